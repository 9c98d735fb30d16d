"""The slice watch: one vLLM startup followed on one worker, or on every worker of a multi-host slice.

The use case behind ``tpu-console watch`` and the startup view; both only collect its input (the
node, the SSH targets, how to ask about a host key) and show what it says. :class:`SliceWatch` holds:

- one :class:`~console.flows.startup_watch.StartupWatch` per followed worker, the first one the
  *primary* (worker 0 of a slice followed whole: its log has the engine's lines and says ready;
  else the worker followed alone), and, when a worker N > 0 is followed alone, worker 0's *quiet*
  watch: nothing shown, recorded or kept on disk but its readiness and a fatal failure (only worker
  0's log says ready);
- the connections, one worker at a time (one host-key question at a time). A worker past the
  primary whose host key is refused (unknown and not accepted, or changed) is refused alone: the
  others are still followed, and the summary says which was not (``refused_workers``). The primary
  or the quiet worker 0 refused, or any other connection failure, ends the watch (nothing would say
  ready, or the node is not reachable);
- per worker: restarts in place and replaced containers (a marker each, and a fresh reader: the
  :class:`StartupWatch` does that), the first fatal failure of each boot, the no-container hint;
- the launch's record through a :class:`~console.flows.launch_sink.LaunchSink`: the slice's state
  for each batch; the container found, replaced, restarted or exited in the order they were seen
  (the ``docker inspect`` reads run at once, the writes one after the other);
- the slice's :attr:`~SliceWatch.state` (a fatal failure on any worker fails the boot and names the
  worker; worker N followed alone is ready when worker 0 says so), its HBM summed over workers, and
  the summary (:func:`remote.vllm_log.workers.slice_summary`).

Presenters get :class:`SliceEvent` s (one sentence each: the verb prints them, prefixed ``wN| ``
when several workers are followed) and the lines (the view shows them). :meth:`SliceWatch.run`
is the verb's whole watch (until ready, failed or exited); the view uses :meth:`SliceWatch.connect`
and :meth:`SliceWatch.follow` and reads :attr:`SliceWatch.state` as it goes.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from console.flows.launch_log import LaunchLog
from console.flows.launch_sink import LaunchSink
from console.flows.startup_watch import FollowedContainer, Replacement, StartupWatch, read_followed
from remote.container.tail import LogLine, TailStatus
from remote.errors import RemoteError
from remote.secrets import scrub_text
from remote.ssh import HostKeyChanged, HostKeyUnknown, SshTarget
from remote.startup import Phase, StartupState
from remote.vllm_log.reader import summary_json
from remote.vllm_log.workers import SliceHbm, failing_worker, ready_from_worker_0, slice_hbm, slice_summary

#: Seconds to keep reading after a fatal failure line (the traceback's remaining lines).
FAILURE_GRACE_S = 3.0
#: Longest wait, once worker 0 is ready, for the other workers' logs to show their KV-cache HBM line.
WORKER_GRACE_S = 10.0
#: Tail statuses worth a sentence (and any ``resumed ...``).
SAID_STATUSES = ("reconnecting", "waiting", "exited", "error")

#: ``fingerprint -> accept?``: asked about an unknown host key (a terminal, a modal, accept-new).
HostKeyAsk = Callable[[str], Awaitable[bool]]
#: ``container_id -> LaunchLog``: the full log of each container followed on one worker.
LogOpener = Callable[[str], LaunchLog]

EventKind = Literal["connected", "refused", "following", "phase", "compiled", "kv_cache", "failed",
                    "status", "hint", "restarted", "replaced", "container", "observed", "quiet_ready",
                    "log", "warning", "probed", "exited"]


@dataclass(frozen=True)
class WorkerTarget:
    """One worker to follow.

    Attributes:
        worker: the worker's index in the slice (0 for a single-host node).
        target: where to connect (:func:`console.flows.ssh_target.choose_target`).
        ask: asked about an unknown host key, or ``None`` (refused).
    """

    worker: int
    target: SshTarget
    ask: HostKeyAsk | None = None


@dataclass(frozen=True)
class SliceEvent:
    """Something the watch saw, with the sentence ``tpu-console watch`` prints for it.

    Attributes:
        kind: what happened (``connected``, ``refused``, ``failed``, ``restarted``, ``status``...).
        text: one sentence (server text already made printable by the caller's print; secrets
            masked), ``""`` for events only the view uses (``container``; ``observed`` without a problem).
        worker: the worker it is about, ``None`` for the slice or the quiet worker 0.
        status: the tail's status (``status`` events).
        error: why a connection was refused (``refused`` events).
        found: what ``docker inspect`` said of the primary's new container (``observed`` events).
    """

    kind: EventKind
    text: str
    worker: int | None = None
    status: TailStatus | None = None
    error: RemoteError | None = None
    found: FollowedContainer | None = None

    def line(self, multi: bool) -> str:
        """:attr:`text`, prefixed ``wN| `` when several workers are followed and it is about one."""
        return f"w{self.worker}| {self.text}" if multi and self.worker is not None else self.text


@dataclass(frozen=True)
class SliceOutcome:
    """How a watch ended: ``code`` 0 ready, 1 failed or exited, 2 could not connect (or ended
    without a verdict); ``summary`` the ``log-summary --json`` object (a slice's with ``workers``,
    ``slice_hbm``...), ``None`` when nothing was read."""

    code: int
    summary: dict[str, Any] | None


@dataclass
class _Said:
    """What was said of one worker's current boot (a fresh boot starts from nothing)."""

    phase: Phase | None = None
    kv_cache_tokens: int | None = None
    steps: int = 0
    failed: bool = False
    seen_ids: set[str] = field(default_factory=set)
    restarts: set[tuple[str, int]] = field(default_factory=set)

    def fresh_boot(self) -> None:
        self.phase, self.kv_cache_tokens, self.steps, self.failed = None, None, 0, False


