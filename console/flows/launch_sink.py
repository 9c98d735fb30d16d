"""Where a slice watch records its launch: the recorder called directly (``watch``) or in the history thread (the startup view).

:class:`~console.flows.slice_watch.SliceWatch` calls a :class:`LaunchSink`: :meth:`LaunchSink.record`
as the log moves on (it must be cheap: it is called on the loop for each batch of lines), and the
other methods in the order the watch saw things (a container found, replaced, restarted, exited),
one after the other. Both sinks write through one
:class:`~console.flows.launch_recorder.LaunchRecorder`, so both doors record the same fields.

- :class:`RecorderSink`: the recorder's calls made at once (``tpu-console watch``: its own store,
  its own loop, nothing else to keep responsive).
- :class:`ThreadedRecorderSink`: every call in the history thread of a
  :class:`~console.flows.history_query.HistoryReader`, never on the UI loop; :meth:`record` keeps
  only the newest state while a write is in flight, at most one write per :data:`RECORD_INTERVAL_S`.
  The recorder is made in that thread on the first write; a history that cannot be opened is
  said once (``on_problem``), then nothing is recorded.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, TypeVar

from console.flows.launch_recorder import LaunchRecorder
from remote.models import Node, utc_now
from remote.startup import StartupState
from store.errors import StoreError

if TYPE_CHECKING:
    from console.flows.history_query import HistoryReader
    from console.flows.startup_watch import FollowedContainer, Replacement, Restart

T = TypeVar("T")

#: Shortest time between two state writes of :class:`ThreadedRecorderSink` (the newest state wins).
RECORD_INTERVAL_S = 0.25


class LaunchSink(Protocol):
    """What a slice watch records (see the module docstring)."""

    def record(self, state: StartupState, container_id: str | None) -> None:
        """The slice's state as of now, of container ``container_id`` (cheap: called per batch)."""
        ...

    async def observe(self, container_id: str, found: FollowedContainer) -> None:
        """The watch follows ``container_id`` now (its launch found, claimed or started)."""
        ...

    async def replaced(self, replacement: Replacement) -> None:
        """The followed container was replaced (its launch closed with what was seen of it)."""
        ...

    async def restarted(self, restart: Restart) -> None:
        """The followed container restarted in place (its launch keeps its row, with the count)."""
        ...

    async def exited(self, state: StartupState, exit_code: int | None) -> None:
        """The followed container exited (its launch ends unless the log already ended it)."""
        ...


class RecorderSink:
    """:class:`LaunchSink` over a :class:`LaunchRecorder` called directly (the ``watch`` verb).

    Args:
        recorder: the recorder (its store may be ``None``: nothing is written).
    """

    def __init__(self, recorder: LaunchRecorder) -> None:
        self.recorder = recorder

    def record(self, state: StartupState, container_id: str | None) -> None:
        """:meth:`LaunchRecorder.record`."""
        self.recorder.record(state, container_id)

    async def observe(self, container_id: str, found: FollowedContainer) -> None:
        """:meth:`LaunchRecorder.observe_container` with the container's spec and start time."""
        self.recorder.observe_container(container_id, found.spec, requested_at=found.requested_at)

    async def replaced(self, replacement: Replacement) -> None:
        """:meth:`LaunchRecorder.record_replaced` of the old container, with the gap's sentence."""
        self.recorder.record_replaced(replacement.old_state, replacement.marker(), replacement.old_id)

    async def restarted(self, restart: Restart) -> None:
        """:meth:`LaunchRecorder.record_restart` with the ended boot's state."""
        self.recorder.record_restart(restart.old_state, restart.restart_count)

    async def exited(self, state: StartupState, exit_code: int | None) -> None:
        """:meth:`LaunchRecorder.record_exit`."""
        self.recorder.record_exit(state, exit_code)


