"""Follow one worker's vLLM startup: the SSH connection, the log tail, the reader and the tunnel.

Shared by the startup view (``console/screens/startup.py``) and ``tpu-console watch`` through
:class:`console.flows.slice_watch.SliceWatch` (one of these per followed worker): both
connect the same way (an unknown host key goes to a callback), follow ``docker logs -f
--timestamps`` with :class:`remote.container.tail.LogTail`, feed :class:`remote.vllm_log.reader.StartupReader`,
and, once ready, reach ``/v1/models`` through an SSH local port forward (``watch``'s one-shot
probe; the startup view and ``forward`` hold theirs with :mod:`console.flows.forwards`). No Textual here:
callers get plain callbacks. Both read a followed container with :func:`read_followed`, and
their :class:`~console.flows.launch_recorder.LaunchRecorder` writes what the watch learns into
the history as it learns it (``watch`` in its own loop, the startup view in its history thread).
One container, one state: when the followed container is replaced (another id under the same
name), the new one gets a fresh reader, and both callers mark the gap
(:meth:`Replacement.marker`) and close the old launch (``LaunchRecorder.record_replaced``).
One boot, one state: when the container restarts in place (same id, ``RestartCount`` up), the
new boot gets a fresh reader too, both callers write the restart marker
(:meth:`Restart.marker`) and the launch keeps its row with the restart count
(``LaunchRecorder.record_restart``).
Off the UI loop: the tail's line thread (:class:`~remote.container.tail.LogTail`) runs the
reader, masks secrets once (the pane and the log on disk get the masked text) and writes the
log on disk; the loop gets each batch (already read) and :attr:`StartupWatch.state`, the
reader's snapshot published after each batch.
"""

from __future__ import annotations

import shlex
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from console.flows.launch_log import LaunchLog
from console.flows.launch_recorder import LaunchRecorder
from console.render.plain import log_line_text
from remote.container.tail import LogLine, LogTail, TailStatus
from remote.errors import RemoteError
from remote.secrets import scrub_text
from remote.ssh import SshTarget
from remote.vllm_log.reader import StartupReader

if TYPE_CHECKING:
    from remote.models import Node

#: The interpreter's thread switch interval while a watch follows (CPython's default is 5 ms): the
#: tail's line thread holds the GIL for at most this long before the UI loop gets it back.
SWITCH_INTERVAL_S = 0.001
_switch_lock = threading.Lock()
_switch_users: list[float] = []       # the interval before the first watch, one entry per follow running


def _fast_switch(enter: bool) -> None:
    """Lower the switch interval while any watch follows; restore it after the last one."""
    with _switch_lock:
        if enter:
            _switch_users.append(sys.getswitchinterval())
            sys.setswitchinterval(min(SWITCH_INTERVAL_S, _switch_users[0]))
        else:
            first = _switch_users[0]
            _switch_users.pop()
            if not _switch_users:
                sys.setswitchinterval(first)


