"""GKE and Kubernetes JSON -> node pools and workloads: the GKE objects are built with google-cloud-container's
own types (so the field names are the API's), the Kubernetes ones as the GKE vLLM TPU tutorial writes them."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from google.cloud import container_v1 as gke

from remote.gke.models import ClusterRef
from remote.gke.parse import (
    chips_in_use,
    cluster_from_json,
    machine_facts,
    model_of,
    node_pool_counts,
    node_pool_from_json,
    node_pool_of_nodes,
    pools_from_nodes,
    workload_from_json,
)

REF = ClusterRef("inference-prod", "us-east5", "tpu-serving")
CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def _pool(**kw: Any) -> dict[str, Any]:
    """A NodePool as the GKE REST API sends it (camelCase), built with the library's type."""
    config = kw.pop("config", {})
    pool = gke.NodePool(config=gke.NodeConfig(**config), **kw)
    return gke.NodePool.to_dict(pool, preserving_proto_field_name=False, use_integers_for_enums=False)


def test_machine_types_give_accelerator_generation_and_chips() -> None:
    assert machine_facts("ct6e-standard-4t") == ("tpu-v6e-slice", "v6e", 4)
    assert machine_facts("ct5lp-hightpu-8t") == ("tpu-v5-lite-podslice", "v5e", 8)
    assert machine_facts("ct5p-hightpu-4t") == ("tpu-v5p-slice", "v5p", 4)
    assert machine_facts("n2-standard-8") == ("", "", None)


@pytest.mark.parametrize(("config", "extra", "expected"), [
    ({"spot": True}, {}, ("spot", False, "")),
    ({"preemptible": True}, {}, ("preemptible", False, "")),
    ({"flex_start": True}, {}, ("flex-start", False, "")),
    ({}, {"queued_provisioning": gke.NodePool.QueuedProvisioning(enabled=True)}, ("flex-start", True, "")),
    ({"reservation_affinity": gke.ReservationAffinity(
        consume_reservation_type=gke.ReservationAffinity.Type.SPECIFIC_RESERVATION,
        key="compute.googleapis.com/reservation-name", values=["projects/p/reservations/res-v6e"])}, {},
     ("reserved", False, "res-v6e")),
    ({}, {}, ("on-demand", False, "")),
])
def test_provisioning_model_of_a_node_pool(config: dict[str, Any], extra: dict[str, Any],
                                           expected: tuple[str, bool, str]) -> None:
    pool = node_pool_from_json(_pool(name="p", config={"machine_type": "ct6e-standard-4t", **config},
                                     initial_node_count=2, **extra), REF)
    assert pool is not None
    assert (pool.provisioning_model, pool.queued, pool.reservation) == expected


def test_cluster_with_tpu_and_cpu_pools() -> None:
    cluster = gke.Cluster(
        name="tpu-serving", location="us-east5", endpoint="34.1.2.3", status=gke.Cluster.Status.RUNNING,
        current_master_version="1.33.2-gke.1", master_auth=gke.MasterAuth(
            cluster_ca_certificate=base64.b64encode(CA.encode()).decode()),
        node_pools=[
            gke.NodePool(name="default-pool", config=gke.NodeConfig(machine_type="e2-standard-4"), initial_node_count=3),
            gke.NodePool(name="v6e-flex", config=gke.NodeConfig(machine_type="ct6e-standard-4t", flex_start=True),
                         initial_node_count=1, placement_policy=gke.NodePool.PlacementPolicy(tpu_topology="2x2")),
        ])
    parsed = cluster_from_json(gke.Cluster.to_dict(cluster, preserving_proto_field_name=False, use_integers_for_enums=False), "inference-prod")
    assert parsed.ref == REF and parsed.server == "https://34.1.2.3" and parsed.ca_pem == CA
    assert (parsed.status, parsed.version) == ("RUNNING", "1.33.2-gke.1")
    [pool] = parsed.node_pools
    assert (pool.name, pool.accelerator, pool.topology, pool.provisioning_model, pool.node_count, pool.chips) == (
        "v6e-flex", "tpu-v6e-slice", "2x2", "flex-start", 1, 4)
    assert pool.to_json()["chips_in_use"] is None