class ThreadedRecorderSink:
    """:class:`LaunchSink` whose writes run in ``db``'s history thread (the startup view).

    Args:
        db: the history reader (one thread, its own store).
        node: the node whose launches are written.
        clock: the current UTC time (the recorder's, for ready/failed without a log time).
        on_problem: told once, with a sentence, when the history cannot be opened.

    Attributes:
        recorder: the recorder, once the first write made it (in the history thread), else ``None``.
        ssh_user: the user the connection logs in as (recorded with each launch); set it before
            the first write, or at any time (the recorder then takes it for the next launch).
    """

    def __init__(self, db: HistoryReader, node: Node, *, clock: Callable[[], datetime] = utc_now,
                 on_problem: Callable[[str], None] | None = None) -> None:
        self.db = db
        self.node = node
        self.clock = clock
        self.recorder: LaunchRecorder | None = None
        self._ssh_user: str | None = None
        self._on_problem = on_problem
        self._lock = asyncio.Lock()
        self._newest: tuple[StartupState, str | None] | None = None
        self._writer: asyncio.Task[None] | None = None

    @property
    def ssh_user(self) -> str | None:
        """The user recorded with each launch."""
        return self._ssh_user

    @ssh_user.setter
    def ssh_user(self, user: str | None) -> None:
        self._ssh_user = user
        if self.recorder is not None:
            self.recorder.ssh_user = user

    @property
    def recording(self) -> bool:
        """The history is open (launches are written)."""
        return self.recorder is not None and self.recorder.store is not None

    @property
    def error(self) -> str | None:
        """Why the history refused a write (recording then stopped), or ``None``."""
        return self.recorder.error if self.recorder is not None else None

    async def _call(self, write: Callable[[LaunchRecorder], T]) -> T | None:
        """``write(recorder)`` in the history thread (the recorder made there first); ``None``
        without a history."""
        async with self._lock:         # one recorder, even when two workers start at once
            if self.recorder is None:
                node, clock, user = self.node, self.clock, self._ssh_user
                try:
                    self.recorder = await self.db.call(
                        lambda store: LaunchRecorder(store, node, clock=clock, ssh_user=user))
                except StoreError as exc:     # say it once, carry on without a history
                    if self._on_problem is not None:
                        self._on_problem(f"History unavailable: {exc}")
                    self.recorder = LaunchRecorder(None, node, clock=clock, ssh_user=user)
        recorder = self.recorder
        if recorder.store is None:
            return None
        return await self.db.call(lambda _store: write(recorder))

    def record(self, state: StartupState, container_id: str | None) -> None:
        """Queue ``state`` for the history: one write in flight, the newest state wins."""
        self._newest = (state, container_id)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_newest())

    async def _write_newest(self) -> None:
        while self._newest is not None:
            (state, container_id), self._newest = self._newest, None
            await self._call(functools.partial(_record, state=state, container_id=container_id))
            await asyncio.sleep(RECORD_INTERVAL_S)      # a flood's states coalesce: a few writes a second

    async def observe(self, container_id: str, found: FollowedContainer) -> None:
        """:meth:`LaunchRecorder.observe_container`, in the history thread."""
        await self._call(lambda recorder: recorder.observe_container(
            container_id, found.spec, requested_at=found.requested_at))

    async def replaced(self, replacement: Replacement) -> None:
        """:meth:`LaunchRecorder.record_replaced`, in the history thread."""
        await self._call(lambda recorder: recorder.record_replaced(
            replacement.old_state, replacement.marker(), replacement.old_id))

    async def restarted(self, restart: Restart) -> None:
        """:meth:`LaunchRecorder.record_restart`, in the history thread."""
        await self._call(lambda recorder: recorder.record_restart(restart.old_state, restart.restart_count))

    async def exited(self, state: StartupState, exit_code: int | None) -> None:
        """:meth:`LaunchRecorder.record_exit`, in the history thread."""
        await self._call(lambda recorder: recorder.record_exit(state, exit_code))

    async def served(self, kv_cache_tokens: int | None, max_concurrency: float | None, engines: int,
                     gpu_memory_utilization: float | None) -> None:
        """What the server's ``/metrics`` said after ready (:meth:`LaunchRecorder.record_served`), in
        the history thread."""
        await self._call(lambda recorder: recorder.record_served(kv_cache_tokens, max_concurrency, engines,
                                                                 gpu_memory_utilization))

    async def compile_eta_s(self, compile_key: str) -> float | None:
        """The history's compile time estimate for ``compile_key`` (seconds), or ``None`` (none
        known, or no history: see :attr:`recording`).

        Raises:
            StoreError: the history failed to read.
        """
        return await self._call(lambda recorder: recorder.store.compile_eta_s(compile_key)
                                if recorder.store is not None else None)

    def close(self) -> None:
        """Stop queuing writes (those already in the history thread finish there)."""
        self._newest = None
        if self._writer is not None and not self._writer.done():
            self._writer.cancel()


def _record(recorder: LaunchRecorder, *, state: StartupState, container_id: str | None) -> None:
    recorder.record(state, container_id)
