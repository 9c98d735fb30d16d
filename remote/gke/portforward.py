"""A local port forwarded to a pod's port through the API server: kr8s's port-forward (the WebSocket channel
protocol ``kubectl port-forward`` speaks), with the pod chosen again for every TCP connection.

kr8s's :class:`kr8s.asyncio.portforward.PortForward` keeps the pod it first chose until a connection to it
fails; a forward to a workload must follow a rollout (the new pod once it is Ready), so
:class:`PodPortForward` asks its ``choose`` callback for the pod on each accepted connection, and reports each
connection (``None`` as it is accepted, then why it failed if it did) to ``on_connection``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from kr8s.asyncio.objects import Pod
from kr8s.asyncio.portforward import PortForward

from remote.errors import KubeApiError
from remote.gke.kube import KubeClient


class _ChosenPodForward(PortForward):
    """kr8s's forward, its pod chosen by the owner for every connection."""

    def __init__(self, owner: PodPortForward, api: Any) -> None:
        super().__init__(Pod({"metadata": {"name": "-", "namespace": owner.namespace}}, api=api),
                         owner.remote_port, owner.local_port)
        self._owner = owner
        self._api = api

    async def _select_pod(self) -> Any:
        name = await self._owner.choose()
        if not name:
            raise KubeApiError(f"no Ready pod in namespace {self._owner.namespace} to forward to")
        return Pod({"metadata": {"name": name, "namespace": self._owner.namespace}}, api=self._api)

    async def _sync_sockets(self, reader: Any, writer: Any) -> None:
        self.pod = None                     # chosen again: a rollout moves the forward to the new pod
        self._owner.on_connection(None)
        try:
            await super()._sync_sockets(reader, writer)
        except Exception as exc:  # noqa: BLE001 (a server callback: nothing above it would catch it)
            self._owner.on_connection(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            writer.close()


class PodPortForward:
    """``127.0.0.1:local_port`` -> port ``remote_port`` of the pod ``choose()`` names, through ``kube``'s API server.

    Args:
        kube: the cluster's client (its kr8s API object carries the credentials).
        namespace: the pods' namespace.
        remote_port: the port in the pod (vLLM's, e.g. 8000).
        local_port: the local port (listening on 127.0.0.1 only); 0: a free one, set by :meth:`start`.
        choose: ``async () -> pod name or None`` (none Ready), asked on every accepted connection.
        on_connection: called with ``None`` when a connection is accepted, and again with why (one sentence)
            when it could not reach the pod.
    """

    def __init__(self, kube: KubeClient, namespace: str, *, remote_port: int, local_port: int,
                 choose: Callable[[], Awaitable[str | None]],
                 on_connection: Callable[[str | None], None] = lambda _: None) -> None:
        self.kube = kube
        self.namespace = namespace
        self.remote_port = remote_port
        self.local_port = local_port
        self.choose = choose
        self.on_connection = on_connection
        self._forward: _ChosenPodForward | None = None
        self._stack = contextlib.AsyncExitStack()

    async def start(self) -> None:
        """Listen on the local port.

        Raises:
            KubeApiError: the API server cannot be reached.
            OSError: the local port is taken.
        """
        api = await self.kube.api()
        self._forward = _ChosenPodForward(self, api)
        self.local_port = await self._stack.enter_async_context(self._forward)

    def stop_listening(self) -> None:
        """Stop accepting connections now (sync; :meth:`stop` finishes the close)."""
        for server in list(self._forward.servers if self._forward else []):
            server.close()

    async def stop(self) -> None:
        """Stop listening and release the port (idempotent)."""
        self.stop_listening()
        with contextlib.suppress(Exception):
            await self._stack.aclose()
        self._forward = None
