"""The fleet listed in a child process, so its parsing never holds the console's GIL.

A listing of thousands of nodes is seconds of protobuf and JSON parsing; on the console's own
threads it holds the GIL the UI loop needs (keys waited seconds during a refresh). A
:class:`ProcessFleetSource` is a :class:`~remote.tpu.api.FleetSource` whose :meth:`list_fleet`
asks one long-lived child process (``python -m remote.tpu.lister_process``, holding its own
``FleetSource``) and reads the snapshot back in chunks, one chunk per loop turn. Everything else
(``get_node``, ``clients``, requests...) runs in this process as before.

Wire (both ways): frames of a 4-byte big-endian length and a pickle. Parent -> child: first the
setup ``(projects as [(id, zones)], api_endpoint, timeout_s)``, then ``("list", base)`` per
listing. Child -> parent, per listing: ``("head", generation, full)``; ``("nodes", [(key, bytes |
None)])`` and ``("qrs", [...])`` in chunks of :data:`CHUNK_RECORDS` in the snapshot's order, each
record pickled on its own (``None``: the same bytes as in listing ``base``, so the parent keeps
its object and a refresh that changed nothing unpickles nothing); ``("end", problems,
fetched_at, elapsed_s)``; or ``("error", kind, message)``.

The whole listing has a deadline (:attr:`ProcessFleetSource.listing_deadline_s`): past it the
child is killed and the call raises :class:`~remote.errors.TpuApiError`. A child that cannot
start, dies or answers nonsense: the listing runs in this process and the snapshot says so
(:data:`IN_PROCESS_PROJECT` problem); after :data:`MAX_CHILD_FAILURES` failures it stays here.
:meth:`ProcessFleetSource.close` kills the child (nothing waits for it); the child also exits
when its stdin closes (the console gone). The child runs at a lower priority (``nice 10``): on a
busy machine the console's keys come first.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, TypeVar

from remote.errors import CredentialsError, TpuApiError
from remote.models import FleetProblem, FleetSnapshot, Node, QueuedResource
from remote.tpu.api import FleetSource, ProjectConfig

#: Records per chunk the child sends (and the parent unpickles per loop turn).
CHUNK_RECORDS = 250
#: Child failures (did not start, died, nonsense) after which listings stay in this process.
MAX_CHILD_FAILURES = 2
#: The project named by the problem that says a listing ran in this process.
IN_PROCESS_PROJECT = "tpu-console"
_HEADER = struct.Struct(">I")
_Key = tuple[str, str, str]
T = TypeVar("T")


class ChildFailed(Exception):
    """The lister process could not start, died or sent what is not a listing."""


def _frame(payload: object) -> bytes:
    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


class _FrameReader:
    """Frames from a non-blocking pipe, read on the running loop (``add_reader``: no thread)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()
        os.set_blocking(fd, False)

    async def read(self, deadline: float) -> Any:
        """The next frame, unpickled.

        Raises:
            ChildFailed: the pipe closed (the child died).
            TimeoutError: ``deadline`` (``time.monotonic()``) passed first.
        """
        while True:
            if len(self.buffer) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(self.buffer)
                if len(self.buffer) >= _HEADER.size + size:
                    data = bytes(self.buffer[_HEADER.size:_HEADER.size + size])
                    del self.buffer[:_HEADER.size + size]
                    return pickle.loads(data)
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                await self._readable(deadline)
                continue
            if not chunk:
                raise ChildFailed("the lister process ended")
            self.buffer += chunk

    async def _readable(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)
        loop.add_reader(self.fd, wake)
        try:
            await asyncio.wait_for(ready, max(0.0, deadline - time.monotonic()))
        finally:
            loop.remove_reader(self.fd)


