"""The sandbox's fleet: projects, zones, TPU nodes and queued resources as REST JSON.

Everything is stored in the **v2alpha1** REST shape (camelCase, enums as strings), the
superset; the sandbox server strips the v2alpha1-only fields when it answers on ``/v2``.
Shapes follow the recorded and schema-derived samples in ``../shared/corpus/gcp-json/``.

Addresses are documentation ranges (``203.0.113.x`` external, ``10.x`` internal); the
sandbox orchestrator maps SSH to loopback through the config's ``[ssh.hosts]``.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

JsonDict = dict[str, Any]


@dataclass
class SandboxProject:
    """One project of the sandbox.

    Attributes:
        id: project id.
        zones: zones the project has (``locations`` answers these).
        nodes: node JSON by full resource name.
        queued_resources: queued-resource JSON by full resource name.
        denied: every call for this project answers 403 PERMISSION_DENIED.
        unreachable_zones: zones a ``locations/-`` list reports in ``unreachable``
            (their resources are left out; a per-zone list answers 503).
        metadata: the project's Compute ``commonInstanceMetadata`` as ``{key: value}``
            (``enable-oslogin``), served by :mod:`sandbox.google_apis`.
    """

    id: str
    zones: tuple[str, ...]
    nodes: dict[str, JsonDict] = field(default_factory=dict)
    queued_resources: dict[str, JsonDict] = field(default_factory=dict)
    denied: bool = False
    unreachable_zones: frozenset[str] = frozenset()
    metadata: dict[str, str] = field(default_factory=dict)


class SandboxWorld:
    """Thread-safe, mutable store of sandbox projects (the TPU server reads it per request).

    Attributes:
        projects: ``{project id: SandboxProject}``.
        guest_attributes: ``{node resource name: [items of worker 0, items of worker 1, ...]}``
            where items are ``[{"namespace", "key", "value"}]`` (``getGuestAttributes`` shape).
        lock: guard for readers and writers that touch several entries.
    """

    def __init__(self) -> None:
        self.projects: dict[str, SandboxProject] = {}
        self.guest_attributes: dict[str, list[list[JsonDict]]] = {}
        self.lock = threading.RLock()

    def add_project(self, project_id: str, zones: tuple[str, ...], *, denied: bool = False,
                    unreachable_zones: tuple[str, ...] = ()) -> SandboxProject:
        """Create (or replace) a project and return it."""
        with self.lock:
            project = SandboxProject(project_id, tuple(zones), denied=denied,
                                     unreachable_zones=frozenset(unreachable_zones))
            self.projects[project_id] = project
            return project

    def add_node(self, project_id: str, node: JsonDict) -> None:
        """Store a node (v2alpha1 JSON with a full ``name``); adds default guest attributes."""
        with self.lock:
            self.projects[project_id].nodes[node["name"]] = node
            workers = max(1, len(node.get("networkEndpoints") or []))
            self.guest_attributes.setdefault(node["name"], [
                _default_guest_items(node.get("id", "0"), w) for w in range(workers)])

    def publish_host_key(self, node_name: str, worker: int, public_key: str) -> None:
        """Publish a worker's real host key in its guest attributes (``hostkeys/<type>``: base64 body).

        Args:
            node_name: the node's full resource name.
            worker: the worker index (its items are added when the node has fewer).
            public_key: the OpenSSH public key line (``ssh-ed25519 AAAA... [comment]``).
        """
        key_type, body = public_key.split()[:2]
        with self.lock:
            per_worker = self.guest_attributes.setdefault(node_name, [])
            node_id = next((str(p.nodes[node_name].get("id", "0")) for p in self.projects.values()
                            if node_name in p.nodes), "0")
            while len(per_worker) <= worker:
                per_worker.append(_default_guest_items(node_id, len(per_worker)))
            kept = [i for i in per_worker[worker] if not (i.get("namespace") == "hostkeys" and i["key"] == key_type)]
            per_worker[worker] = [{"namespace": "hostkeys", "key": key_type, "value": body}, *kept]

    def add_queued_resource(self, project_id: str, qr: JsonDict) -> None:
        """Store a queued resource (v2alpha1 JSON with a full ``name``)."""
        with self.lock:
            self.projects[project_id].queued_resources[qr["name"]] = qr

    def list(self, project_id: str, collection: str, zone: str | None) -> tuple[list[JsonDict], list[str]]:
        """Deep copies of ``collection`` (``nodes`` or ``queuedResources``) items, sorted by name.

        Args:
            project_id: the project (must exist).
            collection: ``"nodes"`` or ``"queuedResources"``.
            zone: one zone, or ``None`` for every reachable zone.

        Returns:
            ``(items, unreachable zones)``; the latter only for ``zone=None``.
        """
        with self.lock:
            project = self.projects[project_id]
            store = project.nodes if collection == "nodes" else project.queued_resources
            items = []
            for name in sorted(store):
                item_zone = name.split("/")[3]
                if zone is None and item_zone in project.unreachable_zones:
                    continue
                if zone is None or item_zone == zone:
                    items.append(copy.deepcopy(store[name]))
            unreachable = sorted(project.unreachable_zones) if zone is None else []
            return items, unreachable

    def get(self, project_id: str, collection: str, name: str) -> JsonDict | None:
        """A deep copy of one resource by full name, or ``None``."""
        with self.lock:
            project = self.projects[project_id]
            store = project.nodes if collection == "nodes" else project.queued_resources
            item = store.get(name)
            return copy.deepcopy(item) if item is not None else None


def _default_guest_items(node_id: str, worker: int) -> list[JsonDict]:
    """Guest-attribute items shaped like ``get-guest-attributes-response.schema-derived.json``:
    the worker's GCE instance name. Its host keys (``hostkeys`` namespace) are published by the
    worker's SSH server when it starts (:meth:`SandboxWorld.publish_host_key`), as a real TPU VM's
    guest agent publishes its own; a node without a VM publishes none."""
    digest = f"{int(node_id or 0) % 0xFFFFFFFF:08x}"
    return [{"key": "hostname", "value": f"t1v-n-{digest}-w-{worker}"}]


# --- the default world ----------------------------------------------------------------------


def rfc3339(value: datetime) -> str:
    """``2026-12-01T09:30:00.000000Z`` (RFC 3339 UTC with microseconds, as the API writes times)."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_json(project: str, zone: str, name: str, *, node_id: str, accelerator: str, topology: str,
              state: str, created: datetime, runtime: str, health: str | None = "HEALTHY",
              scheduling: JsonDict | None = None, workers: int = 1, ip_base: tuple[int, int] = (0, 2),
              external: bool = True, queued_resource: str | None = None,
              symptoms: list[JsonDict] | None = None) -> JsonDict:
    """A node in the v2alpha1 REST shape (cf. ``node-v2alpha1-flex-start.schema-derived.json``)."""
    acc_type = {"v5litepod": "V5LITE_POD", "v6e": "V6E", "v5p": "V5P"}[accelerator.rsplit("-", 1)[0]]
    region = zone.rsplit("-", 1)[0]
    endpoints = []
    if state not in ("CREATING",):
        for w in range(workers):
            third, fourth = ip_base
            access = {"externalIp": f"203.0.113.{fourth + w}"} if external else {}
            endpoints.append({"ipAddress": f"10.{third}.0.{fourth + w}", "port": 8470, "accessConfig": access})
    node: JsonDict = {
        "name": f"projects/{project}/locations/{zone}/nodes/{name}",
        "acceleratorType": accelerator,
        "acceleratorConfig": {"type": acc_type, "topology": topology},
        "state": state,
        "runtimeVersion": runtime,
        "createTime": rfc3339(created),
        "networkConfig": {
            "network": f"projects/{project}/global/networks/default",
            "subnetwork": f"projects/{project}/regions/{region}/subnetworks/default",
            "enableExternalIps": external,
        },
        "networkEndpoints": endpoints,
        "schedulingConfig": scheduling or {},
        "serviceAccount": {"email": "123456789012-compute@developer.gserviceaccount.com",
                           "scope": ["https://www.googleapis.com/auth/cloud-platform"]},
        "shieldedInstanceConfig": {},
        "id": node_id,
        "apiVersion": "V2_ALPHA1",
        "labels": {"app": "vllm"},
    }
    if health:
        node["health"] = health
    if symptoms:
        node["symptoms"] = symptoms
    if queued_resource:
        node["queuedResource"] = f"projects/123456789012/locations/{zone}/queuedResources/{queued_resource}"
    return node


