"""console.flows.swap: launch records and rollback from the history (real SQLite file, no SSH)."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.flows import swap as swap_flow
from remote.container.spec import ContainerSpec
from remote.models import Node
from store.history import HistoryStore

NODE = Node(project="p", zone="us-west4-a", name="vllm-v5e-a", state="READY", accelerator_type="v5litepod-4")
SECRET = "hf_SecretSecret123456"


def spec(max_len: str, token: str = SECRET) -> ContainerSpec:
    return ContainerSpec.from_template(name="vllm", image="vllm/vllm-tpu:v0.29.1", model="Qwen/Qwen3-8B",
                                       args=["--max-model-len", max_len, "--tensor-parallel-size", "4"],
                                       env={"HF_TOKEN": token, "JAX_PLATFORMS": "tpu"})


def record_start(store, node, new, replaced_id, *, replaced_spec=None):
    """A swap's records up to its run step: the attempt, then the rm that removed the old container."""
    launch_id = swap_flow.record_attempt(store, node, new, replaced_id, replaced_spec=replaced_spec)
    swap_flow.record_replaced(store, launch_id)
    return launch_id


@pytest.fixture
def store(tmp_path: Path):
    with HistoryStore(tmp_path / "h.db") as s:
        yield s


def test_first_swap_records_the_replaced_container_as_observed(store) -> None:
    launch_id = record_start(store, NODE, spec("65536"), "a" * 64, replaced_spec=spec("32768"))
    swap_flow.record_outcome(store, launch_id, ok=True, container_id="b" * 64, image_digest="vllm/vllm-tpu@sha256:1")
    new, old = store.list_launches(node=NODE.name)
    assert new.id == launch_id and new.replaced_launch_id == old.id and new.container_id == "b" * 64
    assert new.max_model_len == 65536 and new.started_at is not None and new.origin == "console"
    assert (old.origin, old.outcome, old.container_id, old.max_model_len) == ("observed", "replaced", "a" * 64, 32768)
    assert SECRET not in repr(new) and SECRET not in repr(old)


def test_a_known_replaced_launch_is_marked_replaced_not_duplicated(store) -> None:
    first = record_start(store, NODE, spec("32768"), None)
    swap_flow.record_outcome(store, first, ok=True, container_id="a" * 64)
    second = record_start(store, NODE, spec("65536"), "a" * 64, replaced_spec=spec("32768"))
    assert [x.id for x in store.list_launches(node=NODE.name)] == [second, first]
    assert store.get_launch(first).outcome == "replaced" and store.get_launch(second).replaced_launch_id == first


def test_failed_run_is_recorded_with_the_reason(store) -> None:
    launch_id = record_start(store, NODE, spec("65536"), None)
    swap_flow.record_outcome(store, launch_id, ok=False, failure_detail="docker: Error response from daemon: x")
    launch = store.get_launch(launch_id)
    assert launch.outcome == "failed" and launch.failure_kind == "docker run failed"
    assert launch.failure_detail == "docker: Error response from daemon: x"


def test_rollback_from_history_takes_the_replaced_spec_and_the_running_secret(store) -> None:
    launch_id = record_start(store, NODE, spec("65536"), "a" * 64, replaced_spec=spec("32768"))
    swap_flow.record_outcome(store, launch_id, ok=True, container_id="b" * 64)
    current = swap_flow.RunningSpec(spec("65536"), {"Id": "b" * 64})
    previous, launch = swap_flow.previous_from_history(store, NODE, current)
    assert launch.origin == "observed"
    assert previous.serve_flags == {"max-model-len": "32768", "tensor-parallel-size": "4"}
    assert previous.env == {"HF_TOKEN": SECRET, "JAX_PLATFORMS": "tpu"}   # unmasked from the running container
    assert previous.run_argv() == spec("32768").run_argv()


def test_masked_secret_stays_masked_without_a_running_value(store) -> None:
    launch_id = record_start(store, NODE, spec("32768"), None)
    rebuilt = swap_flow.spec_from_launch(store.get_launch(launch_id), None)
    assert rebuilt.env["HF_TOKEN"] == "***" and rebuilt.model == "Qwen/Qwen3-8B"


def test_nothing_to_roll_back_to(store) -> None:
    current = swap_flow.RunningSpec(spec("32768"), {"Id": "a" * 64})
    assert swap_flow.previous_from_history(store, NODE, current) is None
    assert swap_flow.previous_from_history(None, NODE, current) is None
    only = record_start(store, NODE, spec("32768"), None)
    swap_flow.record_outcome(store, only, ok=True, container_id="a" * 64)
    assert swap_flow.previous_from_history(store, NODE, current) is None   # the one launch is what runs


def test_template_spec_refuses_an_unset_variable() -> None:
    class Template:
        name, image, model, args = "vllm", "vllm/vllm-tpu:v0.29.1", "Qwen/Qwen3-8B", ("--max-model-len", "4096")
        env = {"HF_TOKEN": "$HF_TOKEN"}

    assert swap_flow.template_spec(Template(), {"HF_TOKEN": SECRET}).env == {"HF_TOKEN": SECRET}
    with pytest.raises(ValueError, match=r"\$HF_TOKEN, which is not set"):
        swap_flow.template_spec(Template(), {})


def test_the_launch_is_recorded_before_the_first_remote_step_and_a_failed_pull_replaces_nothing(store) -> None:
    first = record_start(store, NODE, spec("32768"), None)
    swap_flow.record_outcome(store, first, ok=True, container_id="a" * 64)
    store.update_launch(first, outcome="ready")
    attempt = swap_flow.record_attempt(store, NODE, spec("65536"), "a" * 64, replaced_spec=spec("32768"))
    assert store.get_launch(attempt).outcome == "running" and store.get_launch(attempt).replaced_launch_id == first
    swap_flow.record_outcome(store, attempt, ok=False, failure_kind="docker pull failed", failure_detail="no space")
    assert store.get_launch(first).outcome == "ready"          # the pull failed: the old one still serves
    assert (store.get_launch(attempt).outcome, store.get_launch(attempt).failure_kind) == ("failed", "docker pull failed")


def test_an_interrupted_swap_says_at_which_step(store) -> None:
    attempt = swap_flow.record_attempt(store, NODE, spec("65536"), None)
    swap_flow.record_interrupted(store, attempt, "the console quit during docker rm")
    launch = store.get_launch(attempt)
    assert (launch.outcome, launch.failure_detail) == ("interrupted", "the console quit during docker rm")
