"""The startup watch: a node's vLLM container log, live, beside the startup panel.

A node that is not READY yet (CREATING, or its queued resource not ACTIVE) is first waited for
through the TPU API (:mod:`console.flows.node_wait`, one marker line per state change in the
log; PREEMPTED / TERMINATED / a FAILED request end the view's watch with one sentence). Then it
connects to the node with the config's SSH settings (an unknown host key asks the operator in
a modal; a multi-host slice: every worker at once, each log line prefixed ``w0| ``..``w3| ``, the
panel summing HBM over the workers and a failure on any worker failing the boot, ``W`` cycles
all workers -> worker 0 -> ... -> all), follows ``docker logs -f --timestamps`` of ``config.container.name``
and feeds every line to the startup reader (:class:`console.flows.startup_watch.StartupWatch`, shared
with ``tpu-console watch``). Once the log says ready, the node's forward to ``config.container.port``
is opened in the app's forwards (:class:`console.flows.forwards.ForwardRegistry`: its local port is
the node's, it stays open when the screen is left and re-opens on the same port when SSH drops) and
``/v1/models`` probed through it; the serving panel reads ``/metrics`` through it too. What the
view learns goes into the history as it learns it.

Keys (ids in brackets): ``f`` follow [log_follow], ``/`` filter [log_filter], ``ctrl+f``
search [log_search], ``n`` next match [log_next], ``z`` fold [log_fold], ``W`` next worker
[worker], ``r`` reconnect [reconnect], ``R`` roll back [rollback], ``s`` swap [swap],
``y`` copy the forward's URL [copy_url], ``escape`` back [back] (the forward stays open).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.worker import Worker, WorkerState

from console.flows.forwards import Forward
from console.flows.history_query import HistoryReader
from console.flows.launch_log import log_opener
from console.flows.launch_recorder import LaunchRecorder
from console.flows.node_wait import POLL_S as NODE_POLL_S
from console.flows.node_wait import needs_wait, wait_target, wait_until_ready
from console.flows.ssh_target import login_target
from console.flows.startup_watch import Replacement, StartupWatch, no_container_hint, read_followed
from console.heap import freeze_new, refreeze
from console.screens.base import ConsoleScreen
from console.screens.confirm import host_key_question
from console.screens.long_line import LongLineScreen
from console.widgets.footer import ConsoleFooter
from console.widgets.header import ConsoleHeader
from console.widgets.log_pane import LogPane
from console.widgets.log_view import LogView
from console.widgets.serving_panel import ServingPanel
from console.widgets.startup_panel import PanelInfo, ServedKv, StartupPanel
from remote.container.tail import TailStatus
from remote.errors import RemoteError
from remote.printable import printable
from remote.startup import Phase, StartupState
from remote.vllm_log.workers import compile_watch, failing_worker, ready_from_worker_0
from remote.vllm_log.workers import slice_hbm as slice_hbm_of
from remote.vllm_metrics import ServingFigures
from store.errors import StoreError

if TYPE_CHECKING:
    from console.config import Config
    from remote.models import Node
    from remote.ssh import SshTarget

T = TypeVar("T")

#: Lines the log pane keeps (older lines are counted, not shown).
LOG_LINES_SHOWN = 5000
#: Below this many columns the panel (70) is stacked over the log, so the log keeps the full width.
STACK_BELOW = 110
#: Lines per tail batch (the reader reads them on the tail's line thread; the loop gets the batch).
TAIL_BATCH_LINES = 500
#: Seconds between panel refreshes (the panel also ticks once a second for running durations).
PANEL_REFRESH_S = 0.25
#: /v1/models probes after the log says ready (one second apart) before giving up.
PROBE_ATTEMPTS = 5
#: Seconds between two reads of /metrics once the server is ready (the serving panel).
METRICS_INTERVAL_S = 3.0


class StartupScreen(ConsoleScreen):
    """Startup watch of one node: panel on the left, live log on the right."""

    CSS_PATH = "startup.tcss"
    READONLY_ACTIONS = {"swap": "swap", "rollback": "rollback"}
    BINDINGS = [
        Binding("f", "toggle_follow", "Follow", id="log_follow"),
        Binding("slash", "filter", "Filter", key_display="/", id="log_filter"),
        Binding("ctrl+f", "search", "Search", id="log_search"),
        Binding("n", "next_match", "Next match", id="log_next"),
        Binding("z", "toggle_fold", "Fold", id="log_fold"),
        Binding("W", "next_worker", "Worker", id="worker"),
        Binding("r", "reconnect", "Reconnect", id="reconnect"),
        Binding("R", "rollback", "Roll back", id="rollback"),
        Binding("s", "swap", "Swap", id="swap"),
        Binding("escape", "back", "Back", id="back"),
        Binding("y", "copy_url", "Copy URL", id="copy_url"),
        Binding("e", "whole_line", "Whole line", id="log_whole_line"),
    ]

    class StatusChanged(Message):
        """The tail's status changed."""

        def __init__(self, watch: StartupWatch, status: TailStatus) -> None:
            super().__init__()
            self.watcher = watch
            self.status = status

    def __init__(self, node: Node, worker: int | None = None, *, poll_s: float = NODE_POLL_S) -> None:
        super().__init__()
        self.node = node
        self._hinted = False
        self._frozen = False          # what is alive frozen once this view follows a container
        #: The worker followed alone, or ``None``: every worker of a multi-host slice at once.
        self.worker: int | None = worker if worker is not None or self._workers_count() > 1 else 0
        #: Workers 1..N of a slice followed beside :attr:`watcher` (worker 0), in worker order.
        self.side_watchers: list[StartupWatch] = []
        #: Worker 0, followed quietly while worker N > 0 is watched alone: only its log says ready.
        self.ready_watcher: StartupWatch | None = None
        self.poll_s = poll_s
        self.watcher: StartupWatch | None = None
        self.recorder: LaunchRecorder | None = None
        self.ssh_user: str | None = None
        self._db: HistoryReader | None = None
        self._state_to_record: tuple[StartupState, str | None] | None = None
        self._recording = False
        self._recorder_lock = asyncio.Lock()
        self.problem: str | None = None
        self.node_wait: str | None = None
        self.compile_eta_s: float | None = None
        self.history_known = False
        self.tunnel_note: str | None = None
        self.served_models: tuple[str, ...] | None = None
        #: what /metrics last said of the KV cache (the authority after ready), or None
        self.served_kv: ServedKv | None = None
        #: the node's forward in the app's forwards, once the log said ready
        self.forward: Forward | None = None
        self._forward_seen: str | None = None
        self._tunnel_started = False
        self._container_id: str | None = None
        self._restarts_shown = 0
        self._dirty = True
        self._ticks = 0

    # --- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield ConsoleHeader()
        with Horizontal(id="startup-body"):
            yield StartupPanel(id="startup-panel")
            yield LogPane(LOG_LINES_SHOWN, id="log-pane", on_written=self._lines_written)
        yield ConsoleFooter()

    def on_resize(self, event: events.Resize) -> None:
        """Below :data:`STACK_BELOW` columns the panel sits over the log, both full width."""
        super().on_resize(event)
        self.set_class(event.size.width < STACK_BELOW, "-stacked")

    def on_mount(self) -> None:
        self._db = HistoryReader(self.services.db_path)
        self.query_one("#log", LogView).focus()
        self.set_interval(PANEL_REFRESH_S, self._refresh_panel)
        self._start()


    def _workers_count(self) -> int:
        return max(1, len(getattr(self.node, "workers", ()) or ()))

    def _start(self) -> None:
        """(Re)start the watch of the current worker from an empty view."""
        self.workers.cancel_group(self, "startup-tunnel")
        self.watcher = None
        self.side_watchers = []
        self.ready_watcher = None
        self.problem = None
        self.node_wait = None
        self.tunnel_note = None
        self.served_models = None
        self.served_kv = None
        self.forward = None
        self._tunnel_started = False
        self._container_id = None
        self._restarts_shown = 0
        self.query_one(LogPane).clear()
        who = (f"all {self._workers_count()} workers" if self.worker is None
               else f"worker {self.worker} of {self._workers_count()}")
        self.sub_title = f"{self.node.name} · {who} · container {self.services.config.container.name}"
        self._update_log_title()
        self._dirty = True
        self._run_watch()

    # --- the watch (one async worker; restarting cancels the previous one) ----------------

    @work(exclusive=True, group="startup-watch", exit_on_error=False)
    async def _run_watch(self) -> None:
        config = self.services.config
        try:
            if needs_wait(self.node):
                # CREATING, or its queued resource not ACTIVE yet: poll the TPU API until READY
                self.node = await wait_until_ready(self.services.fleet, wait_target(self.node),
                                                   on_change=self._waiting, poll_s=self.poll_s)
                self._waiting(f"node {self.node.name} is READY")
                self.node_wait = None
            chosen = list(range(self._workers_count())) if self.worker is None else [self.worker]
            logins = self.services.logins
            pairs = [await login_target(self.node, config, w, self.services.fleet, logins=logins) for w in chosen]
            quiet_pair = (await login_target(self.node, config, 0, self.services.fleet, logins=logins)
                          if self.worker else None)
        except RemoteError as exc:
            self._set_problem(exc.message, title=exc.title)
            return
        targets = [target for target, _ in pairs]
        login = pairs[0][1]
        self.ssh_user = login.user
        if self.recorder is not None:
            self.recorder.ssh_user = login.user
        if login.verdict.enabled or login.notes or login.source == "--user":
            self._write_marker(f"──── {printable(login.describe())} ────")
        every = [self._make_watch(target, config, worker) for target, worker in zip(targets, chosen, strict=True)]
        self.watcher, self.side_watchers = every[0], every[1:]
        if quiet_pair is not None:
            self.ready_watcher = self._make_quiet_watch(quiet_pair[0], config)
            every.append(self.ready_watcher)
        try:
            for watch in every:
                try:
                    await watch.connect()
                except RemoteError as exc:
                    self._set_problem(exc.message, title=exc.title)   # the title is the toast's, not repeated
                    return
            await asyncio.gather(*(watch.follow() for watch in every))
        finally:
            for watch in every:
                await watch.close()

    def _make_watch(self, target: SshTarget, config: Config, worker: int) -> StartupWatch:
        async def ask(fingerprint: str) -> bool:
            return await self.ask(host_key_question(target, fingerprint))

        watch = StartupWatch(
            target, container=config.container.name, container_port=config.container.port,
            accept_new_host_key=ask,
            on_lines=lambda batch: self._queue_lines(watch, batch),
            on_status=lambda status: self._post_status(watch, status),
            tail_options={"max_batch_lines": TAIL_BATCH_LINES},
            log_for=log_opener(config.logs.folder, self.node.name, worker,
                               max_mib=config.logs.max_mib, keep=config.logs.keep))
        return watch

    def _make_quiet_watch(self, target: SshTarget, config: Config) -> StartupWatch:
        """Worker 0 of a slice, followed for its readiness only (no lines shown, no launch, no file)."""
        async def ask(fingerprint: str) -> bool:
            return await self.ask(host_key_question(target, fingerprint))

        def lines(_batch: list[Any]) -> None:
            self._dirty = True

        return StartupWatch(target, container=config.container.name, container_port=config.container.port,
                            accept_new_host_key=ask, on_lines=lines, on_status=lambda _status: None,
                            tail_options={"max_batch_lines": TAIL_BATCH_LINES})

    def _worker_of(self, watch: StartupWatch) -> int | None:
        """The worker number ``watch`` follows in the all-workers view, else ``None`` (no prefix)."""
        if not self.side_watchers:
            return None
        if watch is self.watcher:
            return 0
        return self.side_watchers.index(watch) + 1 if watch in self.side_watchers else None

    def _waiting(self, sentence: str) -> None:
        """A state change of the node waited for: one marker line in the log."""
        self._write_marker(f"──── {sentence} ────")
        self.node_wait = sentence
        self._dirty = True

    def _post_status(self, watch: StartupWatch, status: TailStatus) -> None:
        self.post_message(self.StatusChanged(watch, status))

    def _set_problem(self, sentence: str, *, title: str = "Startup watch") -> None:
        self.problem = sentence
        self._dirty = True
        self.app.notify(sentence, title=title, severity="error", timeout=10)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """An unexpected error in a worker becomes a sentence (and the log), never a traceback."""
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            error = event.worker.error
            self.log.error(f"worker {event.worker.name} failed", error)
            self._set_problem(f"{type(error).__name__}: {error}", title="Unexpected error")

    def _queue_lines(self, watch: StartupWatch, batch: list[Any]) -> None:
        """Tail callback (the reader has read ``batch``): hand the text to the log pane, which
        writes it at its own pace (:meth:`LogPane.queue_lines`)."""
        worker = self._worker_of(watch)
        if watch is not self.watcher and worker is None:
            return
        if worker is None:
            self.query_one(LogPane).queue_lines([text for _, text in batch])
        else:
            self.query_one(LogPane).queue_lines([f"w{worker}| {text}" for _, text in batch])

    def _write_marker(self, text: str) -> None:
        """A line of the console's own (a gap, a wait) in the log, in order with the queued lines."""
        self.query_one(LogPane).queue_marker(text)

    def _lines_written(self) -> None:
        """The pane wrote queued lines: the panel may show something new."""
        self._dirty = True

    @on(StatusChanged)
    def _status(self, message: StatusChanged) -> None:
        status = message.status
        worker = self._worker_of(message.watcher)
        if message.watcher is not self.watcher:
            if worker is not None and ((status.kind == "reconnecting" and status.attempt == 1)
                                       or status.kind in ("exited", "error")
                                       or status.message.startswith(("resumed", "container "))):
                self.query_one("#log", LogView).write_lines([f"──── w{worker}| {status.message.split(';')[0]} ────"])
                self._dirty = True
            return
        if status.container_id and status.container_id != self._container_id:
            watch, gone = message.watcher, None
            if self._container_id is not None and watch.replaced and watch.replaced[-1].new_id == status.container_id:
                gone = watch.replaced[-1]           # the new container has its own reader and launch
                self._write_marker(f"──── {gone.marker()} ────")
            self._container_id = status.container_id
            self._observe(message.watcher, status.container_id, gone)
            if not self._frozen:        # the view, its watch and render caches out of a flood's collections
                self._frozen = True
                self.call_after_refresh(freeze_new)
        if status.kind == "waiting" and self._container_id is None and not self._hinted:
            self._hinted = True        # once: what the view waits for and how to start a container
            container = self.services.config.container
            hint = no_container_hint(self.node, container.name, image=container.image, model=container.model)
            self.query_one("#log", LogView).write_lines([f"──── {hint} ────"])
        restart = message.watcher.restarts[-1] if message.watcher.restarts else None
        if restart is not None and restart.restart_count == status.restart_count \
                and restart.restart_count > self._restarts_shown:
            self._restarts_shown = restart.restart_count      # a fresh boot section: its own reader
            self.query_one("#log", LogView).write_lines([f"──── {restart.marker()} ────"])
            self._write_restart(restart.old_state, restart.restart_count)
            self._tunnel_started = False
        if status.kind == "exited":
            self._write_exit(message.watcher.state, status.exit_code)
        if status.kind == "error":
            self.app.notify(status.message, title="Log tail stopped", severity="error", timeout=10)
        if (status.kind == "reconnecting" and status.attempt == 1) or status.message.startswith("resumed"):
            # the gap and its end, in the log itself: "connection lost (last line ...)", "... caught up"
            self._write_marker(f"──── {status.message.split(';')[0]} ────")
        self._dirty = True

    # --- history ------------------------------------------------------------------------

    async def _history(self, write: Callable[[], T]) -> T | None:
        """Run ``write()`` (a recorder call) in the history thread, never on the UI loop.

        The recorder is created there, on the thread's own store, the first time; a history
        that cannot be opened is said once, then nothing is recorded.
        """
        if self._db is None:
            return None
        async with self._recorder_lock:   # one recorder, even when two workers start at once
            if self.recorder is None:
                clock = self.services.clock
                try:
                    self.recorder = await self._db.call(lambda store: LaunchRecorder(
                        store, self.node, clock=clock, ssh_user=self.ssh_user))
                except StoreError as exc:     # say it once, carry on without a history
                    self.app.notify(f"History unavailable: {exc}", severity="warning", timeout=8)
                    self.recorder = LaunchRecorder(None, self.node, clock=clock, ssh_user=self.ssh_user)
        if self.recorder.store is None:
            return None
        return await self._db.call(lambda _store: write())

    @work(group="startup-observe", exit_on_error=False)
    async def _observe(self, watch: StartupWatch, container_id: str, replaced: Replacement | None = None) -> None:
        """Close the launch of the container ``replaced`` (with what was seen of it), inspect the new
        container, find or start its launch, and look up the compile ETA."""
        from store.records import compile_key

        if replaced is not None:
            await self._history(lambda: self._recorder().record_replaced(replaced.old_state, replaced.marker(),
                                                                         replaced.old_id))
        found = await read_followed(watch, container_id)
        if found.problem is not None:
            self.log.warning(found.problem)
        await self._history(lambda: self._recorder().observe_container(
            container_id, found.spec, requested_at=found.requested_at))
        spec = found.spec
        if spec is not None and self.node.accelerator_type:
            key = compile_key(self.node.accelerator_type, spec.model, spec.serve_args())
            try:
                eta = await self._history(lambda: self._recorder()._db.compile_eta_s(key))
            except StoreError as exc:     # no ETA is fine; say why in the log
                self.log.warning(f"compile ETA: {exc}")
            else:
                if self.recorder is not None and self.recorder.store is not None:
                    self.compile_eta_s, self.history_known = eta, True
        self._dirty = True

    def _recorder(self) -> LaunchRecorder:
        assert self.recorder is not None      # _history creates it before any write
        return self.recorder

    def _record(self, state: StartupState, container_id: str | None) -> None:
        """Queue ``state`` (of container ``container_id``) for the history; one write in flight,
        the newest state wins."""
        self._state_to_record = (state, container_id)
        if not self._recording:
            self._recording = True
            self._write_states()

    @work(group="startup-record", exit_on_error=False)
    async def _write_states(self) -> None:
        """Write the queued states in the history thread until none is left."""
        try:
            while self._state_to_record is not None:
                (state, container_id), self._state_to_record = self._state_to_record, None
                await self._history(functools.partial(self._record_in_thread, state, container_id))
        finally:
            self._recording = False

    def _record_in_thread(self, state: StartupState, container_id: str | None) -> dict[str, Any]:
        return self._recorder().record(state, container_id)

    @work(group="startup-record", exit_on_error=False)
    async def _write_restart(self, state: StartupState, restart_count: int) -> None:
        """The container restarted in place: its launch keeps its row with the restart count
        (:meth:`LaunchRecorder.record_restart`), in the history thread."""
        await self._history(lambda: self._recorder().record_restart(state, restart_count))

    @work(group="startup-record", exit_on_error=False)
    async def _write_exit(self, state: StartupState, exit_code: int | None) -> None:
        """The container exited: its launch ends (:meth:`LaunchRecorder.record_exit`), in the history thread."""
        await self._history(lambda: self._recorder().record_exit(state, exit_code))

    # --- tunnel ------------------------------------------------------------------------

    @work(exclusive=True, group="startup-tunnel", exit_on_error=False)
    async def _tunnel(self, watch: StartupWatch) -> None:
        """Open the node's forward in the app's forwards (or take the one open), probe /v1/models
        through it, then sample /metrics through it; the forward outlives the screen."""
        from remote.ssh import probe_models

        config = self.services.config
        self.tunnel_note = f"opening the forward to port {config.container.port}…"
        self._dirty = True
        try:
            forward = await self.services.forwards.open(self.node, watch.target, container_port=config.container.port,
                                                        config=config.forward)
        except RemoteError as exc:
            self.tunnel_note = f"the log says ready, but the forward failed: {exc}"
            self._dirty = True
            return
        self.forward = forward
        self.tunnel_note = f"probing {forward.url}/v1/models…"
        self._dirty = True
        for attempt in range(PROBE_ATTEMPTS):
            try:
                self.served_models = tuple(await probe_models(forward.url))
                self.tunnel_note = None
                self._serve_metrics(watch, forward)
                break
            except RemoteError as exc:
                self.tunnel_note = (f"/v1/models did not answer through the forward"
                                    f"{' yet' if attempt + 1 < PROBE_ATTEMPTS else ''}: {exc}")
                self._dirty = True
                if attempt + 1 < PROBE_ATTEMPTS:
                    await asyncio.sleep(1.0)
        self._dirty = True

    @work(exclusive=True, group="startup-metrics", exit_on_error=False)
    async def _serve_metrics(self, watch: StartupWatch, forward: Forward) -> None:
        """After ready: sample ``/metrics`` through the app's forward every few seconds into the serving panel."""
        import httpx

        from remote.vllm_metrics import MetricsWindow, fetch_metrics

        window = MetricsWindow()
        panel = self.query_one("#panel-serving", ServingPanel)
        async with httpx.AsyncClient(timeout=5.0, trust_env=False) as client:
            while (watch is self.watcher or watch is self.ready_watcher) and forward.state != "closed":
                if forward.state == "open":
                    try:
                        window.add(await fetch_metrics(client, forward.url))
                        figures = window.figures()
                        panel.show(figures, watch.state.kv_cache_tokens)
                        self._take_served_kv(figures)
                    except RemoteError as exc:
                        panel.show_problem(f"/metrics not read: {exc}")
                await asyncio.sleep(METRICS_INTERVAL_S)

    def _take_served_kv(self, figures: ServingFigures) -> None:
        """/metrics' KV cache figures become the panel's headline and go to the launch's history."""
        served = ServedKv(figures.kv_cache_size_tokens, figures.max_concurrency, figures.engines,
                          figures.gpu_memory_utilization)
        if served == self.served_kv:
            return
        self.served_kv, self._dirty = served, True
        self._write_served(served)

    @work(group="startup-record", exit_on_error=False)
    async def _write_served(self, served: ServedKv) -> None:
        await self._history(lambda: self._recorder().record_served(
            served.kv_cache_tokens, served.max_concurrency, served.engines, served.gpu_memory_utilization))

    # --- panel --------------------------------------------------------------------------

    def panel_info(self) -> PanelInfo:
        """What the panel shows now."""
        watch = self.watcher
        recorder_problem = self.recorder.error if self.recorder is not None else None
        forward = self.forward
        forward_note = None
        if forward is not None and forward.state != "open":
            forward_note = f"forward {forward.url}: {forward.describe()}"
        state = watch.state if watch is not None else PanelInfo().state
        slice_hbm: tuple[Any, ...] = ()
        steps = None
        if watch is not None and self.side_watchers:
            states = [state, *(side.state for side in self.side_watchers)]
            slice_hbm = tuple(slice_hbm_of(states))
            steps = compile_watch(states, self.services.clock(), self.compile_eta_s)
            state = _failed_on_any_worker(states)
        if watch is not None and self.ready_watcher is not None:
            state = ready_from_worker_0(state, self.ready_watcher.reader.state)
        return PanelInfo(
            state=state, workers=1 + len(self.side_watchers), slice_hbm=slice_hbm,
            now=self.services.clock(), status=watch.status if watch is not None else None,
            problem=self.problem, compile_eta_s=self.compile_eta_s, history_known=self.history_known,
            tunnel_url=forward.url if forward is not None and forward.state == "open" else None,
            tunnel_note=self.tunnel_note or forward_note or recorder_problem, served_models=self.served_models,
            served_kv=self.served_kv, compile_watch=steps,
            node_wait=self.node_wait)

    def _refresh_panel(self) -> None:
        self._ticks += 1
        seen = self.forward.describe() if self.forward is not None else None
        if seen != self._forward_seen:        # the forward dropped, re-opened or was closed elsewhere
            self._forward_seen, self._dirty = seen, True
        if not self._dirty:
            state = self.watcher.state if self.watcher is not None else None
            running = state is not None and bool(state.timeline) and state.phase not in (Phase.READY, Phase.FAILED)
            if not running or self._ticks % int(1 / PANEL_REFRESH_S):
                return                      # once a second while a phase runs (its duration grows)
        self._dirty = False
        info = self.panel_info()
        self.query_one("#startup-panel", StartupPanel).show(info)
        watch = self.watcher
        if watch is None:
            return
        self.services.watching[self.node.key] = info.state      # the fleet's SERVING column reads it (kept after)
        if self.recorder is not None:
            self._record(info.state, watch.reader_container_id)
        if info.state.ready and not self._tunnel_started:
            self._tunnel_started = True
            self._tunnel(self.ready_watcher if self.ready_watcher is not None else watch)

    def _update_log_title(self) -> None:
        self.query_one(LogPane).update_title()

    # --- log actions --------------------------------------------------------------------

    def action_toggle_follow(self) -> None:
        """Follow new lines, or stop scrolling to read."""
        self.query_one(LogPane).toggle_follow()

    def action_filter(self) -> None:
        """Show only lines containing a text."""
        self.query_one(LogPane).open_input(search=False)

    def action_search(self) -> None:
        """Highlight a text in every line and jump between matches."""
        self.query_one(LogPane).open_input(search=True)

    def action_next_match(self) -> None:
        """Scroll to the next line with the search text."""
        pane = self.query_one(LogPane)
        if not pane.next_match():
            self.app.notify("No match" if pane.view.search_text else "Search first (ctrl+f).", severity="warning")

    def action_toggle_fold(self) -> None:
        """Collapse or expand runs of continuation lines (tracebacks, array dumps)."""
        self.query_one(LogPane).toggle_fold()

    # --- node actions -------------------------------------------------------------------

    def action_next_worker(self) -> None:
        """Cycle a multi-host node's view: all workers -> worker 0 -> worker 1 ... -> all workers."""
        count = self._workers_count()
        if count <= 1:
            self.app.notify(f"{self.node.name} is a single-host node: worker 0 is the only one.")
            return
        self.worker = 0 if self.worker is None else (self.worker + 1 if self.worker + 1 < count else None)
        self.app.notify(f"Watching all {count} workers." if self.worker is None
                        else f"Watching worker {self.worker} of {count}.")
        self._start()

    def action_reconnect(self) -> None:
        """Start the watch again (after an error or a refused host key)."""
        self._start()

    def action_rollback(self) -> None:
        """Open the rollback view of this node."""
        self.open_feature("rollback", self.node)

    def action_swap(self) -> None:
        """Open the hot-swap form of this node."""
        self.open_feature("swap", self.node)

    def action_copy_url(self) -> None:
        """Copy the local URL of the node's forward to vLLM (the OpenAI base URL) to the clipboard."""
        forward = self.forward
        if forward is None or forward.state == "closed":
            self.app.notify("No forward yet: it opens once the log says the server is ready.",
                            severity="warning")
            return
        self.copy(f"the forward's URL {forward.url}", forward.url)

    def action_whole_line(self) -> None:
        """Open the last line cut at 2,000 characters (at or above the pane's bottom row) whole,
        with the path of the launch's full log on disk."""
        view = self.query_one("#log", LogView)
        bottom = int(view.scroll_offset.y) + max(0, view.size.height - 1)
        text = view.buffer.last_cut_line(bottom)
        if text is None:
            self.app.notify("No line is cut in the pane (lines are cut at 2,000 characters).",
                            title="Whole line")
            return
        log = self.watcher.log if self.watcher is not None else None
        self.app.push_screen(LongLineScreen(text, log.path if log is not None else None, self.copy))

    def action_back(self) -> None:
        """Close the filter box if open, else go back (the node's forward stays open: ``F`` lists it)."""
        if not self.query_one(LogPane).close_input():
            self.app.pop_screen()

    def on_unmount(self) -> None:
        self.workers.cancel_group(self, "startup-tunnel")
        self.workers.cancel_group(self, "startup-watch")
        for watch in (self.watcher, *self.side_watchers):
            if watch is not None:
                watch.stop()                  # the worker's finally closes its connections; the forward stays
        if self._db is not None:
            self._db.close()                  # after the writes already queued
        self.app.call_later(refreeze)         # what this view left in cycles, collected once it is gone


def _failed_on_any_worker(states: list[StartupState]) -> StartupState:
    """Worker 0's state, failed when another worker failed first (its failure, naming the worker)."""
    import dataclasses

    worker = failing_worker(states)
    if worker is None or worker == 0:
        return states[0]
    failure = states[worker].failure
    assert failure is not None
    named = dataclasses.replace(failure, message=f"worker {worker}: {failure.message}",
                                explanation=f"On worker {worker}: {failure.explanation}")
    return dataclasses.replace(states[0], failure=named, ready=False, phase=Phase.FAILED)