def queued_resource_json(project: str, zone: str, name: str, *, node_id: str, accelerator: str, runtime: str,
                         created: datetime, state: JsonDict, flex_s: int | None = None,
                         termination: datetime | None = None, spot: bool = False) -> JsonDict:
    """A queued resource in the v2alpha1 REST shape (cf. the ``queued-resource-*`` corpus files)."""
    spec_node: JsonDict = {"acceleratorType": accelerator, "runtimeVersion": runtime,
                           "networkConfig": {"network": "default", "enableExternalIps": True}}
    if spot:
        spec_node["schedulingConfig"] = {"spot": True}
    qr: JsonDict = {
        "name": f"projects/{project}/locations/{zone}/queuedResources/{name}",
        "createTime": rfc3339(created),
        "tpu": {"nodeSpec": [{"parent": f"projects/{project}/locations/{zone}", "nodeId": node_id,
                              "node": spec_node}]},
        "state": state,
    }
    if spot:
        qr["spot"] = {}
    if flex_s is not None:
        qr["provisioningModel"] = "FLEX_START"
        qr["runDuration"] = {"maxRunDuration": f"{flex_s}s"}
        if termination is not None:
            qr["runDuration"]["terminationTime"] = rfc3339(termination)
        qr["queueingPolicy"] = {"validUntilDuration": "7200s"}
    return qr


