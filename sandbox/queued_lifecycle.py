"""Queued resources created in the sandbox, moving through their states as time passes.

A created request follows the zone's :class:`~sandbox.capacity.CapacityAnswer`:

- granted: ``ACCEPTED`` (:data:`ACCEPTED_S`) -> ``WAITING_FOR_RESOURCES`` (``wait_s``) ->
  ``PROVISIONING`` (:data:`PROVISIONING_S`; its node appears as ``CREATING``) -> ``ACTIVE``
  (the node stays ``CREATING`` for :data:`NODE_CREATING_S`, then ``READY``, with IPs);
- stockout / quota / reservation: ``ACCEPTED`` -> ``FAILED`` with ``failedData.error`` ``{code: 8, message}``;
- wait: ``ACCEPTED`` -> ``WAITING_FOR_RESOURCES`` until ``validUntilDuration`` runs out -> ``FAILED``.

A granted request whose ``validUntilDuration`` runs out before it provisions fails the same way.
Deleting a queued resource puts it (and its node) in ``DELETING`` for :data:`DELETING_S`, then
removes both. Every duration is multiplied by ``time_scale`` (tests run at 0.02).

Long-running operations: create and delete answer a ``google.longrunning.Operation``; it is
``done`` after :data:`OPERATION_S` for a create (``response``: the queued resource as accepted)
and once the resource is gone for a delete (``response``: ``google.protobuf.Empty``).

Time comes from a monotonic clock; :meth:`QueuedResourceLifecycle.advance` applies everything
due and is called by the server before it reads the world.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sandbox.capacity import CapacityAnswer, expired_message
from sandbox.fleet_data import JsonDict, SandboxWorld, node_json, rfc3339, topology_of

ACCEPTED_S = 1.0
PROVISIONING_S = 3.0
NODE_CREATING_S = 4.0
DELETING_S = 1.0
OPERATION_S = 0.3


def duration_s(text: str | None) -> float | None:
    """``"3600s"`` / ``"1.5s"`` (google.protobuf.Duration JSON) -> seconds, or ``None``."""
    if not text or not text.endswith("s"):
        return None
    try:
        return float(text[:-1])
    except ValueError:
        return None


@dataclass
class _Request:
    project: str
    name: str                      # full queued-resource name
    answer: CapacityAnswer
    started: float                 # monotonic seconds
    valid_until_s: float | None    # scaled
    max_run_s: float | None        # flex-start run duration (wall clock, not scaled)
    node_names: list[str]
    activated_at: datetime | None = None
    done: bool = False             # FAILED or ACTIVE+READY: nothing left to do


@dataclass
class _Operation:
    name: str
    due: float
    metadata: JsonDict
    response: JsonDict | None      # None: google.protobuf.Empty
    error: JsonDict | None = None


@dataclass
class _Deletion:
    project: str
    name: str
    due: float
    node_names: list[str] = field(default_factory=list)


class QueuedResourceLifecycle:
    """Creates, advances and deletes queued resources of a :class:`SandboxWorld`.

    Args:
        world: the world to change (its ``lock`` guards every change).
        time_scale: factor applied to every sandbox duration (1.0: seconds as documented).
        clock: monotonic clock in seconds (tests may pass their own).
    """

    def __init__(self, world: SandboxWorld, *, time_scale: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.world = world
        self.time_scale = time_scale
        self.clock = clock
        self._requests: dict[str, _Request] = {}
        self._operations: dict[str, _Operation] = {}
        self._deletions: dict[str, _Deletion] = {}
        self._ids = itertools.count(1)
        #: Called as ``on_node_ready(project, node JSON copy)`` just before a requested node turns
        #: READY (from a server thread, under the world's lock; it may wait briefly for the node's
        #: VM, so that no client sees READY before the node is reachable).
        self.on_node_ready: Callable[[str, JsonDict], None] | None = None
        #: Called as ``on_node_deleting(project, node JSON copy)`` for each node of a queued resource
        #: being deleted (same thread and lock rules): its VM and container stop, as on GCP.
        self.on_node_deleting: Callable[[str, JsonDict], None] | None = None

    # --- create / delete ----------------------------------------------------------------------

    def create(self, project: str, zone: str, qr: JsonDict, answer: CapacityAnswer, api_version: str) -> JsonDict:
        """Store the request ``qr`` (v2alpha1 JSON with its full ``name``) and answer its Operation.

        Returns:
            The create Operation as REST JSON (not yet ``done``).
        """
        now = self.clock()
        n = next(self._ids)
        qr["createTime"] = rfc3339(datetime.now(UTC))
        qr["state"] = {"state": "ACCEPTED", "acceptedData": {}}
        valid = duration_s((qr.get("queueingPolicy") or {}).get("validUntilDuration"))
        max_run = duration_s((qr.get("runDuration") or {}).get("maxRunDuration"))
        specs = (qr.get("tpu") or {}).get("nodeSpec") or []
        nodes = [f"projects/{project}/locations/{zone}/nodes/{spec.get('nodeId') or f'node-{n}'}" for spec in specs]
        with self.world.lock:
            self.world.add_queued_resource(project, qr)
            self._requests[qr["name"]] = _Request(project, qr["name"], answer, now,
                                                  None if valid is None else valid * self.time_scale,
                                                  max_run, nodes)
        return self._operation(project, zone, "create", qr["name"], api_version, response=qr,
                               due=now + OPERATION_S * self.time_scale)

    def delete(self, project: str, zone: str, name: str, api_version: str) -> JsonDict:
        """Put the queued resource ``name`` and its nodes in DELETING; they vanish after :data:`DELETING_S`.

        Returns:
            The delete Operation as REST JSON (not yet ``done``).
        """
        now = self.clock()
        with self.world.lock:
            qrs = self.world.projects[project].queued_resources
            qr = qrs[name]
            qr["state"] = {"state": "DELETING", "deletingData": {}, "stateInitiator": "USER"}
            nodes = [n for n in self.world.projects[project].nodes
                     if (self.world.projects[project].nodes[n].get("queuedResource") or "").rsplit("/", 1)[-1]
                     == name.rsplit("/", 1)[-1]]
            for node_name in nodes:
                node = self.world.projects[project].nodes[node_name]
                node["state"] = "DELETING"
                if self.on_node_deleting is not None:
                    self.on_node_deleting(project, copy.deepcopy(node))
            self._deletions[name] = _Deletion(project, name, now + DELETING_S * self.time_scale, nodes)
            request = self._requests.get(name)
            if request is not None:
                request.done = True
        return self._operation(project, zone, "delete", name, api_version, response=None,
                               due=now + DELETING_S * self.time_scale)

    def _operation(self, project: str, zone: str, verb: str, target: str, api_version: str, *,
                   response: JsonDict | None, due: float) -> JsonDict:
        op_id = f"operation-{int(time.time() * 1000)}-{next(self._ids):06d}"
        name = f"projects/{project}/locations/{zone}/operations/{op_id}"
        metadata = {"createTime": rfc3339(datetime.now(UTC)), "target": target, "verb": verb,
                    "apiVersion": api_version}
        with self.world.lock:
            self._operations[name] = _Operation(name, due, metadata,
                                                None if response is None else copy.deepcopy(response))
        return self.operation_json(name, api_version) or {}

    def operation_json(self, name: str, api_version: str) -> JsonDict | None:
        """The Operation ``name`` as REST JSON (``@type`` URLs of ``api_version``), or ``None``."""
        with self.world.lock:
            op = self._operations.get(name)
            if op is None:
                return None
            done = self.clock() >= op.due
            out: JsonDict = {"name": op.name, "metadata": {
                "@type": f"type.googleapis.com/google.cloud.tpu.{api_version}.OperationMetadata", **op.metadata}}
            if done:
                out["done"] = True
                if op.error is not None:
                    out["error"] = op.error
                elif op.response is None:
                    out["response"] = {"@type": "type.googleapis.com/google.protobuf.Empty"}
                else:
                    out["response"] = {"@type": f"type.googleapis.com/google.cloud.tpu.{api_version}.QueuedResource",
                                       **op.response}
            return out

    # --- time ---------------------------------------------------------------------------------

    def advance(self) -> None:
        """Apply every state change that is due by now (thread-safe)."""
        now = self.clock()
        with self.world.lock:
            for request in self._requests.values():
                if not request.done:
                    self._advance_request(request, now - request.started)
            for name, deletion in list(self._deletions.items()):
                if now >= deletion.due:
                    project = self.world.projects[deletion.project]
                    project.queued_resources.pop(name, None)
                    for node_name in deletion.node_names:
                        project.nodes.pop(node_name, None)
                    self._requests.pop(name, None)
                    del self._deletions[name]

    def _advance_request(self, request: _Request, elapsed: float) -> None:
        qr = self.world.projects[request.project].queued_resources.get(request.name)
        if qr is None:
            request.done = True
            return
        s = self.time_scale
        answer = request.answer
        if elapsed < ACCEPTED_S * s:
            return
        if answer.outcome in ("stockout", "quota", "reservation"):
            qr["state"] = {"state": "FAILED", "failedData": {"error": {"code": 8, "message": answer.message}}}
            request.done = True
            return
        provision_at = (ACCEPTED_S + answer.wait_s) * s if answer.outcome == "grant" else None
        if provision_at is None or elapsed < provision_at:
            valid = request.valid_until_s
            if valid is not None and elapsed >= valid:
                qr["state"] = {"state": "FAILED", "failedData": {"error": {
                    "code": 4, "message": expired_message(valid / s)}}}
                request.done = True
            else:
                qr["state"] = {"state": "WAITING_FOR_RESOURCES", "waitingForResourcesData": {}}
            return
        active_at = provision_at + PROVISIONING_S * s
        ready_at = active_at + NODE_CREATING_S * s
        self._ensure_nodes(request, qr)
        if elapsed < active_at:
            qr["state"] = {"state": "PROVISIONING", "provisioningData": {}}
            return
        if request.activated_at is None:
            request.activated_at = datetime.now(UTC)
            qr["state"] = {"state": "ACTIVE", "activeData": {}}
            if request.max_run_s is not None:
                end = request.activated_at + timedelta(seconds=request.max_run_s)
                qr.setdefault("runDuration", {})["terminationTime"] = rfc3339(end)
                for node_name in request.node_names:
                    node = self.world.projects[request.project].nodes.get(node_name)
                    if node is not None:
                        node["schedulingConfig"]["terminationTimestamp"] = rfc3339(end)
        if elapsed >= ready_at:
            for node_name in request.node_names:
                node = self.world.projects[request.project].nodes.get(node_name)
                if node is not None:
                    ready = {**node, **self._ready_fields(node)}
                    if self.on_node_ready is not None:     # the VM first: READY means reachable, as on GCP
                        self.on_node_ready(request.project, copy.deepcopy(ready))
                    node.update(self._ready_fields(node))
            request.done = True

    def _ensure_nodes(self, request: _Request, qr: JsonDict) -> None:
        """Create the request's nodes in CREATING (once)."""
        project = self.world.projects[request.project]
        specs = (qr.get("tpu") or {}).get("nodeSpec") or []
        for node_name, spec in zip(request.node_names, specs):
            if node_name in project.nodes:
                continue
            wanted = spec.get("node") or {}
            accelerator = wanted.get("acceleratorType") or "v5litepod-1"
            zone = node_name.split("/")[3]
            n = next(self._ids)
            scheduling: JsonDict = {}
            if "spot" in qr:
                scheduling = {"spot": True, "provisioningModel": "SPOT"}
            elif (qr.get("guaranteed") or {}).get("reserved") or (wanted.get("schedulingConfig") or {}).get("reserved"):
                scheduling = {"reserved": True, "provisioningModel": "RESERVATION_BOUND"}
            node = node_json(request.project, zone, node_name.rsplit("/", 1)[-1],
                             node_id=f"49{n:017d}", accelerator=accelerator,
                             topology=topology_of(accelerator), state="CREATING", created=datetime.now(UTC),
                             runtime=wanted.get("runtimeVersion") or "", health=None, scheduling=scheduling,
                             ip_base=(60 + n % 100, 10 + n % 200), queued_resource=qr["name"].rsplit("/", 1)[-1])
            self.world.add_node(request.project, node)

    def _ready_fields(self, node: JsonDict) -> JsonDict:
        """The fields a CREATING node gains when it turns READY: state, health, IPs."""
        n = int(node.get("id", "0")) % 200
        return {"state": "READY", "health": "HEALTHY", "networkEndpoints": [
            {"ipAddress": f"10.60.0.{10 + n}", "port": 8470, "accessConfig": {"externalIp": f"203.0.113.{10 + n}"}}]}
