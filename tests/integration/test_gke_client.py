"""The GKE backend against the sandbox's GKE API and Kubernetes API stand-ins, one sandbox for the module,
with the real kubectl as the oracle for what the console shows (skipped, saying why, without kubectl)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from console.cli import main
from sandbox.runner import Sandbox

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    sb = Sandbox(tmp_path_factory.mktemp("gke-sandbox"), boot_s=1.0, fast_boot_s=0.3, gke_boot_s=1.0,
                 gke_create_s=0.3)
    sb.start()
    try:
        yield sb
    finally:
        sb.stop()


def _kubectl(box: Sandbox, *args: str) -> Any:
    if not Path(KUBECTL).exists():
        pytest.skip("kubectl is not installed (the oracle for the Kubernetes API stand-in)")
    done = subprocess.run([KUBECTL, "--kubeconfig", str(box.kubeconfig_path), *args], capture_output=True,
                          text=True, timeout=30, check=True)
    return json.loads(done.stdout) if "-o" in args and "json" in args else done.stdout


def _cli(capsys: pytest.CaptureFixture[str], box: Sandbox, *argv: str) -> tuple[int, str, str]:
    code = main(["--config", str(box.config_path), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_nodes_json_lists_the_deployment_kubectl_lists(box: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, box, "nodes", "--json", "--project", "inference-prod")
    assert code == 0, out
    data = json.loads(out)
    oracle = _kubectl(box, "get", "deploy", "-A", "-o", "json")
    expected = {(d["metadata"]["namespace"], d["metadata"]["name"]): d for d in oracle["items"]}
    seen = {(w["namespace"], w["name"]): w for w in data["workloads"] if w["kind"] == "Deployment"}
    assert set(seen) == set(expected) and ("default", "vllm-llama") in seen
    for key, w in seen.items():
        [container] = expected[key]["spec"]["template"]["spec"]["containers"]
        assert (w["kind"], w["image"], w["args"]) == ("Deployment", container["image"], container["args"])
        assert (w["cluster"], w["location"], w["project"]) == ("tpu-serving", "us-east5", "inference-prod")
        assert w["replicas"] == expected[key]["spec"]["replicas"]
    llama = seen[("default", "vllm-llama")]
    assert (llama["accelerator"], llama["topology"], llama["node_pool"], llama["provisioning_model"]) == (
        "tpu-v6e-slice", "2x2", "v6e-flex", "flex-start")
    pools = {p["name"]: p for p in data["node_pools"]}
    nodes = _kubectl(box, "get", "nodes", "-o", "json")["items"]
    per_pool = {n["metadata"]["labels"]["cloud.google.com/gke-nodepool"] for n in nodes}
    assert set(pools) == per_pool == {"v5e-spot", "v6e-flex"}
    assert (pools["v5e-spot"]["provisioning_model"], pools["v5e-spot"]["chips"]) == ("spot", 4)
    assert {name: pool["chips_in_use"] for name, pool in pools.items()} == _chips_in_use(box, nodes)
    assert pools["v6e-flex"]["chips_in_use"] == 4


def _chips_in_use(box: Sandbox, nodes: list[dict[str, Any]]) -> dict[str, int]:
    """``google.com/tpu`` limits of the pods kubectl shows bound and not ended, summed per node pool (the other
    tests of this module may have added or deleted workloads before this one runs)."""
    pool_of = {n["metadata"]["name"]: n["metadata"]["labels"]["cloud.google.com/gke-nodepool"] for n in nodes}
    in_use = dict.fromkeys(pool_of.values(), 0)
    for pod in _kubectl(box, "get", "pods", "-A", "-o", "json")["items"]:
        node = pod["spec"].get("nodeName")
        if node in pool_of and pod["status"].get("phase") not in ("Succeeded", "Failed"):
            for container in pod["spec"]["containers"]:
                in_use[pool_of[node]] += int(container.get("resources", {}).get("limits", {}).get("google.com/tpu", 0))
    return in_use


def test_nodes_tables_and_a_denied_project_is_one_line(box: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, box, "nodes", "--project", "inference-prod", "--project", "denied-project")
    assert code == 1
    listed = sum(len(_kubectl(box, "get", kind, "-A", "-o", "json")["items"]) for kind in ("deploy", "leaderworkersets"))
    assert f"GKE workloads ({listed})" in out and "deploy/vllm-llama" in out and "GKE TPU node pools (2)" in out
    [line] = [li for li in out.splitlines() if li.startswith("problem: denied-project (GKE)")]
    assert "403" in line and "container.clusters.list" in line


def test_watch_ends_ready_with_kv_tokens(box: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, box, "watch", "deploy/vllm-llama", "--json", "--poll-s", "0.2")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["ready"] is True and summary["kv_cache_tokens"] > 0
    deployed = _kubectl(box, "get", "deploy", "vllm-llama", "-o", "json")["spec"]["template"]["spec"]["containers"][0]
    [length] = [a.split("=", 1)[1] for a in deployed["args"] if a.startswith("--max-model-len=")]
    assert summary["max_model_len"] == int(length) and summary["workload"] == "deploy/vllm-llama"
    pods = _kubectl(box, "get", "pods", "-n", "default", "-o", "json")["items"]
    assert summary["pod"] in {p["metadata"]["name"] for p in pods}
    assert "following " + summary["pod"] in err
    from store.history import HistoryStore

    with HistoryStore(box.db_path) as store:        # recorded when first seen, timed from its container's start
        launch = store.get_launch(summary["launch_id"])
    assert launch is not None and launch.started_at is not None and launch.time_to_ready_s is not None
    assert 0 < launch.time_to_ready_s < 120


def test_watch_of_a_missing_workload_says_where_it_looked(box: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, box, "watch", "deploy/nope", "--namespace", "serving")
    assert code == 2
    assert "no deploy/nope in namespace serving (clusters searched: tpu-serving)" in err


def test_swap_patches_the_deployment_and_the_second_watch_has_the_new_length(
        box: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, box, "watch", "deploy/vllm-llama", "--json", "--poll-s", "0.2")
    assert code == 0, err
    first = json.loads(out)
    before = _kubectl(box, "get", "deploy", "vllm-llama", "-o", "json")
    code, out, err = _cli(capsys, box, "swap", "deploy/vllm-llama", "--set", "max-model-len=8192", "--yes", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["outcome"]["patched"] is True and report["outcome"]["code"] == 0
    assert report["plan"]["patch"][0] == {"op": "test", "path": "/metadata/resourceVersion",
                                          "value": before["metadata"]["resourceVersion"]}
    after = _kubectl(box, "get", "deploy", "vllm-llama", "-o", "json")
    args = after["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--max-model-len=8192" in args and "--max-model-len=65536" not in args
    assert [a for a in args if "max-model-len" not in a] == [
        a for a in before["spec"]["template"]["spec"]["containers"][0]["args"] if "max-model-len" not in a]
    code, out, err = _cli(capsys, box, "watch", "deploy/vllm-llama", "--json", "--poll-s", "0.2")
    assert code == 0, err
    second = json.loads(out)
    assert second["max_model_len"] == 8192 and second["pod"] != first["pod"]
    assert second["max_concurrency"] == pytest.approx(second["kv_cache_tokens"] / 8192, rel=0.01)
    code, out, _ = _cli(capsys, box, "history", "--json")
    launches = [launch for launch in json.loads(out) if launch.get("workload") == "deploy/vllm-llama"]
    assert {launch["max_model_len"] for launch in launches} == {65536, 8192}
    swapped = next(launch for launch in launches if launch["max_model_len"] == 8192)
    assert (swapped["origin"], swapped["outcome"], swapped["cluster"], swapped["namespace"], swapped["container_id"]) \
        == ("console", "ready", "tpu-serving", "default", second["pod"])
    assert swapped["id"] == second["launch_id"]


def _swap_after(box: Sandbox, name: str, edit: list[str]) -> Any:
    """Read ``deploy/name``, run ``kubectl edit`` (someone else's write) on it, then swap from that read."""
    import asyncio

    from console.config import load_config
    from console.flows.gke_fleet import gke_source
    from console.flows.gke_target import parse_workload_spec, pick_workload
    from console.flows.history_access import HistoryAccess
    from console.flows.workload_swap import WorkloadSwapCase

    async def go() -> Any:
        source = gke_source(load_config(box.config_path))
        assert source is not None
        try:
            fleet = await source.list_fleet()
            workload = pick_workload(fleet, parse_workload_spec(f"deploy/{name}"))
            await asyncio.to_thread(_kubectl, box, *edit)
            case = WorkloadSwapCase(workload, source.client(fleet.clusters[0].ref), load_config(box.config_path),
                                    HistoryAccess.none())
            return await case.run(case.preview({"max-model-len": "2048"}, None), follow=False)
        finally:
            await source.close()

    return asyncio.run(go())


def test_a_spec_changed_since_it_was_read_is_refused_and_a_status_change_is_not(box: Sandbox) -> None:
    """The patch's guard (a test of the resourceVersion read) refuses when someone else changed the spec;
    a write that left the spec alone (the controllers' status updates bump the resourceVersion too: a pod
    turning Ready between the preview and the confirm failed a swap) is patched on the new version."""
    _create(box, "guard-a", "8")                # unschedulable: nothing boots, nothing else writes it
    other = ["patch", "deploy", "guard-a", "--type", "merge", "-p",
             '{"spec": {"template": {"metadata": {"annotations": {"someone": "else"}}}}}']
    outcome = _swap_after(box, "guard-a", other)
    after = _kubectl(box, "get", "deploy", "guard-a", "-o", "json")
    assert outcome.patched is False and "changed since it was read" in (outcome.error or "")
    assert after["spec"]["template"]["metadata"]["annotations"] == {"someone": "else"}
    assert "--max-model-len=2048" not in after["spec"]["template"]["spec"]["containers"][0]["args"]
    outcome = _swap_after(box, "guard-a", ["annotate", "deploy", "guard-a", "seen=yes"])
    after = _kubectl(box, "get", "deploy", "guard-a", "-o", "json")
    assert outcome.patched is True, outcome.error
    assert after["metadata"]["annotations"]["seen"] == "yes"
    assert "--max-model-len=2048" in after["spec"]["template"]["spec"]["containers"][0]["args"]


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gke-deploy-noprobe.json"


def _create(box: Sandbox, name: str, chips: str) -> None:
    manifest = FIXTURE.read_text().replace("vllm-noprobe", name).replace('"google.com/tpu": "4"',
                                                                          f'"google.com/tpu": "{chips}"')
    path = box.state_dir / f"{name}.json"
    path.write_text(manifest)
    _kubectl(box, "create", "--validate=false", "-f", str(path))


def _watch_events(box: Sandbox, name: str, max_wait_s: float) -> tuple[Any, list[str]]:
    import asyncio

    from console.config import load_config
    from console.flows.gke_fleet import gke_source
    from console.flows.gke_target import find_workload, parse_workload_spec
    from console.flows.workload_watch import WorkloadWatch

    said: list[str] = []

    async def go() -> Any:
        source = gke_source(load_config(box.config_path))
        assert source is not None
        try:
            workload, kube = await find_workload(source, parse_workload_spec(f"deploy/{name}"))
            watch = WorkloadWatch(workload, kube, on_event=lambda e: said.append(f"{e.kind}: {e.text}"), poll_s=0.05,
                                  max_wait_s=max_wait_s)
            return await watch.run()
        finally:
            await source.close()

    return asyncio.run(go()), said


def test_a_pod_that_cannot_schedule_is_said_with_its_event(box: Sandbox) -> None:
    _create(box, "vllm-big", "8")               # more chips than any node has
    try:
        outcome, said = _watch_events(box, "vllm-big", max_wait_s=2.0)
    finally:
        _kubectl(box, "delete", "deploy", "vllm-big", "--ignore-not-found")
    assert outcome.code == 2
    assert any(s.startswith("status: pod vllm-big-") and "Pending: Unschedulable: 0/2 nodes are available" in s
               for s in said), said
    assert any(s.startswith("event: ") and "Warning FailedScheduling" in s and "Insufficient google.com/tpu" in s
               for s in said), said
    assert said[-1].startswith("warning: gave up after 2 s")


def test_ready_before_the_log_is_flagged(box: Sandbox) -> None:
    _create(box, "vllm-noprobe", "4")           # no readinessProbe: Ready as soon as the container runs
    try:
        outcome, said = _watch_events(box, "vllm-noprobe", max_wait_s=60.0)
    finally:                                    # its chips back for the module's other tests, whatever their order
        _kubectl(box, "delete", "deploy", "vllm-noprobe", "--ignore-not-found")
    assert outcome.code == 0 and outcome.summary["kubernetes_ready_early"] is True
    [flag] = [s for s in said if s.startswith("ready_early: ")]
    assert "Kubernetes says Ready while the log still compiles" in flag
    assert said.index(flag) < next(i for i, s in enumerate(said) if s.startswith("ready: "))


def test_a_leader_worker_set_is_listed_and_watched(box: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    _kubectl(box, "delete", "deploy", "vllm-noprobe", "vllm-big", "--ignore-not-found")   # the v5e node's chips
    _kubectl(box, "create", "--validate=false", "-f", str(FIXTURE.with_name("gke-lws.json")))
    try:
        _watch_list_and_swap_the_leader_worker_set(box, capsys)
    finally:
        _kubectl(box, "delete", "leaderworkersets", "vllm-lws", "--ignore-not-found")


def _watch_list_and_swap_the_leader_worker_set(box: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, box, "watch", "lws/vllm-lws", "--json", "--poll-s", "0.1")
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["pod"], summary["ready"], summary["workload"]) == ("vllm-lws-0", True, "lws/vllm-lws")
    code, out, _ = _cli(capsys, box, "nodes", "--json", "--project", "inference-prod")
    [lws] = [w for w in json.loads(out)["workloads"] if w["kind"] == "LeaderWorkerSet"]
    oracle = _kubectl(box, "get", "leaderworkersets", "vllm-lws", "-o", "json")
    assert (lws["name"], lws["replicas"], lws["node_pool"], lws["provisioning_model"]) == (
        "vllm-lws", oracle["spec"]["replicas"], "v5e-spot", "spot")
    code, _, err = _cli(capsys, box, "swap", "lws/vllm-lws", "--set", "max-model-len=2048", "--yes")
    assert code == 0, err
    args = _kubectl(box, "get", "leaderworkersets", "vllm-lws", "-o", "json")["spec"]["leaderWorkerTemplate"][
        "workerTemplate"]["spec"]["containers"][0]["args"]
    assert "--max-model-len=2048" in args


def test_endpoint_ca_and_a_renewed_token_as_get_credentials_gives_them(box: Sandbox,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The credentials path of a discovered cluster (no kubeconfig): server + CA + bearer token, the token asked
    again once it ages; a refused token is a 401 sentence."""
    import asyncio
    import base64

    import yaml

    import remote.gke.kube as kube_module
    from remote.errors import KubeApiError
    from remote.gke.discovery import ClusterAccess
    from remote.gke.kube import KubeClient

    config = yaml.safe_load(box.kubeconfig_path.read_text())
    cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
    asked: list[str] = []

    async def token() -> str:
        asked.append("token")
        return str(user["token"])

    async def go(source: Any) -> list[str]:
        client = KubeClient(ClusterAccess(server=cluster["server"], token="stale",
                                          ca_pem=base64.b64decode(cluster["certificate-authority-data"]).decode(),
                                          token_source=source), timeout_s=10)
        try:
            first = await client.list_all("apps/v1", "deployments", namespace="default")
            ca_file = client._api.auth.server_ca_file                    # kr8s wrote the CA data to a file
            assert ca_file and not Path(str(ca_file)).exists()          # ...which is gone once the session has it
            second = await client.list_all("apps/v1", "deployments", namespace="default")
            return [d["metadata"]["name"] for d in first + second]
        finally:
            await client.close()

    monkeypatch.setattr(kube_module, "TOKEN_MAX_AGE_S", 0.0)       # every call: a fresh token
    assert asyncio.run(go(token)).count("vllm-llama") == 2 and len(asked) == 2

    async def wrong() -> str:
        return "not-a-token"

    with pytest.raises(KubeApiError) as refused:
        asyncio.run(go(wrong))
    assert refused.value.code == 401
