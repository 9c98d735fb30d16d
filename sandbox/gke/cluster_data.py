"""The sandbox's GKE cluster: ``inference-prod/us-east5/tpu-serving`` with two single-host TPU node pools,
as the GKE API (``container.googleapis.com`` v1 ``Cluster`` / ``NodePool``) and the Kubernetes API
(``Node`` objects with GKE's TPU labels) show them, and the vLLM Deployment it serves at start.

Node pools (one node each, 4 chips per node, topology ``2x2``):

- ``v5e-spot``: ``ct5lp-hightpu-4t`` (TPU v5e, ``tpu-v5-lite-podslice``), ``config.spot: true``;
  nodes labelled ``cloud.google.com/gke-spot: "true"``.
- ``v6e-flex``: ``ct6e-standard-4t`` (TPU v6e, ``tpu-v6e-slice``), ``config.flexStart: true`` with
  ``config.maxRunDuration`` 7 days; nodes labelled ``cloud.google.com/gke-flex-start: "true"``.

With ``multi_host`` (``--demo``, ``tpu-console sandbox``) a third pool, :data:`MULTI_POOL` ``v5e-multi``
(4 nodes x 4 chips, topology ``4x4``, spot), serves the LeaderWorkerSet :data:`DEMO_LWS` (:func:`demo_lws`).

Field names are those of google-cloud-container 2.67's ``NodePool`` / ``NodeConfig`` in REST (camelCase)
form; the TPU node labels and the ``google.com/tpu=present:NoSchedule`` taint are GKE's.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from sandbox.gke.store import JsonDict, rfc3339

PROJECT = "inference-prod"
LOCATION = "us-east5"
ZONE = "us-east5-b"
CLUSTER = "tpu-serving"
K8S_VERSION = "1.33.5-gke.1080000"
#: The Deployment the cluster serves at start (namespace ``default``).
DEMO_DEPLOYMENT = "vllm-llama"
DEMO_IMAGE = "vllm/vllm-tpu:v0.29.1"
TPU_RESOURCE = "google.com/tpu"


@dataclass(frozen=True)
class PoolSpec:
    """One TPU node pool: its name, machine type, TPU accelerator label, topology, node count, chips per
    node, provisioning (spot / flex-start) and the TPU API accelerator type the engine simulates."""

    name: str
    machine_type: str
    accelerator: str
    topology: str
    node_count: int
    chips_per_node: int
    accelerator_type: str
    spot: bool = False
    flex_start: bool = False

    def node_names(self) -> list[str]:
        """GKE-style node names: ``gke-CLUSTER-POOL-<8 hex>-<4 chars>``."""
        group = hashlib.sha256(f"{CLUSTER}/{self.name}".encode()).hexdigest()[:8]
        return [f"gke-{CLUSTER}-{self.name}-{group}-{hashlib.sha256(f'{group}{i}'.encode()).hexdigest()[:4]}"
                for i in range(self.node_count)]


POOLS: tuple[PoolSpec, ...] = (
    PoolSpec("v5e-spot", "ct5lp-hightpu-4t", "tpu-v5-lite-podslice", "2x2", 1, 4, "v5litepod-4", spot=True),
    PoolSpec("v6e-flex", "ct6e-standard-4t", "tpu-v6e-slice", "2x2", 1, 4, "v6e-4", flex_start=True),
)
#: The multi-host pool of ``--demo`` and ``tpu-console sandbox`` (``SandboxGke(multi_host=True)``): one
#: v5e 4x4 slice of 4 nodes x 4 chips (the engine simulates each host of a ``v5litepod-16``), spot.
MULTI_POOL = PoolSpec("v5e-multi", "ct5lp-hightpu-4t", "tpu-v5-lite-podslice", "4x4", 4, 4, "v5litepod-16",
                      spot=True)
#: Every pool a sandbox cluster may have (node IPs and names are stable across both cluster shapes).
ALL_POOLS: tuple[PoolSpec, ...] = (*POOLS, MULTI_POOL)
#: The LeaderWorkerSet on the multi-host pool (namespace ``default``): a leader and 3 workers.
DEMO_LWS = "vllm-multi"
DEMO_LWS_SIZE = 4


def pool_of_node(node_name: str) -> PoolSpec | None:
    """The pool a node name belongs to."""
    return next((p for p in ALL_POOLS if node_name in p.node_names()), None)


def node_pool_json(pool: PoolSpec, project: str = PROJECT) -> JsonDict:
    """A v1 ``NodePool`` as ``GET .../clusters/C/nodePools`` gives it."""
    config: JsonDict = {"machineType": pool.machine_type, "diskSizeGb": 100, "diskType": "pd-balanced",
                        "imageType": "COS_CONTAINERD", "serviceAccount": "default",
                        "oauthScopes": ["https://www.googleapis.com/auth/cloud-platform"],
                        "labels": {}, "taints": [], "shieldedInstanceConfig": {"enableIntegrityMonitoring": True}}
    if pool.spot:
        config["spot"] = True
    if pool.flex_start:
        config["flexStart"] = True
        config["maxRunDuration"] = "604800s"
    base = f"https://container.googleapis.com/v1/projects/{project}/locations/{LOCATION}/clusters/{CLUSTER}"
    return {
        "name": pool.name, "config": config, "initialNodeCount": pool.node_count,
        "locations": [ZONE], "selfLink": f"{base}/nodePools/{pool.name}", "version": K8S_VERSION,
        "instanceGroupUrls": [f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{ZONE}/"
                              f"instanceGroupManagers/gke-{CLUSTER}-{pool.name}-grp"],
        "status": "RUNNING", "autoscaling": {}, "management": {"autoUpgrade": True, "autoRepair": True},
        "maxPodsConstraint": {"maxPodsPerNode": "110"}, "podIpv4CidrSize": 24,
        "placementPolicy": {"tpuTopology": pool.topology, **({"type": "COMPACT"} if pool.node_count > 1 else {})},
        "upgradeSettings": {"maxSurge": 1, "strategy": "SURGE"}, "etag": hashlib.sha256(pool.name.encode()).hexdigest()[:16],
    }


def cluster_json(endpoint_host: str, ca_b64: str, project: str = PROJECT,
                 pool_specs: tuple[PoolSpec, ...] = POOLS) -> JsonDict:
    """A v1 ``Cluster`` (the fields clients read: endpoint, CA, location, versions, node pools)."""
    pools = [node_pool_json(p, project) for p in pool_specs]
    return {
        "name": CLUSTER, "description": "sandbox: vLLM on TPU node pools",
        "nodePools": pools, "location": LOCATION, "zone": LOCATION, "locations": [ZONE],
        "endpoint": endpoint_host, "masterAuth": {"clusterCaCertificate": ca_b64},
        "initialClusterVersion": K8S_VERSION, "currentMasterVersion": K8S_VERSION,
        "currentNodeVersion": K8S_VERSION, "currentNodeCount": sum(p.node_count for p in pool_specs),
        "createTime": "2026-11-02T09:00:00+00:00", "status": "RUNNING",
        "selfLink": f"https://container.googleapis.com/v1/projects/{project}/locations/{LOCATION}/clusters/{CLUSTER}",
        "network": "default", "subnetwork": "default", "clusterIpv4Cidr": "10.8.0.0/14",
        "servicesIpv4Cidr": "34.118.224.0/20", "loggingService": "logging.googleapis.com/kubernetes",
        "monitoringService": "monitoring.googleapis.com/kubernetes",
        "releaseChannel": {"channel": "REGULAR"}, "id": hashlib.sha256(CLUSTER.encode()).hexdigest()[:32],
        "privateClusterConfig": {}, "workloadIdentityConfig": {"workloadPool": f"{project}.svc.id.goog"},
        "labelFingerprint": "a9dc16a7", "etag": "sandbox-etag",
    }


def node_json(pool: PoolSpec, name: str, index: int) -> JsonDict:
    """A ``Node`` of a TPU pool: GKE's labels, the TPU taint, capacity and allocatable ``google.com/tpu``,
    Ready condition, addresses and kubelet version."""
    labels = {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": pool.machine_type, "topology.kubernetes.io/region": LOCATION,
        "topology.kubernetes.io/zone": ZONE, "cloud.google.com/gke-nodepool": pool.name,
        "cloud.google.com/machine-family": pool.machine_type.split("-")[0],
        "cloud.google.com/gke-tpu-accelerator": pool.accelerator,
        "cloud.google.com/gke-tpu-topology": pool.topology,
        "cloud.google.com/gke-os-distribution": "cos", "cloud.google.com/gke-boot-disk": "pd-balanced",
    }
    if pool.spot:
        labels["cloud.google.com/gke-spot"] = "true"
        labels["cloud.google.com/gke-provisioning"] = "spot"
    if pool.flex_start:
        labels["cloud.google.com/gke-flex-start"] = "true"
        labels["cloud.google.com/gke-provisioning"] = "flex-start"
    resources = {"cpu": "112", "memory": "196Gi" if pool.accelerator.startswith("tpu-v5") else "720Gi",
                 "ephemeral-storage": "98831908Ki", "pods": "110", TPU_RESOURCE: str(pool.chips_per_node)}
    now = rfc3339()
    ip = f"10.0.{1 + ALL_POOLS.index(pool)}.{10 + index}"
    return {
        "metadata": {"name": name, "labels": labels,
                     "annotations": {"container.googleapis.com/instance_id": str(4711000000000 + index)}},
        "spec": {"podCIDR": f"10.8.{ALL_POOLS.index(pool) + 8 * index}.0/24", "providerID": f"gce://{PROJECT}/{ZONE}/{name}",
                 "taints": [{"key": TPU_RESOURCE, "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "capacity": dict(resources), "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status", "lastHeartbeatTime": now,
                            "lastTransitionTime": now}],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": f"v{K8S_VERSION}", "kubeProxyVersion": f"v{K8S_VERSION}",
                         "osImage": "Container-Optimized OS from Google", "containerRuntimeVersion":
                         "containerd://1.7.24", "kernelVersion": "6.6.72+", "operatingSystem": "linux",
                         "architecture": "amd64", "machineID": hashlib.md5(name.encode()).hexdigest(),
                         "systemUUID": hashlib.md5(name.encode()).hexdigest(), "bootID": "sandbox"},
        },
    }


def demo_serve_args() -> list[str]:
    """The demo Deployment's container args: the VM demo's Llama 3.1 8B serving flags on 4 v6e chips,
    written ``--flag=value`` as GKE manifests write them."""
    return ["--model=meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size=4", "--max-model-len=65536",
            "--gpu-memory-utilization=0.92", "--download-dir=/data", "--port=8000"]


def demo_deployment() -> JsonDict:
    """``default/vllm-llama``: vLLM on the v6e flex-start pool, ``google.com/tpu: 4``, strategy
    ``Recreate`` (a new pod cannot fit beside the old one on a full TPU node), ``VLLM_XLA_CACHE_PATH``
    on a volume, a tcpSocket readiness probe on 8000."""
    labels = {"app": DEMO_DEPLOYMENT}
    pool = POOLS[1]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": DEMO_DEPLOYMENT, "namespace": "default", "labels": dict(labels)},
        "spec": {
            "replicas": 1, "selector": {"matchLabels": dict(labels)}, "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 10, "progressDeadlineSeconds": 3600,
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": pool.accelerator,
                                     "cloud.google.com/gke-tpu-topology": pool.topology},
                    "containers": [{
                        "name": "vllm", "image": DEMO_IMAGE, "imagePullPolicy": "IfNotPresent",
                        "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
                        "args": demo_serve_args(),
                        "env": [{"name": "VLLM_XLA_CACHE_PATH", "value": "/data/xla-cache"},
                                {"name": "HF_HOME", "value": "/data/hf"}],
                        "ports": [{"containerPort": 8000, "name": "http", "protocol": "TCP"}],
                        "resources": {"limits": {TPU_RESOURCE: "4"}, "requests": {TPU_RESOURCE: "4"}},
                        "readinessProbe": {"tcpSocket": {"port": 8000}, "initialDelaySeconds": 15,
                                           "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1,
                                           "failureThreshold": 3},
                        "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                         {"name": "dshm", "mountPath": "/dev/shm"}],
                        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                    }],
                    "volumes": [{"name": "data", "emptyDir": {}},
                                {"name": "dshm", "emptyDir": {"medium": "Memory"}}],
                    "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                    "schedulerName": "default-scheduler",
                },
            },
        },
    }


def demo_lws_args() -> list[str]:
    """Each host's serve flags in the demo LeaderWorkerSet: Llama 3.1 8B over the host's 4 v5e chips."""
    return ["--model=meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size=4", "--max-model-len=8192",
            "--download-dir=/data", "--port=8000"]


def _lws_pod_spec(leader: bool) -> JsonDict:
    """One host's pod of the demo LWS: the 4x4 v5e slice's node selector, ``google.com/tpu: 4``, the XLA
    cache on a volume; the leader serves on 8000 behind a readinessProbe (workers serve nothing)."""
    container: JsonDict = {
        "name": "vllm", "image": DEMO_IMAGE, "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"], "args": demo_lws_args(),
        "env": [{"name": "VLLM_XLA_CACHE_PATH", "value": "/data/xla-cache"}, {"name": "HF_HOME", "value": "/data/hf"}],
        "resources": {"limits": {TPU_RESOURCE: "4"}, "requests": {TPU_RESOURCE: "4"}},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "dshm", "mountPath": "/dev/shm"}]}
    if leader:
        container["ports"] = [{"containerPort": 8000, "name": "http", "protocol": "TCP"}]
        container["readinessProbe"] = {"tcpSocket": {"port": 8000}, "initialDelaySeconds": 15, "periodSeconds": 10}
    return {"nodeSelector": {"cloud.google.com/gke-tpu-accelerator": MULTI_POOL.accelerator,
                             "cloud.google.com/gke-tpu-topology": MULTI_POOL.topology},
            "containers": [container],
            "volumes": [{"name": "data", "emptyDir": {}}, {"name": "dshm", "emptyDir": {"medium": "Memory"}}]}


def demo_lws() -> JsonDict:
    """``default/vllm-multi``: a LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``, as the LWS project's TPU
    example writes it: ``role`` labels, ``RecreateGroupOnPodRestart``) of one group of
    :data:`DEMO_LWS_SIZE` pods, one per host of the ``v5e-multi`` slice, each with that host's 4 chips."""
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": DEMO_LWS, "namespace": "default", "labels": {"app": DEMO_LWS}},
        "spec": {
            "replicas": 1, "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {"type": "RollingUpdate",
                                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
            "leaderWorkerTemplate": {
                "size": DEMO_LWS_SIZE, "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": {"labels": {"role": "leader"}}, "spec": _lws_pod_spec(True)},
                "workerTemplate": {"metadata": {"labels": {"role": "worker"}}, "spec": _lws_pod_spec(False)},
            },
        },
    }
