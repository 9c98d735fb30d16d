"""A forward to a GKE workload: ``localhost:PORT -> the serving pod's vLLM port``, through the API server.

The workload's :class:`~console.flows.forwards.Forward` (the SSH one a node gets): the same surface
(``state``, ``url``, ``describe()``, ``connections``, ``open()``, ``hold()``, ``close()``), so the forwards view,
``forward deploy/NAME``, ``bench`` and ``metrics`` use it as they use a node's. Underneath,
:class:`remote.gke.portforward.PodPortForward` (kr8s's port-forward over WebSocket) with the pod chosen for
every connection: the newest Ready pod of the workload (:func:`remote.gke.parse.serving_pod`). During a
rollout the old pod serves until the new one is Ready; then connections go to the new pod, and the forward
says so once (``the forward moves to pod NEW (was OLD)``). :meth:`WorkloadForward.hold` looks at the pods
every ``poll_s`` seconds so the move is said when it happens, not at the next request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from console.flows.gke_target import lint_node
from remote.errors import KubeApiError, RemoteError

if TYPE_CHECKING:
    from console.config import Config
    from console.flows.forwards import ForwardRegistry
    from console.flows.gke_target import WorkloadSpec
    from remote.gke.kube import KubeClient
    from remote.gke.models import NodePool, Workload
    from remote.gke.portforward import PodPortForward


class WorkloadForward:
    """``127.0.0.1:local_port`` -> the workload's serving pod, port :attr:`container_port`.

    Args:
        workload: the workload (``deploy/NAME``; an LWS forwards to its leader pod ``NAME-0``).
        kube: its cluster's client.
        local_port: the local port (0: a free one, chosen when it opens).
        on_change: one sentence per change (opened, the pod it goes to changed, no Ready pod, closed).
        poll_s: seconds between two looks at the pods while held.
        release: awaited once when the forward ends (held to its close, or failed to open): what ``kube``
            belongs to and the forward alone keeps open (the TUI's GKE source), or ``None``.

    Attributes:
        node_name: ``CLUSTER/NAMESPACE/deploy/NAME`` (the forwards list's NODE column, the history's node).
        key: ``(project, location, node_name)``: the registry's key, as a node's ``(project, zone, name)``.
        pod: the pod connections go to now, or ``None`` before the first look.
        state, attempt, reason, connections, failed_connections, target_down: as :class:`Forward`'s.
    """

    def __init__(self, workload: Workload, kube: KubeClient, *, local_port: int,
                 on_change: Callable[[str], None] | None = None, poll_s: float = 2.0,
                 release: Callable[[], Awaitable[None]] | None = None) -> None:
        from remote.gke.edit import serving_port

        node = lint_node(workload)
        self.workload = workload
        self.kube = kube
        self.node_name = node.name
        self.key = node.key
        self.container_port = serving_port(workload)
        self.local_port = local_port
        self.on_change = on_change
        self.poll_s = poll_s
        self.pod: str | None = None
        self.state = "opening"
        self.attempt = 0
        self.reason: str | None = None
        self.connections = 0
        self.failed_connections = 0
        self.target_down: str | None = None
        self._forward: PodPortForward | None = None
        self._release = release

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: the OpenAI base URL through the forward."""
        return f"http://127.0.0.1:{self.local_port}"

    @property
    def label(self) -> str:
        """``deploy/NAME localhost:8005``."""
        return f"{self.workload.ref} localhost:{self.local_port}"

    def describe(self) -> str:
        """``open (pod NAME)``, ``open, target down: REASON``, ``failed: REASON``, ``opening`` or ``closed``."""
        if self.state == "failed":
            return f"failed: {self.reason}"
        if self.state == "open" and self.target_down is not None:
            return f"open, target down: {self.target_down}"
        return f"open (pod {self.pod})" if self.state == "open" and self.pod else self.state

    def _say(self, sentence: str) -> None:
        if self.on_change is not None:
            self.on_change(sentence)

    async def choose(self) -> str | None:
        """The pod connections go to now (listed again): the newest Ready one; says a move once.

        Raises:
            KubeApiError: the pods could not be listed.
        """
        from remote.gke.parse import selector_of, serving_pod

        w = self.workload
        if w.kind == "LeaderWorkerSet":
            pods = await self.kube.list_all("v1", "pods", namespace=w.namespace, field_selector=f"metadata.name={w.name}-0")
        else:
            pods = await self.kube.list_all("v1", "pods", namespace=w.namespace, label_selector=selector_of(w.raw))
        found = serving_pod(pods, w.container)
        name = found.name if found is not None else None
        if name is None and self.target_down is None and self.state == "open":
            self.target_down = f"no Ready pod of {w.ref}"
            self._say(f"target down: no Ready pod of {w.ref} to forward {self.url} to; the forward stays open")
        elif name is not None and self.pod is not None and name != self.pod:
            self._say(f"the forward moves to pod {name} (was {self.pod}): a rollout replaced the pod; {self.url} "
                      "stays the same")
        if name is not None and self.target_down is not None:
            self.target_down = None
            self._say(f"target back: pod {name} serves {self.url} again")
        self.pod = name or self.pod
        return name

    def _connection(self, failed: str | None) -> None:
        """A connection accepted (``None``), or the one just accepted could not reach the pod (why)."""
        if failed is None:
            self.connections += 1
        else:
            self.failed_connections += 1

    async def open(self) -> str:
        """Find the serving pod and listen on the local port; returns :attr:`url`.

        Raises:
            RemoteError: no Ready pod (nothing serves yet), the API server cannot be reached, or the local
                port is taken (the forward is then ``failed`` with that reason).
        """
        from remote.gke.portforward import PodPortForward

        self.state, self.reason = "opening", None
        try:
            if await self.choose() is None:
                raise RemoteError(f"no Ready pod of {self.workload.ref} in {self.workload.cluster}/"
                                  f"{self.workload.namespace}: nothing serves there yet (watch it first).",
                                  title="Not ready")
            self._forward = PodPortForward(self.kube, self.workload.namespace, remote_port=self.container_port,
                                           local_port=self.local_port, choose=self.choose,
                                           on_connection=self._connection)
            try:
                await self._forward.start()
                self.local_port = self._forward.local_port
            except OSError as exc:
                raise RemoteError(f"localhost:{self.local_port} cannot be used: {exc.strerror or exc}",
                                  title="Port taken") from None
        except RemoteError as exc:                  # KubeApiError too
            self.state, self.reason = "failed", exc.message
            self._say(f"cannot forward {self.url}: {exc.message}")
            await self._released()
            raise
        self.state = "open"
        self._say(f"forwarding {self.url} -> {self.workload.ref} pod {self.pod} port {self.container_port} "
                  "(through the API server)")
        return self.url

    async def hold(self) -> None:
        """Keep it open until cancelled or :meth:`close`, looking at the pods every ``poll_s`` seconds (a move
        to a new pod, no Ready pod, one back: one sentence each)."""
        try:
            while self.state != "closed":
                await asyncio.sleep(self.poll_s)
                try:
                    await self.choose()
                    self.reason = None
                except KubeApiError as exc:
                    self.reason = str(exc)
        finally:
            if self._forward is not None:
                await self._forward.stop()
            await self._released()

    async def _released(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            await release()

    def close(self) -> None:
        """Stop listening (idempotent); the held task (:meth:`hold`) releases the port as it ends."""
        self.state = "closed"
        if self._forward is not None:
            self._forward.stop_listening()

    async def aclose(self) -> None:
        """Close a forward that was not held (a verb's own): the port released, ``release`` awaited."""
        self.close()
        if self._forward is not None:
            await self._forward.stop()
        await self._released()


async def open_workload_forward(registry: ForwardRegistry, workload: Workload, config: Config, *,
                                notify: Callable[[str], None] | None = None) -> WorkloadForward:
    """The console's forward to ``workload`` (the TUI's ``f``, the bench and metrics views): the one the
    registry holds, else a new one on a GKE source of its own, closed with the forward. ``notify`` hears the
    sentences worth a toast (the forward moved to a new pod, no Ready pod, one back).

    Raises:
        RemoteError: no ``[gke]``, the workload is not listed, no Ready pod, or the local port is taken.
    """
    from console.flows.gke_fleet import gke_source
    from console.flows.gke_target import WorkloadSpec, WorkloadSpecError, find_workload

    key = lint_node(workload).key
    existing = registry.get(key)
    if isinstance(existing, WorkloadForward) and existing.state == "open":
        return existing
    source = gke_source(config)
    if source is None:
        raise RemoteError("the config has no [gke] table", title="No GKE")
    try:
        found, kube = await find_workload(source, WorkloadSpec(workload.kind, workload.name, workload.namespace,
                                                               workload.cluster))
    except (WorkloadSpecError, RemoteError) as exc:
        await source.close()
        raise RemoteError(str(exc) if isinstance(exc, WorkloadSpecError) else exc.message, title="No forward") from None
    forward = await registry.open_workload(found, kube, config=config.forward, release=source.close)
    changed = forward.on_change

    def said(sentence: str) -> None:
        if changed is not None:
            changed(sentence)
        if notify is not None and sentence.startswith(("the forward moves", "target down", "target back")):
            notify(sentence)

    forward.on_change = said
    return forward


@asynccontextmanager
async def workload_tunnel(config: Config, spec: WorkloadSpec) -> AsyncIterator[tuple[Workload, NodePool | None,
                                                                                      WorkloadForward]]:
    """A verb's own forward to the workload ``spec`` names, on a free local port, closed on exit:
    ``(workload, its node pool or None, the open forward)``.

    Raises:
        WorkloadSpecError: no such workload (or several, without ``--cluster``).
        RemoteError: no ``[gke]``, a listing that failed, no Ready pod.
    """
    from console.flows.gke_fleet import gke_source
    from console.flows.gke_target import pick_workload

    source = gke_source(config)
    if source is None:
        raise RemoteError(f"{spec.ref} is a GKE workload and {config.path or 'the config'} has no [gke] table",
                          title="No GKE")
    try:
        fleet = await source.list_fleet()
        workload = pick_workload(fleet, spec)
        ref = next(c.ref for c in fleet.clusters if c.ref.name == workload.cluster
                   and c.ref.project == workload.project and c.ref.location == workload.location)
        pool = next((p for p in fleet.node_pools if p.cluster == workload.cluster and p.name == workload.node_pool),
                    None)
        forward = WorkloadForward(workload, source.client(ref), local_port=0)
        await forward.open()
        try:
            yield workload, pool, forward
        finally:
            await forward.aclose()
    finally:
        await source.close()
