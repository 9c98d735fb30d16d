"""Reach a node's vLLM server for a benchmark: find the node, open SSH, forward its port.

The node is looked up with :class:`remote.tpu_api.FleetSource`; worker 0 is reached
with :mod:`remote.ssh` (gcloud's key, known-hosts file and host-key alias) and vLLM's
port on the node is forwarded to a free local port on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from remote.errors import RemoteError
from remote.models import Node


class NodeLookupError(RemoteError):
    """The node named for a benchmark is not in the fleet, is ambiguous, or is not READY."""

    title = "No such node"


@dataclass(frozen=True)
class NodeEndpoint:
    """A forwarded vLLM server.

    Attributes:
        node: the node benchmarked (accelerator type, chips, provisioning model for cost).
        base_url: ``http://127.0.0.1:<local port>``, the local end of the SSH forward.
    """

    node: Node
    base_url: str


def pick_node(nodes: Sequence[Node], spec: str) -> Node:
    """The node ``spec`` names: ``NAME``, ``ZONE/NAME`` or ``PROJECT/ZONE/NAME``.

    Raises:
        NodeLookupError: no match, several matches, or the node is not READY.
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
        raise NodeLookupError(f"Node {node.name} is {node.state}, not READY.", title="Node not ready")
    return node


@asynccontextmanager
async def node_endpoint(spec: str, *, projects: Sequence[Any], api_endpoint: str | None,
                        request_timeout_s: float, ssh: Any, vllm_port: int) -> AsyncIterator[NodeEndpoint]:
    """Find node ``spec``, SSH to worker 0 and forward vLLM's port while the block runs.

    Args:
        spec: see :func:`pick_node`.
        projects: the config's projects (``id`` and ``zones``).
        api_endpoint: TPU API endpoint override, or ``None``.
        request_timeout_s: TPU API call timeout, seconds.
        ssh: the config's ``[ssh]`` section (see :func:`remote.ssh.target_for`).
        vllm_port: vLLM's port on the node (the config's ``container.port``).

    Raises:
        NodeLookupError: see :func:`pick_node`.
        CredentialsError, SshError: the TPU API or SSH failed (unknown host keys are refused:
            connect once from the console to accept one).
    """
    from remote.ssh import connect, forward_port, target_for
    from remote.tpu_api import FleetSource

    source = FleetSource(projects, api_endpoint=api_endpoint, timeout_s=request_timeout_s)
    try:
        snapshot = await source.list_fleet()
    finally:
        source.close()
    try:
        node = pick_node(snapshot.nodes, spec)
    except NodeLookupError as exc:
        if snapshot.problems:
            failed = "; ".join(f"{p.project}: {p.message}" for p in snapshot.problems)
            raise NodeLookupError(f"{exc.message} Some projects did not list: {failed}",
                                  title=exc.title) from None
        raise
    conn = await connect(target_for(node, ssh))
    try:
        listener, local_port = await forward_port(conn, vllm_port)
        try:
            yield NodeEndpoint(node, f"http://127.0.0.1:{local_port}")
        finally:
            listener.close()
    finally:
        conn.close()
