"""Follow a container's log over SSH, surviving dropped connections and container replacement.

:class:`LogTail` runs ``sudo -n docker logs -f --timestamps [--since TS] <container id> 2>&1``
(vLLM logs to stderr, so both streams are merged on the node, in docker's order).

- **Resume.** After a drop it reconnects with exponential backoff and resumes with
  ``--since <last timestamp>``. Docker includes lines at exactly that timestamp, so the lines
  already delivered at that timestamp are skipped (counted by text): no duplicates, no gaps.
- **Replacement.** At each (re)connect and whenever ``logs -f`` ends, the container name is
  inspected; a new container id is followed from its first line.
- **No orphans.** The follower runs on a pseudo-terminal, so it dies with its channel (SIGHUP
  from the kernel when sshd closes the tty), on a clean stop, a reconnect or a killed session.
  A blackholed link keeps sshd's session (and the follower) alive, so the follower prints its
  PID first and the next connection ends exactly that process before following again
  (:mod:`remote.container.follower`; an operator's own ``docker logs -f`` is never touched).
- **Restart in place.** A ``RestartCount`` above the one seen (same id) is reported once
  (``container vllm restarted (restart 2) at 14:05:31 UTC``, :attr:`TailStatus.restart_count`)
  and the new run is followed from where the old one's lines ended. Found after a lost
  connection, the restart is reported where the old run ends in the log: after the old run's
  last lines that ``--since`` replays (stamped before the new run's ``StartedAt``), before the
  new run's first line, so the old boot's last lines stay in the old boot's section.
- **Catch-up.** The first follow after a lost connection reports ``N lines caught up since T``
  (T: the last line read before the loss). When the container was replaced meanwhile, those are
  no catch-up: it says they are a new container's log from its start, and when the one before
  was last read.
- **Stopped container.** An exited container is polled with backoff (``poll_interval_s``
  doubling up to ``max_backoff_s``), reported as ``exited`` with ``waiting: container vllm
  exited (code 1) at 14:05:31 UTC; polling every 4 s``, and followed again if it restarts.
- **Status.** ``connecting``, ``connected``, ``reconnecting`` (attempt n), ``waiting`` (no such
  container), ``exited`` (exit code; still polled), ``error`` (cannot continue: host key, auth, sudo, docker).
- **Off the event loop.** The SSH session (asyncssh, on the loop) only hands each packet's raw
  bytes to one line thread (a queue): the thread splits lines (a 7 MB chunk too), rejoins
  docker's 16 KiB records, strips docker's timestamps, runs ``prepare_lines`` (e.g. the
  startup reader, secret scrubbing, the log on disk) and ``prepare_status``, then hands each
  batch and status to the loop (``on_lines`` / ``on_status``), in log order: a status is put in
  the same queue, so it never overtakes the lines received before it. The thread stops with
  :meth:`LogTail.run`.
- **Batching.** Lines reach ``on_lines`` in batches every ``batch_interval_s`` (or sooner when
  ``max_batch_lines`` are pending), so a UI is called ~10-20 times a second, not per line.
  Memory is bounded: at most :data:`QUEUED_BYTES_HIGH` bytes wait for the thread (then the
  channel stops reading, so the SSH window and TCP slow the sender) and at most
  :data:`BATCHES_IN_FLIGHT` batches wait for the loop (then the thread waits).
"""

from __future__ import annotations

import asyncio
import calendar
import queue
import re
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncssh

from remote.container.docker import container_id_of, docker_inspect, logs_follow_args
from remote.container.docker_records import DOCKER_RECORD_BYTES, rejoin_records
from remote.container.follower import follower_command, follower_pid, stop_follower
from remote.ssh import SshFailure

#: One delivered line: (docker timestamp or None, text without the timestamp).
LogLine = tuple[datetime | None, str]

_TS = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")
_DOCKER_ERROR = re.compile(r"^(Error response from daemon: |Error: No such )")
_MAX_LINE_CHARS = 1 << 20
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Bytes received and not yet split by the line thread above which the channel stops reading.
QUEUED_BYTES_HIGH = 8 << 20
#: ... and below which it reads again.
QUEUED_BYTES_LOW = 1 << 20
#: Batches handed to the loop and not yet delivered above which the line thread waits.
BATCHES_IN_FLIGHT = 4
#: A docker timestamp (``2025-06-01T14:05:31.123456789Z``, or with a ``+HH:MM`` zone) is at
#: most this long: the space after it is looked for in this many characters only.
_STAMP_MAX_CHARS = 36


