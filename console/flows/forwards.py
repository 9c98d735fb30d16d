"""Forwards that stay: ``localhost:PORT -> node:container.port`` held for the whole session.

One flow for the ``forward`` verb and the TUI. A :class:`Forward` is one SSH local port forward
with its own connection; :meth:`Forward.hold` re-opens it on the same local port when that
connection drops (``reconnecting (attempt N)``), as the article's ``demo.sh`` keeps
``localhost:8005 -> TPU:8000`` open. The TUI's :class:`ForwardRegistry` belongs to the app's
services, not to a screen: a forward opened from the startup view or the fleet stays open when
the screen is left, and the same node gets the same local port across screens and reconnects
(:meth:`ForwardRegistry.port_for`: the config's fixed port, else a port derived from the node's
name within :data:`STABLE_PORTS`, checked free). No Textual here: callers get plain callbacks.
"""

from __future__ import annotations

import asyncio
import socket
import zlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from console.flows.gke_target import lint_node
from remote.errors import RemoteError

if TYPE_CHECKING:
    from console.config import ForwardConfig
    from console.flows.workload_forward import WorkloadForward
    from remote.gke.kube import KubeClient
    from remote.gke.models import Workload
    from remote.models import Node
    from remote.ssh import SshTarget  # (asyncssh costs ~0.2 s to import: not before the first frame)

#: The local ports a node's stable port is derived from (the article's 8005 first).
STABLE_PORTS = range(8005, 8105)
#: Seconds before the first re-open of a dropped forward (doubles up to :data:`RETRY_MAX_S`).
RETRY_S = 1.0
#: The longest wait between two re-open attempts, seconds.
RETRY_MAX_S = 30.0


def stable_port(node_name: str, ports: range = STABLE_PORTS) -> int:
    """The port ``node_name`` starts from within ``ports``: the same name always gives the same port
    (CRC-32 of the UTF-8 name), so a node keeps ``localhost:PORT`` across sessions too."""
    return ports[zlib.crc32(node_name.encode("utf-8")) % len(ports)]


