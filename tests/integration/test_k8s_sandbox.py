"""The sandbox's GKE held to the real clients: kubectl (``/usr/bin/kubectl``) against the Kubernetes API
stand-in, gcloud against the GKE API stand-in. One cluster for the module; its pods boot in 1 s.

Tests that change the cluster use their own Deployment or put ``vllm-llama`` back, so they can run in any
order; each waits on conditions (``kubectl rollout status``, a polled object), never on a timer.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.gke.cluster import SandboxGke
from sandbox.gke.cluster_data import DEMO_DEPLOYMENT, POOLS
from sandbox.gke.store import Selector
from tests.integration.gcloud_oracle import GCLOUD, why_no_gcloud

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
#: Seconds one kubectl call may take (a rollout includes a 2 s boot).
KUBECTL_TIMEOUT_S = 60.0

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed here (the oracle)")


@pytest.fixture(scope="module")
def gke() -> Iterator[SandboxGke]:
    with tempfile.TemporaryDirectory(prefix="k8s-sandbox-") as folder:
        cluster = SandboxGke(Path(folder), boot_s=1.0, create_s=0.2, terminate_s=0.1, time_scale=0.05,
                             other_projects=("research-sandbox",), denied_projects=("denied-project",))
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.stop()


def kubectl(gke: SandboxGke, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KUBECTL, "--kubeconfig", str(gke.kubeconfig_path), *args], input=stdin,
                          capture_output=True, text=True, timeout=KUBECTL_TIMEOUT_S, check=False)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def get_json(gke: SandboxGke, *args: str) -> Any:
    return json.loads(ok(kubectl(gke, "get", *args, "-o", "json")))


def wait_for(what: str, check: Any, timeout_s: float = 30.0) -> Any:
    """Poll ``check()`` until it returns something truthy; fail saying ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def live_pods(gke: SandboxGke, labels: str) -> list[dict[str, Any]]:
    """The pods of ``default`` matching ``labels``, read from the stand-in's store (cheap, for polling;
    the assertions read through kubectl)."""
    return gke.store.list("pods", "default", Selector.parse(labels), Selector())[0]


def live_pod(gke: SandboxGke, name: str) -> dict[str, Any]:
    """One pod of ``default`` from the store (``{}`` when gone)."""
    return gke.store.get("pods", "default", name) or {}


def newest_pod(gke: SandboxGke, deployment: str) -> dict[str, Any]:
    """The pod of the deployment's newest ReplicaSet (highest revision)."""
    sets = get_json(gke, "rs", "-l", f"app={deployment}")["items"]
    newest = max(sets, key=lambda rs: int(rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]))
    template_hash = newest["metadata"]["labels"]["pod-template-hash"]
    pods = wait_for("the new ReplicaSet's pod", lambda: live_pods(gke, f"pod-template-hash={template_hash}"))
    return dict(pods[0])


def api_get(gke: SandboxGke, path: str, *, token: str | None = None, accept: str = "") -> tuple[int, bytes]:
    """A raw GET through the cluster CA (certificate-authority-data of the kubeconfig), bearer ``token``."""
    context = ssl.create_default_context(cadata=(gke.folder / "ca.crt").read_text())
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if accept:
        headers["Accept"] = accept
    request = urllib.request.Request(gke.kubernetes_api_url + path, headers=headers)
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_kubeconfig_is_private_and_names_the_gke_context(gke: SandboxGke) -> None:
    assert os.stat(gke.kubeconfig_path).st_mode & 0o777 == 0o600
    assert ok(kubectl(gke, "config", "current-context")).strip() == "gke_inference-prod_us-east5_tpu-serving"
    view = json.loads(ok(kubectl(gke, "config", "view", "--raw", "-o", "json")))
    ca = base64.b64decode(view["clusters"][0]["cluster"]["certificate-authority-data"])
    assert ca == (gke.folder / "ca.crt").read_bytes()
    assert view["clusters"][0]["cluster"]["server"] == gke.kubernetes_api_url