class StartupWatch:
    """One watch of one container on one worker.

    Args:
        target: where to connect.
        container: container name (``config.container.name``).
        container_port: vLLM's port on the node (the tunnel's remote end).
        accept_new_host_key: asked with the fingerprint of an unknown host key (first connect).
        on_lines: called on the loop with each batch after the reader has read it (texts with
            secrets masked).
        on_status: called on the loop when the tail's status changes.
        connect: ``(target, accept_new_host_key=...) -> connection`` (``remote.ssh.connect``).
        tail_options: extra :class:`~remote.container.tail.LogTail` keyword arguments.
        clock: current UTC time (when a replacement was noticed).
        log_for: ``container_id -> LaunchLog`` (:mod:`console.flows.launch_log`): every line read
            is also written to the followed container's full log on disk; ``None`` keeps none.

    Attributes:
        reader: the startup reader of the container followed now; a container that replaces
            the followed one (another id: a swap, or ``rm -f`` + ``run`` outside the console)
            gets a fresh reader. While :meth:`follow` runs it belongs to the tail's line thread:
            read :attr:`state` on the loop.
        state: the reader's :class:`StartupState` snapshot as of the last batch or status
            handed to the loop (a frozen value: safe to read from any thread).
        replaced: the :class:`Replacement` s seen, oldest first (``on_status`` is called after
            the reader was swapped, so a callback sees the new one).
        restarts: the :class:`Restart` s seen (restarts in place), oldest first; likewise.
        status: the last :class:`TailStatus`, or ``None``.
        lines_received: lines delivered so far.
        tunnel_url: ``http://127.0.0.1:PORT`` once :meth:`open_tunnel` succeeded.
        log: the followed container's :class:`~console.flows.launch_log.LaunchLog`, or ``None``.
        log_problem: why the log on disk stopped being written (one sentence), or ``None``.
    """

    def __init__(self, target: SshTarget, *, container: str, container_port: int = 8000,
                 accept_new_host_key: Callable[[str], Awaitable[bool]] | None = None,
                 on_lines: Callable[[list[LogLine]], None] | None = None,
                 on_status: Callable[[TailStatus], None] | None = None,
                 connect: Callable[..., Awaitable[Any]] | None = None,
                 tail_options: dict[str, Any] | None = None,
                 clock: Callable[[], datetime] | None = None,
                 log_for: Callable[[str], LaunchLog] | None = None) -> None:
        from remote.ssh import connect as ssh_connect

        self.target = target
        self.container = container
        self.container_port = container_port
        self.reader = StartupReader()
        self.state = self.reader.state
        self.status: TailStatus | None = None
        self.lines_received = 0
        self.tunnel_url: str | None = None
        self._accept = accept_new_host_key
        self._on_lines = on_lines
        self._on_status = on_status
        self._connect = connect or ssh_connect
        self._tail_options = tail_options or {}
        self._first: Any = None
        self._control: Any = None
        self._listener: Any = None
        self._tail: LogTail | None = None
        self._followed_id: str | None = None
        self._clock = clock or _utc_now
        self.replaced: list[Replacement] = []
        self.restarts: list[Restart] = []
        self._restart_count = 0
        self._last_read_at: datetime | None = None   # docker time of the followed container's last line read
        self._log_for = log_for
        self.log: LaunchLog | None = None
        self.log_problem: str | None = None

    async def connect(self) -> None:
        """Open the first, verified connection (asking about an unknown host key).

        Raises:
            RemoteError: any SSH failure, as one sentence (``HostKeyUnknown``, ``HostKeyChanged``...).
        """
        self._first = await self._connect(self.target, accept_new_host_key=self._accept)

    async def follow(self) -> None:
        """Follow the container's log until :meth:`stop` or an error retrying cannot fix.

        The connection from :meth:`connect` is used first; reconnects open new ones.
        """
        async def reconnect() -> Any:
            if self._first is not None:
                conn, self._first = self._first, None
                return conn
            return await self._connect(self.target)

        self._tail = LogTail(reconnect, self.container, on_lines=self._lines, on_status=self._status,
                             prepare_lines=self._read_lines, prepare_status=self._read_status,
                             **self._tail_options)
        _fast_switch(True)
        try:
            await self._tail.run()
        finally:
            _fast_switch(False)
            self.state = self.reader.state

    @property
    def tail_thread(self) -> Any:
        """The tail's line thread while :meth:`follow` runs, else ``None``."""
        return self._tail.thread if self._tail is not None else None

    def _read_lines(self, batch: list[LogLine]) -> None:
        """Line thread: the reader reads the batch, each line is masked once for the log on disk
        and, as the pane shows it (:func:`~console.render.plain.log_line_text`), put back in
        ``batch``; the log is written, the snapshot published."""
        self.reader.feed_lines(batch)
        for ts, _ in reversed(batch):
            if ts is not None:
                self._last_read_at = ts
                break
        masked_lines = []
        for index, (ts, text) in enumerate(batch):
            masked = scrub_text(text)
            masked_lines.append(masked)
            shown = masked if masked.isprintable() else log_line_text(text)   # printable: the same text
            if shown is not text:
                batch[index] = (ts, shown)
        if self.log is not None:
            try:
                self.log.write(masked_lines, masked=True)
            except OSError as exc:
                self.log_problem = f"stopped writing the log to {self.log.path}: {exc.strerror or exc}"
                self.log.close()
                self.log = None
        self.state = self.reader.state

    def _lines(self, batch: list[LogLine]) -> None:
        self.lines_received += len(batch)
        if self._on_lines is not None:
            self._on_lines(batch)

    def _status(self, status: TailStatus) -> None:
        self.status = status
        if self._on_status is not None:
            self._on_status(status)

    def _read_status(self, status: TailStatus) -> None:
        """Line thread: a replacement or a restart gets a fresh reader (in order with the lines)."""
        followed = status.container_id
        if followed and self._followed_id is not None and followed != self._followed_id:
            # one container, one state: the new container starts from a fresh reader
            self.reader.close()
            self.replaced.append(Replacement(self._followed_id, followed, self._clock(), self.reader.state,
                                             self._last_read_at))
            self._last_read_at = None
            self.reader = StartupReader()
            self._restart_count = status.restart_count
        elif followed and followed == self._followed_id and status.restart_count > self._restart_count:
            # one boot, one state: a restart in place starts a fresh boot section
            self.reader.close()
            self.restarts.append(Restart(followed, status.restart_count, status.message, self.reader.state))
            self.reader = StartupReader()
        if followed and followed != self._followed_id and self._log_for is not None:
            if self.log is not None:
                self.log.close()
            self.log = self._log_for(followed)
        if followed:
            if self._followed_id is None:
                self._restart_count = status.restart_count
            self._restart_count = max(self._restart_count, status.restart_count)
            self._followed_id = followed
        self.state = self.reader.state

    @property
    def reader_container_id(self) -> str | None:
        """The id of the container :attr:`reader` reads (``None`` before the first status names one)."""
        return self._followed_id

    @property
    def container_id(self) -> str | None:
        """The followed container's id, once the tail knows it."""
        return self._tail.container_id if self._tail is not None else None

    def stop(self) -> None:
        """Make :meth:`follow` return soon."""
        if self._tail is not None:
            self._tail.stop()

    async def control(self) -> Any:
        """A live connection for commands and forwards (re-opened when it dropped)."""
        if self._control is None or self._control.is_closed():
            self._control = await self._connect(self.target)
        return self._control

    async def inspect(self) -> dict[str, Any] | None:
        """``docker inspect`` of the container (``None`` when there is none).

        Raises:
            RemoteError: SSH or docker failure.
        """
        from remote.container.docker import docker_inspect

        return await docker_inspect(await self.control(), self.container, label=self.target.label)

    async def image_inspect(self, inspect: dict[str, Any]) -> dict[str, Any] | None:
        """``docker image inspect`` of the image the container (its ``inspect`` JSON) runs, or ``None``
        (:func:`remote.container.docker.container_image_inspect`).

        Raises:
            RemoteError: SSH or docker failure.
        """
        from remote.container.docker import container_image_inspect

        return await container_image_inspect(await self.control(), inspect, label=self.target.label)

    async def open_tunnel(self, local_port: int = 0) -> str:
        """Forward ``127.0.0.1:<local_port>`` to the container port on the node; returns the URL.

        Raises:
            RemoteError: cannot connect, the local port is taken, or the node refused.
        """
        from remote.ssh import forward_port

        if self._listener is not None:
            self._listener.close()
            self._listener = None
        listener, port = await forward_port(await self.control(), self.container_port, local_port)
        self._listener = listener
        self.tunnel_url = f"http://127.0.0.1:{port}"
        return self.tunnel_url

    async def probe(self, timeout_s: float = 5.0) -> list[str]:
        """``/v1/models`` through the tunnel: the served model ids.

        Raises:
            VllmHttpError: no answer or not a model list. RuntimeError: no tunnel yet.
        """
        from remote.ssh import probe_models

        if self.tunnel_url is None:
            raise RuntimeError("open_tunnel() first")
        return await probe_models(self.tunnel_url, timeout_s=timeout_s)

    async def close(self) -> None:
        """Stop the tail, close the tunnel, the log file and every connection still open (idempotent)."""
        self.stop()
        if self.log is not None:
            self.log.close()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for conn in (self._first, self._control):
            if conn is not None:
                conn.close()
        self._first = self._control = None