class ProcessFleetSource(FleetSource):
    """A :class:`FleetSource` that lists the fleet in a child process (see the module doc).

    Args:
        projects, api_endpoint, timeout_s: as :class:`FleetSource`.
        listing_deadline_s: the most one whole listing may take, child start included (default:
            six times ``timeout_s``, at least 60 s).
        child_command: the child's command line (default: this Python, ``-m remote.tpu.lister_process``).
    """

    def __init__(self, projects: Sequence[ProjectConfig], *, api_endpoint: str | None = None,
                 timeout_s: float = 20.0, listing_deadline_s: float | None = None,
                 child_command: Sequence[str] | None = None) -> None:
        super().__init__(projects, api_endpoint=api_endpoint, timeout_s=timeout_s)
        self.listing_deadline_s = listing_deadline_s or max(60.0, 6 * timeout_s)
        self.child_command = list(child_command or [sys.executable, "-m", "remote.tpu.lister_process"])
        self.child: subprocess.Popen[bytes] | None = None
        self._reader: _FrameReader | None = None
        #: why listings run in this process for good (``None``: the child is used)
        self.in_process_reason: str | None = None
        self._failures = 0
        self._generation = 0
        self._nodes: dict[_Key, Node] = {}
        self._qrs: dict[_Key, QueuedResource] = {}
        #: the tuples of the last snapshot, handed back again while nothing changed
        self._last_nodes: tuple[Node, ...] = ()
        self._last_qrs: tuple[QueuedResource, ...] = ()
        self._lock = asyncio.Lock()

    # --- the child ---------------------------------------------------------------------------

    def _start(self) -> subprocess.Popen[bytes]:
        """The running child, started (and sent its setup) when there is none."""
        if self.child is not None and self.child.poll() is None:
            return self.child
        self._forget()
        child = subprocess.Popen(self.child_command, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)
        assert child.stdin is not None and child.stdout is not None
        self.child = child
        self._reader = _FrameReader(child.stdout.fileno())
        setup = ([(p.id, tuple(p.zones)) for p in self.projects], self.api_endpoint, self.timeout_s)
        child.stdin.write(_frame(setup))
        child.stdin.flush()
        return child

    def _forget(self) -> None:
        """Kill the child (if any) and drop what its listings shared with this side."""
        child, self.child, self._reader = self.child, None, None
        self._generation = 0
        self._nodes, self._qrs = {}, {}
        self._last_nodes, self._last_qrs = (), ()
        if child is not None:
            kill(child)

    def close(self) -> None:
        """Kill the child and stop the in-process clients (idempotent; waits for nothing)."""
        self._forget()
        super().close()

    # --- listing -----------------------------------------------------------------------------

    async def list_fleet(self) -> FleetSnapshot:
        """Every node and queued resource of every project, listed in the child (see the module doc).

        Raises:
            CredentialsError: there are no usable Google credentials.
            TpuApiError: the listing did not finish within :attr:`listing_deadline_s` (the child is
                killed; the next listing starts another).
        """
        async with self._lock:          # one listing on the wire at a time
            if self.in_process_reason is not None:
                return await self._in_process(self.in_process_reason)
            try:
                return await self._from_child()
            except ChildFailed as exc:
                self._forget()
                self._failures += 1
                reason = str(exc)
                if self._failures >= MAX_CHILD_FAILURES:
                    self.in_process_reason = reason
                return await self._in_process(reason)
            except TimeoutError:
                self._forget()
                raise TpuApiError(f"the fleet listing did not finish within {self.listing_deadline_s:g} s "
                                  "(its process was stopped; the next refresh starts another)") from None
            except BaseException:       # cancelled mid-listing: the pipe holds half an answer
                self._forget()
                raise

    async def _in_process(self, reason: str) -> FleetSnapshot:
        snapshot = await super().list_fleet()
        note = FleetProblem(IN_PROCESS_PROJECT, None, 0, f"listed in the console's own process ({reason}): "
                            "keys may lag while a large fleet is read")
        return FleetSnapshot(snapshot.nodes, snapshot.queued_resources, (*snapshot.problems, note),
                             snapshot.fetched_at, snapshot.elapsed_s)

    async def _from_child(self) -> FleetSnapshot:
        deadline = time.monotonic() + self.listing_deadline_s
        try:
            child = self._start()
            assert child.stdin is not None and self._reader is not None
            child.stdin.write(_frame(("list", self._generation)))
            child.stdin.flush()
        except OSError as exc:
            raise ChildFailed(f"the lister process could not start: {exc}") from None
        reader = self._reader
        head = await reader.read(deadline)
        if head[0] == "error":
            if head[1] == "credentials":
                raise CredentialsError(str(head[2]))
            raise ChildFailed(f"the lister process failed: {head[2]}")
        if head[0] != "head":
            raise ChildFailed(f"the lister process sent {head[0]!r}, not a listing")
        _, generation, full = head
        nodes: dict[_Key, Node] = {}
        qrs: dict[_Key, QueuedResource] = {}
        while True:
            frame = await reader.read(deadline)
            if frame[0] == "end":
                break
            if frame[0] not in ("nodes", "qrs"):
                raise ChildFailed(f"the lister process sent {frame[0]!r} within a listing")
            known: dict[Any, Any] = {} if full else (self._nodes if frame[0] == "nodes" else self._qrs)
            into: dict[Any, Any] = nodes if frame[0] == "nodes" else qrs
            for key, data in frame[1]:
                item = pickle.loads(data) if data is not None else known.get(key)
                if item is None:
                    raise ChildFailed("the lister process sent a record this side never had")
                into[key] = item
            await asyncio.sleep(0)      # one chunk per loop turn: the keys go in between
        _, problems, fetched_at, elapsed_s = frame
        node_items = self._same(self._last_nodes, tuple(nodes.values()))
        qr_items = self._same(self._last_qrs, tuple(qrs.values()))
        self._generation, self._nodes, self._qrs = generation, nodes, qrs
        self._last_nodes, self._last_qrs = node_items, qr_items
        self._failures = 0
        return FleetSnapshot(node_items, qr_items, tuple(problems), fetched_at, elapsed_s)

    @staticmethod
    def _same(before: tuple[T, ...], now: tuple[T, ...]) -> tuple[T, ...]:
        """``before`` itself when ``now`` holds the same objects in the same order (a listing that
        changed nothing: the console sees at once that nothing is to be drawn), else ``now``."""
        if len(before) == len(now) and all(a is b for a, b in zip(before, now, strict=True)):
            return before
        return now