def test_a_bad_ca_reads_as_none() -> None:
    parsed = cluster_from_json({"name": "c", "location": "l", "masterAuth": {"clusterCaCertificate": "%%%"},
                                "nodePools": "not a list"}, "p")
    assert (parsed.ca_pem, parsed.node_pools) == ("", ())


DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "vllm-llama", "namespace": "default", "resourceVersion": "4711",
                 "annotations": {"deployment.kubernetes.io/revision": "3"}},
    "spec": {"replicas": 1, "strategy": {"type": "Recreate"}, "template": {"spec": {
        "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                         "cloud.google.com/gke-tpu-topology": "2x2"},
        "containers": [
            {"name": "sidecar", "image": "busybox"},
            {"name": "vllm-tpu", "image": "vllm/vllm-tpu:v0.11.1",
             "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
             "args": ["--host=0.0.0.0", "--port=8000", "--tensor-parallel-size=4", "--max-model-len=4096",
                      "--model=meta-llama/Llama-3.1-8B-Instruct"],
             "resources": {"limits": {"google.com/tpu": "4"}, "requests": {"google.com/tpu": "4"}}}]}}},
    "status": {"replicas": 1, "readyReplicas": 1},
}


def test_deployment_workload_lands_on_the_matching_pool() -> None:
    pools = [node_pool_from_json(_pool(name=n, config={"machine_type": t, "spot": spot}, initial_node_count=1,
                                       placement_policy=gke.NodePool.PlacementPolicy(tpu_topology="2x2")), REF)
             for n, t, spot in (("v5e-spot", "ct5lp-hightpu-4t", True), ("v6e-flex", "ct6e-standard-4t", False))]
    w = workload_from_json(DEPLOYMENT, REF, [p for p in pools if p is not None])
    assert w is not None
    assert (w.kind, w.name, w.namespace, w.ready, w.replicas, w.container, w.chips) == (
        "Deployment", "vllm-llama", "default", 1, 1, "vllm-tpu", 4)
    assert (w.node_pool, w.provisioning_model, w.accelerator, w.topology) == ("v6e-flex", "on-demand",
                                                                             "tpu-v6e-slice", "2x2")
    assert (w.model, w.revision, w.resource_version, w.strategy, w.ref) == (
        "meta-llama/Llama-3.1-8B-Instruct", "3", "4711", "Recreate", "deploy/vllm-llama")
    assert w.to_json()["args"][-1] == "--model=meta-llama/Llama-3.1-8B-Instruct"
    assert set(w.to_json()) >= {"cluster", "location", "project", "namespace", "kind", "name", "ready", "replicas",
                                "image", "args", "accelerator", "topology", "provisioning_model"}


def test_non_tpu_deployment_is_not_a_workload_and_missing_status_reads_zero() -> None:
    web = copy.deepcopy(DEPLOYMENT)
    web["spec"]["template"]["spec"] = {"containers": [{"name": "web", "image": "nginx"}]}
    assert workload_from_json(web, REF) is None
    fresh = copy.deepcopy(DEPLOYMENT)
    del fresh["status"]
    w = workload_from_json(fresh, REF)
    assert w is not None and (w.ready, w.replicas, w.node_pool, w.provisioning_model) == (0, 1, "", "")


def test_leader_worker_set() -> None:
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": "vllm", "namespace": "serving"},
           "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 4, "workerTemplate": {"spec": {
               "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                                "cloud.google.com/gke-tpu-topology": "4x4"},
               "containers": [{"name": "vllm-worker", "image": "vllm/vllm-tpu:latest",
                               "command": ["sh", "-c", "vllm serve meta-llama/Llama-3.1-70B"],
                               "resources": {"limits": {"google.com/tpu": 4}}}]}}}},
           "status": {"readyReplicas": 1}}
    w = workload_from_json(lws, REF)
    assert w is not None and (w.kind, w.ref, w.size, w.replicas, w.ready, w.chips, w.topology) == (
        "LeaderWorkerSet", "lws/vllm", 4, 2, 1, 4, "4x4")