def no_container_hint(node: Node, container: str, *, image: str | None = None, model: str | None = None) -> str:
    """What a watch of a READY node without ``container`` waits for, and how to start one.

    Args:
        node: the :class:`remote.models.Node` (name, project, zone).
        container: the container name the watch follows.
        image / model: the config's ``[container]`` defaults, named in the command when set.

    Returns:
        One sentence with the exact ``tpu-console swap`` line (the swap machinery runs a first
        container on a node that has none) and the ``request --image`` alternative.
    """
    words = ["tpu-console", "swap", node.name, "--project", node.project, "--zone", node.zone,
             "--image", image or "IMAGE", "--set", f"model={model or 'MODEL'}"]
    return (f"node {node.name} is READY but runs no container named {container}: this watch waits until one "
            f"starts. Start one: {shlex.join(words)} (a new node can run one at once: "
            "tpu-console request ... --image IMAGE --model MODEL).")


def _utc_now() -> datetime:
    from datetime import UTC

    return datetime.now(UTC)


@dataclass(frozen=True)
class Replacement:
    """The followed container was replaced by another one (another id under the same name).

    Attributes:
        old_id, new_id: full docker ids.
        at: when the watch noticed it (UTC, the console's clock).
        old_state: the old container's final :class:`StartupState` (what was seen of it).
        last_line_at: the docker time (UTC) of the old container's last line read, or ``None``
            when none was: its output after that was not seen.
    """

    old_id: str
    new_id: str
    at: datetime
    old_state: Any
    last_line_at: datetime | None = None

    def marker(self) -> str:
        """The gap, for the log: ``container A replaced by B (noticed at T1 UTC); A's output after its
        last line read (T0 UTC) was not seen``, T0 the docker time of A's last line read (a lost
        connection's gap starts there, not when the replacement was noticed)."""
        old = self.old_id[:12]
        head = f"container {old} replaced by {self.new_id[:12]} (noticed at {self.at:%H:%M:%S} UTC)"
        if self.last_line_at is None:
            return f"{head}; none of {old}'s output was read"
        return f"{head}; {old}'s output after its last line read ({self.last_line_at:%H:%M:%S} UTC) was not seen"


