"""Wait for a node to be READY before following it: the wait ``watch`` and the startup view share.

A node that is ``CREATING`` (or starting, restarting, repairing), or the node of a queued
resource that is not ``ACTIVE`` yet (``ACCEPTED``, ``WAITING_FOR_RESOURCES``,
``PROVISIONING``), is polled through the TPU API (``get_node`` / ``get_queued_resource`` of a
``remote.tpu.api.FleetSource``) until it is ``READY``. Each change of state is reported once as
one sentence saying what the wait is for. A node that is ``PREEMPTED``, ``TERMINATED``,
``STOPPED`` ... or a queued resource that ``FAILED`` (or is suspended or deleted) ends the wait
with :class:`NodeWontBeReady`, whose message says so once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from console.flows.node_lookup import NodeLookupError
from remote.errors import TpuApiError
from remote.models import Node, QueuedResource

if TYPE_CHECKING:
    from console.services import FleetLister

#: Node states that turn READY on their own (the TPU API's ``Node.State`` names).
NODE_WAIT_STATES = frozenset({"CREATING", "STARTING", "RESTARTING", "REPAIRING", "UPDATING", "UNHIDING"})
#: Queued-resource states on the way to ACTIVE.
QR_WAIT_STATES = frozenset({"ACCEPTED", "CREATING", "WAITING_FOR_RESOURCES", "PROVISIONING"})

#: Seconds between two polls of the TPU API while waiting.
POLL_S = 5.0


class NodeWontBeReady(NodeLookupError):
    """The node (or its queued resource) is in a state that never turns READY on its own.

    ``str()`` is the message alone (one sentence naming the node and the state).
    """

    title = "Node not ready"


@dataclass(frozen=True)
class WaitTarget:
    """What a name found in the fleet stands for.

    Attributes:
        project, zone, name: the node's identity (``name`` is the short node id).
        node: the node as listed, or ``None`` when it does not exist yet (only its queued
            resource does).
        queued_resource: the short name of the queued resource creating it, or ``None``.
    """

    project: str
    zone: str
    name: str
    node: Node | None
    queued_resource: str | None


def wait_target(node: Node | None, qr: QueuedResource | None = None, name: str | None = None) -> WaitTarget:
    """A :class:`WaitTarget` for a listed ``node``, or for node ``name`` of the queued resource ``qr``.

    Raises:
        ValueError: neither ``node`` nor ``qr`` and ``name`` given.
    """
    if node is not None:
        return WaitTarget(node.project, node.zone, node.name, node, node.queued_resource)
    if qr is None or name is None:
        raise ValueError("a node, or a queued resource and the node name")
    return WaitTarget(qr.project, qr.zone, name, None, qr.name)


def needs_wait(node: Node) -> bool:
    """``node`` is not READY (the follower must wait, or give up)."""
    return node.state != "READY"


def describe(target: WaitTarget, qr: QueuedResource | None, node: Node | None) -> str:
    """One sentence: the state now and what the wait is for, e.g.
    ``node demo is CREATING (queued resource demo-qr ACTIVE); waiting for READY``."""
    parts = [f"node {target.name} is {node.state}" if node is not None else f"node {target.name} does not exist yet"]
    if qr is not None:
        parts.append(f"(queued resource {qr.name} {qr.state})")
    if qr is not None and qr.state in QR_WAIT_STATES:
        want = {"WAITING_FOR_RESOURCES": "capacity", "PROVISIONING": "the TPU VM to be created"}.get(
            qr.state, "the request to be queued")
        return " ".join(parts) + f"; waiting for {want}, then for READY"
    return " ".join(parts) + "; waiting for READY"


def verdict(target: WaitTarget, qr: QueuedResource | None, node: Node | None) -> str | None:
    """``"ready"`` when the node is READY, ``None`` while waiting makes sense.

    Raises:
        NodeWontBeReady: the node or its queued resource is in a state that does not become READY.
    """
    if node is not None and node.state == "READY":
        return "ready"
    if node is not None and node.state not in NODE_WAIT_STATES:
        raise NodeWontBeReady(f"Node {target.name} is {node.state}: it will not become READY on its own; "
                              "not following it.")
    if qr is not None and qr.state not in QR_WAIT_STATES and qr.state != "ACTIVE":
        reason = f": {qr.failure}" if qr.failure else ""
        raise NodeWontBeReady(f"Queued resource {qr.name} of node {target.name} is {qr.state}{reason}; "
                              "its node will not become READY; not following it.")
    if qr is None and node is None:
        raise NodeWontBeReady(f"Node {target.name} no longer exists; not following it.")
    return None


async def wait_until_ready(source: FleetLister, target: WaitTarget, *, on_change: Callable[[str], None],
                           poll_s: float = POLL_S, timeout_s: float = 6 * 3600.0,
                           sleep: Callable[[float], Any] = asyncio.sleep) -> Node:
    """Poll the TPU API until ``target``'s node is READY; returns it (fresh from ``get_node``).

    Args:
        source: a ``remote.tpu.api.FleetSource`` (``get_node``, ``get_queued_resource``).
        target: the node to wait for (:func:`wait_target`).
        on_change: called with :func:`describe`'s sentence on the first poll and on every
            change of the (queued resource state, node state) pair.
        poll_s: seconds between polls.
        timeout_s: give up after this many seconds.

    Raises:
        NodeWontBeReady: PREEMPTED, TERMINATED ..., a FAILED queued resource, a node deleted.
        TpuApiError: a read failed (other than the node's 404 before it exists), or ``timeout_s``
            ran out.
    """
    deadline = time.monotonic() + timeout_s
    seen: tuple[str | None, str | None] | None = None
    while True:
        qr = None
        if target.queued_resource:
            try:
                qr = await source.get_queued_resource(target.project, target.zone, target.queued_resource)
            except TpuApiError as exc:
                if exc.code != 404:
                    raise
        node = None
        try:
            node = await source.get_node(target.project, target.zone, target.name)
        except TpuApiError as exc:
            if exc.code != 404:
                raise
        now_seen = (None if qr is None else qr.state, None if node is None else node.state)
        if verdict(target, qr, node) == "ready" and node is not None:
            return node
        if now_seen != seen:
            seen = now_seen
            on_change(describe(target, qr, node))
        if time.monotonic() + poll_s > deadline:
            raise TpuApiError(f"node {target.name} still not READY after {timeout_s:g} s")
        await sleep(poll_s)



def request_node(qr: QueuedResource, nodes: Sequence[Node]) -> Node:
    """The node a queued resource creates, to follow from the queue to READY (``w`` on a request).

    The listed node when it exists; else a stand-in with the request's project, zone, type and
    provisioning model, ``queued_resource`` set and the request's state as its state (not READY,
    so the startup view waits: :func:`wait_until_ready` reads the real node and request).

    Raises:
        NodeWontBeReady: the request has no node id, or it is FAILED / SUSPENDED ... (its node will
            not become READY); the message says which.
    """
    if not qr.node_ids:
        raise NodeWontBeReady(f"Queued resource {qr.name} names no node to follow.")
    name = qr.node_ids[0]
    listed = next((n for n in nodes if (n.project, n.zone, n.name) == (qr.project, qr.zone, name)), None)
    if listed is not None:
        return listed
    verdict(wait_target(None, qr, name), qr, None)       # FAILED, SUSPENDED ...: said, not followed
    return Node(project=qr.project, zone=qr.zone, name=name, state=qr.state,
                accelerator_type=qr.accelerator_type or "", provisioning_model=qr.provisioning_model,
                queued_resource=qr.name)