def test_model_of_command_lines() -> None:
    assert model_of(["vllm", "serve", "google/gemma-3-27b-it", "--max-model-len=8192"]) == "google/gemma-3-27b-it"
    assert model_of(["--model", "m1"]) == "m1"
    assert model_of(["--port=8000"]) == ""


def test_node_pool_counts_and_chips_in_use() -> None:
    nodes = [{"metadata": {"name": f"n{i}", "labels": {"cloud.google.com/gke-nodepool": pool,
                                                       "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                                                       "cloud.google.com/gke-tpu-topology": "2x2"}},
              "status": {"allocatable": {"google.com/tpu": "4"}}} for i, pool in enumerate(["a", "a", "b"])]
    pods = [{"spec": {"nodeName": "n0", "containers": [{"resources": {"limits": {"google.com/tpu": "4"}}}]},
             "status": {"phase": "Running"}},
            {"spec": {"nodeName": "n2", "containers": [{"resources": {"limits": {"google.com/tpu": "4"}}}]},
             "status": {"phase": "Succeeded"}},
            {"spec": {"containers": [{"resources": {"limits": {"google.com/tpu": "4"}}}]},
             "status": {"phase": "Pending"}}]
    assert node_pool_counts(nodes) == {"a": 2, "b": 1}
    assert chips_in_use(pods, node_pool_of_nodes(nodes)) == {"a": 4}
    [a, b] = pools_from_nodes(ClusterRef("", "", "ctx"), nodes)
    assert (a.name, a.node_count, a.chips, b.node_count, a.accelerator) == ("a", 2, 8, 1, "tpu-v6e-slice")


def test_edited_args_keep_the_manifests_style() -> None:
    from remote.gke.edit import edited_args

    args = ["--model=m", "--max-model-len", "4096", "--enforce-eager", "--port=8000"]
    assert edited_args(args, {"max-model-len": "8192"}) == ["--model=m", "--max-model-len", "8192", "--enforce-eager",
                                                           "--port=8000"]
    assert edited_args(args, {"max_model_len": None, "port": "9000"}) == ["--model=m", "--enforce-eager", "--port=9000"]
    assert edited_args(args, {"enforce-eager": None}) == ["--model=m", "--max-model-len", "4096", "--port=8000"]
    assert edited_args(args, {"kv-cache-dtype": "fp8"})[-1] == "--kv-cache-dtype=fp8"


def _workload(**spec: Any) -> Any:
    obj = copy.deepcopy(DEPLOYMENT)
    obj["spec"].update(spec)
    w = workload_from_json(obj, REF)
    assert w is not None
    return w


def test_swap_patch_tests_the_resource_version_first() -> None:
    from remote.gke.edit import container_index, spec_of, swap_patch

    w = _workload()
    assert container_index(w) == 1
    ops = swap_patch(w, 1, args=["--model=m"], image="vllm/vllm-tpu:v2")
    assert ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "4711"}
    assert [o["path"] for o in ops[1:]] == ["/spec/template/spec/containers/1/args",
                                            "/spec/template/spec/containers/1/image"]
    spec = spec_of(w)
    assert (spec.model, spec.flag("max-model-len"), spec.flag("tensor-parallel-size")) == (
        "meta-llama/Llama-3.1-8B-Instruct", "4096", "4")


def test_workload_lints() -> None:
    from remote.gke.edit import workload_lints

    rolling = _workload(strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}})
    rules = {f.rule_id for f in workload_lints(rolling, pool_chips=4, predicted_boot_s=None)}
    assert rules == {"gke-rolling-update-tpu", "gke-compile-cache"}
    no_surge = _workload(strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0}})
    assert "gke-rolling-update-tpu" not in {f.rule_id for f in workload_lints(no_surge, 4, None)}
    probed = copy.deepcopy(DEPLOYMENT)
    container = probed["spec"]["template"]["spec"]["containers"][1]
    container["startupProbe"] = {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 10,
                                 "failureThreshold": 30}
    container["env"] = [{"name": "VLLM_XLA_CACHE_PATH", "value": "/cache/xla"}]
    container["volumeMounts"] = [{"name": "cache", "mountPath": "/cache"}]
    probed["spec"]["template"]["spec"]["volumes"] = [{"name": "cache", "persistentVolumeClaim": {"claimName": "x"}}]
    w = workload_from_json(probed, REF)
    assert w is not None
    [finding] = workload_lints(w, 4, predicted_boot_s=600.0)
    assert (finding.rule_id, finding.severity) == ("gke-startup-probe-short", "error") and "300 s" in finding.message
    assert workload_lints(w, 4, predicted_boot_s=200.0) == []