@dataclass(frozen=True)
class Restart:
    """The followed container restarted in place (same id, docker's ``RestartCount`` rose).

    Attributes:
        container_id: full docker id.
        restart_count: ``RestartCount`` after the restart.
        message: the tail's sentence (``container vllm restarted (restart 2) at 14:05:31 UTC``).
        old_state: the previous boot's final :class:`StartupState`.
    """

    container_id: str
    restart_count: int
    message: str
    old_state: Any

    def marker(self) -> str:
        """For the log: ``container vllm restarted (restart 2) at T; a fresh boot follows``."""
        return f"{self.message}; a fresh boot follows"


@dataclass(frozen=True)
class FollowedContainer:
    """What ``docker inspect`` says about the container a watch follows.

    Attributes:
        spec: its :class:`~remote.container.spec.ContainerSpec` (with the repo digest when
            ``docker image inspect`` names one), or ``None`` when it could not be read.
        requested_at: when it was asked to run (``Created`` / ``State.StartedAt``), UTC, or ``None``.
        problem: a sentence saying why it could not be read fully, or ``None``.
    """

    spec: Any
    requested_at: datetime | None
    problem: str | None


async def read_followed(watch: StartupWatch, container_id: str) -> FollowedContainer:
    """Read the container the watch now follows: ``docker inspect`` gives the spec and the requested
    time (the container's start), ``docker image inspect`` of its image the repo digest
    (``repo@sha256:...``). Never raises for SSH or docker failures (see ``problem``)."""
    from remote.container.spec import ContainerSpec, container_start_time

    spec, problem, inspect = None, None, None
    try:
        inspect = await watch.inspect()
        if inspect:
            image = None
            try:
                image = await watch.image_inspect(inspect)
            except RemoteError as exc:
                problem = f"docker image inspect of {container_id[:12]}: {exc}"
            spec = ContainerSpec.from_inspect(inspect, image)
    except (RemoteError, ValueError) as exc:
        problem = f"docker inspect of {container_id[:12]}: {exc}"
    return FollowedContainer(spec, container_start_time(inspect), problem)


async def observe_followed(watch: StartupWatch, recorder: LaunchRecorder, container_id: str) -> FollowedContainer:
    """:func:`read_followed`, then have ``recorder`` find, claim or start the container's launch
    (a container that cannot be read is still recorded, without its spec)."""
    found = await read_followed(watch, container_id)
    recorder.observe_container(container_id, found.spec, requested_at=found.requested_at)
    return found
