"""Which node a benchmark targets: ``NAME``, ``ZONE/NAME`` or ``PROJECT/ZONE/NAME`` in a fleet.

``console.bench_flow`` lists the fleet, calls :func:`pick_node`, then opens the SSH
forward to vLLM's port with :mod:`remote.ssh`.
"""

from __future__ import annotations

from collections.abc import Sequence

from remote.errors import RemoteError
from remote.models import Node


class NodeLookupError(RemoteError):
    """The node named for a benchmark is not in the fleet, is ambiguous, or is not READY."""

    title = "No such node"


class NodeNotReady(NodeLookupError):
    """The node exists but is not READY (creating, preempted, stopped ...)."""

    title = "Node not ready"


def pick_node(nodes: Sequence[Node], spec: str) -> Node:
    """The node ``spec`` names: ``NAME``, ``ZONE/NAME`` or ``PROJECT/ZONE/NAME``.

    Raises:
        NodeLookupError: no match or several matches.
        NodeNotReady: the node is not READY.
    """
    parts = spec.split("/")
    if not 1 <= len(parts) <= 3 or not all(parts):
        raise NodeLookupError(f"{spec!r} is not NAME, ZONE/NAME or PROJECT/ZONE/NAME.")
    matches = [n for n in nodes if list(n.key[3 - len(parts):]) == parts]
    if not matches:
        known = ", ".join(sorted({n.name for n in nodes})) or "none"
        raise NodeLookupError(f"No node {spec!r} in the configured projects (nodes: {known}).")
    if len(matches) > 1:
        where = ", ".join("/".join(n.key) for n in matches)
        raise NodeLookupError(f"{spec!r} matches several nodes ({where}); name one as PROJECT/ZONE/NAME.",
                              title="Ambiguous node")
    node = matches[0]
    if node.state != "READY":
        raise NodeNotReady(f"Node {node.name} is {node.state}, not READY.")
    return node
