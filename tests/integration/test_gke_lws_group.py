"""A multi-host LeaderWorkerSet in the sandbox's GKE, held to the real kubectl: the ``v5e-multi`` pool
(a 4x4 v5e slice, 4 nodes of 4 chips) and the ``vllm-multi`` group (a leader and 3 workers), each pod's log
describing ITS 4 chips; the group recreated whole when one pod goes (``RecreateGroupOnPodRestart``); and
``watch lws/NAME`` following every pod of the group (:class:`console.flows.group_watch.GroupWatch`).

One sandbox for the module (``gke_multi_host``, as ``--demo`` starts it; its pods boot in 3 s); tests that
break the group put it back, and every test waits on conditions, never on a timer.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from console.cli import main
from sandbox.gke.cluster_data import DEMO_LWS, DEMO_LWS_SIZE, MULTI_POOL
from sandbox.runner import Sandbox

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
KUBECTL_TIMEOUT_S = 60.0
LABEL = "leaderworkerset.sigs.k8s.io/"

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed here (the oracle)")


@pytest.fixture(scope="module")
def gke(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    box = Sandbox(tmp_path_factory.mktemp("gke-lws"), boot_s=1.0, fast_boot_s=0.3, gke_boot_s=3.0,
                  gke_create_s=0.2, time_scale=0.05, gke_multi_host=True)
    box.start()
    try:
        yield box
    finally:
        box.stop()


def kubectl(gke: Sandbox, *args: str) -> str:
    done = subprocess.run([KUBECTL, "--kubeconfig", str(gke.kubeconfig_path), *args], capture_output=True,
                          text=True, timeout=KUBECTL_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def group_pods(gke: Sandbox) -> list[dict[str, Any]]:
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


def _all_ready(gke: Sandbox) -> list[dict[str, Any]] | None:
    pods = group_pods(gke)
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    ready = [p for p in live if any(c["type"] == "Ready" and c["status"] == "True"
                                    for c in (p.get("status") or {}).get("conditions") or [])]
    return live if len(ready) == DEMO_LWS_SIZE == len(pods) else None


def test_the_group_runs_one_pod_per_host_of_the_slice(gke: Sandbox) -> None:
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


def test_each_pods_log_describes_its_own_four_chips(gke: Sandbox) -> None:
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


def test_one_pod_going_recreates_the_whole_group(gke: Sandbox) -> None:
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in wait_for("ready", lambda: _all_ready(gke))}
    kubectl(gke, "delete", "pod", "vllm-multi-0-2", "--wait=false")
    after = wait_for("the group made anew", lambda: (pods := _all_ready(gke)) and all(
        p["metadata"]["uid"] != before[p["metadata"]["name"]] for p in pods) and pods)
    assert sorted(p["metadata"]["name"] for p in after) == sorted(before)
    events = json.loads(kubectl(gke, "get", "events", "--field-selector",
                                f"involvedObject.name={DEMO_LWS},reason=RecreateGroupOnPodRestart", "-o", "json"))
    assert any("vllm-multi-0-2" in e["message"] for e in events["items"])


# --- watch lws/NAME: every pod of group 0 -------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], gke: Sandbox, *argv: str) -> tuple[int, str, str]:
    code = main(["--config", str(gke.config_path), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _group_watch(gke: Sandbox, on_event: Any = None, max_wait_s: float = 90.0) -> tuple[Any, list[str]]:
    """Run a GroupWatch on ``lws/vllm-multi`` (the one ``watch lws/NAME`` runs); ``on_event(event)`` may act."""
    import asyncio

    from console.config import load_config
    from console.flows.gke_fleet import gke_source
    from console.flows.gke_target import find_workload, parse_workload_spec
    from console.flows.group_watch import GroupWatch

    said: list[str] = []

    async def go() -> Any:
        source = gke_source(load_config(gke.config_path))
        assert source is not None
        try:
            workload, kube = await find_workload(source, parse_workload_spec(f"lws/{DEMO_LWS}"))

            def event(e: Any) -> None:
                said.append(f"{e.kind}: {e.line()}")
                if on_event is not None:
                    on_event(e)

            return await GroupWatch(workload, kube, on_event=event, poll_s=0.05, max_wait_s=max_wait_s).run()
        finally:
            await source.close()

    return asyncio.run(go()), said


def _remake_group(gke: Sandbox) -> set[str]:
    """Delete the leader (LWS remakes the whole group); returns the old pods' uids."""
    old = {p["metadata"]["uid"] for p in group_pods(gke)}
    kubectl(gke, "delete", "pod", "vllm-multi-0", "--wait=false")
    wait_for("the new group's pods", lambda: (pods := group_pods(gke)) and len(pods) == DEMO_LWS_SIZE and all(
        p["metadata"]["uid"] not in old for p in pods))
    return old


