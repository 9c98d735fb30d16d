"""The sandbox cluster's controllers stepped by hand (no threads, no servers): a Recreate rollout never
runs the old and the new pod at once, a RollingUpdate on a full TPU node leaves the new pod Pending, and
Events expire after the API server's hour."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from sandbox.gke.cluster import SandboxGke
from sandbox.gke.controller import EVENT_TTL_S
from sandbox.gke.kubelet import StaticPlan
from sandbox.gke.store import Selector
from sandbox.gke.writes import with_defaults


def _ready_at_once(argv: list[str], accelerator_type: str, image: str) -> Any:
    return StaticPlan(((0.0, f"serving {' '.join(argv)}"),), outcome="ready", ready_at_s=0.0)


def _cluster(tmp_path: Path) -> SandboxGke:
    gke = SandboxGke(tmp_path, create_s=0.0, terminate_s=0.0, plan_for=_ready_at_once)
    gke._seed()                                           # the objects only: no servers, no controller thread
    return gke


def _pods(gke: SandboxGke) -> list[dict[str, Any]]:
    return gke.store.list("pods", "default", Selector(), Selector())[0]


def _patch_args(gke: SandboxGke, name: str, args: list[str]) -> None:
    deployment = gke.store.get("deployments", "default", name)
    assert deployment is not None
    deployment["spec"]["template"]["spec"]["containers"][0]["args"] = args
    gke.store.update("deployments", deployment)


def test_recreate_never_runs_the_old_and_the_new_pod_together(tmp_path: Path) -> None:
    gke = _cluster(tmp_path)
    for _ in range(5):
        gke.controller.sync()
    first = [p for p in _pods(gke) if p["status"].get("phase") == "Running"]
    assert len(first) == 1 and first[0]["status"]["containerStatuses"][0]["ready"] is True
    _patch_args(gke, "vllm-llama", ["--model=meta-llama/Llama-3.1-8B-Instruct", "--max-model-len=1024"])
    seen_together = False
    for _ in range(10):
        gke.controller.sync()
        live = [p for p in _pods(gke) if not p["metadata"].get("deletionTimestamp")]
        seen_together = seen_together or len(live) > 1
    pods = _pods(gke)
    assert not seen_together
    assert [p["spec"]["containers"][0]["args"] for p in pods] == [["--model=meta-llama/Llama-3.1-8B-Instruct",
                                                                   "--max-model-len=1024"]]
    status = gke.store.get("deployments", "default", "vllm-llama")["status"]  # type: ignore[index]
    assert (status["updatedReplicas"], status["availableReplicas"], status["replicas"]) == (1, 1, 1)


def test_rolling_update_on_a_full_tpu_node_keeps_the_old_pod_and_leaves_the_new_one_pending(tmp_path: Path) -> None:
    gke = _cluster(tmp_path)
    deployment = gke.store.get("deployments", "default", "vllm-llama")
    assert deployment is not None
    rolling = copy.deepcopy(deployment)
    rolling["spec"]["strategy"] = {"type": "RollingUpdate"}
    gke.store.update("deployments", with_defaults(rolling))
    for _ in range(5):
        gke.controller.sync()
    _patch_args(gke, "vllm-llama", ["--model=x", "--max-model-len=1024"])
    for _ in range(10):
        gke.controller.sync()
    phases = sorted((p["status"]["phase"], bool(p["spec"].get("nodeName"))) for p in _pods(gke))
    assert phases == [("Pending", False), ("Running", True)]
    pending = next(p for p in _pods(gke) if p["status"]["phase"] == "Pending")
    condition = pending["status"]["conditions"][0]
    assert condition["reason"] == "Unschedulable"
    assert condition["message"].startswith("0/2 nodes are available: 1 Insufficient google.com/tpu, 1 node(s) "
                                           "didn't match Pod's node affinity/selector.")


def test_events_expire_after_an_hour(tmp_path: Path) -> None:
    gke = _cluster(tmp_path)
    for _ in range(3):
        gke.controller.sync()
    with gke.store.cond:
        assert list(gke.store.items("events"))
        gke.controller._expire_events(time.time() + 60)
        kept = len(list(gke.store.items("events")))
        gke.controller._expire_events(time.time() + EVENT_TTL_S + 60)
        assert kept > 0 and not list(gke.store.items("events"))
