"""GKE API and Kubernetes API JSON -> the models of :mod:`remote.gke.models`. Pure functions, stdlib only.

Inputs are REST JSON as the servers send it (camelCase keys): the GKE API's ``Cluster`` / ``NodePool``
(``container.googleapis.com`` v1; :mod:`remote.gke.discovery` turns the library's messages into it), and
Kubernetes' ``apps/v1`` Deployment / ReplicaSet, ``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet and
``v1`` Pod / Event. Nothing from the network is trusted: every field is read with its type checked, a
missing or mistyped one reads as empty, and lists are cut at :data:`MAX_ITEMS`.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from remote.gke.models import ClusterRef, GkeCluster, NodePool, PodStatus, Workload

JsonDict = dict[str, Any]

#: Most entries read from any one list in an object (containers, args, pools...).
MAX_ITEMS = 1000
#: Node labels GKE sets on TPU nodes, and the pod resource their chips are.
ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
SPOT_LABEL = "cloud.google.com/gke-spot"
FLEX_LABEL = "cloud.google.com/gke-flex-start"
TPU_RESOURCE = "google.com/tpu"
REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
TEMPLATE_HASH_LABEL = "pod-template-hash"

#: TPU machine type family -> the ``gke-tpu-accelerator`` label of its nodes and the chip generation.
MACHINE_FAMILIES: dict[str, tuple[str, str]] = {
    "ct4p": ("tpu-v4-podslice", "v4"),
    "ct5l": ("tpu-v5-lite-device", "v5e"),
    "ct5lp": ("tpu-v5-lite-podslice", "v5e"),
    "ct5p": ("tpu-v5p-slice", "v5p"),
    "ct6e": ("tpu-v6e-slice", "v6e"),
    "tpu7x": ("tpu7x", "tpu7x"),
}
_CHIPS = re.compile(r"-(\d{1,3})t$")


def _dict(value: object) -> JsonDict:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value[:MAX_ITEMS] if isinstance(value, list) else []


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _int(value: object) -> int:
    """An integer field (JSON number or the GKE API's int64-as-string), else 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit() and len(value) < 19:
        return int(value)
    return 0


def _path(obj: object, *keys: str) -> object:
    for key in keys:
        obj = _dict(obj).get(key)
    return obj


# --- GKE API ------------------------------------------------------------------------------------

def machine_facts(machine_type: str) -> tuple[str, str, int | None]:
    """``(accelerator label, generation, chips per node)`` of a TPU machine type:
    ``ct6e-standard-4t`` -> ``("tpu-v6e-slice", "v6e", 4)``; ``("", "", None)`` for a non-TPU type."""
    family = machine_type.split("-", 1)[0]
    if family not in MACHINE_FAMILIES:
        return "", "", None
    accelerator, generation = MACHINE_FAMILIES[family]
    found = _CHIPS.search(machine_type)
    return accelerator, generation, int(found.group(1)) if found else None


def generation_of_accelerator(accelerator: str) -> str:
    """The chip generation of a ``gke-tpu-accelerator`` label (``tpu-v5-lite-podslice`` -> ``v5e``), or ``""``."""
    return next((gen for label, gen in MACHINE_FAMILIES.values() if label == accelerator), "")


def provisioning_of_pool(pool: Mapping[str, Any]) -> tuple[str, bool, str]:
    """``(provisioning model, queued provisioning?, reservation name)`` of a GKE ``NodePool``.

    ``config.spot`` -> spot, ``config.preemptible`` -> preemptible, ``config.flexStart`` or
    ``queuedProvisioning.enabled`` -> flex-start (the second with ``queued`` true),
    ``config.reservationAffinity`` of type ``SPECIFIC_RESERVATION`` -> reserved, else on-demand.
    """
    config = _dict(pool.get("config"))
    queued = _path(pool, "queuedProvisioning", "enabled") is True
    affinity = _dict(config.get("reservationAffinity"))
    reservation = ""
    if _str(affinity.get("consumeReservationType")) == "SPECIFIC_RESERVATION":
        values = [v for v in _list(affinity.get("values")) if isinstance(v, str)]
        reservation = values[0].rsplit("/", 1)[-1] if values else "?"
    if config.get("spot") is True:
        return "spot", queued, reservation
    if config.get("preemptible") is True:
        return "preemptible", queued, reservation
    if config.get("flexStart") is True or queued:
        return "flex-start", queued, reservation
    if reservation:
        return "reserved", queued, reservation
    return "on-demand", queued, reservation


def node_pool_from_json(pool: Mapping[str, Any], ref: ClusterRef) -> NodePool | None:
    """A TPU :class:`NodePool` from a GKE ``NodePool`` object, or ``None`` for a pool that is not TPU."""
    machine_type = _str(_path(pool, "config", "machineType"))
    accelerator, _, chips = machine_facts(machine_type)
    if not accelerator:
        return None
    model, queued, reservation = provisioning_of_pool(pool)
    autoscaling = _dict(pool.get("autoscaling"))
    count = _int(pool.get("initialNodeCount"))
    if autoscaling.get("enabled") is True and queued:
        count = 0           # queued pools start empty: nodes come with each admitted request
    return NodePool(project=ref.project, location=ref.location, cluster=ref.name, name=_str(pool.get("name")),
                    machine_type=machine_type, accelerator=accelerator,
                    topology=_str(_path(pool, "placementPolicy", "tpuTopology")), provisioning_model=model,
                    queued=queued, reservation=reservation, node_count=count, chips_per_node=chips,
                    status=_str(pool.get("status")))


def _ca_pem(value: str) -> str:
    """``masterAuth.clusterCaCertificate`` (base64 of PEM) as PEM text, or ``""``."""
    try:
        text = base64.b64decode(value, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return ""
    return text if "-----BEGIN CERTIFICATE-----" in text else ""


def cluster_from_json(cluster: Mapping[str, Any], project: str) -> GkeCluster:
    """A :class:`GkeCluster` from a GKE ``Cluster`` object (its TPU node pools inside)."""
    ref = ClusterRef(project, _str(cluster.get("location")) or _str(cluster.get("zone")), _str(cluster.get("name")))
    pools = (node_pool_from_json(_dict(p), ref) for p in _list(cluster.get("nodePools")))
    return GkeCluster(ref=ref, endpoint=_str(cluster.get("endpoint")),
                      ca_pem=_ca_pem(_str(_path(cluster, "masterAuth", "clusterCaCertificate"))),
                      status=_str(cluster.get("status")), version=_str(cluster.get("currentMasterVersion")),
                      node_pools=tuple(p for p in pools if p is not None))


# --- Kubernetes objects -------------------------------------------------------------------------

def _tpu_limit(container: Mapping[str, Any]) -> int | None:
    for where in ("limits", "requests"):
        value = _path(container, "resources", where, TPU_RESOURCE)
        if isinstance(value, int | str) and str(value).isdigit():
            return int(value)
    return None


def serving_container(pod_spec: Mapping[str, Any]) -> JsonDict:
    """The serving container of a pod spec: the one with a ``google.com/tpu`` limit, else the first
    whose image names vllm, else the first; ``{}`` when there is none."""
    containers = [_dict(c) for c in _list(pod_spec.get("containers"))]
    for test in (lambda c: _tpu_limit(c) is not None, lambda c: "vllm" in _str(c.get("image")).lower()):
        found = next((c for c in containers if test(c)), None)
        if found is not None:
            return found
    return containers[0] if containers else {}


def model_of(words: Iterable[str]) -> str:
    """The model a vLLM command line serves: ``--model=M``, ``--model M`` or ``serve M``; else ``""``."""
    items = list(words)
    for i, word in enumerate(items):
        if word.startswith("--model="):
            return word.split("=", 1)[1]
        if word in ("--model", "serve") and i + 1 < len(items) and not items[i + 1].startswith("-"):
            return items[i + 1]
    return ""


def container_words(container: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(command, args)`` of a container, each word a string (others dropped)."""
    command = tuple(w for w in _list(container.get("command")) if isinstance(w, str))
    args = tuple(w for w in _list(container.get("args")) if isinstance(w, str))
    return command, args


def _pick_pool(selector: Mapping[str, Any], accelerator: str, topology: str,
               pools: Iterable[NodePool]) -> NodePool | None:
    """The node pool a pod with ``selector`` lands on: the ``gke-nodepool`` one, else the only pool
    whose accelerator (and topology, when given) matches."""
    pools = list(pools)
    named = _str(selector.get(NODEPOOL_LABEL))
    if named:
        return next((p for p in pools if p.name == named), None)
    matches = [p for p in pools if accelerator and p.accelerator == accelerator
               and (not topology or not p.topology or p.topology == topology)]
    if selector.get(SPOT_LABEL) == "true":
        matches = [p for p in matches if p.provisioning_model == "spot"]
    return matches[0] if len(matches) == 1 else None


def _template_and_counts(obj: Mapping[str, Any]) -> tuple[JsonDict, int, int, int, str] | None:
    """``(pod template, desired, ready, pods per group, strategy)`` of a Deployment or LeaderWorkerSet."""
    kind, spec, status = _str(obj.get("kind")), _dict(obj.get("spec")), _dict(obj.get("status"))
    replicas = _int(spec.get("replicas")) if "replicas" in spec else 1
    if kind == "Deployment":
        return (_dict(spec.get("template")), replicas, _int(status.get("readyReplicas")), 1,
                _str(_path(spec, "strategy", "type")) or "RollingUpdate")
    if kind == "LeaderWorkerSet":
        lwt = _dict(spec.get("leaderWorkerTemplate"))
        template = _dict(lwt.get("leaderTemplate")) or _dict(lwt.get("workerTemplate"))
        return template, replicas, _int(status.get("readyReplicas")), max(1, _int(lwt.get("size")) or 1), ""
    return None


def workload_from_json(obj: Mapping[str, Any], ref: ClusterRef, pools: Iterable[NodePool] = ()) -> Workload | None:
    """A :class:`Workload` from a Deployment or LeaderWorkerSet, or ``None`` for one that is neither or
    does not look like TPU serving (no ``google.com/tpu``, no TPU node selector, no vllm image)."""
    found = _template_and_counts(obj)
    if found is None:
        return None
    template, replicas, ready, size, strategy = found
    pod_spec = _dict(template.get("spec"))
    container = serving_container(pod_spec)
    selector = _dict(pod_spec.get("nodeSelector"))
    accelerator, topology = _str(selector.get(ACCELERATOR_LABEL)), _str(selector.get(TOPOLOGY_LABEL))
    image = _str(container.get("image"))
    chips = _tpu_limit(container)
    if chips is None and not accelerator and "vllm" not in image.lower():
        return None
    command, args = container_words(container)
    pool = _pick_pool(selector, accelerator, topology, pools)
    provisioning = pool.provisioning_model if pool else ("spot" if selector.get(SPOT_LABEL) == "true" else "")
    meta = _dict(obj.get("metadata"))
    return Workload(
        project=ref.project, location=ref.location, cluster=ref.name, namespace=_str(meta.get("namespace")),
        kind=_str(obj.get("kind")), name=_str(meta.get("name")), ready=ready, replicas=replicas, image=image,
        args=args, model=model_of(command + args), accelerator=accelerator or (pool.accelerator if pool else ""),
        topology=topology or (pool.topology if pool else ""), chips=chips, node_pool=pool.name if pool else "",
        provisioning_model=provisioning, container=_str(container.get("name")),
        revision=_str(_dict(meta.get("annotations")).get(REVISION_ANNOTATION)),
        resource_version=_str(meta.get("resourceVersion")), strategy=strategy, size=size, raw=dict(obj))


def node_pool_counts(nodes: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Nodes per ``cloud.google.com/gke-nodepool`` label, from a Kubernetes NodeList's items."""
    counts: dict[str, int] = {}
    for node in nodes:
        pool = _str(_path(node, "metadata", "labels", NODEPOOL_LABEL))
        if pool:
            counts[pool] = counts.get(pool, 0) + 1
    return counts


def chips_in_use(pods: Iterable[Mapping[str, Any]], node_pools: Mapping[str, str]) -> dict[str, int]:
    """``google.com/tpu`` requested per node pool by pods placed on a node (``spec.nodeName``) and not
    finished; ``node_pools`` maps node name -> pool name."""
    used: dict[str, int] = {}
    for pod in pods:
        node = _str(_path(pod, "spec", "nodeName"))
        if not node or _str(_path(pod, "status", "phase")) in ("Succeeded", "Failed") or node not in node_pools:
            continue
        chips = sum(_tpu_limit(_dict(c)) or 0 for c in _list(_path(pod, "spec", "containers")))
        pool = node_pools[node]
        used[pool] = used.get(pool, 0) + chips
    return used


def node_pool_of_nodes(nodes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Node name -> its ``gke-nodepool`` label, for the nodes that have one."""
    return {name: pool for node in nodes
            if (name := _str(_path(node, "metadata", "name")))
            and (pool := _str(_path(node, "metadata", "labels", NODEPOOL_LABEL)))}


def pools_from_nodes(ref: ClusterRef, nodes: Iterable[Mapping[str, Any]]) -> list[NodePool]:
    """TPU node pools read from the nodes' GKE labels (pool, accelerator, topology, spot) and allocatable
    ``google.com/tpu``: for a cluster known only from a kubeconfig context, without the GKE API."""
    seen: dict[str, NodePool] = {}
    for node in nodes:
        labels = _dict(_path(node, "metadata", "labels"))
        pool, accelerator = _str(labels.get(NODEPOOL_LABEL)), _str(labels.get(ACCELERATOR_LABEL))
        if not pool or not accelerator:
            continue
        chips = _int(_path(node, "status", "allocatable", TPU_RESOURCE))
        model = "spot" if labels.get(SPOT_LABEL) == "true" else "flex-start" if labels.get(FLEX_LABEL) == "true" \
            else "on-demand"
        found = seen.get(pool) or NodePool(
            project=ref.project, location=ref.location, cluster=ref.name, name=pool, machine_type="",
            accelerator=accelerator, topology=_str(labels.get(TOPOLOGY_LABEL)), provisioning_model=model,
            chips_per_node=chips or None)
        seen[pool] = replace(found, node_count=found.node_count + 1)
    return list(seen.values())


def pod_status(pod: Mapping[str, Any], container: str) -> PodStatus:
    """A :class:`PodStatus` of ``pod`` (a v1 Pod) for its container named ``container`` (else its first)."""
    meta, status = _dict(pod.get("metadata")), _dict(pod.get("status"))
    conditions = {_str(c.get("type")): c for c in map(_dict, _list(status.get("conditions")))}
    scheduled = conditions.get("PodScheduled", {})
    unschedulable = _str(scheduled.get("message")) or "Unschedulable" \
        if _str(scheduled.get("status")) == "False" and _str(scheduled.get("reason")) == "Unschedulable" else ""
    statuses = [_dict(c) for c in _list(status.get("containerStatuses"))]
    mine = next((c for c in statuses if c.get("name") == container), statuses[0] if statuses else {})
    state = _dict(mine.get("state"))
    waiting, running, terminated = _dict(state.get("waiting")), state.get("running"), _dict(state.get("terminated"))
    code = terminated.get("exitCode")
    return PodStatus(
        name=_str(meta.get("name")), phase=_str(status.get("phase")),
        template_hash=_str(_dict(meta.get("labels")).get(TEMPLATE_HASH_LABEL)),
        node=_str(_path(pod, "spec", "nodeName")), unschedulable=unschedulable,
        waiting=_str(waiting.get("reason")), waiting_message=_str(waiting.get("message")),
        running=isinstance(running, dict), terminated=_str(terminated.get("reason")) or ("Terminated" if terminated else ""),
        exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        ready=_str(conditions.get("Ready", {}).get("status")) == "True",
        ready_since=_str(conditions.get("Ready", {}).get("lastTransitionTime"))
        if _str(conditions.get("Ready", {}).get("status")) == "True" else "",
        restarts=_int(mine.get("restartCount")),
        started_at=_str(_dict(running).get("startedAt")) or _str(terminated.get("startedAt")),
        deleting=bool(meta.get("deletionTimestamp")), uid=_str(meta.get("uid")),
        labels=tuple(sorted((str(k), _str(v)) for k, v in _dict(meta.get("labels")).items())))


def newest_template_hash(replica_sets: Iterable[Mapping[str, Any]], owner: str,
                         template: Mapping[str, Any] | None = None) -> str:
    """The ``pod-template-hash`` of the newest ReplicaSet of Deployment ``owner`` (highest
    ``deployment.kubernetes.io/revision``): the CURRENT template, whose pods a watch follows (``kubectl
    logs -f deploy/x`` may follow an old pod during a rollout). With the Deployment's ``template``, only a
    ReplicaSet whose pod spec's containers are the template's counts: right after a patch the controller
    has not made the new ReplicaSet yet, and the newest one is still the old template's. ``""`` when none."""
    best, best_revision = "", -1
    wanted = _path(template, "spec", "containers") if template is not None else None
    for rs in replica_sets:
        meta = _dict(rs.get("metadata"))
        owners = [_dict(o) for o in _list(meta.get("ownerReferences"))]
        if not any(o.get("kind") == "Deployment" and o.get("name") == owner for o in owners):
            continue
        if wanted is not None and _path(rs, "spec", "template", "spec", "containers") != wanted:
            continue
        revision = _int(_dict(meta.get("annotations")).get(REVISION_ANNOTATION))
        found = _str(_dict(meta.get("labels")).get(TEMPLATE_HASH_LABEL))
        if found and revision > best_revision:
            best, best_revision = found, revision
    return best


def selector_of(workload: Mapping[str, Any]) -> str:
    """``spec.selector.matchLabels`` of a Deployment as a label selector (``app=vllm,tier=x``), or ``""``."""
    labels = _dict(_path(workload, "spec", "selector", "matchLabels"))
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if isinstance(v, str))


def pod_events(events: Iterable[Mapping[str, Any]], pod: str, limit: int = 5) -> list[str]:
    """The newest ``limit`` event lines about ``pod`` (``Warning FailedScheduling: 0/2 nodes...``), oldest first."""
    mine = [e for e in events if _str(_path(e, "involvedObject", "name")) == pod]
    mine.sort(key=lambda e: _str(e.get("lastTimestamp")) or _str(e.get("eventTime"))
              or _str(_path(e, "metadata", "creationTimestamp")))
    return [f"{_str(e.get('type')) or 'Normal'} {_str(e.get('reason'))}: {_str(e.get('message'))}"
            for e in mine[-limit:]]


def serving_pod(pods: Iterable[Mapping[str, Any]], container: str) -> PodStatus | None:
    """The pod a forward to a workload goes to: the newest Ready pod that is not being deleted (during a
    rollout the old pod serves until the new one is Ready; then the new one, the newest). ``None``: none Ready."""
    ready = [(p, pod_status(p, container)) for p in pods]
    ready = [(p, s) for p, s in ready if s.ready and not s.deleting]
    if not ready:
        return None
    return max(ready, key=lambda ps: _str(_dict(ps[0].get("metadata")).get("creationTimestamp")))[1]