@dataclass(frozen=True)
class TailStatus:
    """Where the tail stands.

    Attributes:
        kind: ``connecting``, ``connected``, ``reconnecting``, ``waiting``, ``exited`` or ``error``.
        attempt: consecutive failed attempts (``reconnecting``), else 0.
        container_id: the followed container's id, when known.
        exit_code: the container's exit code (``exited``), else ``None``.
        message: one sentence for a status line.
        restart_count: the followed container's ``RestartCount`` (``docker inspect``): it rises
            when the container restarts in place (same id); the status that first shows the new
            count says ``container NAME restarted (restart N) at HH:MM:SS UTC``.
    """

    kind: str
    attempt: int = 0
    container_id: str | None = None
    exit_code: int | None = None
    message: str = ""
    restart_count: int = 0


def parse_docker_timestamp(raw: str) -> int | None:
    """Nanoseconds since the epoch for a docker ``--timestamps`` prefix, or ``None``.

    Docker prints RFC 3339 with nanoseconds, e.g. ``2025-06-01T14:05:31.123456789Z``.
    """
    match = _TS.match(raw)
    if not match:
        return None
    base, frac, zone = match.groups()
    try:
        seconds = calendar.timegm(datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").timetuple())
    except ValueError:
        return None
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return seconds * 1_000_000_000 + int((frac or "0").ljust(9, "0"))


class _Position:
    """The resume point: the latest timestamp and the texts delivered at exactly that timestamp."""

    def __init__(self) -> None:
        self.last_ns: int | None = None
        self.last_raw: str | None = None
        self.seen: list[str] = []            # texts delivered at last_ns (bounded by one timestamp)
        self.skip: Counter[str] = Counter()  # after a resume: repeats docker will send again
        self._second: tuple[str, int, datetime] = ("", 0, _EPOCH)

    def begin_resume(self) -> None:
        """Docker's ``--since last_raw`` repeats the lines at ``last_raw``: skip those once."""
        self.skip = Counter(self.seen)

    def accept(self, line: str) -> LogLine | None:
        """The line to deliver, or ``None`` when it duplicates one delivered before a resume."""
        cut = line.find(" ", 0, _STAMP_MAX_CHARS)
        raw, text = (line[:cut], line[cut + 1:]) if cut > 0 else (line, "")
        stamp = self._stamp(raw)
        if stamp is None:
            return (None, line)
        ns, when = stamp
        last = self.last_ns
        if last is None or ns > last:
            self.last_ns, self.last_raw = ns, raw
            self.seen = [text]
            if self.skip:
                self.skip = Counter()
        elif ns == last:
            if self.skip and self.skip[text] > 0:
                self.skip[text] -= 1
                return None
            self.seen.append(text)
        # ns < last: docker interleaves stdout/stderr; keep the line, do not move back
        return (when, text)

    def _stamp(self, raw: str) -> tuple[int, datetime] | None:
        prefix, second_ns, second_dt = self._second
        # Fast path: ``YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`` in the same second as the previous line.
        if len(raw) == 30 and raw[29] == "Z" and raw[19] == "." and raw.startswith(prefix) and prefix:
            try:
                frac = int(raw[20:29])
            except ValueError:
                return None
            return second_ns + frac, second_dt.replace(microsecond=frac // 1000)
        ns = parse_docker_timestamp(raw)
        if ns is None:
            return None
        whole = ns - ns % 1_000_000_000
        second_dt = datetime.fromtimestamp(whole // 1_000_000_000, tz=UTC)
        if len(raw) == 30 and raw[29] == "Z" and raw[19] == ".":
            self._second = (raw[:20], whole, second_dt)
        return ns, second_dt.replace(microsecond=(ns % 1_000_000_000) // 1000)


class _LogSession(asyncssh.SSHClientSession):
    """Hands each packet's bytes to the line thread (``lines``), which splits them and calls ``on_lines``
    with each packet's whole lines (decoded, record borders rejoined).

    The session runs on the event loop and does no per-line work: :meth:`data_received` queues
    the bytes and stops the channel reading while more than :data:`QUEUED_BYTES_HIGH` wait.
    """

    def __init__(self, lines: _LineThread, on_lines: Callable[[list[str]], None]) -> None:
        self._lines = lines
        self._on_lines = on_lines
        self._partial = b""
        #: An exception to re-raise after the channel closes (connection lost, or a callback bug).
        self.failure: BaseException | None = None
        self._channel: Any = None
        self._paused = False

    def connection_made(self, chan: Any) -> None:
        self._channel = chan

    def data_received(self, data: bytes, datatype: Any) -> None:
        if self.failure is not None:
            return
        if self._lines.put_data(self, data) > QUEUED_BYTES_HIGH and not self._paused:
            self._paused = True
            self._channel.pause_reading()

    def resume(self) -> None:
        """The thread caught up (loop side): read again, unless the queue filled up again since the
        thread asked (a resume asked before the last pause is stale: it would read past the high mark)."""
        if self._paused and self._lines.queued_bytes < QUEUED_BYTES_LOW:
            self._paused = False
            if self.failure is None:
                self._channel.resume_reading()

    def fail(self, exc: BaseException) -> None:
        """A callback failed (loop side): remember it and close the channel."""
        if self.failure is None:
            self.failure = exc
        self._channel.close()

    def split(self, data: bytes) -> None:
        """Thread side: split and rejoin docker's 16 KiB records on bytes, then decode whole lines
        (a record border may cut a multi-byte character, which a per-packet decode would garble)."""
        lines = (self._partial + data).split(b"\n") if self._partial else data.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > _MAX_LINE_CHARS:
            lines.append(self._partial)
            self._partial = b""
        limit = DOCKER_RECORD_BYTES          # a shorter line holds no record border
        self._on_lines([(rejoin_records(line) if len(line) > limit else line).decode("utf-8", "replace")
                        for line in lines])

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self.failure is None:
            self.failure = exc

    def finish(self) -> None:
        """Thread side: hand over a last line without a newline."""
        rest, self._partial = self._partial, b""
        if rest and self.failure is None:
            self._on_lines([rejoin_records(rest).decode("utf-8", "replace")])


class _LineThread:
    """The tail's one line thread: a FIFO of packets, ends of follows, flushes and statuses.

    Loop side: :meth:`put_data`, :meth:`drained` (an awaitable: every item put before is
    handled), :meth:`flush`, :meth:`status`, :meth:`stop`. Thread side: the tail's ``_accept``
    (through :meth:`_LogSession.split`), ``prepare_lines`` / ``prepare_status``; results reach
    the loop through ``call_soon_threadsafe`` in the order they were made.
    """

    def __init__(self, tail: LogTail, loop: asyncio.AbstractEventLoop) -> None:
        self._tail = tail
        self._loop = loop
        self._items: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._queued_bytes = 0
        self._in_flight = threading.BoundedSemaphore(BATCHES_IN_FLIGHT)
        self._session: _LogSession | None = None
        self.stopped: asyncio.Future[None] = loop.create_future()
        self.thread = threading.Thread(target=self._run, name=f"log-tail-{tail.container}", daemon=True)
        self.thread.start()

    @property
    def queued_bytes(self) -> int:
        """Bytes queued and not yet split."""
        with self._lock:
            return self._queued_bytes

    # --- loop side ---
    def put_data(self, session: _LogSession, data: bytes) -> int:
        """Queue a packet; returns the bytes now waiting."""
        with self._lock:
            self._queued_bytes += len(data)
            queued = self._queued_bytes
        self._items.put(("data", session, data))
        return queued

    def drained(self, session: _LogSession | None = None) -> asyncio.Future[None]:
        """A future done once every item queued before is handled (``session``'s last line too)."""
        done: asyncio.Future[None] = self._loop.create_future()
        self._items.put(("mark", session, done))
        return done

    def flush(self) -> None:
        self._items.put(("flush",))

    def put_lines(self, items: list[LogLine]) -> None:
        """Deliver these lines after everything queued before."""
        self._items.put(("lines", items))

    def status(self, status: TailStatus) -> None:
        self._items.put(("status", status))

    def call(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the thread after everything queued before."""
        self._items.put(("call", callback))

    def stop(self) -> None:
        self._items.put(("stop",))

    # --- thread side ---
    def _run(self) -> None:
        try:
            while True:
                item = self._items.get()
                if item[0] == "stop":
                    self._tail._flush_thread()
                    return
                try:
                    self._handle(item)
                except Exception as exc:  # noqa: BLE001 - a hook's bug: the tail's run() raises it
                    self._call(self._tail._fail, exc)
        except Exception as exc:  # noqa: BLE001 - likewise (the last flush)
            self._call(self._tail._fail, exc)
        finally:
            self._call(_set_done, self.stopped)

    def _handle(self, item: tuple[Any, ...]) -> None:
        """One item of the queue (thread side)."""
        tail = self._tail
        kind = item[0]
        if kind == "data":
            _, session, data = item
            self._session = session
            if session.failure is None:
                try:
                    session.split(data)
                except Exception as exc:  # noqa: BLE001 - surfaced by _follow after the channel closes
                    session.failure = session.failure or exc
                    self._call(session.fail, exc)
            with self._lock:
                self._queued_bytes -= len(data)
                low = self._queued_bytes < QUEUED_BYTES_LOW
            if low and session._paused:
                self._call(session.resume)
        elif kind == "mark":
            _, session, done = item
            if session is not None:
                try:
                    session.finish()
                except Exception as exc:  # noqa: BLE001 - surfaced by _follow
                    session.failure = session.failure or exc
            self._call(_set_done, done)
        elif kind == "flush":
            tail._flush_thread()
            tail._report_restart(quiet_s=4 * tail._batch_interval_s)
        elif kind == "call":
            item[1]()
        elif kind == "lines":
            for line in item[1]:
                tail._deliver(line)
        elif kind == "status":
            tail._status_thread(item[1])

    def hand_over(self, callback: Callable[..., None], *args: Any) -> None:
        """Thread side: run ``callback(*args)`` on the loop, after everything handed over before
        (waits while :data:`BATCHES_IN_FLIGHT` hand-overs have not run yet)."""
        self._in_flight.acquire()
        if not self._call(self._run_handed_over, callback, *args):
            self._in_flight.release()            # no loop to run it: never wait for one

    def _run_handed_over(self, callback: Callable[..., None], *args: Any) -> None:
        self._in_flight.release()
        callback(*args)

    def _call(self, callback: Callable[..., None], *args: Any) -> bool:
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:        # the loop is closed: nobody is waiting any more
            return False
        return True


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _docker_time(raw: Any) -> datetime | None:
    """A ``docker inspect`` time (``State.StartedAt``/``FinishedAt``, RFC 3339 nano) as UTC, or ``None``."""
    ns = parse_docker_timestamp(raw) if isinstance(raw, str) else None
    if ns is None or ns <= 0:
        return None
    whole, rest = divmod(ns, 1_000_000_000)         # exact: a float of ns rounds to the next microsecond
    return datetime.fromtimestamp(whole, tz=UTC).replace(microsecond=rest // 1000)


def _at(raw: Any) -> str:
    """`` at 14:05:31 UTC`` for a ``docker inspect`` time, or nothing when docker gave none."""
    when = _docker_time(raw)
    return f" at {_clock(when)}" if when is not None else ""


def _clock(at: datetime | None) -> str:
    """``14:05:31 UTC`` (the log's own clock, from docker's timestamps)."""
    return at.strftime("%H:%M:%S UTC") if at is not None else "unknown"


class _CatchUp:
    """Counts the lines ``--since`` replays after a lost connection: the burst that arrives before
    the log goes quiet, or before the first line stamped after the resume (the node's clock)."""

    def __init__(self, lost_at: datetime | None, new_container: str | None = None) -> None:
        self.lost_at = lost_at
        self.new_container = new_container   # the short id of a container that replaced the one read
        self.lines = 0
        self._resumed_at = datetime.now(UTC)
        self._started = time.monotonic()
        self._last: float | None = None      # when the last replayed line arrived
        self._live = False

    def line(self, at: datetime | None) -> None:
        if self._live:
            return
        if at is not None and at > self._resumed_at:
            self._live = True
            return
        self.lines += 1
        self._last = time.monotonic()

    def sentence(self, container: str) -> str:
        """``resumed following container vllm: 40 lines caught up since 14:05:31 UTC``; for a container
        that replaced the one read, what the lines are: the new container's log from its start."""
        lines = f"{self.lines} line{'s' * (self.lines != 1)}"
        if self.new_container is not None:
            before = f"; the one before was last read at {_clock(self.lost_at)}, its later output not seen" \
                if self.lost_at else ""
            return (f"resumed following container {container}: a new container ({self.new_container}), "
                    f"read from its start: {lines} of its own log{before}")
        since = f" since {_clock(self.lost_at)}" if self.lost_at else ""
        return f"resumed following container {container}: {lines} caught up{since}"

    def done(self, quiet_s: float, first_line_s: float = 5.0) -> bool:
        """The replay is over: a live line came, the log went quiet after the replay, or no
        line came at all within ``first_line_s`` (nothing was missed)."""
        if self._live:
            return True
        if self._last is None:
            return time.monotonic() - self._started > first_line_s
        return time.monotonic() - self._last > quiet_s


@dataclass
class _RestartDue:
    """A restart in place found on reconnecting, not reported yet: the old run's unread last lines
    come first. Reported (thread side) before the first line stamped at or after ``started_at``,
    once the replay went quiet, or when the follow ends."""

    started_at: datetime
    restart_count: int
    message: str
    lines: int = 0                               # lines delivered since it was found
    last_mono: float = field(default_factory=time.monotonic)   # ... and when the last one came

    def quiet(self, quiet_s: float, first_line_s: float = 5.0) -> bool:
        """No line for ``quiet_s`` after some came (or for ``first_line_s`` when none came)."""
        return time.monotonic() - self.last_mono > (quiet_s if self.lines else first_line_s)


class LogTail:
    """Follow one container's log on one node.

    Args:
        connect: opens a new verified connection (e.g. ``lambda: remote.ssh.connect(target)``);
            the tail closes each connection it gets.
        container: container name (``vllm``).
        on_lines: called on the loop with each batch of ``(timestamp, text)`` lines, in log order.
        on_status: called on the loop when the status changes (after the lines received before it).
        prepare_lines: called on the line thread with each batch before ``on_lines`` (it may
            replace items in the list, e.g. with secrets masked); the heavy per-line work goes here.
        prepare_status: called on the line thread with each status before ``on_status``, in
            order with ``prepare_lines``.
        max_backoff_s: longest wait between reconnect attempts.
        initial_backoff_s: first wait; doubles per failed attempt.
        batch_interval_s: longest time a line waits before ``on_lines``.
        max_batch_lines: a batch is delivered at once when this many lines are pending.
        poll_interval_s: how often to look for a container when there is none or it exited.
        max_attempts: give up (status ``error``) after this many consecutive failures;
            ``None`` retries forever.
        sudo: prefix docker with ``sudo -n``.
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncssh.SSHClientConnection]],
        container: str,
        *,
        on_lines: Callable[[list[LogLine]], None],
        on_status: Callable[[TailStatus], None],
        prepare_lines: Callable[[list[LogLine]], None] | None = None,
        prepare_status: Callable[[TailStatus], None] | None = None,
        max_backoff_s: float = 30.0,
        initial_backoff_s: float = 1.0,
        batch_interval_s: float = 0.075,
        max_batch_lines: int = 2000,
        poll_interval_s: float = 1.0,
        max_attempts: int | None = None,
        sudo: bool = True,
    ) -> None:
        self._connect = connect
        self.container = container
        self._on_lines = on_lines
        self._on_status = on_status
        self._prepare_lines = prepare_lines
        self._prepare_status = prepare_status
        self._lines: _LineThread | None = None
        self._max_backoff_s = max_backoff_s
        self._initial_backoff_s = initial_backoff_s
        self._batch_interval_s = batch_interval_s
        self._max_batch_lines = max_batch_lines
        self._poll_interval_s = poll_interval_s
        self._max_attempts = max_attempts
        self._sudo = sudo
        self._pending: list[LogLine] = []
        self._position = _Position()
        self._container_id: str | None = None
        self._drained_id: str | None = None
        self._status: TailStatus | None = None
        self._stopping = False
        self._main: asyncio.Task[None] | None = None
        #: Lines delivered so far (all containers).
        self.lines_delivered = 0
        self._last_line_at: datetime | None = None       # docker time of the newest line delivered
        self._lost_at: datetime | None = None            # ... when the connection was lost
        self._catch_up: _CatchUp | None = None
        self._follower: tuple[int, str] | None = None     # (pid, container id) of the running follower
        self._orphan: tuple[int, str] | None = None       # ... of one whose connection was lost
        self._restart_count = 0                           # RestartCount of the followed container, reported
        self._restarts_seen = 0                           # ... as docker inspect last said it
        self._restart_due: _RestartDue | None = None      # a restart to report where the old run ends
        self._replay_pending = False                      # a follow was cut: --since replays its rest
        self._exit_poll_s = poll_interval_s               # next wait while the container stays exited
        #: Earlier followers this tail found still running after a reconnect and stopped.
        self.followers_stopped = 0
        self._session_now: _LogSession | None = None     # the session followed now (loop side)
        self._failure: BaseException | None = None        # a callback's bug, raised by run()

    @property
    def status(self) -> TailStatus | None:
        """The last status reported."""
        return self._status

    @property
    def container_id(self) -> str | None:
        """The id of the container being followed, once known."""
        return self._container_id

    def stop(self) -> None:
        """Make :meth:`run` return soon (pending lines are still delivered)."""
        self._stopping = True
        if self._main is not None:
            self._main.cancel()

    async def run(self) -> None:
        """Follow until :meth:`stop`, cancellation, or an error that retrying cannot fix."""
        if self._stopping:
            return
        lines = self._lines = _LineThread(self, asyncio.get_running_loop())
        self._main = asyncio.ensure_future(self._follow_forever())
        flusher = asyncio.ensure_future(self._flush_periodically())
        try:
            await self._main
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._failure is None and (not self._stopping or (current is not None and current.cancelling())):
                raise
        finally:
            flusher.cancel()
            lines.stop()                       # the pending lines are still delivered, then it ends
            try:
                await asyncio.shield(lines.stopped)
            finally:
                lines.thread.join(timeout=5.0)
                self._lines = None
        if self._failure is not None:
            raise self._failure

    @property
    def thread(self) -> threading.Thread | None:
        """The line thread while :meth:`run` runs, else ``None``."""
        return self._lines.thread if self._lines is not None else None

    @property
    def queued_bytes(self) -> int:
        """Bytes received over SSH and not yet split by the line thread (0 when none runs)."""
        return self._lines.queued_bytes if self._lines is not None else 0

    # --- internals ----------------------------------------------------------------------

    def _report(self, kind: str, message: str, *, attempt: int = 0, exit_code: int | None = None) -> None:
        status = TailStatus(kind, attempt, self._container_id, exit_code, message, self._restart_count)
        if status != self._status:
            self._status = status
            if self._lines is not None:
                self._lines.status(status)       # after the lines queued before it
            else:
                self._status_thread(status)

    # thread side (or the loop when no thread runs) ---

    def _deliver(self, item: LogLine) -> None:
        if self._restart_due is not None:
            self._restart_due_line(item[0])
        if item[0] is not None:
            self._last_line_at = item[0]
        if self._catch_up is not None:
            self._catch_up.line(item[0])
        self._pending.append(item)
        if len(self._pending) >= self._max_batch_lines:
            self._flush_thread()

    def _flush_thread(self) -> None:
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        if self._prepare_lines is not None:
            self._prepare_lines(batch)
        self._hand_over(self._deliver_lines, batch)

    def _restart_due_line(self, at: datetime | None) -> None:
        """Thread side: a line while a restart waits to be reported: the new run's first line
        (stamped at or after its start) reports the restart before it."""
        due = self._restart_due
        if due is None:
            return
        if at is not None and at >= due.started_at:
            self._report_restart()
        else:
            due.lines += 1
            due.last_mono = time.monotonic()

    def _report_restart(self, quiet_s: float | None = None) -> None:
        """Thread side: report the waiting restart (with ``quiet_s``: only once the replay went quiet)."""
        due = self._restart_due
        if due is None or (quiet_s is not None and not due.quiet(quiet_s)):
            return
        self._restart_due = None
        self._restart_count = due.restart_count
        status = TailStatus("connected", 0, self._container_id, None, due.message, due.restart_count)
        self._status = status
        self._status_thread(status)       # after the old run's lines, before the new run's

    def _status_thread(self, status: TailStatus) -> None:
        self._flush_thread()
        if self._prepare_status is not None:
            self._prepare_status(status)
        self._hand_over(self._deliver_status, status)

    def _hand_over(self, callback: Callable[..., None], *args: Any) -> None:
        if self._lines is not None and threading.current_thread() is self._lines.thread:
            self._lines.hand_over(callback, *args)
        else:
            callback(*args)

    # loop side ---

    def _deliver_lines(self, batch: list[LogLine]) -> None:
        self.lines_delivered += len(batch)
        try:
            self._on_lines(batch)
        except Exception as exc:  # noqa: BLE001 - run() raises it
            self._fail(exc)

    def _deliver_status(self, status: TailStatus) -> None:
        try:
            self._on_status(status)
        except Exception as exc:  # noqa: BLE001 - run() raises it
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        """A callback or hook failed (a bug): the follow ends and :meth:`run` raises ``exc``."""
        if self._failure is None:
            self._failure = exc
        if self._session_now is not None:
            self._session_now.fail(exc)
        elif self._main is not None:
            self._main.cancel()

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._batch_interval_s)
            if self._lines is not None:
                self._lines.flush()
            catch_up = self._catch_up
            if catch_up is not None and catch_up.done(quiet_s=4 * self._batch_interval_s):
                self._catch_up = None
                self._report("connected", catch_up.sentence(self.container))

    async def _follow_forever(self) -> None:
        attempt = 0
        self._report("connecting", f"connecting to follow container {self.container}")
        while True:
            connected = False
            try:
                conn = await self._connect()
                async with conn:
                    connected = True
                    await self._session(conn)
            except SshFailure as exc:
                if not exc.retryable:
                    self._report("error", exc.message)
                    return
                reason = exc.message
            except (asyncssh.Error, OSError) as exc:
                reason = f"connection lost ({getattr(exc, 'reason', '') or type(exc).__name__})"
            if self._follower is not None:       # the link went while following: it may live on
                self._orphan, self._follower = self._follower, None
            if connected:
                attempt = 0
                self._lost_at = self._last_line_at
                self._replay_pending = True
            attempt += 1
            if self._max_attempts is not None and attempt > self._max_attempts:
                self._report("error", f"gave up after {attempt - 1} attempts: {reason}", attempt=attempt - 1)
                return
            delay = min(self._max_backoff_s, self._initial_backoff_s * 2 ** (attempt - 1))
            lost = f"connection lost (last line {_clock(self._lost_at)}); " if self._lost_at else ""
            self._report("reconnecting", f"{lost}reconnecting (attempt {attempt}) in {delay:.1f} s: {reason}",
                         attempt=attempt)
            await asyncio.sleep(delay)

    async def _session(self, conn: asyncssh.SSHClientConnection) -> None:
        """Inspect, follow, repeat, on one connection; returns only by raising."""
        if self._orphan is not None:
            pid, orphan_id = self._orphan
            if await stop_follower(conn, pid, orphan_id, sudo=self._sudo):
                self.followers_stopped += 1
            self._orphan = None
        while True:
            info = await docker_inspect(conn, self.container, sudo=self._sudo)
            if info is None:
                self._report("waiting", f"waiting for container {self.container}: none by that name on the node "
                                        f"yet (checked every {self._poll_interval_s:g} s)")
                await asyncio.sleep(self._poll_interval_s)
                continue
            container_id = container_id_of(info.get("Id")) or ""      # only hex is an id
            state = info.get("State") or {}
            restarts = _int(info.get("RestartCount"))
            new_container = self._container_id is not None and container_id != self._container_id
            if container_id != self._container_id:
                self._container_id = container_id
                self._position = _Position()
                self._restart_count = self._restarts_seen = restarts
                self._restart_due = None
            elif restarts > self._restarts_seen:
                self._restarted(restarts, state.get("StartedAt"))
            exited = state.get("Status") in ("exited", "dead")
            if exited and self._drained_id == container_id:
                code = state.get("ExitCode")
                delay = self._exit_poll_s
                self._report("exited", f"waiting: container {self.container} exited (code {code})"
                                       f"{_at(state.get('FinishedAt'))}; polling every {delay:g} s",
                             exit_code=code)
                await asyncio.sleep(delay)
                self._exit_poll_s = min(self._max_backoff_s, delay * 2)
                continue
            self._exit_poll_s = self._poll_interval_s
            self._report("connected", f"following container {self.container} ({container_id[:12]})")
            if self._lost_at is not None:        # first follow after a lost connection: count the catch-up
                self._catch_up = _CatchUp(self._lost_at, container_id[:12] if new_container else None)
                self._lost_at = None
            self._replay_pending = False
            status = await self._follow(conn, container_id)
            if exited and status == 0:
                self._drained_id = container_id
            elif status != 0:
                await asyncio.sleep(self._poll_interval_s)

    def _restarted(self, restarts: int, started_raw: Any) -> None:
        """Loop side: ``RestartCount`` rose (same id). Reported now, or, when a cut follow's rest is
        still to be replayed, where the old run ends in the log (:class:`_RestartDue`)."""
        self._restarts_seen = restarts
        self._exit_poll_s = self._poll_interval_s
        message = f"container {self.container} restarted (restart {restarts}){_at(started_raw)}"
        started_at = _docker_time(started_raw)
        if self._replay_pending and started_at is not None and self._lines is not None:
            self._restart_due = _RestartDue(started_at, restarts, message)
            return
        self._restart_count = restarts
        self._report("connected", message)

    async def _follow(self, conn: asyncssh.SSHClientConnection, container_id: str) -> int:
        """Stream ``docker logs -f`` until it ends; returns its exit status.

        The SSH session's ``data_received`` (not a stream reader: asyncssh 2.24 re-opens the
        channel window while a paused stream still holds data, so a reader slower than the
        node would buffer without limit) queues each packet for the line thread and pauses the
        channel while more than :data:`QUEUED_BYTES_HIGH` wait, so memory stays bounded and the
        SSH window and TCP slow the sender. Before returning it waits until the thread has split
        every packet of this follow (the last line included).
        """
        position = self._position
        position.begin_resume()
        args = logs_follow_args(container_id, since=position.last_raw)
        command = follower_command(args, sudo=self._sudo)
        errors: list[str] = []
        lines = self._lines
        assert lines is not None, "run() starts the line thread"
        session = _LogSession(lines, lambda batch: self._accept(position, batch, errors, container_id))
        self._session_now = session
        # A pseudo-terminal ties the follower's life to the channel: when the channel or the
        # connection goes, sshd hangs up the tty and the kernel sends SIGHUP, so no
        # ``docker logs -f`` is left running on the node (without one it lives until its next
        # write fails, i.e. forever on a quiet container). Output post-processing is off, so
        # the bytes arrive as docker wrote them (no LF -> CRLF).
        channel, _ = await conn.create_session(
            lambda: session, command, encoding=None, term_type="dumb",
            term_modes={asyncssh.PTY_OPOST: 0, asyncssh.PTY_ECHO: 0})
        try:
            await channel.wait_closed()
        finally:
            channel.close()
            await lines.drained(session)     # every packet split, the last line read
            self._session_now = None
            if self._restart_due is not None:    # the follow ended inside the old run's replay
                lines.call(self._report_restart)
        self._follower = None if session.failure is None else self._follower
        if session.failure is not None:
            raise session.failure
        status = channel.get_exit_status()
        status = -1 if status is None else status
        if status != 0 and errors:
            self._report("waiting", f"docker logs: {errors[-1]}")
        elif errors:
            lines.put_lines([(None, line) for line in errors])
        return status

    def _accept(self, position: _Position, lines: list[str], errors: list[str], container_id: str) -> None:
        """Thread side: one packet's lines, in order: the follower's pid line kept, docker's own
        errors set aside, each log line delivered unless it repeats one from before a resume."""
        accept, deliver = position.accept, self._deliver
        for line in lines:
            if line.endswith("\r"):
                line = line[:-1]
            if not line:
                continue
            head = line[:1]
            if head == "t" and line.startswith("tpu-console follower pid "):
                pid = follower_pid(line)
                if pid is not None:
                    self._follower = (pid, container_id)
                    continue
            if head == "E" and _DOCKER_ERROR.match(line):
                errors.append(line)
                continue
            item = accept(line)
            if item is not None:
                deliver(item)

