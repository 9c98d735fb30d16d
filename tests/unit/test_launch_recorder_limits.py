"""A boot that vLLM refused for a max-model-len above the model's maximum teaches the history that maximum."""

from __future__ import annotations

from pathlib import Path

from console.flows.launch_recorder import LaunchRecorder
from console.flows.swap import history_facts
from remote.container.spec import ContainerSpec
from remote.models import Node
from remote.vllm_log.reader import StartupReader
from sandbox.engine import plan_startup
from store.history import HistoryStore

NODE = Node(project="p", zone="z", name="vllm-gemma", state="READY", accelerator_type="v6e-4")
ARGV = ["google/gemma-3-27b-it", "--max-model-len", "200000", "--tensor-parallel-size", "4"]


def test_a_refused_boot_records_the_derived_limit_and_the_lint_gets_it(tmp_path: Path):
    spec = ContainerSpec.from_template(name="vllm", image="vllm/vllm-tpu:v0.29.1", model=ARGV[0], args=ARGV[1:])
    reader = StartupReader(year=2026)
    for _, line in plan_startup(ARGV, "v6e-4", boot_s=0.5).lines:
        reader.feed_line(line)
    reader.close()
    with HistoryStore(tmp_path / "h.db") as store:
        assert history_facts(store, NODE, spec)["model_max_len"] is None
        recorder = LaunchRecorder(store, NODE)
        recorder.observe_container("c" * 64, spec)
        written = recorder.record(reader.state)
        assert written["failure_kind"] == "max_model_len_too_large"
        assert store.model_limit("google/gemma-3-27b-it") == (131072, "boot log")
        assert history_facts(store, NODE, spec)["model_max_len"] == 131072


def test_a_boot_that_failed_loading_its_compiled_programs_flags_that_utilization_at_the_next_swap(tmp_path: Path):
    from console.flows.swap import lint_spec
    from tests.unit.test_failure_catalogue import PROGRAM_LOAD_FAILURE

    node = Node(project="p", zone="z", name="vllm-v5e-a", state="READY", accelerator_type="v5litepod-1")
    failed_spec = ContainerSpec.from_template(name="vllm", image="vllm/vllm-tpu:v0.29.1", model="google/gemma-3-4b-it",
                                              args=["--gpu-memory-utilization", "0.95"])
    reader = StartupReader(year=2026)
    for line in PROGRAM_LOAD_FAILURE:
        reader.feed_line(line)
    reader.close()
    with HistoryStore(tmp_path / "h.db") as store:
        recorder = LaunchRecorder(store, node)
        recorder.observe_container("d" * 64, failed_spec)
        assert recorder.record(reader.state)["failure_kind"] == "hbm_oom_after_compile"
        other_model = ContainerSpec.from_template(name="vllm", image="vllm/vllm-tpu:v0.29.1", model="Qwen/Qwen3-8B",
                                                  args=["--gpu-memory-utilization", "0.95"])
        facts = history_facts(store, node, other_model)
    assert [list(args) for _, args, _ in facts["hbm_failures"]] == [failed_spec.serve_args()]
    [found] = [f for f in lint_spec(node, other_model, None, facts) if f.rule_id == "hbm-failed-here"]
    assert "0.95 failed on v5litepod-1 after compiling" in found.message
    assert found.fix == {"gpu-memory-utilization": "0.90"}