def test_get_deploy_all_namespaces_lists_the_vllm_deployment(gke: SandboxGke) -> None:
    lines = ok(kubectl(gke, "get", "deploy", "-A")).splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert [line.split()[:2] for line in lines[1:]] == [["default", DEMO_DEPLOYMENT]]


def test_get_nodes_shows_the_tpu_labels(gke: SandboxGke) -> None:
    out = ok(kubectl(gke, "get", "nodes", "-L", "cloud.google.com/gke-nodepool,cloud.google.com/gke-tpu-accelerator,"
                     "cloud.google.com/gke-tpu-topology,cloud.google.com/gke-spot,cloud.google.com/gke-flex-start"))
    rows = sorted(line.split() for line in out.splitlines()[1:])
    assert [row[1] for row in rows] == ["Ready", "Ready"]
    assert [row[5:] for row in rows] == [["v5e-spot", "tpu-v5-lite-podslice", "2x2", "true"],
                                         ["v6e-flex", "tpu-v6e-slice", "2x2", "true"]]
    nodes = get_json(gke, "nodes")["items"]
    assert sorted(n["status"]["allocatable"]["google.com/tpu"] for n in nodes) == ["4", "4"]
    assert all(n["spec"]["taints"] == [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}]
               for n in nodes)


def test_get_pods_json_has_the_serving_pod_on_the_v6e_node(gke: SandboxGke) -> None:
    ok(kubectl(gke, "rollout", "status", f"deploy/{DEMO_DEPLOYMENT}", "--timeout=50s"))
    pods = get_json(gke, "pods", "-l", f"app={DEMO_DEPLOYMENT}")
    assert pods["kind"] == "List" and [p["kind"] for p in pods["items"]] == ["Pod"]
    pod = pods["items"][0]
    assert pod["spec"]["nodeName"] == POOLS[1].node_names()[0]
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["containerStatuses"][0]["ready"] is True
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert {"key": "google.com/tpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"} \
        in pod["spec"]["tolerations"]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"google.com/tpu": "4"}


