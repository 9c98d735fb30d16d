"""A multi-host LeaderWorkerSet in the sandbox's GKE, held to the real kubectl: the ``v5e-multi`` pool
(a 4x4 v5e slice, 4 nodes of 4 chips) and the ``vllm-multi`` group (a leader and 3 workers), each pod's log
describing ITS 4 chips; the group recreated whole when one pod goes (``RecreateGroupOnPodRestart``).

One cluster for the module (its pods boot in 2 s); tests wait on conditions, never on a timer.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.gke.cluster import SandboxGke
from sandbox.gke.cluster_data import DEMO_LWS, DEMO_LWS_SIZE, MULTI_POOL

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
KUBECTL_TIMEOUT_S = 60.0
LABEL = "leaderworkerset.sigs.k8s.io/"

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed here (the oracle)")


@pytest.fixture(scope="module")
def gke() -> Iterator[SandboxGke]:
    with tempfile.TemporaryDirectory(prefix="k8s-lws-") as folder:
        cluster = SandboxGke(Path(folder), boot_s=2.0, create_s=0.2, terminate_s=0.1, time_scale=0.05,
                             multi_host=True)
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.stop()


def kubectl(gke: SandboxGke, *args: str) -> str:
    done = subprocess.run([KUBECTL, "--kubeconfig", str(gke.kubeconfig_path), *args], capture_output=True,
                          text=True, timeout=KUBECTL_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def group_pods(gke: SandboxGke) -> list[dict[str, Any]]:
    """The group's pods as kubectl lists them (``-l leaderworkerset.sigs.k8s.io/name=vllm-multi``)."""
    items = json.loads(kubectl(gke, "get", "pods", "-l", f"{LABEL}name={DEMO_LWS}", "-o", "json"))["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def wait_for(what: str, check: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def _all_ready(gke: SandboxGke) -> list[dict[str, Any]] | None:
    pods = group_pods(gke)
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    ready = [p for p in live if any(c["type"] == "Ready" and c["status"] == "True"
                                    for c in (p.get("status") or {}).get("conditions") or [])]
    return live if len(ready) == DEMO_LWS_SIZE == len(pods) else None


def test_the_group_runs_one_pod_per_host_of_the_slice(gke: SandboxGke) -> None:
    pods = wait_for("the group's 4 pods Ready", lambda: _all_ready(gke))
    assert [p["metadata"]["name"] for p in pods] == ["vllm-multi-0", "vllm-multi-0-1", "vllm-multi-0-2",
                                                     "vllm-multi-0-3"]
    assert [p["metadata"]["labels"][LABEL + "worker-index"] for p in pods] == ["0", "1", "2", "3"]
    assert {p["metadata"]["labels"][LABEL + "group-index"] for p in pods} == {"0"}
    assert len({p["metadata"]["labels"][LABEL + "template-revision-hash"] for p in pods}) == 1
    assert [p["metadata"]["labels"]["role"] for p in pods] == ["leader", "worker", "worker", "worker"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(MULTI_POOL.node_names())
    assert all(p["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"] == "4" for p in pods)
    lws = json.loads(kubectl(gke, "get", "lws", DEMO_LWS, "-o", "json"))
    assert (lws["spec"]["leaderWorkerTemplate"]["size"], lws["status"]["readyReplicas"]) == (4, 1)
    listed = kubectl(gke, "get", "lws,pods", "-A")
    assert "leaderworkerset.leaderworkerset.x-k8s.io/vllm-multi" in listed and "pod/vllm-multi-0-3" in listed
    pools = json.loads(kubectl(gke, "get", "nodes", "-l", "cloud.google.com/gke-nodepool=v5e-multi", "-o", "json"))
    assert {n["metadata"]["labels"]["cloud.google.com/gke-tpu-topology"] for n in pools["items"]} == {"4x4"}


def test_each_pods_log_describes_its_own_four_chips(gke: SandboxGke) -> None:
    wait_for("the group's 4 pods Ready", lambda: _all_ready(gke))
    for worker, name in enumerate(["vllm-multi-0", "vllm-multi-0-1", "vllm-multi-0-2", "vllm-multi-0-3"]):
        def logged(name: str = name) -> str | None:
            text = kubectl(gke, "logs", name)
            return text if "Init kv-cache" in text else None

        text = wait_for(f"{name}'s Init kv-cache line", logged)
        assert f"worker_id={worker} | num_chips=4" in text
        assert f"Init worker | rank={worker} |" in text
        [model] = re.findall(r"Init model \| hbm=(\[.*?\])GiB", text)
        assert model.count("(") == 4, model              # this host's 4 chips, not the slice's 16
        assert ("TPU KV cache size" in text) == (worker == 0)   # the engine's figures: the leader's alone


def test_one_pod_going_recreates_the_whole_group(gke: SandboxGke) -> None:
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in wait_for("ready", lambda: _all_ready(gke))}
    kubectl(gke, "delete", "pod", "vllm-multi-0-2", "--wait=false")
    after = wait_for("the group made anew", lambda: (pods := _all_ready(gke)) and all(
        p["metadata"]["uid"] != before[p["metadata"]["name"]] for p in pods) and pods)
    assert sorted(p["metadata"]["name"] for p in after) == sorted(before)
    events = json.loads(kubectl(gke, "get", "events", "--field-selector",
                                f"involvedObject.name={DEMO_LWS},reason=RecreateGroupOnPodRestart", "-o", "json"))
    assert any("vllm-multi-0-2" in e["message"] for e in events["items"])
