"""The startup watch: a node's vLLM container log, live, beside the startup panel.

A node that is not READY yet (CREATING, or its queued resource not ACTIVE) is first waited for
through the TPU API (:mod:`console.flows.node_wait`, one marker line per state change in the
log; PREEMPTED / TERMINATED / a FAILED request end the view's watch with one sentence). Then it
connects to the node with the config's SSH settings (an unknown host key asks the operator in
a modal; a multi-host slice: every worker at once, each log line prefixed ``w0| ``..``w3| ``, the
panel summing HBM over the workers and a failure on any worker failing the boot, ``W`` cycles
all workers -> worker 0 -> ... -> all), follows ``docker logs -f --timestamps`` of ``config.container.name``
and feeds every line to the startup reader: the watch is :class:`console.flows.slice_watch.SliceWatch`,
shared with ``tpu-console watch``; this view collects its input and shows its lines (the log pane
paces them) and events. A worker past worker 0 whose host key is refused is refused alone (a
marker and a toast); the others are followed. Once the log says ready, the node's forward to ``config.container.port``
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
from typing import TYPE_CHECKING

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
from console.flows.launch_sink import ThreadedRecorderSink
from console.flows.node_wait import POLL_S as NODE_POLL_S
from console.flows.node_wait import needs_wait, wait_target, wait_until_ready
from console.flows.slice_watch import SliceEvent, SliceWatch, WorkerTarget
from console.flows.ssh_target import login_target
from console.flows.startup_watch import FollowedContainer, StartupWatch, no_container_hint
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
from remote.container.swap import SwapStep
from remote.container.tail import LogLine, TailStatus
from remote.errors import RemoteError
from remote.models import Node
from remote.printable import printable
from remote.ssh import CommandResult, SshTarget
from remote.startup import Phase
from remote.vllm_log.workers import compile_watch
from remote.vllm_metrics import ServingFigures
from store.errors import StoreError

if TYPE_CHECKING:
    from console.flows.request import RequestCase

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

    class WatchEvent(Message):
        """The slice watch said something (a marker, a new container, a refused worker...)."""

        def __init__(self, watch: SliceWatch, event: SliceEvent) -> None:
            super().__init__()
            self.slice_watch = watch
            self.event = event

    def __init__(self, node: Node, worker: int | None = None, *, poll_s: float = NODE_POLL_S,
                 request: RequestCase | None = None) -> None:
        super().__init__()
        self.node = node
        #: the request this view follows from the queue; its container is started once the node is READY
        self.request = request if request is not None and request.launch is not None else None
        self.container_started = False
        self._hinted = False
        self._frozen = False          # what is alive frozen once this view follows a container
        #: The worker followed alone, or ``None``: every worker of a multi-host slice at once.
        self.worker: int | None = worker if worker is not None or self._workers_count() > 1 else 0
        #: no worker was asked for: every worker of a slice (learned once a waited-for node is READY)
        self._every_worker = worker is None
        self.poll_s = poll_s
        #: the watch of the worker(s) followed now (:class:`console.flows.slice_watch.SliceWatch`)
        self.slice_watch: SliceWatch | None = None
        #: where the launch is recorded (the history thread), made on mount
        self.sink: ThreadedRecorderSink | None = None
        self._db: HistoryReader | None = None
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
        self._version_shown = -1
        self._dirty = True
        self._ticks = 0

    # --- what the watch holds (the tests and benches read these) --------------------------

    @property
    def watcher(self) -> StartupWatch | None:
        """The primary worker's watch (worker 0 of a slice followed whole, else the worker followed)."""
        return self.slice_watch.primary if self.slice_watch is not None else None

    @property
    def side_watchers(self) -> list[StartupWatch]:
        """Workers 1..N of a slice followed beside :attr:`watcher`, in worker order (connected ones)."""
        watch = self.slice_watch
        if watch is None:
            return []
        return [each for worker, each in watch.followed.items() if worker != watch.primary_worker]

    @property
    def ready_watcher(self) -> StartupWatch | None:
        """Worker 0, followed quietly while worker N > 0 is watched alone: only its log says ready."""
        return self.slice_watch.quiet if self.slice_watch is not None else None

    @property
    def recorder(self) -> LaunchRecorder | None:
        """The recorder of this view's launches (in the history thread), once it wrote."""
        return self.sink.recorder if self.sink is not None else None

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
        self.sink = ThreadedRecorderSink(self._db, self.node, clock=self.services.clock,
                                         on_problem=lambda sentence: self.app.notify(
                                             sentence, severity="warning", timeout=8))
        self.query_one("#log", LogView).focus()
        self.set_interval(PANEL_REFRESH_S, self._refresh_panel)
        self._start()

    def _workers_count(self) -> int:
        return max(1, len(getattr(self.node, "workers", ()) or ()))

    def _start(self) -> None:
        """(Re)start the watch of the current worker from an empty view."""
        self.workers.cancel_group(self, "startup-tunnel")
        self.slice_watch = None
        self.problem = None
        self.node_wait = None
        self.tunnel_note = None
        self.served_models = None
        self.served_kv = None
        self.forward = None
        self._tunnel_started = False
        self.query_one(LogPane).clear()
        self._show_title()
        self._update_log_title()
        self._dirty = True
        self._run_watch()

    def _show_title(self) -> None:
        who = (f"all {self._workers_count()} workers" if self.worker is None
               else f"worker {self.worker} of {self._workers_count()}")
        self.sub_title = f"{self.node.name} · {who} · container {self.services.config.container.name}"

    # --- the watch (one async worker; restarting cancels the previous one) ----------------

    @work(exclusive=True, group="startup-watch", exit_on_error=False)
    async def _run_watch(self) -> None:
        targets = await self._targets()
        if targets is None:
            return
        watch = self._slice_watch_of(*targets)
        self.slice_watch = watch
        try:
            if await watch.connect():
                await watch.follow()
        finally:
            await watch.close()

    async def _targets(self) -> tuple[list[WorkerTarget], WorkerTarget | None] | None:
        """Wait for the node to be READY, then each chosen worker's target and the quiet worker 0's
        (``None`` after saying why not)."""
        fleet, logins = self.services.fleet, self.services.logins
        try:
            if needs_wait(self.node):
                # CREATING, or its queued resource not ACTIVE yet: poll the TPU API until READY
                self.node = await wait_until_ready(fleet, wait_target(self.node), on_change=self._waiting,
                                                   poll_s=self.poll_s)
                self._waiting(f"node {self.node.name} is READY")
                self.node_wait = None
                self.services.reload_ssh_hosts()     # a node created since the start may have a host entry now
                if self._every_worker and self._workers_count() > 1:
                    self.worker = None               # a requested slice: its workers are known only now
                self._show_title()
            chosen = list(range(self._workers_count())) if self.worker is None else [self.worker]
            if self.request is not None and not self.container_started and not await self._start_container():
                return None
            config = self.services.config           # after the wait: the hosts reloaded
            pairs = {w: await login_target(self.node, config, w, fleet, logins=logins)
                     for w in [*chosen, *([0] if self.worker else [])]}
        except RemoteError as exc:
            self._set_problem(exc.message, title=exc.title)
            return None
        login = pairs[chosen[0]][1]
        if self.sink is not None:
            self.sink.node, self.sink.ssh_user = self.node, login.user
        if login.verdict.enabled or login.notes or login.source == "--user":
            self._write_marker(f"──── {printable(login.describe())} ────")
        followed = [self._worker_target(w, pairs[w][0]) for w in chosen]
        return followed, (self._worker_target(0, pairs[0][0]) if self.worker else None)

    async def _start_container(self) -> bool:
        """The followed request's container on the READY node (:meth:`RequestCase.start_container`: pull,
        run, the launch recorded), each command a marker in the log; ``False`` after saying why not."""
        from console.flows.history_access import HistoryAccess
        from console.flows.policy import ReadOnlyRefused
        from console.flows.ssh_target import resolve_target

        case, services, node = self.request, self.services, self.node
        assert case is not None
        config = services.config
        target = await resolve_target(node, config, 0, services.fleet, logins=services.logins)

        async def ask(fingerprint: str) -> bool:
            return await self.ask(host_key_question(target, fingerprint))

        def step(s: SwapStep, res: CommandResult | None, _states: object) -> None:
            if res is None:
                self.node_wait = f"starting the container: {s.kind}"
                self._write_marker(f"──── $ {printable(s.display)} ────")
            elif res.exit_status != 0:
                self._write_marker(f"──── exit {res.exit_status} ────")
            self._dirty = True

        self._waiting(f"starting the container on {node.name} (the request's image, model and settings)")
        history = HistoryAccess(lambda: services.store, owned=False)
        try:
            outcome = await case.start_container(config, node, history=history, on_step=step, fleet=services.fleet,
                                                 logins=services.logins, accept_new_host_key=ask)
        except (ReadOnlyRefused, ValueError) as exc:
            self._set_problem(f"The container was not started on {node.name}: {exc}", title="Container")
            return False
        if history.problem:
            self.app.notify(f"The launch was not recorded: {history.problem}", severity="warning", timeout=8)
        result = outcome.result
        if not result.ok:
            self._set_problem(f"The container did not start on {node.name}: {result.error}", title="Container")
            return False
        self.container_started = True
        self.node_wait = None
        self._write_marker(f"──── container started ({(result.container_id or '')[:12]}); following its boot ────")
        return True

    def _worker_target(self, worker: int, target: SshTarget) -> WorkerTarget:
        """``worker``'s target; an unknown host key is asked about in a modal."""
        async def ask(fingerprint: str) -> bool:
            return await self.ask(host_key_question(target, fingerprint))

        return WorkerTarget(worker, target, ask)

    def _slice_watch_of(self, followed: list[WorkerTarget], ready_from: WorkerTarget | None) -> SliceWatch:
        """The view's slice watch: its lines go to the log pane, its events come back as messages."""
        config = self.services.config
        logs, container = config.logs, config.container
        node_name = self.node.name

        def said(event: SliceEvent) -> None:         # handled in the view's turn (it may write, notify)
            self.post_message(self.WatchEvent(watch, event))

        watch = SliceWatch(
            followed, container=container.name, container_port=container.port, ready_from=ready_from,
            sink=self.sink, on_event=said,
            on_lines=lambda worker, batch: self._queue_lines(watch, worker, batch),
            log_for=lambda worker: log_opener(logs.folder, node_name, worker, max_mib=logs.max_mib, keep=logs.keep),
            waiting_hint=no_container_hint(self.node, container.name, image=container.image, model=container.model),
            tail_options={"max_batch_lines": TAIL_BATCH_LINES})
        return watch

    def _waiting(self, sentence: str) -> None:
        """A state change of the node waited for: one marker line in the log."""
        self._write_marker(f"──── {sentence} ────")
        self.node_wait = sentence
        self._dirty = True

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

    def _queue_lines(self, watch: SliceWatch, worker: int, batch: list[LogLine]) -> None:
        """Tail callback (the reader has read ``batch``): hand the text to the log pane, which
        writes it at its own pace (:meth:`LogPane.queue_lines`); ``wN| `` first on a slice."""
        if watch is not self.slice_watch:
            return
        if watch.multi:
            self.query_one(LogPane).queue_lines([f"w{worker}| {text}" for _, text in batch])
        else:
            self.query_one(LogPane).queue_lines([text for _, text in batch])

    def _write_marker(self, text: str) -> None:
        """A line of the console's own (a gap, a wait) in the log, in order with the queued lines."""
        self.query_one(LogPane).queue_marker(text)

    def _lines_written(self) -> None:
        """The pane wrote queued lines: the panel may show something new."""
        self._dirty = True

    @on(WatchEvent)
    def _watch_event(self, message: WatchEvent) -> None:
        """Show what the slice watch said: markers in the log, a refusal, the compile ETA."""
        watch, event = message.slice_watch, message.event
        if watch is not self.slice_watch:
            return
        self._dirty = True
        other = event.worker is not None and event.worker != watch.primary_worker
        prefix = f"w{event.worker}| " if watch.multi and other else ""
        if event.kind in ("restarted", "replaced"):
            self._write_marker(f"──── {prefix}{event.text} ────")       # a fresh boot section: its own reader
            if event.kind == "restarted" and not other:
                self._tunnel_started = False
        elif event.kind == "refused" and event.error is not None:
            self._refused(event.error, event.worker if other else None)
        elif event.kind == "container" and not self._frozen:
            self._frozen = True        # the view, its watch and render caches out of a flood's collections
            self.call_after_refresh(freeze_new)
        elif event.kind == "observed" and event.found is not None:
            self._compile_eta(event.found)
        elif event.kind == "hint" and not self._hinted:
            self._hinted = True        # once: what the view waits for and how to start a container
            self._write_marker(f"──── {event.text} ────")
        elif event.kind == "status" and event.status is not None:
            self._status(event.status, prefix, other)
        elif event.kind == "warning":
            self.log.warning(event.text)

    def _refused(self, error: RemoteError, worker: int | None) -> None:
        """A refused connection: the whole watch's problem, or (a worker past the primary) that worker's alone."""
        if worker is None:
            self._set_problem(error.message, title=error.title)   # the title is the toast's, not repeated
            return
        self._write_marker(f"──── w{worker}| not followed: {error.message} ────")
        self.app.notify(f"Worker {worker} is not followed (the others are): {error.message}", title=error.title,
                        severity="warning", timeout=10)

    def _status(self, status: TailStatus, prefix: str, other: bool) -> None:
        """A tail status: the gap and its end in the log; a stopped tail said (a worker's in the log)."""
        if status.kind == "error" and not other:
            self.app.notify(status.message, title="Log tail stopped", severity="error", timeout=10)
        elif (status.kind == "reconnecting" and status.attempt == 1) or status.message.startswith("resumed") \
                or (other and status.kind in ("exited", "error")):
            # the gap and its end: "connection lost (last line ...)", "... caught up"
            self._write_marker(f"──── {prefix}{status.message.split(';')[0]} ────")

    @work(group="startup-observe", exit_on_error=False)
    async def _compile_eta(self, found: FollowedContainer) -> None:
        """The compile ETA of the container now followed, from the history (in its thread)."""
        from store.records import compile_key

        if found.problem is not None:
            self.log.warning(found.problem)
        spec, sink = found.spec, self.sink
        if spec is None or sink is None or not self.node.accelerator_type:
            return
        key = compile_key(self.node.accelerator_type, spec.model, spec.serve_args())
        try:
            eta = await sink.compile_eta_s(key)
        except StoreError as exc:     # no ETA is fine; say why in the log
            self.log.warning(f"compile ETA: {exc}")
            return
        if sink.recording:
            self.compile_eta_s, self.history_known = eta, True
        self._dirty = True

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
            while self.slice_watch is not None and watch is self.slice_watch.lead and forward.state != "closed":
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
        if self.sink is not None:
            self._write_served(self.sink, served)

    @work(group="startup-record", exit_on_error=False)
    async def _write_served(self, sink: ThreadedRecorderSink, served: ServedKv) -> None:
        await sink.served(served.kv_cache_tokens, served.max_concurrency, served.engines,
                          served.gpu_memory_utilization)

    # --- panel --------------------------------------------------------------------------

    def panel_info(self) -> PanelInfo:
        """What the panel shows now (the slice's state: a failure on any worker, worker 0's ready)."""
        watch = self.slice_watch
        recorder_problem = self.sink.error if self.sink is not None else None
        forward = self.forward
        forward_note = None
        if forward is not None and forward.state != "open":
            forward_note = f"forward {forward.url}: {forward.describe()}"
        steps = (compile_watch(watch.worker_states(), self.services.clock(), self.compile_eta_s)
                 if watch is not None and watch.multi else None)
        return PanelInfo(
            state=watch.state if watch is not None else PanelInfo().state,
            workers=len(watch.watches) if watch is not None else 1,
            slice_hbm=tuple(watch.slice_hbm()) if watch is not None else (),
            now=self.services.clock(), status=watch.primary.status if watch is not None else None,
            problem=self.problem, compile_eta_s=self.compile_eta_s, history_known=self.history_known,
            tunnel_url=forward.url if forward is not None and forward.state == "open" else None,
            tunnel_note=self.tunnel_note or forward_note or recorder_problem, served_models=self.served_models,
            served_kv=self.served_kv, compile_watch=steps, node_wait=self.node_wait)

    def _refresh_panel(self) -> None:
        self._ticks += 1
        watch = self.slice_watch
        seen = self.forward.describe() if self.forward is not None else None
        if seen != self._forward_seen:        # the forward dropped, re-opened or was closed elsewhere
            self._forward_seen, self._dirty = seen, True
        if watch is not None and watch.version != self._version_shown:     # lines or a status of any worker
            self._version_shown, self._dirty = watch.version, True
        if not self._dirty:
            state = watch.primary.state if watch is not None else None
            running = state is not None and bool(state.timeline) and state.phase not in (Phase.READY, Phase.FAILED)
            if not running or self._ticks % int(1 / PANEL_REFRESH_S):
                return                      # once a second while a phase runs (its duration grows)
        self._dirty = False
        info = self.panel_info()
        self.query_one("#startup-panel", StartupPanel).show(info)
        if watch is None:
            return
        self.services.watching[self.node.key] = info.state      # the fleet's SERVING column reads it (kept after)
        if info.state.ready and not self._tunnel_started:
            self._tunnel_started = True
            self._tunnel(watch.lead)

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
        if self.slice_watch is not None:
            self.slice_watch.stop()           # the worker's finally closes its connections; the forward stays
        if self.sink is not None:
            self.sink.close()
        if self._db is not None:
            self._db.close()                  # after the writes already queued
        self.app.call_later(refreeze)         # what this view left in cycles, collected once it is gone