def test_json_patch_rolls_out_a_new_pod_with_the_new_arg_and_its_boot_log(gke: SandboxGke) -> None:
    ok(kubectl(gke, "rollout", "status", f"deploy/{DEMO_DEPLOYMENT}", "--timeout=50s"))
    deployment = get_json(gke, "deploy", DEMO_DEPLOYMENT)
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    at = next(i for i, a in enumerate(args) if a.startswith("--max-model-len="))
    new_len = "16384" if args[at] != "--max-model-len=16384" else "8192"
    patch = [{"op": "test", "path": "/metadata/resourceVersion", "value": deployment["metadata"]["resourceVersion"]},
             {"op": "replace", "path": f"/spec/template/spec/containers/0/args/{at}", "value": f"--max-model-len={new_len}"}]
    assert ok(kubectl(gke, "patch", "deploy", DEMO_DEPLOYMENT, "--type", "json", "-p", json.dumps(patch))).strip() \
        == f"deployment.apps/{DEMO_DEPLOYMENT} patched"
    status = ok(kubectl(gke, "rollout", "status", f"deploy/{DEMO_DEPLOYMENT}", "--timeout=50s"))
    assert status.splitlines()[-1] == f'deployment "{DEMO_DEPLOYMENT}" successfully rolled out'
    pod = newest_pod(gke, DEMO_DEPLOYMENT)
    assert f"--max-model-len={new_len}" in pod["spec"]["containers"][0]["args"]
    assert [p["metadata"]["name"] for p in get_json(gke, "pods", "-l", f"app={DEMO_DEPLOYMENT}")["items"]] \
        == [pod["metadata"]["name"]]                         # Recreate: the old pod is gone
    follow = subprocess.Popen([KUBECTL, "--kubeconfig", str(gke.kubeconfig_path), "logs", "-f", pod["metadata"]["name"]],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        assert follow.stdout is not None
        for line in follow.stdout:                          # the engine runs on: stop reading at ready
            seen.append(line)
            if "Application startup complete." in line or len(seen) > 5000:
                break
    finally:
        follow.kill()
        follow.communicate(timeout=10)
    text = "".join(seen)
    assert "Application startup complete." in text
    assert f"max_model_len={new_len}" in text or f"'max_model_len': {new_len}" in text
    assert "meta-llama/Llama-3.1-8B-Instruct" in text


def test_json_patch_with_a_stale_resource_version_is_refused(gke: SandboxGke) -> None:
    patch = [{"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
             {"op": "replace", "path": "/spec/replicas", "value": 2}]
    result = kubectl(gke, "patch", "deploy", DEMO_DEPLOYMENT, "--type", "json", "-p", json.dumps(patch))
    assert result.returncode == 1
    assert result.stderr.strip() == "The request is invalid: the server rejected our request due to an error in our request"
    assert get_json(gke, "deploy", DEMO_DEPLOYMENT)["spec"]["replicas"] == 1


def test_merge_patch_that_empties_the_containers_gets_422(gke: SandboxGke) -> None:
    before = get_json(gke, "deploy", DEMO_DEPLOYMENT)["metadata"]["resourceVersion"]
    result = kubectl(gke, "patch", "deploy", DEMO_DEPLOYMENT, "--type", "merge",
                     "-p", '{"spec":{"template":{"spec":{"containers":[]}}}}')
    assert result.returncode == 1
    assert f'The Deployment "{DEMO_DEPLOYMENT}" is invalid: spec.template.spec.containers: Required value' \
        in result.stderr
    replaced = kubectl(gke, "patch", "deploy", DEMO_DEPLOYMENT, "--type", "merge",
                       "-p", '{"spec":{"template":{"spec":{"containers":[{"name":"vllm","args":["--port=8001"]}]}}}}')
    assert "spec.template.spec.containers[0].image: Required value" in replaced.stderr
    assert get_json(gke, "deploy", DEMO_DEPLOYMENT)["metadata"]["resourceVersion"] == before


def test_strategic_merge_patch_merges_containers_and_env_by_name(gke: SandboxGke) -> None:
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "env": [{"name": "EXTRA", "value": "1"}]}]}}}}
    out = ok(kubectl(gke, "patch", "deploy", DEMO_DEPLOYMENT, "-p", json.dumps(patch), "--dry-run=server", "-o", "json"))
    container = json.loads(out)["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].startswith("vllm/vllm-tpu:")
    assert [e["name"] for e in container["env"]] == ["VLLM_XLA_CACHE_PATH", "HF_HOME", "EXTRA"]
    live = get_json(gke, "deploy", DEMO_DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0]
    assert "EXTRA" not in [e["name"] for e in live["env"]]      # dry run: nothing stored


def _rolling_deployment(name: str, pool_index: int, args: list[str]) -> dict[str, Any]:
    pool = POOLS[pool_index]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": pool.accelerator},
                         "containers": [{"name": "vllm", "image": "vllm/vllm-tpu:v0.29.1", "command": ["vllm", "serve"],
                                         "args": args, "resources": {"limits": {"google.com/tpu": "4"}}}]}}}}


