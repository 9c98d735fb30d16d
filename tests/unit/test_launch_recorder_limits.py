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
