"""The startup watch: a node's vLLM container log, live, beside the startup panel.

A node that is not READY yet (CREATING, or its queued resource not ACTIVE) is first waited for
through the TPU API (:mod:`console.flows.node_wait`, one marker line per state change in the
log; PREEMPTED / TERMINATED / a FAILED request end the view's watch with one sentence). Then it
connects to one worker of the node with the config's SSH settings (an unknown host key asks
the operator in a modal), follows ``docker logs -f --timestamps`` of ``config.container.name``
and feeds every line to the startup reader (:class:`console.flows.startup_watch.StartupWatch`, shared
with ``tpu-console watch``). Once the log says ready, an SSH local port forward to
``config.container.port`` is opened and ``/v1/models`` probed through it; the local URL stays
usable while the screen is open. What the view learns goes into the history as it learns it.

Keys (ids in brackets): ``f`` follow [log_follow], ``/`` filter [log_filter], ``ctrl+f``
search [log_search], ``n`` next match [log_next], ``z`` fold [log_fold], ``W`` next worker
[worker], ``r`` reconnect [reconnect], ``R`` roll back [rollback], ``s`` swap [swap],
``y`` copy the tunnel URL [copy_url], ``escape`` back [back].
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Footer, Header
from textual.worker import Worker, WorkerState

from console.flows.history_query import HistoryReader
from console.flows.launch_recorder import LaunchRecorder
from console.flows.node_wait import POLL_S as NODE_POLL_S
from console.flows.node_wait import needs_wait, wait_target, wait_until_ready
from console.flows.ssh_target import login_target
from console.flows.startup_watch import Replacement, StartupWatch, read_followed
from console.screens.base import ConsoleScreen
from console.screens.confirm import host_key_question
from console.widgets.log_pane import LogPane
from console.widgets.log_view import LogView
from console.widgets.serving_panel import ServingPanel
from console.widgets.startup_panel import PanelInfo, StartupPanel
from remote.container.tail import TailStatus
from remote.errors import RemoteError
from remote.printable import printable
from remote.startup import Phase, StartupState
from store.errors import StoreError

T = TypeVar("T")

#: Lines the log pane keeps (older lines are counted, not shown).
LOG_LINES_SHOWN = 5000
#: Lines per tail batch: the reader reads a batch in one go, so this bounds that pause (~10 ms).
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
    ]

    class LinesArrived(Message):
        """Log lines are waiting in the screen's pending list (one message in flight at a time)."""

        def __init__(self, watch: StartupWatch) -> None:
            super().__init__()
            self.watcher = watch

    class StatusChanged(Message):
        """The tail's status changed."""

        def __init__(self, watch: StartupWatch, status: TailStatus) -> None:
            super().__init__()
            self.watcher = watch
            self.status = status

    def __init__(self, node: Any, worker: int = 0, *, poll_s: float = NODE_POLL_S) -> None:
        super().__init__()
        self.node = node
        self.worker = worker
        self.poll_s = poll_s
        self.watcher: StartupWatch | None = None
        self.recorder: LaunchRecorder | None = None
        self.ssh_user: str | None = None
        self._db: HistoryReader | None = None
        self._state_to_record: StartupState | None = None
        self._recording = False
        self._recorder_lock = asyncio.Lock()
        self.problem: str | None = None
        self.node_wait: str | None = None
        self.compile_eta_s: float | None = None
        self.history_known = False
        self.tunnel_note: str | None = None
        self.served_models: tuple[str, ...] | None = None
        self._tunnel_started = False
        self._container_id: str | None = None
        self._dirty = True
        self._ticks = 0
        self._pending: list[str] = []
        self._skipped = 0

    # --- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="startup-body"):
            yield StartupPanel(id="startup-panel")
            yield LogPane(LOG_LINES_SHOWN, id="log-pane")
        yield Footer()

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
        self.problem = None
        self.node_wait = None
        self.tunnel_note = None
        self.served_models = None
        self._tunnel_started = False
        self._container_id = None
        self._pending, self._skipped = [], 0
        self.query_one("#log", LogView).clear()
        self.sub_title = (f"{self.node.name} · worker {self.worker} of {self._workers_count()} · "
                          f"container {self.services.config.container.name}")
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
            target, login = await login_target(self.node, config, self.worker, self.services.fleet)
        except RemoteError as exc:
            self._set_problem(exc.message, title=exc.title)
            return
        self.ssh_user = login.user
        if self.recorder is not None:
            self.recorder.ssh_user = login.user
        if login.verdict.enabled or login.notes or login.source == "--user":
            self.query_one("#log", LogView).write_lines([f"──── {printable(login.describe())} ────"])

        async def ask(fingerprint: str) -> bool:
            return await self.ask(host_key_question(target, fingerprint))

        watch = StartupWatch(
            target, container=config.container.name, container_port=config.container.port,
            accept_new_host_key=ask,
            on_lines=lambda batch: self._queue_lines(watch, batch),
            on_status=lambda status: self._post_status(watch, status),
            tail_options={"max_batch_lines": TAIL_BATCH_LINES})
        self.watcher = watch
        try:
            await watch.connect()
        except RemoteError as exc:
            self._set_problem(exc.message, title=exc.title)   # the title is the toast's, not repeated
            return
        try:
            await watch.follow()
        finally:
            await watch.close()

    def _waiting(self, sentence: str) -> None:
        """A state change of the node waited for: one marker line in the log."""
        self.query_one("#log", LogView).write_lines([f"──── {sentence} ────"])
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
        """Tail callback (the reader has read ``batch``): queue the text for the log pane.

        Only one :class:`LinesArrived` is in flight; lines beyond the pane's cap are counted,
        not kept, so a burst the screen cannot draw in time costs no memory and no key latency.
        """
        if watch is not self.watcher:
            return
        notify = not self._pending and not self._skipped
        self._pending.extend(text for _, text in batch)
        over = len(self._pending) - LOG_LINES_SHOWN
        if over > 0:
            del self._pending[:over]
            self._skipped += over
        if notify:
            self.post_message(self.LinesArrived(watch))

    @on(LinesArrived)
    def _lines(self, message: LinesArrived) -> None:
        lines, skipped = self._pending, self._skipped
        self._pending, self._skipped = [], 0
        if message.watcher is not self.watcher:
            return
        self.query_one("#log", LogView).write_lines(lines, skipped)
        self._update_log_title()
        self._dirty = True

    @on(StatusChanged)
    def _status(self, message: StatusChanged) -> None:
        if message.watcher is not self.watcher:
            return
        status = message.status
        if status.container_id and status.container_id != self._container_id:
            watch, gone = message.watcher, None
            if self._container_id is not None and watch.replaced and watch.replaced[-1].new_id == status.container_id:
                gone = watch.replaced[-1]           # the new container has its own reader and launch
                self.query_one("#log", LogView).write_lines([f"──── {gone.marker()} ────"])
            self._container_id = status.container_id
            self._observe(message.watcher, status.container_id, gone)
        if status.kind == "exited":
            self._write_exit(message.watcher.reader.state, status.exit_code)
        if status.kind == "error":
            self.app.notify(status.message, title="Log tail stopped", severity="error", timeout=10)
        if (status.kind == "reconnecting" and status.attempt == 1) or status.message.startswith("resumed"):
            # the gap and its end, in the log itself: "connection lost (last line ...)", "... caught up"
            self.query_one("#log", LogView).write_lines([f"──── {status.message.split(';')[0]} ────"])
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
            await self._history(lambda: self._recorder().record_replaced(replaced.old_state, replaced.marker()))
        found = await read_followed(watch, container_id)
        if found.problem is not None:
            self.log.warning(found.problem)
        await self._history(lambda: self._recorder().observe_container(
            container_id, found.spec, requested_at=found.requested_at))
        spec = found.spec
        if spec is not None and self.node.accelerator_type:
            key = compile_key(self.node.accelerator_type, spec.model, spec.serve_args())
            try:
                eta = await self._history(lambda: self._recorder().store.compile_eta_s(key))
            except StoreError as exc:     # no ETA is fine; say why in the log
                self.log.warning(f"compile ETA: {exc}")
            else:
                if self.recorder is not None and self.recorder.store is not None:
                    self.compile_eta_s, self.history_known = eta, True
        self._dirty = True

    def _recorder(self) -> LaunchRecorder:
        assert self.recorder is not None      # _history creates it before any write
        return self.recorder

    def _record(self, state: StartupState) -> None:
        """Queue ``state`` for the history; one write in flight, the newest state wins."""
        self._state_to_record = state
        if not self._recording:
            self._recording = True
            self._write_states()

    @work(group="startup-record", exit_on_error=False)
    async def _write_states(self) -> None:
        """Write the queued states in the history thread until none is left."""
        try:
            while self._state_to_record is not None:
                state, self._state_to_record = self._state_to_record, None
                await self._history(functools.partial(self._record_in_thread, state))
        finally:
            self._recording = False

    def _record_in_thread(self, state: StartupState) -> dict[str, Any]:
        return self._recorder().record(state)

    @work(group="startup-record", exit_on_error=False)
    async def _write_exit(self, state: StartupState, exit_code: int | None) -> None:
        """The container exited: its launch ends (:meth:`LaunchRecorder.record_exit`), in the history thread."""
        await self._history(lambda: self._recorder().record_exit(state, exit_code))

    # --- tunnel ------------------------------------------------------------------------

    @work(exclusive=True, group="startup-tunnel", exit_on_error=False)
    async def _tunnel(self, watch: StartupWatch) -> None:
        """Forward a local port to vLLM, probe /v1/models, keep the forward while the screen is open."""
        port = self.services.config.container.port
        self.tunnel_note = f"opening an SSH tunnel to port {port}…"
        self._dirty = True
        try:
            await watch.open_tunnel()
        except RemoteError as exc:
            self.tunnel_note = f"the log says ready, but the tunnel failed: {exc}"
            self._dirty = True
            return
        self.tunnel_note = f"probing {watch.tunnel_url}/v1/models…"
        self._dirty = True
        for attempt in range(PROBE_ATTEMPTS):
            try:
                self.served_models = tuple(await watch.probe())
                self.tunnel_note = None
                self._serve_metrics(watch)
                break
            except RemoteError as exc:
                self.tunnel_note = (f"/v1/models did not answer through the tunnel"
                                    f"{' yet' if attempt + 1 < PROBE_ATTEMPTS else ''}: {exc}")
                self._dirty = True
                if attempt + 1 < PROBE_ATTEMPTS:
                    await asyncio.sleep(1.0)
        self._dirty = True

        def changed(sentence: str) -> None:
            self.tunnel_note = sentence
            self._dirty = True

        await watch.keep_tunnel(changed)

    @work(exclusive=True, group="startup-metrics", exit_on_error=False)
    async def _serve_metrics(self, watch: StartupWatch) -> None:
        """After ready: sample ``/metrics`` through the tunnel every few seconds into the serving panel."""
        import asyncio

        import httpx

        from remote.vllm_metrics import MetricsWindow, fetch_metrics

        window = MetricsWindow()
        panel = self.query_one("#panel-serving", ServingPanel)
        async with httpx.AsyncClient(timeout=5.0, trust_env=False) as client:
            while watch is self.watcher:
                url = watch.tunnel_url
                if url:
                    try:
                        window.add(await fetch_metrics(client, url))
                        panel.show(window.figures(), watch.reader.state.kv_cache_tokens)
                    except RemoteError as exc:
                        panel.show_problem(f"/metrics not read: {exc}")
                await asyncio.sleep(METRICS_INTERVAL_S)

    # --- panel --------------------------------------------------------------------------

    def panel_info(self) -> PanelInfo:
        """What the panel shows now."""
        watch = self.watcher
        recorder_problem = self.recorder.error if self.recorder is not None else None
        return PanelInfo(
            state=watch.reader.state if watch is not None else PanelInfo().state,
            now=self.services.clock(), status=watch.status if watch is not None else None,
            problem=self.problem, compile_eta_s=self.compile_eta_s, history_known=self.history_known,
            tunnel_url=watch.tunnel_url if watch is not None else None,
            tunnel_note=self.tunnel_note or recorder_problem, served_models=self.served_models,
            node_wait=self.node_wait)

    def _refresh_panel(self) -> None:
        self._ticks += 1
        if not self._dirty:
            state = self.watcher.reader.state if self.watcher is not None else None
            running = state is not None and bool(state.timeline) and state.phase not in (Phase.READY, Phase.FAILED)
            if not running or self._ticks % int(1 / PANEL_REFRESH_S):
                return                      # once a second while a phase runs (its duration grows)
        self._dirty = False
        info = self.panel_info()
        self.query_one("#startup-panel", StartupPanel).show(info)
        watch = self.watcher
        if watch is None:
            return
        if self.recorder is not None:
            self._record(info.state)
        if info.state.ready and not self._tunnel_started:
            self._tunnel_started = True
            self._tunnel(watch)

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
        """Watch the next worker of a multi-host node."""
        count = self._workers_count()
        if count <= 1:
            self.app.notify(f"{self.node.name} is a single-host node: worker 0 is the only one.")
            return
        self.worker = (self.worker + 1) % count
        self.app.notify(f"Watching worker {self.worker} of {count}.")
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
        """Copy the local URL of the SSH tunnel to vLLM (the OpenAI base URL) to the clipboard."""
        url = self.watcher.tunnel_url if self.watcher is not None else None
        if not url:
            self.app.notify("No tunnel URL yet: it opens once the log says the server is ready.",
                            severity="warning")
            return
        self.copy(f"the tunnel URL {url}", url)

    def action_back(self) -> None:
        """Close the filter box if open, else go back (the tunnel closes with the screen)."""
        if not self.query_one(LogPane).close_input():
            self.app.pop_screen()

    def on_unmount(self) -> None:
        self.workers.cancel_group(self, "startup-tunnel")
        self.workers.cancel_group(self, "startup-watch")
        if self.watcher is not None:
            self.watcher.stop()               # the worker's finally closes the tunnel and connections
        if self._db is not None:
            self._db.close()                  # after the writes already queued