def test_rolling_update_on_a_full_tpu_node_leaves_the_new_pod_unschedulable(gke: SandboxGke) -> None:
    name = "vllm-rolling"
    manifest = _rolling_deployment(name, 0, ["Qwen/Qwen3-0.6B", "--max-model-len=4096", "--tensor-parallel-size=4"])
    created = kubectl(gke, "create", "--validate=false", "-f", "-", stdin=json.dumps(manifest))  # no OpenAPI served
    assert ok(created).strip() == f"deployment.apps/{name} created"
    try:
        ok(kubectl(gke, "rollout", "status", f"deploy/{name}", "--timeout=50s"))
        old = newest_pod(gke, name)
        assert old["spec"]["nodeName"] == POOLS[0].node_names()[0]
        patch = [{"op": "replace", "path": "/spec/template/spec/containers/0/args/1", "value": "--max-model-len=2048"}]
        ok(kubectl(gke, "patch", "deploy", name, "--type", "json", "-p", json.dumps(patch)))
        pending = newest_pod(gke, name)
        assert pending["metadata"]["name"] != old["metadata"]["name"]
        message = ("0/2 nodes are available: 1 Insufficient google.com/tpu, 1 node(s) didn't match Pod's node "
                   "affinity/selector. preemption: 0/2 nodes are available: 1 No preemption victims found for "
                   "incoming pod, 1 Preemption is not helpful for scheduling.")

        def unschedulable() -> bool:
            pod = live_pod(gke, pending["metadata"]["name"])
            return any(c.get("reason") == "Unschedulable" and c.get("message") == message
                       for c in pod["status"].get("conditions") or [])

        wait_for("the new pod's Unschedulable condition", unschedulable)
        events = get_json(gke, "events", "--field-selector",
                          f"involvedObject.name={pending['metadata']['name']},reason=FailedScheduling")["items"]
        assert [(e["type"], e["message"]) for e in events] == [("Warning", message)]
        logs = kubectl(gke, "logs", pending["metadata"]["name"])
        assert logs.returncode == 1
        assert f'container "vllm" in pod "{pending["metadata"]["name"]}" is waiting to start: ContainerCreating' \
            in logs.stderr
        assert get_json(gke, "pod", old["metadata"]["name"])["status"]["phase"] == "Running"   # never surrendered
    finally:
        ok(kubectl(gke, "delete", "deploy", name))
    wait_for("the rolling deployment's pods to go", lambda: not live_pods(gke, f"app={name}"))


def test_watch_resumes_from_a_resource_version_and_410s_an_expired_one(gke: SandboxGke) -> None:
    status, body = api_get(gke, "/api/v1/namespaces/default/pods?watch=true&resourceVersion=1&timeoutSeconds=5",
                           token=gke.token)
    assert status == 200
    event = json.loads(body.splitlines()[0])
    assert event["type"] == "ERROR" and event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
    status, body = api_get(gke, "/api/v1/nodes", token=gke.token)
    listed = json.loads(body)
    assert listed["kind"] == "NodeList" and int(listed["metadata"]["resourceVersion"]) > 1000
    status, body = api_get(gke, "/api/v1/nodes?watch=1&timeoutSeconds=1", token=gke.token)
    assert sorted(json.loads(line)["type"] for line in body.splitlines()) == ["ADDED", "ADDED"]
    table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"      # what kubectl get -w asks for
    status, body = api_get(gke, "/api/v1/nodes?watch=1&timeoutSeconds=1", token=gke.token, accept=table)
    events = [json.loads(line)["object"] for line in body.splitlines()]
    assert [e["kind"] for e in events] == ["Table", "Table"]
    assert [c["name"] for c in events[0]["columnDefinitions"]] == ["Name", "Status", "Roles", "Age", "Version"]
    assert events[1]["columnDefinitions"] == []                                 # the columns come once
    assert sorted(e["rows"][0]["cells"][0] for e in events) == sorted(n for p in POOLS for n in p.node_names())


def test_no_or_a_wrong_token_is_401(gke: SandboxGke) -> None:
    assert api_get(gke, "/api/v1/pods")[0] == 401
    status, body = api_get(gke, "/api/v1/pods", token="not-the-token")
    assert status == 401 and json.loads(body)["reason"] == "Unauthorized"