def port_is_free(port: int) -> bool:
    """``True`` when nothing listens on ``127.0.0.1:port`` now (a bind is tried and released, with
    ``SO_REUSEADDR`` as the forward's listener binds: a closed connection of an earlier forward in
    TIME_WAIT does not make the port taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Forward:
    """One forward ``127.0.0.1:local_port -> 127.0.0.1:container_port`` on the node, over its own connection.

    Args:
        node_name: the node's name (what the header and the forwards list show).
        target: where to connect (from :func:`console.flows.ssh_target.resolve_target`).
        container_port: vLLM's port on the node (``config.container.port``).
        local_port: the local port, kept across reconnects.
        accept_new_host_key: asked with the fingerprint of an unknown host key (first connect only).
        connect: ``(target, accept_new_host_key=...) -> connection`` (``remote.ssh.connect``).
        on_change: called with one sentence per state change (opened, dropped, re-opened, failed).

    Attributes:
        state: ``opening``, ``open``, ``reconnecting``, ``failed`` or ``closed``.
        attempt: the re-open attempt under way (1-based) while ``reconnecting``, else 0.
        reason: why the last open failed (a sentence), or ``None``.
        connections: TCP connections accepted on the local port (each curl, each HTTP client).
        failed_connections: those whose channel to the node's port the node refused (nothing
            listens there: the container behind the forward is gone; the client saw ``Empty reply
            from server``), counted over the forward's life.
        target_down: while the last connection failed, why (``Connection refused``), else ``None``;
            a connection that reaches the port again clears it ("target back").
        on_change: the ``on_change`` callback (may be replaced, e.g. after the first open).
    """

    def __init__(self, node_name: str, target: SshTarget, *, container_port: int, local_port: int,
                 accept_new_host_key: Callable[[str], Awaitable[bool]] | None = None,
                 connect: Callable[..., Awaitable[Any]] | None = None,
                 on_change: Callable[[str], None] | None = None) -> None:
        from remote.ssh import connect as ssh_connect

        self.node_name = node_name
        self.target = target
        self.container_port = container_port
        self.local_port = local_port
        self.state = "opening"
        self.attempt = 0
        self.reason: str | None = None
        self.connections = 0
        self.failed_connections = 0
        self.target_down: str | None = None
        self._failed_since_down = 0
        self._accept = accept_new_host_key
        self._connect = connect or ssh_connect
        self.on_change = on_change
        self._conn: Any = None
        self._listener: Any = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: the OpenAI base URL through the forward."""
        return f"http://127.0.0.1:{self.local_port}"

    @property
    def label(self) -> str:
        """``vllm-flex-b localhost:8005`` (the header's form)."""
        return f"{self.node_name} localhost:{self.local_port}"

    def describe(self) -> str:
        """The state as the forwards list says it: ``open``, ``reconnecting (attempt 2): REASON``,
        ``failed: REASON``, ``opening`` or ``closed``."""
        if self.state == "reconnecting":
            return f"reconnecting (attempt {self.attempt})" + (f": {self.reason}" if self.reason else "")
        if self.state == "failed":
            return f"failed: {self.reason}"
        if self.state == "open" and self.target_down is not None:
            return f"open, target down: {self.target_down}"
        return self.state

    def _say(self, sentence: str) -> None:
        if self.on_change is not None:
            self.on_change(sentence)

    def _connection(self, refused: str | None) -> None:
        """One local client's channel to the node's port: opened (``None``) or refused (the reason).
        The first refusal says the target is down; the first success after it says it is back."""
        self.connections += 1
        if refused is None:
            if self.target_down is not None:
                failed, self.target_down, self._failed_since_down = self._failed_since_down, None, 0
                self._say(f"target back: {self.node_name} port {self.container_port} answers {self.url} again "
                          f"({failed} connection{'s' * (failed != 1)} failed while it was down)")
            return
        self.failed_connections += 1
        self._failed_since_down += 1
        if self.target_down is None:
            self.target_down = refused
            self._say(f"target down: {self.node_name} refused port {self.container_port} for a connection to "
                      f"{self.url} ({refused}): the container behind the forward may be gone; the tunnel "
                      "stays open")

    async def _listen(self, *, first: bool) -> None:
        from remote.ssh import forward_port_watched

        conn = await self._connect(self.target, accept_new_host_key=self._accept if first else None)
        try:
            self._listener, _ = await forward_port_watched(conn, self.container_port, self.local_port,
                                                           on_connection=self._connection)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    async def open(self, *, container: str | None = None) -> str:
        """Connect and listen on the local port; returns :attr:`url`.

        Args:
            container: when given, ``docker inspect`` it first and refuse a node without it.

        Raises:
            RemoteError: cannot connect, no such container, the local port is taken, or the
                node refused forwarding (the forward is then ``failed`` with that reason).
        """
        from remote.container.docker import docker_inspect

        self.state, self.reason = "opening", None
        try:
            if container is not None:
                conn = await self._connect(self.target, accept_new_host_key=self._accept)
                try:
                    if await docker_inspect(conn, container, label=self.target.label) is None:
                        raise RemoteError(f"{self.node_name} has no container {container!r}: nothing to forward to.",
                                          title="No container")
                finally:
                    conn.close()
            await self._listen(first=True)
        except RemoteError as exc:
            self.state, self.reason = "failed", exc.message
            self._say(f"cannot forward {self.url}: {exc.message}")
            raise
        self.state = "open"
        self._say(f"forwarding {self.url} -> {self.node_name} port {self.container_port}")
        return self.url

    async def hold(self) -> None:
        """Keep the forward open until cancelled or :meth:`close`: when its connection drops, re-open
        it on the same local port (``reconnecting (attempt N)``, waits doubling from :data:`RETRY_S`)."""
        delay = RETRY_S
        while self.state != "closed":
            if self._conn is not None and not self._conn.is_closed():
                await self._conn.wait_closed()
                if self.state == "closed":
                    return
                self._close_listener()
                self._conn = None
                self.state, self.attempt = "reconnecting", 1
                self._say(f"the tunnel's SSH connection dropped; re-opening {self.url}")
            elif self.state != "reconnecting":          # it dropped before hold() began
                self.state, self.attempt = "reconnecting", 1
            try:
                await self._listen(first=False)
            except RemoteError as exc:
                self.reason = exc.message
                self._say(f"cannot re-open the tunnel yet (attempt {self.attempt}): {exc.message}")
                await asyncio.sleep(delay)
                delay = min(RETRY_MAX_S, delay * 2)
                self.attempt += 1
                continue
            delay = RETRY_S
            self.state, self.attempt, self.reason = "open", 0, None
            self._say(f"tunnel open again at {self.url}")

    def _close_listener(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def close(self) -> None:
        """Stop listening and close the connection (idempotent); the local port is free after."""
        self.state = "closed"
        self._close_listener()
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class ForwardRegistry:
    """The console's forwards, one per node (owned by the app's services, not by a screen).

    Args:
        connect: ``(target, accept_new_host_key=...) -> connection`` (``remote.ssh.connect``).

    Attributes:
        forwards: node key ``(project, zone, name)`` -> its :class:`Forward` (a GKE workload's:
            ``(project, location, CLUSTER/NAMESPACE/deploy/NAME)`` -> its ``WorkloadForward``), in opening order
            (a failed one stays listed with its reason until closed).
        ports: node name -> the local port it was given (kept after a close: reopened on it).
    """

    def __init__(self, connect: Callable[..., Awaitable[Any]] | None = None) -> None:
        self.forwards: dict[tuple[str, str, str], Forward | WorkloadForward] = {}
        self.ports: dict[str, int] = {}
        self._connect = connect
        self._tasks: dict[tuple[str, str, str], asyncio.Task[None]] = {}
        self._opened: dict[tuple[str, str, str], asyncio.Future[None]] = {}
        self._subscribers: list[Callable[[], None]] = []

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` after every change of any forward (opened, dropped, re-opened, closed)."""
        self._subscribers.append(callback)

    def _changed(self, _sentence: str = "") -> None:
        for callback in list(self._subscribers):
            callback()

    def port_for(self, node_name: str, config: ForwardConfig) -> int:
        """The local port of ``node_name``'s forward.

        The port it had before in this console; else ``[forward.ports]`` for the node; else
        ``[forward] port`` unless another node's forward holds it; else the node's
        :func:`stable_port`, or the next free one after it within :data:`STABLE_PORTS`.
        A fixed port is returned even when taken (opening then fails and says why).

        Args:
            config: ``config.forward`` (:class:`console.config.ForwardConfig`).
        """
        if node_name in self.ports:
            return self.ports[node_name]
        held = {f.local_port for f in self.forwards.values() if f.state != "closed"} | set(self.ports.values())
        if node_name in config.ports:
            port = int(config.ports[node_name])
        elif config.port is not None and config.port not in held:
            port = int(config.port)
        else:
            start = STABLE_PORTS.index(stable_port(node_name))
            candidates = [STABLE_PORTS[(start + i) % len(STABLE_PORTS)] for i in range(len(STABLE_PORTS))]
            port = next((p for p in candidates if p not in held and port_is_free(p)), candidates[0])
        self.ports[node_name] = port
        return port

    def get(self, key: tuple[str, str, str]) -> Forward | WorkloadForward | None:
        """The forward of the node ``key``, or ``None``."""
        return self.forwards.get(key)

    def live(self) -> list[Forward | WorkloadForward]:
        """The forwards open or reconnecting, in opening order."""
        return [f for f in self.forwards.values() if f.state in ("open", "reconnecting")]

    async def open(self, node: Node, target: SshTarget, *, container_port: int, config: ForwardConfig,
                   accept_new_host_key: Callable[[str], Awaitable[bool]] | None = None,
                   container: str | None = None) -> Forward:
        """The node's forward, opened (or the one already open or reconnecting), held by a task
        of its own until :meth:`close`: cancelling the caller does not close it.

        Args:
            node: the :class:`remote.models.Node` (its ``key`` and ``name``).
            target: where to connect.
            container_port: vLLM's port on the node.
            config: ``config.forward`` (the local port, :meth:`port_for`).
            accept_new_host_key: asked about an unknown host key.
            container: check the node runs this container first (the fleet's key).

        Raises:
            RemoteError: the forward could not be opened (it stays listed as ``failed``).
        """
        existing = self.forwards.get(node.key)
        if isinstance(existing, Forward) and existing.state == "opening":     # another caller is opening it
            await asyncio.shield(self._opened[node.key])
            return existing
        if isinstance(existing, Forward) and existing.state in ("open", "reconnecting"):
            return existing
        if existing is not None:
            self.close(node.key)
        forward = Forward(node.name, target, container_port=container_port,
                          local_port=self.port_for(node.name, config), accept_new_host_key=accept_new_host_key,
                          connect=self._connect, on_change=self._changed)
        await self._start(node.key, forward, lambda: forward.open(container=container))
        return forward

    async def open_workload(self, workload: Workload, kube: KubeClient, *, config: ForwardConfig,
                            release: Callable[[], Awaitable[None]] | None = None) -> WorkloadForward:
        """A GKE workload's forward (:class:`console.flows.workload_forward.WorkloadForward`: through the API
        server to its serving pod, following a rollout), opened or the one already open, held as a node's is.
        ``release`` is awaited once the forward ends (or at once when one is already open).

        Raises:
            RemoteError: no Ready pod, the API server cannot be reached, or the local port is taken.
        """
        from console.flows.workload_forward import WorkloadForward

        name = lint_node(workload).name
        key = lint_node(workload).key
        existing = self.forwards.get(key)
        if isinstance(existing, WorkloadForward) and existing.state in ("opening", "open"):
            if release is not None:
                await release()
            if existing.state == "opening":
                await asyncio.shield(self._opened[key])
            return existing
        if existing is not None:
            self.close(key)
        forward = WorkloadForward(workload, kube, local_port=self.port_for(name, config), on_change=self._changed,
                                  release=release)
        await self._start(key, forward, forward.open)
        return forward

    async def _start(self, key: tuple[str, str, str], forward: Forward | WorkloadForward,
                     open_it: Callable[[], Awaitable[str]]) -> None:
        """List ``forward`` under ``key``, open it (``open_it``) and hold it on a task of its own.

        Raises:
            RemoteError: it could not be opened (it stays listed as ``failed``).
        """
        node_name = forward.node_name
        self.forwards[key] = forward
        opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._opened[key] = opened

        def fail(exc: RemoteError) -> None:
            if not opened.done():
                opened.set_exception(exc)
                opened.exception()            # retrieved: a caller that went away leaves no warning

        async def run() -> None:
            try:
                await open_it()
            except RemoteError as exc:
                fail(exc)
                return
            except BaseException:             # closed (cancelled) while it opened: the callers hear it
                fail(RemoteError(f"the forward to {node_name} was closed while it opened"))
                raise
            opened.set_result(None)
            await forward.hold()

        self._tasks[key] = asyncio.create_task(run(), name=f"forward {node_name}")
        await asyncio.shield(opened)

    def close(self, key: tuple[str, str, str]) -> Forward | WorkloadForward | None:
        """Close and unlist the node ``key``'s forward (its port stays the node's); returns it, or ``None``."""
        forward = self.forwards.pop(key, None)
        task = self._tasks.pop(key, None)
        self._opened.pop(key, None)
        if forward is not None:
            forward.close()
        if task is not None:
            task.cancel()
        if forward is not None:
            self._changed()
        return forward

    def close_all(self) -> None:
        """Close every forward (the console exits)."""
        for key in list(self.forwards):
            self.close(key)