class SliceWatch:
    """The watch of one node's vLLM startup on ``followed`` workers (see the module docstring).

    Args:
        followed: the workers to follow, the primary first (worker 0 of a whole slice).
        container: the container name (``config.container.name``).
        container_port: vLLM's port on the node (the ``/v1/models`` probe).
        ready_from: worker 0, followed quietly beside a worker N > 0 followed alone, or ``None``.
        sink: where the launch is recorded, or ``None`` (nothing is).
        on_event: told each :class:`SliceEvent`, on the loop.
        on_lines: ``(worker, batch)`` of each followed worker, on the loop, after the reader read
            them (texts cleaned and masked); never the quiet worker's.
        log_for: ``worker -> LogOpener``: each followed worker's full log on disk, or ``None``.
        waiting_hint: said once when the primary has no such container yet (what to start, how).
        tail_options: extra :class:`~remote.container.tail.LogTail` keyword arguments.

    Raises:
        ValueError: ``followed`` is empty.
    """

    def __init__(self, followed: Sequence[WorkerTarget], *, container: str, container_port: int = 8000,
                 ready_from: WorkerTarget | None = None, sink: LaunchSink | None = None,
                 on_event: Callable[[SliceEvent], None] | None = None,
                 on_lines: Callable[[int, list[LogLine]], None] | None = None,
                 log_for: Callable[[int], LogOpener] | None = None, waiting_hint: str | None = None,
                 tail_options: dict[str, int] | None = None) -> None:
        if not followed:
            raise ValueError("a slice watch follows at least one worker")
        self.container = container
        self.container_port = container_port
        self.sink = sink
        self.waiting_hint = waiting_hint
        self._on_event = on_event
        self._on_lines = on_lines
        self.primary_worker = followed[0].worker
        self.watches: dict[int, StartupWatch] = {
            each.worker: self._watch_of(each, tail_options, log_for(each.worker) if log_for else None)
            for each in followed}
        self.quiet = self._watch_of(ready_from, tail_options, None, quiet=True) if ready_from else None
        #: workers whose connection was refused (not followed), with why
        self.refused: dict[int, RemoteError] = {}
        #: rises with every batch and status of any worker (a view redraws when it moved)
        self.version = 0
        self._said = {worker: _Said() for worker in self.watches}
        self._quiet_said = False
        self._hinted = False
        self._done = asyncio.Event()
        self._writes: asyncio.Task[None] | None = None
        self._reads: list[asyncio.Task[FollowedContainer]] = []

    def _watch_of(self, each: WorkerTarget, tail_options: dict[str, int] | None, log_for: LogOpener | None,
                  *, quiet: bool = False) -> StartupWatch:
        worker = each.worker

        def lines(batch: list[LogLine]) -> None:
            if quiet:
                self._quiet_lines()
            else:
                self._lines(worker, batch)

        def status(status: TailStatus) -> None:
            self.version += 1
            if not quiet:
                self._status(worker, status)

        return StartupWatch(each.target, container=self.container, container_port=self.container_port,
                            accept_new_host_key=each.ask, on_lines=lines, on_status=status,
                            tail_options=dict(tail_options or {}), log_for=log_for)

    # --- what the view and the summary read -----------------------------------------------

    @property
    def primary(self) -> StartupWatch:
        """The first followed worker's watch (worker 0 of a whole slice)."""
        return self.watches[self.primary_worker]

    @property
    def multi(self) -> bool:
        """Several workers are followed (lines and sentences carry ``wN| ``)."""
        return len(self.watches) > 1

    @property
    def followed(self) -> dict[int, StartupWatch]:
        """The followed workers' watches whose connection was not refused, by worker."""
        return {worker: watch for worker, watch in self.watches.items() if worker not in self.refused}

    @property
    def lead(self) -> StartupWatch:
        """Where the server runs (the forward and ``/v1/models``): the quiet worker 0, else the primary."""
        return self.quiet if self.quiet is not None else self.primary

    def worker_states(self) -> list[StartupState]:
        """Each followed worker's state in worker order (a refused worker's is empty)."""
        return [StartupState() if worker in self.refused else watch.state for worker, watch in self.watches.items()]

    @property
    def state(self) -> StartupState:
        """The boot as the slice sees it: the primary's state, failed when another worker failed
        first (its failure, naming the worker), ready when the quiet worker 0 says so."""
        state = failed_on_any_worker(self.worker_states()) if self.multi else self.primary.state
        if self.quiet is not None:
            state = ready_from_worker_0(state, self.quiet.state)
        return state

    def slice_hbm(self) -> list[SliceHbm]:
        """HBM per boot stage summed over the followed workers (empty for one worker)."""
        return slice_hbm(self.worker_states()) if self.multi else []

    def summary(self) -> dict[str, Any]:
        """The ``log-summary --json`` object: a slice's (:func:`slice_summary`, with ``refused_workers``)
        when several workers are followed, else the state's (``ready_on_worker: 0`` when only the
        quiet worker 0 said ready)."""
        if not self.multi:
            result = summary_json(self.state)
            if self.quiet is not None and self.state.ready and not self.primary.state.ready:
                result["ready_on_worker"] = 0        # this worker's log never says it: worker 0's did
            return result
        result = slice_summary(self.worker_states())      # a refused worker: no lines
        if self.refused:
            result["refused_workers"] = sorted(self.refused)
        return result

    # --- events -----------------------------------------------------------------------------

    def _emit(self, kind: EventKind, text: str, worker: int | None = None, *, status: TailStatus | None = None,
              error: RemoteError | None = None, found: FollowedContainer | None = None) -> None:
        if self._on_event is not None:
            self._on_event(SliceEvent(kind, text, worker, status=status, error=error, found=found))

    def _lines(self, worker: int, batch: list[LogLine]) -> None:
        self.version += 1
        if self._on_lines is not None:
            self._on_lines(worker, batch)
        state = self.watches[worker].state
        if worker == self.primary_worker:
            self._say_progress(state)
        self._check_failure(worker, state)
        if self.sink is not None:
            self.sink.record(self.state, self.primary.reader_container_id)
        if worker == self.primary_worker and state.ready:
            self._done.set()

    def _say_progress(self, state: StartupState) -> None:
        """The primary's phase changes, every 10 compile steps and the KV cache, once each."""
        said = self._said[self.primary_worker]
        worker = self.primary_worker
        if state.phase != said.phase:
            said.phase = state.phase
            self._emit("phase", f"phase: {state.phase.value}", worker)
        if state.compile.steps_finished >= said.steps + 10:
            said.steps = state.compile.steps_finished
            self._emit("compiled", f"compiled {state.compile.steps_finished} steps", worker)
        if state.kv_cache_tokens is not None and state.kv_cache_tokens != said.kv_cache_tokens:
            said.kv_cache_tokens = state.kv_cache_tokens
            self._emit("kv_cache", f"KV cache: {state.kv_cache_tokens:,} tokens, max concurrency "
                                   f"{state.max_concurrency}", worker)

    def _check_failure(self, worker: int, state: StartupState) -> None:
        """A worker's first fatal failure of this boot: said, and the watch ends after the grace."""
        said = self._said[worker]
        if state.ready or state.failure is None or not state.failure.fatal or said.failed:
            return
        said.failed = True
        self._emit("failed", f"failed: {state.failure.kind.value}: {scrub_text(state.failure.message)}", worker)
        asyncio.get_running_loop().call_later(FAILURE_GRACE_S, self._done.set)

    def _quiet_lines(self) -> None:
        """Worker 0 followed quietly: its ready (the watch ends) or its fatal failure, said once."""
        self.version += 1
        state = self.quiet.state if self.quiet is not None else None
        if state is None or self._quiet_said:
            return
        if state.ready:
            self._quiet_said = True
            self._emit("quiet_ready", "worker 0 says ready (the server runs on worker 0)")
            if self.sink is not None:
                self.sink.record(self.state, self.primary.reader_container_id)
            self._done.set()
        elif state.failure is not None and state.failure.fatal:
            self._quiet_said = True
            self._emit("failed", f"worker 0 failed: {state.failure.kind.value}: {scrub_text(state.failure.message)}")
            asyncio.get_running_loop().call_later(FAILURE_GRACE_S, self._done.set)

    def _status(self, worker: int, status: TailStatus) -> None:
        """A followed worker's tail status: a restart or a replacement (a fresh boot: its marker, its
        record), a new container of the primary (its launch), the sentence, the hint, the end."""
        watch, said = self.watches[worker], self._said[worker]
        restart = watch.restarts[-1] if watch.restarts else None
        if restart is not None and restart.restart_count == status.restart_count \
                and (restart.container_id, restart.restart_count) not in said.restarts:
            said.restarts.add((restart.container_id, restart.restart_count))
            said.fresh_boot()
            self._emit("restarted", restart.marker(), worker)
            if worker == self.primary_worker:
                self._write(lambda sink: sink.restarted(restart))
        new_id = status.container_id
        if new_id and new_id not in said.seen_ids:
            gone = watch.replaced[-1] if watch.replaced and watch.replaced[-1].new_id == new_id else None
            said.seen_ids.add(new_id)
            if gone is not None:
                said.fresh_boot()
                self._emit("replaced", gone.marker(), worker)
            if worker == self.primary_worker:
                self._emit("container", "", worker)
                self._observe(new_id, gone)
        if status.kind in SAID_STATUSES or status.message.startswith("resumed"):
            self._emit("status", status.message, worker, status=status)
        if status.kind == "waiting" and worker == self.primary_worker and self.waiting_hint \
                and not said.seen_ids and not self._hinted:
            self._hinted = True
            self._emit("hint", self.waiting_hint, worker)
        if status.kind == "exited" and worker == self.primary_worker:
            state, code = self.state, status.exit_code
            self._write(lambda sink: sink.exited(state, code))
        if status.kind in ("exited", "error"):
            self._done.set()

    # --- the record -------------------------------------------------------------------------

    def _write(self, step: Callable[[LaunchSink], Awaitable[None]]) -> None:
        """Run ``step(sink)`` after the writes before it (in the order the watch saw things)."""
        sink, previous = self.sink, self._writes
        if sink is None:
            return

        async def run() -> None:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            try:
                await step(sink)
            except Exception as exc:  # noqa: BLE001 - a write that failed is said, never a traceback
                self._emit("warning", f"warning: the history was not written: {type(exc).__name__}: {exc}")

        self._writes = asyncio.get_running_loop().create_task(run())

    def _observe(self, container_id: str, gone: Replacement | None) -> None:
        """The primary follows a new container: close the replaced one's launch, read the new one
        (``docker inspect``, at once), then find, claim or start its launch."""
        if self.sink is None:
            return
        reading = asyncio.get_running_loop().create_task(read_followed(self.primary, container_id))
        self._reads.append(reading)

        async def step(sink: LaunchSink) -> None:
            if gone is not None:
                await sink.replaced(gone)
            found = await reading
            await sink.observe(container_id, found)
            self._emit("observed", f"warning: {found.problem}" if found.problem else "", self.primary_worker,
                       found=found)
            sink.record(self.state, self.primary.reader_container_id)

        self._write(step)

    async def settle(self) -> None:
        """Wait for every write queued so far, then record the slice's state once more."""
        if self._writes is not None:
            await self._writes
        if self.sink is not None:
            self.sink.record(self.state, self.primary.reader_container_id)

    # --- connect, follow, end ---------------------------------------------------------------

    async def connect(self) -> bool:
        """Open every worker's first connection, one at a time (host-key questions one at a time).

        Returns:
            ``False`` when a connection failed (a ``refused`` event says why; every connection is
            closed); a worker past the primary whose host key is refused is refused alone.
        """
        for worker, watch in self.watches.items():
            try:
                await watch.connect()
            except (HostKeyChanged, HostKeyUnknown) as exc:
                if worker == self.primary_worker:       # the worker whose log says ready: nothing to follow
                    return await self._refuse_all(exc, worker)
                self._emit("refused", f"tpu-console: {exc} Worker {worker} is not followed; the others are.",
                           worker, error=exc)
                self.refused[worker] = exc
                continue
            except RemoteError as exc:
                return await self._refuse_all(exc, worker)
            self._emit("connected", f"connected to {watch.target.label}; following container {self.container}",
                       worker)
        if self.quiet is not None:
            try:
                await self.quiet.connect()
            except RemoteError as exc:
                return await self._refuse_all(exc, None)
            self._emit("connected", f"connected to {self.quiet.target.label} (worker 0) for its readiness only")
        if self.multi:
            target = self.primary.target
            refused = (f" (not worker {', '.join(map(str, sorted(self.refused)))}: host key refused)"
                       if self.refused else "")
            self._emit("following", f"following {len(self.followed)} workers of "
                                    f"{target.node_name or target.label}{refused}")
        return True

    async def _refuse_all(self, exc: RemoteError, worker: int | None) -> bool:
        self._emit("refused", f"tpu-console: {exc}", worker, error=exc)
        await self.close()
        return False

    async def follow(self) -> None:
        """Follow every connected worker (and the quiet one) until :meth:`stop` or cancellation."""
        every = [*self.followed.values(), *([self.quiet] if self.quiet is not None else [])]
        await asyncio.gather(*(watch.follow() for watch in every))

    def stop(self) -> None:
        """Make :meth:`follow` return soon."""
        for watch in self._every():
            watch.stop()

    async def close(self) -> None:
        """Close every connection, tunnel and log file (idempotent); reads still running are cancelled."""
        for reading in self._reads:
            reading.cancel()
        for watch in self._every():
            await watch.close()

    def _every(self) -> list[StartupWatch]:
        return [*self.watches.values(), *([self.quiet] if self.quiet is not None else [])]

    async def run(self, *, probe: bool = True) -> SliceOutcome:
        """The verb's watch: connect, follow until ready (then ``/v1/models``), a fatal failure (after
        :data:`FAILURE_GRACE_S`) or an exited container, record the end, summarise."""
        if not await self.connect():
            return SliceOutcome(2, None)
        try:
            await self._follow_until_done()
            return await self._conclude(probe)
        finally:
            await self.close()

    async def _follow_until_done(self) -> None:
        followers = {worker: asyncio.create_task(watch.follow()) for worker, watch in self.followed.items()}
        quiet = asyncio.create_task(self.quiet.follow()) if self.quiet is not None else None
        waiter = asyncio.create_task(self._done.wait())
        await asyncio.wait([followers[self.primary_worker], waiter], return_when=asyncio.FIRST_COMPLETED)
        others = [watch for worker, watch in self.followed.items() if worker != self.primary_worker]
        if others and self.primary.state.ready:
            await workers_caught_up(others)
        if self.quiet is not None and self.quiet.state.ready:
            await workers_caught_up([self.primary])
        self.stop()
        waiter.cancel()
        await asyncio.gather(*followers.values(), *([quiet] if quiet is not None else []), return_exceptions=True)
        for watch in self.followed.values():
            watch.reader.close()                  # a trailing partial line
            watch.state = watch.reader.state

    async def _conclude(self, probe: bool) -> SliceOutcome:
        for worker, watch in self.followed.items():
            if watch.log is not None:
                self._emit("log", f"full log of the launch: {watch.log.path}", worker)
            if watch.log_problem is not None:
                self._emit("warning", f"warning: {watch.log_problem}", worker)
        await self.settle()
        state = self.state
        exited = [worker for worker, watch in self.followed.items()
                  if watch.status is not None and watch.status.kind == "exited"]
        if state.ready and not [worker for worker in exited if worker != self.primary_worker]:
            if probe:
                await self._probe()
            return SliceOutcome(0, self.summary())
        quiet_failed = self.quiet is not None and self.quiet.state.failure is not None \
            and self.quiet.state.failure.fatal
        if (state.failure is not None and state.failure.fatal) or quiet_failed:
            return SliceOutcome(1, self.summary())
        if exited:                           # the primary's exit first: its log says ready
            worker = self.primary_worker if self.primary_worker in exited else exited[0]
            status = self.watches[worker].status
            code = status.exit_code if status is not None else None
            self._emit("exited", f"container {self.container} exited with code {code} before the log said it "
                                 f"was ready", worker)
            return SliceOutcome(1, self.summary())
        return SliceOutcome(2, self.summary() if self.primary.lines_received else None)

    async def _probe(self) -> None:
        """``/v1/models`` through a tunnel to where the server runs (worker 0)."""
        lead = self.quiet if self.quiet is not None and not self.primary.state.ready else self.primary
        try:
            await lead.open_tunnel()
            models = await lead.probe()
            self._emit("probed", f"confirmed: /v1/models on port {self.container_port} serves "
                                 f"{', '.join(models) or 'no models'}", self.primary_worker)
        except RemoteError as exc:
            self._emit("warning", f"warning: the log says ready but /v1/models did not answer through the "
                                  f"tunnel: {exc}", self.primary_worker)