@pytest.mark.skipif(why_no_gcloud() is not None, reason=why_no_gcloud() or "")
def test_gcloud_lists_the_clusters_tpu_node_pools(gke: SandboxGke, tmp_path: Path) -> None:
    config = tmp_path / "gcloud"
    (config / "configurations").mkdir(parents=True)
    (config / "active_config").write_text("default")
    (config / "gce").write_text("False")
    (config / "configurations" / "config_default").write_text(
        f"[auth]\ndisable_credentials = true\n\n[api_endpoint_overrides]\ncontainer = {gke.gke_api_url}/\n\n"
        "[core]\naccount = a@example.com\ndisable_usage_reporting = true\nproject = inference-prod\n")
    env = {**os.environ, "CLOUDSDK_CONFIG": str(config), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}

    def gcloud(*args: str) -> list[Any]:
        done = subprocess.run([GCLOUD, *args, "--format=json"], env=env, capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return list(json.loads(done.stdout))

    pools = gcloud("container", "node-pools", "list", "--cluster", "tpu-serving", "--location", "us-east5")
    assert [(p["name"], p["config"]["machineType"], p["placementPolicy"]["tpuTopology"], p["config"].get("spot"),
             p["config"].get("flexStart")) for p in pools] \
        == [("v5e-spot", "ct5lp-hightpu-4t", "2x2", True, None), ("v6e-flex", "ct6e-standard-4t", "2x2", None, True)]


def test_a_flag_vllm_rejects_crash_loops_with_its_usage_error(gke: SandboxGke) -> None:
    name = "vllm-typo"
    manifest = _rolling_deployment(name, 0, ["Qwen/Qwen3-0.6B", "--max-modle-len=4096"])
    ok(kubectl(gke, "create", "--validate=false", "-f", "-", stdin=json.dumps(manifest)))
    try:
        def crashed() -> dict[str, Any] | None:
            pods = live_pods(gke, f"app={name}")
            statuses = pods[0]["status"].get("containerStatuses") or [] if pods else []
            waiting = (statuses[0].get("state") or {}).get("waiting") or {} if statuses else {}
            return statuses[0] if waiting.get("reason") == "CrashLoopBackOff" else None

        status = wait_for("CrashLoopBackOff", crashed)
        assert status["lastState"]["terminated"]["exitCode"] == 2 and status["ready"] is False
        pod = get_json(gke, "pods", "-l", f"app={name}")["items"][0]["metadata"]["name"]
        wait_for("a restart", lambda: live_pod(gke, pod)["status"]["containerStatuses"][0]["restartCount"] >= 1)
        assert "vllm serve: error: unrecognized arguments: --max-modle-len=4096" \
            in ok(kubectl(gke, "logs", "--previous", pod))
    finally:
        ok(kubectl(gke, "delete", "deploy", name))
    wait_for("the crashing deployment's pods to go", lambda: not live_pods(gke, f"app={name}"))


def test_kr8s_forwards_a_port_to_the_pods_vllm_and_resumes_logs_from_a_time(gke: SandboxGke) -> None:
    pytest.importorskip("kr8s", reason="kr8s (the console's Kubernetes client) is not installed here")
    import asyncio

    import httpx
    import kr8s.asyncio
    from kr8s.asyncio.objects import Pod

    ok(kubectl(gke, "rollout", "status", f"deploy/{DEMO_DEPLOYMENT}", "--timeout=50s"))
    name = newest_pod(gke, DEMO_DEPLOYMENT)["metadata"]["name"]
    args = get_json(gke, "deploy", DEMO_DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0]["args"]
    max_model_len = int(next(a for a in args if a.startswith("--max-model-len=")).split("=")[1])

    async def drive() -> tuple[dict[str, Any], list[str], list[str]]:
        api = await kr8s.asyncio.api(kubeconfig=str(gke.kubeconfig_path))
        pod = await Pod.get(name, namespace="default", api=api)
        async with pod.portforward(remote_port=8000, local_port=0) as port, httpx.AsyncClient(timeout=10) as client:
            models = (await client.get(f"http://127.0.0.1:{port}/v1/models")).json()
        every = [line async for line in pod.logs(timestamps=True)]
        since = every[len(every) // 2].split(" ", 1)[0]
        resumed = [line async for line in pod.logs(timestamps=True, since_time=since)]
        return models, every, resumed

    models, every, resumed = asyncio.run(drive())
    assert [(m["id"], m["max_model_len"]) for m in models["data"]] == [("meta-llama/Llama-3.1-8B-Instruct", max_model_len)]
    assert "Application startup complete." in every[-1] or any("Application startup complete." in x for x in every)
    assert resumed and resumed[-1] == every[-1] and every[len(every) // 2] in resumed and len(resumed) < len(every)


def test_google_cloud_container_reads_the_cluster_and_its_tpu_pools(gke: SandboxGke) -> None:
    pytest.importorskip("google.cloud.container_v1", reason="google-cloud-container is not installed here")
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import container_v1

    client = container_v1.ClusterManagerClient(credentials=AnonymousCredentials(), transport="rest",
                                               client_options={"api_endpoint": gke.gke_api_url})
    clusters = client.list_clusters(parent="projects/inference-prod/locations/-").clusters
    assert [(c.name, c.location, c.endpoint) for c in clusters] \
        == [("tpu-serving", "us-east5", gke.kubernetes_api_url.removeprefix("https://"))]
    assert base64.b64decode(clusters[0].master_auth.cluster_ca_certificate) == (gke.folder / "ca.crt").read_bytes()
    pools = {p.name: p for p in clusters[0].node_pools}
    assert (pools["v5e-spot"].config.machine_type, pools["v5e-spot"].config.spot,
            pools["v5e-spot"].placement_policy.tpu_topology) == ("ct5lp-hightpu-4t", True, "2x2")
    assert (pools["v6e-flex"].config.machine_type, pools["v6e-flex"].config.flex_start,
            pools["v6e-flex"].initial_node_count) == ("ct6e-standard-4t", True, 1)
    assert client.list_clusters(parent="projects/research-sandbox/locations/-").clusters == []
    from google.api_core.exceptions import Forbidden

    with pytest.raises(Forbidden):
        client.list_clusters(parent="projects/denied-project/locations/-")


def test_the_sandbox_starts_its_gke_and_says_where(tmp_path: Path) -> None:
    from sandbox.runner import Sandbox

    with Sandbox(tmp_path / "state", boot=False, gke_boot_s=2.0) as box:
        assert box.kubeconfig_path == tmp_path / "state" / "gke" / "kubeconfig"
        assert os.stat(box.kubeconfig_path).st_mode & 0o777 == 0o600
        assert f"Kubernetes API: {box.kubernetes_api_url} (kubeconfig {box.kubeconfig_path})" \
            in box.describe().splitlines()
        assert box.gke_api_url.startswith("http://127.0.0.1:") and box.kubernetes_api_url.startswith("https://127.0.0.1:")
        out = subprocess.run([KUBECTL, "--kubeconfig", str(box.kubeconfig_path), "get", "deploy", "-A", "-o", "name"],
                             capture_output=True, text=True, timeout=KUBECTL_TIMEOUT_S, check=False)
        assert out.stdout.split() == [f"deployment.apps/{DEMO_DEPLOYMENT}"]
        assert f'api_endpoint = "{box.gke_api_url}"' in box.config_path.read_text()
    assert box.gke is None


def test_rollout_undo_goes_back_to_the_previous_replicaset_and_scale_sets_replicas(gke: SandboxGke) -> None:
    ok(kubectl(gke, "rollout", "status", f"deploy/{DEMO_DEPLOYMENT}", "--timeout=50s"))
    before = newest_pod(gke, DEMO_DEPLOYMENT)["metadata"]["labels"]["pod-template-hash"]
    image = get_json(gke, "deploy", DEMO_DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0]["image"]
    ok(kubectl(gke, "set", "image", f"deploy/{DEMO_DEPLOYMENT}", "vllm=vllm/vllm-tpu:v0.30.0"))
    ok(kubectl(gke, "rollout", "status", f"deploy/{DEMO_DEPLOYMENT}", "--timeout=50s"))
    assert ok(kubectl(gke, "rollout", "undo", f"deploy/{DEMO_DEPLOYMENT}")).strip() \
        == f"deployment.apps/{DEMO_DEPLOYMENT} rolled back"
    ok(kubectl(gke, "rollout", "status", f"deploy/{DEMO_DEPLOYMENT}", "--timeout=50s"))
    deployment = get_json(gke, "deploy", DEMO_DEPLOYMENT)
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == image
    rs = get_json(gke, "rs", f"{DEMO_DEPLOYMENT}-{before}")                 # the same ReplicaSet, a new revision
    revision = rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
    assert deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == revision
    assert int(revision) >= 3 and rs["status"]["readyReplicas"] == 1
    assert ok(kubectl(gke, "scale", f"deploy/{DEMO_DEPLOYMENT}", "--replicas=2")).strip() \
        == f"deployment.apps/{DEMO_DEPLOYMENT} scaled"
    try:
        def second_pending() -> bool:
            pods = live_pods(gke, f"app={DEMO_DEPLOYMENT}")
            return len(pods) == 2 and any(c.get("reason") == "Unschedulable" for p in pods
                                          for c in p["status"].get("conditions") or [])

        wait_for("a second pod that no v6e node can take", second_pending)
    finally:
        ok(kubectl(gke, "scale", f"deploy/{DEMO_DEPLOYMENT}", "--replicas=1"))
    wait_for("one pod again", lambda: len(live_pods(gke, f"app={DEMO_DEPLOYMENT}")) == 1)


def test_a_leaderworkerset_runs_its_leader_pod_and_replaces_the_group_on_a_template_change(gke: SandboxGke) -> None:
    name = "vllm-lws"
    script = ("ray start --head --port=6379; python3 -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-0.6B "
              "--tensor-parallel-size 4 --max-model-len 4096")
    manifest = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": name},
                "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 1, "workerTemplate": {
                    "metadata": {"labels": {"app": name}}, "spec": {
                        "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": POOLS[0].accelerator},
                        "containers": [{"name": "vllm", "image": "vllm/vllm-tpu:v0.29.1", "command": ["sh", "-c"],
                                        "args": [script], "resources": {"limits": {"google.com/tpu": "4"}},
                                        "readinessProbe": {"tcpSocket": {"port": 8000}}}]}}}}}
    created = kubectl(gke, "create", "--validate=false", "-f", "-", stdin=json.dumps(manifest))
    assert ok(created).strip() == f"leaderworkerset.leaderworkerset.x-k8s.io/{name} created"
    try:
        def ready_leader(hash_other_than: str = "") -> dict[str, Any] | None:
            pods = live_pods(gke, f"leaderworkerset.sigs.k8s.io/name={name}")
            fresh = [p for p in pods if not p["metadata"].get("deletionTimestamp") and
                     p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/template-revision-hash"] != hash_other_than]
            return fresh[0] if fresh and fresh[0]["status"].get("containerStatuses", [{}])[0].get("ready") else None

        leader = wait_for("the leader pod to be ready", ready_leader)
        assert leader["metadata"]["name"] == f"{name}-0"
        assert leader["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
        assert {"name": "LWS_GROUP_SIZE", "value": "1"} in leader["spec"]["containers"][0]["env"]
        assert "Application startup complete." in ok(kubectl(gke, "logs", f"{name}-0"))
        status = get_json(gke, "lws", name)["status"]
        assert (status["replicas"], status["readyReplicas"], status["updatedReplicas"]) == (1, 1, 1)
        patch = [{"op": "replace", "path": "/spec/leaderWorkerTemplate/workerTemplate/spec/containers/0/args/0",
                  "value": script.replace("4096", "2048")}]
        ok(kubectl(gke, "patch", "lws", name, "--type", "json", "-p", json.dumps(patch)))
        old_hash = leader["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/template-revision-hash"]
        replaced = wait_for("the group's new leader", lambda: ready_leader(old_hash))
        assert replaced["metadata"]["uid"] != leader["metadata"]["uid"]
        assert "'max_model_len': 2048" in ok(kubectl(gke, "logs", f"{name}-0")) or \
            "max_model_len=2048" in ok(kubectl(gke, "logs", f"{name}-0"))
    finally:
        ok(kubectl(gke, "delete", "lws", name))
    wait_for("the LWS pods to go", lambda: not live_pods(gke, f"leaderworkerset.sigs.k8s.io/name={name}"))


def test_kubectl_port_forward_is_told_the_sandbox_speaks_the_websocket_channel_protocol_only(gke: SandboxGke) -> None:
    ok(kubectl(gke, "rollout", "status", f"deploy/{DEMO_DEPLOYMENT}", "--timeout=50s"))
    pod = newest_pod(gke, DEMO_DEPLOYMENT)["metadata"]["name"]
    result = kubectl(gke, "port-forward", pod, ":8000")
    assert result.returncode == 1
    assert "not SPDY (kubectl port-forward)" in result.stderr