def kill(child: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``child`` and reap it without waiting on it (a reaper thread, daemon)."""
    try:
        child.kill()
    except OSError:
        pass
    for pipe in (child.stdin, child.stdout):
        try:
            if pipe is not None:
                pipe.close()
        except OSError:
            pass
    threading.Thread(target=child.wait, name="lister-reaper", daemon=True).start()


# --- the child's side ---------------------------------------------------------------------------


class _Project:
    def __init__(self, project_id: str, zones: tuple[str, ...]) -> None:
        self.id = project_id
        self.zones = zones


def _read_frame(stream: Any) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    return pickle.loads(data) if len(data) == size else None


def _changes(items: Sequence[Node] | Sequence[QueuedResource], before: dict[_Key, bytes],
             full: bool) -> tuple[list[tuple[_Key, bytes | None]], dict[_Key, bytes]]:
    """Each record pickled, or ``None`` where it pickles as it did in the last listing sent."""
    out: list[tuple[_Key, bytes | None]] = []
    now: dict[_Key, bytes] = {}
    for item in items:
        data = now[item.key] = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
        out.append((item.key, None if not full and before.get(item.key) == data else data))
    return out, now


def child_main() -> None:
    """The child: read the setup, then answer each ``("list", base)`` until stdin closes."""
    import queue

    try:
        os.nice(10)                    # background work: the console's UI wins the CPU when both want it
    except OSError:
        pass
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                      # a library's print goes to stderr, never into the frames
    stdin = sys.stdin.buffer
    setup = _read_frame(stdin)
    if setup is None:
        return
    projects, endpoint, timeout_s = setup
    source = FleetSource([_Project(p, tuple(z)) for p, z in projects], api_endpoint=endpoint, timeout_s=timeout_s)
    requests: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def listen() -> None:              # the parent gone (stdin closed): exit at once, mid-listing too
        while (frame := _read_frame(stdin)) is not None:
            requests.put(frame)
        os._exit(0)

    threading.Thread(target=listen, daemon=True).start()
    loop = asyncio.new_event_loop()
    generation = 0
    sent: dict[str, dict[_Key, bytes]] = {"nodes": {}, "qrs": {}}
    while True:
        _, base = requests.get()
        try:
            snapshot = loop.run_until_complete(source.list_fleet())
        except CredentialsError as exc:
            out.write(_frame(("error", "credentials", str(exc))))
            out.flush()
            continue
        except Exception as exc:  # noqa: BLE001 - said to the parent, which lists in its own process
            out.write(_frame(("error", "failed", f"{type(exc).__name__}: {exc}")))
            out.flush()
            continue
        full = base != generation or generation == 0
        generation += 1
        out.write(_frame(("head", generation, full)))
        for kind, items in (("nodes", snapshot.nodes), ("qrs", snapshot.queued_resources)):
            changes, sent[kind] = _changes(items, sent[kind], full)
            for start in range(0, len(changes), CHUNK_RECORDS):
                out.write(_frame((kind, changes[start:start + CHUNK_RECORDS])))
        out.write(_frame(("end", snapshot.problems, snapshot.fetched_at, snapshot.elapsed_s)))
        out.flush()


if __name__ == "__main__":
    child_main()