async def workers_caught_up(others: Sequence[StartupWatch], deadline_s: float = WORKER_GRACE_S) -> None:
    """Wait (at most ``deadline_s``) until every other worker's log has shown its KV-cache HBM line
    or a fatal failure, so a slice's summary sums every worker (worker 0 may be ready first)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while loop.time() < end:
        if all(other.state.last_snapshot("kv_cache") is not None
               or (other.state.failure is not None and other.state.failure.fatal) for other in others):
            return
        await asyncio.sleep(0.05)


def failed_on_any_worker(states: Sequence[StartupState],
                         label: Callable[[int], str] | None = None) -> StartupState:
    """Worker 0's state, failed when another worker failed first (its failure, naming the worker:
    ``worker N``). With ``label`` (a LeaderWorkerSet's ``pod NAME``), worker 0's own failure is named too."""
    worker = failing_worker(states)
    if worker is None or (worker == 0 and label is None):
        return states[0]
    failure = states[worker].failure
    assert failure is not None
    name = label(worker) if label is not None else f"worker {worker}"
    named = dataclasses.replace(failure, message=f"{name}: {failure.message}",
                                explanation=f"On {name}: {failure.explanation}")
    return dataclasses.replace(states[0], failure=named, ready=False, phase=Phase.FAILED)