def test_pod_status_and_the_current_template() -> None:
    from remote.gke.parse import newest_template_hash, pod_events, pod_status

    pending = {"metadata": {"name": "p1", "labels": {"pod-template-hash": "abc"}},
               "status": {"phase": "Pending", "conditions": [
                   {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/2 nodes are available: 2 Insufficient google.com/tpu."}]}}
    status = pod_status(pending, "vllm")
    assert (status.template_hash, status.running, status.headline) == (
        "abc", False, "Pending: Unschedulable: 0/2 nodes are available: 2 Insufficient google.com/tpu.")
    creating = {"metadata": {"name": "p2"}, "spec": {"nodeName": "n1"}, "status": {
        "phase": "Pending", "containerStatuses": [{"name": "vllm", "restartCount": 0,
                                                   "state": {"waiting": {"reason": "ContainerCreating"}}}]}}
    assert pod_status(creating, "vllm").headline == "ContainerCreating"
    running = {"metadata": {"name": "p3"}, "status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}], "containerStatuses": [
        {"name": "vllm", "restartCount": 2, "state": {"running": {"startedAt": "2026-12-02T10:00:00Z"}}}]}}
    s3 = pod_status(running, "vllm")
    assert (s3.ready, s3.restarts, s3.started_at, s3.headline) == (True, 2, "2026-12-02T10:00:00Z", "Running, Ready")
    owner = [{"kind": "Deployment", "name": "vllm-llama"}]
    sets = [{"metadata": {"ownerReferences": owner, "labels": {"pod-template-hash": h},
                          "annotations": {"deployment.kubernetes.io/revision": r}}} for h, r in
            (("old", "2"), ("new", "10"), ("mid", "9"))]
    sets.append({"metadata": {"ownerReferences": [{"kind": "Deployment", "name": "other"}],
                              "labels": {"pod-template-hash": "x"}, "annotations": {"deployment.kubernetes.io/revision": "99"}}})
    assert newest_template_hash(sets, "vllm-llama") == "new"
    events = [{"involvedObject": {"name": "p1"}, "type": "Warning", "reason": "FailedScheduling",
               "message": "0/2 nodes are available", "lastTimestamp": "2026-12-02T10:00:01Z"},
              {"involvedObject": {"name": "p9"}, "type": "Normal", "reason": "Pulled", "message": "x"}]
    assert pod_events(events, "p1") == ["Warning FailedScheduling: 0/2 nodes are available"]


def test_right_after_a_patch_the_old_replica_set_is_not_the_current_template() -> None:
    from remote.gke.parse import newest_template_hash

    owner = [{"kind": "Deployment", "name": "d"}]
    old = {"metadata": {"ownerReferences": owner, "labels": {"pod-template-hash": "old"},
                        "annotations": {"deployment.kubernetes.io/revision": "1"}},
           "spec": {"template": {"spec": {"containers": [{"name": "vllm", "args": ["--max-model-len=4096"]}]}}}}
    patched = {"spec": {"containers": [{"name": "vllm", "args": ["--max-model-len=8192"]}]}}
    assert newest_template_hash([old], "d") == "old"                  # without the template: the newest
    assert newest_template_hash([old], "d", patched) == ""            # the controller has not made it yet
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["pod-template-hash"] = "new"
    new["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "2"
    new["spec"]["template"] = patched
    assert newest_template_hash([old, new], "d", patched) == "new"