def test_watch_lws_follows_every_pod_and_sums_their_hbm(gke: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    wait_for("the group Ready", lambda: _all_ready(gke))
    code, out, err = _cli(capsys, gke, "watch", f"lws/{DEMO_LWS}", "--json", "--poll-s", "0.1")
    assert code == 0, err
    summary = json.loads(out)
    pods = group_pods(gke)
    assert (summary["workload"], summary["pod"], summary["ready"], summary["workers"]) == (
        "lws/vllm-multi", "vllm-multi-0", True, 4)
    assert [(p["name"], p["worker"], p["node"], p["log_ready"], p["failure"]) for p in summary["pods"]] == [
        (p["metadata"]["name"], i, p["spec"]["nodeName"], True, None) for i, p in enumerate(pods)]
    leader_log = kubectl(gke, "logs", "vllm-multi-0")
    [tokens] = re.findall(r"TPU KV cache size: ([\d,]+) tokens", leader_log)
    assert summary["kv_cache_tokens"] == int(tokens.replace(",", ""))
    kv = next(h for h in summary["slice_hbm"] if h["stage"] == "kv_cache")
    assert (kv["chips"], kv["workers"]) == (16, 4)              # 4 pods x their own 4 chips
    [per_chip] = {tuple(h) for h in summary["worker_hbm_used_gib"]}
    assert kv["used_gib"] == pytest.approx(16 * per_chip[0], abs=0.05)
    for worker in (1, 2, 3):                                    # each pod's sentences, marked with its index
        assert f"w{worker}| following vllm-multi-0-{worker}" in err or f"w{worker}| pod vllm-multi-0-{worker}" in err
    code, out, err = _cli(capsys, gke, "watch", f"lws/{DEMO_LWS}", "--poll-s", "0.1")     # the panel, then the pods
    assert code == 0, err
    for worker, p in enumerate(pods):
        assert f"w{worker} {p['metadata']['name']} on {p['spec']['nodeName']}: Running, Ready · log ready" in out


def test_one_pod_failing_fails_the_group_with_its_reason(gke: Sandbox) -> None:
    from sandbox.engine import plan_startup, worker_plan

    def failing_on_2(plan: Any, worker: int) -> Any:
        if worker != 2:
            return worker_plan(plan, worker)
        oom = plan_startup(["--model=meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size=4"],
                           "v5litepod-16", boot_s=3.0)
        return worker_plan(oom, worker)

    kubelet = gke.gke.kubelet
    kubelet.worker_plan = failing_on_2
    try:
        _remake_group(gke)
        outcome, said = _group_watch(gke)
    finally:
        kubelet.worker_plan = worker_plan
    assert outcome.code == 1, said
    summary = outcome.summary
    assert (summary["ready"], summary["failure_pod"], summary["failure"]) == (False, "vllm-multi-0-2",
                                                                                   "hbm_oom_load")
    assert summary["failure_explanation"].startswith("pod vllm-multi-0-2: ")
    [failed] = [p for p in summary["pods"] if p["failure"]]
    assert failed["name"] == "vllm-multi-0-2" and failed["failure"].startswith("hbm_oom_load")
    assert said[-1].startswith("failed: failed: hbm_oom_load: On pod vllm-multi-0-2: HBM ran out")
    _remake_group(gke)                                 # the next tests' group boots as it should


def test_a_recreated_group_is_marked_and_booted_afresh(gke: Sandbox) -> None:

    from sandbox.engine import plan_startup

    kubelet = gke.gke.kubelet
    quick = kubelet.plan_for
    kubelet.plan_for = lambda argv, accelerator, image: plan_startup(argv, accelerator, boot_s=8.0, image=image)
    try:                                               # a boot long enough to delete a pod in the middle of it
        _remake_group(gke)
        outcome, said, deleted = _watch_and_delete_a_worker(gke)
    finally:
        kubelet.plan_for = quick
    assert deleted.is_set()
    assert outcome.code == 0, said
    assert outcome.summary["recreated"] == 1 and all(p["recreated"] == 1 for p in outcome.summary["pods"])
    [marker] = [s for s in said if s.startswith("group: ")]
    assert "group 0 of lws/vllm-multi was recreated" in marker
    assert said.index(marker) < next(i for i, s in enumerate(said) if s.startswith("ready: "))


def _watch_and_delete_a_worker(gke: Sandbox) -> tuple[Any, list[str], Any]:
    """Watch the group; when worker 1's container is followed, delete that pod (LWS remakes the group)."""
    import threading

    deleted = threading.Event()

    def on_event(event: Any) -> None:
        if event.worker == 1 and event.kind == "following" and not deleted.is_set():
            deleted.set()                              # mid-boot: one worker goes, LWS remakes the group
            threading.Thread(target=kubectl, args=(gke, "delete", "pod", "vllm-multi-0-1", "--wait=false")).start()

    outcome, said = _group_watch(gke, on_event)
    return outcome, said, deleted


# --- swap lws/NAME: one patch of both templates, every new pod followed --------------------------------


def test_swap_lws_patches_both_templates_once_and_follows_every_new_pod(
        gke: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    before = {p["metadata"]["uid"] for p in wait_for("the group Ready", lambda: _all_ready(gke))}
    lws_before = json.loads(kubectl(gke, "get", "lws", DEMO_LWS, "-o", "json"))
    code, out, err = _cli(capsys, gke, "swap", f"lws/{DEMO_LWS}", "--set", "max-model-len=4096", "--yes", "--json")
    assert code == 0, err
    report = json.loads(out)
    ops = report["plan"]["patch"]
    assert ops[0] == {"op": "test", "path": "/metadata/resourceVersion",
                      "value": lws_before["metadata"]["resourceVersion"]}
    assert sorted(op["path"] for op in ops[1:]) == [
        "/spec/leaderWorkerTemplate/leaderTemplate/spec/containers/0/args",
        "/spec/leaderWorkerTemplate/workerTemplate/spec/containers/0/args"]
    lws = json.loads(kubectl(gke, "get", "lws", DEMO_LWS, "-o", "json"))
    lwt = lws["spec"]["leaderWorkerTemplate"]
    for part in ("leaderTemplate", "workerTemplate"):
        assert "--max-model-len=4096" in lwt[part]["spec"]["containers"][0]["args"]
    pods = group_pods(gke)                              # the new group, each pod from the new templates
    assert len(pods) == 4 and not {p["metadata"]["uid"] for p in pods} & before
    assert all("--max-model-len=4096" in p["spec"]["containers"][0]["args"] for p in pods)
    assert len({p["metadata"]["labels"][LABEL + "template-revision-hash"] for p in pods}) == 1
    summary = report["outcome"]["summary"]
    assert (summary["ready"], summary["max_model_len"], len(summary["pods"])) == (True, 4096, 4)
    assert {p["name"] for p in summary["pods"]} == {p["metadata"]["name"] for p in pods}
    [tokens] = re.findall(r"Maximum concurrency for ([\d,]+) tokens per request", kubectl(gke, "logs", "vllm-multi-0"))
    assert tokens == "4,096"
    assert "w3| following vllm-multi-0-3" in err

    from store.history import HistoryStore

    with HistoryStore(gke.db_path) as store:            # recorded like the Deployment swap
        launch = store.get_launch(report["outcome"]["launch_id"])
    assert launch is not None
    assert (launch.workload, launch.cluster, launch.namespace, launch.outcome) == (
        "lws/vllm-multi", "tpu-serving", "default", "ready")
    leader = next(p for p in pods if p["metadata"]["name"] == "vllm-multi-0")
    assert launch.kv_cache_tokens == summary["kv_cache_tokens"]
    assert launch.container_id == f"vllm-multi-0@{leader['metadata']['uid']}"      # this boot's leader, by uid


def test_a_template_changed_during_the_watch_is_followed_as_a_rollout(gke: Sandbox) -> None:
    import threading

    from sandbox.engine import plan_startup

    kubelet = gke.gke.kubelet
    quick = kubelet.plan_for
    kubelet.plan_for = lambda argv, accelerator, image: plan_startup(argv, accelerator, boot_s=8.0, image=image)
    patched = threading.Event()
    lws = json.loads(kubectl(gke, "get", "lws", DEMO_LWS, "-o", "json"))
    args = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["args"]
    new_args = [a for a in args if not a.startswith("--max-model-len")] + ["--max-model-len=2048"]
    patch = json.dumps([{"op": "replace", "path": f"/spec/leaderWorkerTemplate/{part}/spec/containers/0/args",
                         "value": new_args} for part in ("leaderTemplate", "workerTemplate")])

    def on_event(event: Any) -> None:
        if event.worker == 1 and event.kind == "following" and not patched.is_set():
            patched.set()                              # mid-boot: someone patches the LWS
            threading.Thread(target=kubectl, args=(gke, "patch", "lws", DEMO_LWS, "--type", "json", "-p",
                                                   patch)).start()

    try:
        _remake_group(gke)
        outcome, said = _group_watch(gke, on_event)
    finally:
        kubelet.plan_for = quick
    assert patched.is_set() and outcome.code == 0, said
    summary = outcome.summary
    assert (summary["max_model_len"], summary["recreated"]) == (2048, 0)   # the new template's boot, no recreation
    [rollout] = [s for s in said if s.startswith("rollout: ")]               # said once, not once per pod
    assert rollout.startswith("rollout: lws/vllm-multi's template changed")
    assert all("--max-model-len=2048" in p["spec"]["containers"][0]["args"] for p in group_pods(gke))


def test_an_lws_changed_since_it_was_read_is_not_patched(gke: Sandbox) -> None:
    """The swap's guard on an LWS: someone else's spec edit between the read and the patch refuses the swap
    (nothing of ours lands); an edit that left the spec alone (an annotation) is patched on the new version."""
    import asyncio

    from console.config import load_config
    from console.flows.gke_fleet import gke_source
    from console.flows.gke_target import parse_workload_spec, pick_workload
    from console.flows.history_access import HistoryAccess
    from console.flows.workload_swap import WorkloadSwapCase

    def swap_after(*edit: str) -> Any:
        async def go() -> Any:
            source = gke_source(load_config(gke.config_path))
            assert source is not None
            try:
                fleet = await source.list_fleet()
                workload = pick_workload(fleet, parse_workload_spec(f"lws/{DEMO_LWS}"))
                await asyncio.to_thread(kubectl, gke, *edit)
                case = WorkloadSwapCase(workload, source.client(fleet.clusters[0].ref), load_config(gke.config_path),
                                        HistoryAccess.none())
                return await case.run(case.preview({"max-model-len": "3072"}, None), follow=False)
            finally:
                await source.close()

        return asyncio.run(go())

    outcome = swap_after("patch", "lws", DEMO_LWS, "--type", "merge", "-p",
                         '{"spec": {"leaderWorkerTemplate": {"workerTemplate": {"metadata": {"annotations": '
                         '{"someone": "else"}}}}}}')
    lwt = json.loads(kubectl(gke, "get", "lws", DEMO_LWS, "-o", "json"))["spec"]["leaderWorkerTemplate"]
    assert outcome.patched is False and "changed since it was read" in (outcome.error or "")
    assert lwt["workerTemplate"]["metadata"]["annotations"] == {"someone": "else"}
    assert not any("--max-model-len=3072" in lwt[part]["spec"]["containers"][0]["args"]
                   for part in ("leaderTemplate", "workerTemplate"))
    # the other's template edit remade the group: its status moves at every step of that, which a guarded patch
    # may retry only so often; the annotation case starts from a settled group
    wait_for("the group remade by the other's edit Ready", lambda: _all_ready(gke))
    outcome = swap_after("annotate", "lws", DEMO_LWS, "seen=yes")
    lwt = json.loads(kubectl(gke, "get", "lws", DEMO_LWS, "-o", "json"))["spec"]["leaderWorkerTemplate"]
    assert outcome.patched is True, outcome.error
    assert all("--max-model-len=3072" in lwt[part]["spec"]["containers"][0]["args"]
               for part in ("leaderTemplate", "workerTemplate"))
    wait_for("the new group Ready (the next test starts from a settled group)", lambda: (pods := _all_ready(gke))
             and all("--max-model-len=3072" in p["spec"]["containers"][0]["args"] for p in pods))


def test_watches_of_one_boot_share_a_launch_and_a_remade_group_is_a_new_one(
        gke: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    """The history keys a group's boot by its leader's uid: the leader's NAME outlives a recreation."""
    def watched() -> int:
        wait_for("the group Ready", lambda: _all_ready(gke))
        code, out, err = _cli(capsys, gke, "watch", f"lws/{DEMO_LWS}", "--json", "--poll-s", "0.1")
        assert code == 0, err
        return int(json.loads(out)["launch_id"])

    first = watched()
    assert watched() == first
    _remake_group(gke)
    assert watched() != first


def test_rollback_lws_restores_both_templates_from_the_history(gke: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    """A LeaderWorkerSet keeps no ReplicaSets to undo to: ``rollback lws/NAME`` restores the spec the last swap
    replaced, which the swap kept in the history (``observed``, ``replaced``) when no launch held it."""
    wait_for("the group Ready", lambda: _all_ready(gke))
    lwt = json.loads(kubectl(gke, "get", "lws", DEMO_LWS, "-o", "json"))["spec"]["leaderWorkerTemplate"]
    before = {part: lwt[part]["spec"]["containers"][0]["args"] for part in ("leaderTemplate", "workerTemplate")}
    code, _, err = _cli(capsys, gke, "swap", f"lws/{DEMO_LWS}", "--set", "max-model-len=2048", "--set",
                        "enable-prefix-caching=", "--yes")
    assert code == 0, err
    code, out, err = _cli(capsys, gke, "rollback", f"lws/{DEMO_LWS}", "--yes", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["plan"]["restores_launch"] is not None and report["plan"]["restores_revision"] is None
    assert f"rollback lws/{DEMO_LWS} to launch {report['plan']['restores_launch']} from the history" in err
    lwt = json.loads(kubectl(gke, "get", "lws", DEMO_LWS, "-o", "json"))["spec"]["leaderWorkerTemplate"]
    after = {part: lwt[part]["spec"]["containers"][0]["args"] for part in ("leaderTemplate", "workerTemplate")}
    assert after == before
    summary = report["outcome"]["summary"]
    pods = group_pods(gke)
    assert summary["ready"] is True and {p["name"] for p in summary["pods"]} == {p["metadata"]["name"] for p in pods}
    assert all(p["spec"]["containers"][0]["args"] == before["workerTemplate" if p["metadata"]["name"] != "vllm-multi-0"
                                                            else "leaderTemplate"] for p in pods)
    code, out, err = _cli(capsys, gke, "rollback", f"lws/{DEMO_LWS}", "--dry-run")   # back to the swapped spec
    assert code == 0, err
    assert "--max-model-len=2048" in out.split("->", 1)[1] and "--enable-prefix-caching" in out.split("->", 1)[1]