def topology_of(accelerator_type: str) -> str:
    """A plausible ``acceleratorConfig.topology`` for a chip count: 1 -> ``1x1``, 4 -> ``2x2``, 8 -> ``2x4``."""
    chips = int(accelerator_type.rsplit("-", 1)[-1]) if accelerator_type.rsplit("-", 1)[-1].isdigit() else 1
    return {1: "1x1", 2: "1x2", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8"}.get(chips, f"1x{chips}")


def default_world(now: datetime) -> SandboxWorld:
    """The demo fleet: 3 projects, 5 zones, every provisioning model, every QR story.

    Args:
        now: the current time (UTC); the flex-start node ``vllm-flex-b`` ends at ``now + 2 h``.

    Returns:
        A world with ``inference-prod`` (9 nodes: pages at the server's default page size),
        ``research-sandbox`` (``europe-west4-a`` unreachable; project metadata
        ``enable-oslogin=TRUE``: its nodes accept OS Login users only) and ``denied-project`` (403).
    """
    world = SandboxWorld()
    h = timedelta(hours=1)
    p = "inference-prod"
    world.add_project(p, ("us-east5-a", "us-west4-a", "us-central1-a", "asia-northeast1-b", "europe-west4-a",
                          "us-central1-b"))
    v5e_rt, v6e_rt = "v2-alpha-tpuv5-lite", "v2-alpha-tpuv6e"
    nodes = [
        node_json(p, "us-west4-a", "vllm-v5e-a", node_id="4711000000000000001", accelerator="v5litepod-4",
              topology="2x2", state="READY", created=now - 26 * h, runtime=v5e_rt, ip_base=(10, 11)),
        node_json(p, "us-east5-a", "vllm-flex-b", node_id="4711000000000000002", accelerator="v6e-8",
              topology="2x4", state="READY", created=now - 2 * h, runtime=v6e_rt, ip_base=(20, 21),
              scheduling={"terminationTimestamp": rfc3339(now + 2 * h)}, queued_resource="qr-flex-b"),
        node_json(p, "us-central1-a", "vllm-spot-c", node_id="4711000000000000003", accelerator="v5litepod-8",
              topology="2x4", state="READY", created=now - 5 * h, runtime=v5e_rt, ip_base=(30, 31),
              scheduling={"spot": True, "provisioningModel": "SPOT"}, queued_resource="qr-spot-c"),
        node_json(p, "us-east5-a", "vllm-reserved-d", node_id="4711000000000000004", accelerator="v6e-4",
              topology="2x2", state="READY", created=now - 72 * h, runtime=v6e_rt, ip_base=(20, 41),
              scheduling={"reserved": True, "provisioningModel": "RESERVATION_BOUND",
                          "reservationName": f"projects/{p}/reservations/res-v6e"}),
        node_json(p, "asia-northeast1-b", "vllm-new-e", node_id="4711000000000000005", accelerator="v6e-8",
              topology="2x4", state="CREATING", created=now - timedelta(minutes=3), runtime=v6e_rt,
              health=None),
        node_json(p, "us-central1-a", "vllm-spot-gone", node_id="4711000000000000006", accelerator="v5litepod-4",
              topology="2x2", state="PREEMPTED", created=now - 30 * h, runtime=v5e_rt, ip_base=(30, 61),
              external=False, health=None, scheduling={"spot": True, "provisioningModel": "SPOT"}),
        node_json(p, "us-west4-a", "vllm-v5e-16", node_id="4711000000000000007", accelerator="v5litepod-16",
              topology="4x4", state="READY", created=now - 50 * h, runtime=v5e_rt, ip_base=(10, 71), workers=4),
        node_json(p, "us-central1-a", "batch-preempt-f", node_id="4711000000000000008", accelerator="v5litepod-1",
              topology="1x1", state="READY", created=now - 8 * h, runtime=v5e_rt, ip_base=(30, 81),
              health="TIMEOUT", scheduling={"preemptible": True},
              symptoms=[{"createTime": rfc3339(now - 10 * timedelta(minutes=1)), "symptomType": "EXECUTE_TIMED_OUT",
                         "details": "Worker 0 did not answer the health check", "workerId": "0"}]),
        node_json(p, "us-east5-a", "vllm-ondemand-g", node_id="4711000000000000009", accelerator="v6e-1",
              topology="1x1", state="READY", created=now - 100 * h, runtime=v6e_rt, ip_base=(20, 91)),
    ]
    for node in nodes:
        world.add_node(p, node)
    qrs = [
        queued_resource_json(p, "us-east5-a", "qr-flex-b", node_id="vllm-flex-b", accelerator="v6e-8", runtime=v6e_rt,
            created=now - 2 * h - timedelta(minutes=5), state={"state": "ACTIVE", "activeData": {}},
            flex_s=14400, termination=now + 2 * h),
        queued_resource_json(p, "us-central1-a", "qr-spot-c", node_id="vllm-spot-c", accelerator="v5litepod-8", runtime=v5e_rt,
            created=now - 5 * h - timedelta(minutes=2), state={"state": "ACTIVE", "activeData": {}}, spot=True),
        queued_resource_json(p, "asia-northeast1-b", "qr-flex-wait", node_id="vllm-flex-h", accelerator="v6e-8", runtime=v6e_rt,
            created=now - timedelta(minutes=40), state={"state": "WAITING_FOR_RESOURCES"}, flex_s=14400),
        queued_resource_json(p, "us-east5-a", "qr-flex-done", node_id="vllm-flex-old", accelerator="v6e-8", runtime=v6e_rt,
            created=now - 30 * h, flex_s=14400, termination=now - 26 * h,
            state={"state": "SUSPENDED", "suspendedData": {}, "stateInitiator": "SERVICE"}),
        queued_resource_json(p, "asia-northeast1-b", "qr-failed", node_id="vllm-big-i", accelerator="v6e-8", runtime=v6e_rt,
            created=now - 3 * h, state={"state": "FAILED", "failedData": {"error": {"code": 8, "message": (
                'There is no more capacity in the zone "asia-northeast1-b"; you can try in another zone '
                "where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) "
                "[EID: 0x0000000000000000]")}}}),
    ]
    for qr in qrs:
        world.add_queued_resource(p, qr)

    r = "research-sandbox"
    world.add_project(r, ("us-central1-a", "us-east5-a", "europe-west4-a"), unreachable_zones=("europe-west4-a",))
    world.projects[r].metadata["enable-oslogin"] = "TRUE"    # its nodes take OS Login users only
    world.add_node(r, node_json(r, "us-central1-a", "research-v5e-1", node_id="5822000000000000001",
                            accelerator="v5litepod-1", topology="1x1", state="READY", created=now - 4 * h,
                            runtime=v5e_rt, ip_base=(40, 111)))
    world.add_node(r, node_json(r, "europe-west4-a", "research-eu-v6e", node_id="5822000000000000002",
                            accelerator="v6e-4", topology="2x2", state="READY", created=now - 9 * h,
                            runtime=v6e_rt, ip_base=(50, 121)))
    world.add_project("denied-project", ("us-central1-a",), denied=True)
    return world


#: Zones of each project of :func:`scale_world`.
SCALE_ZONES = ("us-central1-a", "us-east5-a", "us-west4-a", "europe-west4-a")


def scale_world(nodes: int, projects: int, now: datetime) -> SandboxWorld:
    """A generated fleet of ``nodes`` nodes spread over ``projects`` projects (``scale-00`` ...), for
    the fleet-at-scale bench and tests.

    Each project has the four :data:`SCALE_ZONES`; node ``i`` is ``node-IIIII`` (5 digits), in zone
    ``i % 4`` of project ``i % projects``. One node in 10 is a flex-start node ending 1-4 h from
    ``now`` (with its ACTIVE queued resource ``qr-IIIII``, so the TIME LEFT countdowns tick), one in
    10 spot, one in 20 CREATING, one in 20 PREEMPTED; the rest READY on-demand. Node ids are unique.

    Returns:
        The world (``queued resources`` = the flex-start nodes' requests).
    """
    world = SandboxWorld()
    ids = [f"scale-{p:02d}" for p in range(projects)]
    for pid in ids:
        world.add_project(pid, SCALE_ZONES)
    runtime = "v2-alpha-tpuv6e"
    for i in range(nodes):
        pid, zone, name = ids[i % projects], SCALE_ZONES[i % 4], f"node-{i:05d}"
        kind = i % 20
        scheduling: JsonDict = {}
        state, queued = "READY", None
        if kind in (0, 10):
            termination = now + timedelta(hours=1 + i % 4, minutes=i % 60)
            scheduling = {"terminationTimestamp": rfc3339(termination)}
            queued = f"qr-{i:05d}"
            world.add_queued_resource(pid, queued_resource_json(
                pid, zone, queued, node_id=name, accelerator="v6e-8", runtime=runtime,
                created=now - timedelta(hours=1), state={"state": "ACTIVE", "activeData": {}}, flex_s=14400,
                termination=termination))
        elif kind in (1, 11):
            scheduling = {"spot": True, "provisioningModel": "SPOT"}
        elif kind == 2:
            state = "CREATING"
        elif kind == 3:
            state = "PREEMPTED"
        world.add_node(pid, node_json(pid, zone, name, node_id=str(9_000_000_000_000_000_000 + i), accelerator="v6e-8",
                                      topology="2x4", state=state, created=now - timedelta(hours=2 + i % 100),
                                      runtime=runtime, scheduling=scheduling, queued_resource=queued,
                                      ip_base=(i // 250 % 250, i % 250 + 2), health=None if state != "READY" else "HEALTHY"))
    return world
