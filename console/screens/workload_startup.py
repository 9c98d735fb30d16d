"""The startup view of a GKE workload: ``w`` on a row of the fleet's Workloads table.

The node startup view's panel (:class:`~console.widgets.startup_panel.StartupPanel`: HBM per chip, KV cache
tokens, max concurrency, compile progress / ETA, phases) fed by the workload watch's ``StartupState``, a pods
panel (one row per pod: name, what Kubernetes says of it, Ready, its log's phase, node, restarts, the newest
warning event: ``FailedScheduling: 0/6 nodes are available...``) and the log pane (the newest
:data:`MAX_LINES` lines, ``wN| `` before a group pod's lines).

A Deployment drives :class:`console.flows.workload_watch.WorkloadWatch` (the current template's pod, as
``tpu-console watch deploy/NAME``); a LeaderWorkerSet drives :class:`console.flows.group_watch.GroupWatch`
(every pod of group 0, as ``tpu-console watch lws/NAME``): one row per pod, the slice's HBM summed over them.
The status line says the newest sentence; ready or failed at the end.

``R`` rolls the workload back to its previous revision (:class:`console.screens.workload_swap.WorkloadSwapScreen`),
``H`` opens its launches in the history, ``f`` its forward (through the API server to the serving pod), ``b``
and ``m`` its benchmark and metrics views, as on the fleet's Workloads table.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Header, RichLog, Static

from console.flows.group_watch import GroupEvent, GroupWatch
from console.flows.workload_watch import WorkloadEvent, WorkloadWatch
from console.render.plain import plain
from console.screens.base import ConsoleScreen
from console.widgets.footer import ConsoleFooter
from console.widgets.startup_panel import PanelInfo, StartupPanel
from remote.container.tail import TailStatus
from remote.gke.models import Workload
from remote.printable import printable
from remote.startup import Phase, StartupState
from remote.vllm_log.workers import slice_hbm

#: Lines the log pane keeps.
MAX_LINES = 5000
#: Seconds between redraws of the panel and the pods table.
REFRESH_S = 0.5
#: Below this many columns the panel sits over the pods and the log, all full width.
STACK_BELOW = 110
POD_COLUMNS = ("pod", "Kubernetes", "Ready", "log", "restarts", "Kubernetes says", "node")
_STYLES = {"failed": "bold red", "ready": "bold green", "ready_early": "bold yellow", "event": "yellow",
           "warning": "yellow", "kv_cache": "cyan", "group": "bold yellow", "recreated": "yellow"}
#: Event kinds whose sentence becomes the status line.
_STATUS_KINDS = ("status", "phase", "kv_cache", "ready_early", "ready", "failed", "warning", "event", "group")


class WorkloadStartupScreen(ConsoleScreen):
    """Follow one workload's pods (a Deployment's current pod, an LWS's group 0) to ready or failed."""

    BINDINGS = [Binding("R", "rollback", "Roll back", id="rollback"),
                Binding("H", "history", "History", id="history"),
                Binding("f", "forward", "Forward", id="forward"),
                Binding("b", "bench", "Bench", id="bench"),
                Binding("m", "metrics", "Metrics", id="metrics"),
                Binding("escape", "back", "Back", id="workload_back")]
    READONLY_ACTIONS = {"rollback": "rollback"}
    DEFAULT_CSS = """
    WorkloadStartupScreen #workload-body { height: 1fr; }
    WorkloadStartupScreen #workload-panel { width: 70; border-right: solid $primary 40%; }
    WorkloadStartupScreen #workload-right { width: 1fr; }
    WorkloadStartupScreen #workload-status { padding: 0 1; height: auto; }
    WorkloadStartupScreen #workload-pods { height: auto; max-height: 12; border-top: solid $primary 40%; }
    WorkloadStartupScreen #workload-log { height: 1fr; border-top: solid $primary 40%; }
    WorkloadStartupScreen.-stacked #workload-body { layout: vertical; }
    WorkloadStartupScreen.-stacked #workload-panel { width: 100%; height: 45%; border-right: none;
                                                     border-bottom: solid $primary 40%; }
    WorkloadStartupScreen.-stacked #workload-right { width: 100%; height: 1fr; }
    """

    def __init__(self, workload: Workload, config: Any) -> None:
        super().__init__()
        self.workload = workload
        self.config = config
        #: every event the watch said, oldest first (tests read it)
        self.events: list[WorkloadEvent | GroupEvent] = []
        self.outcome: Any = None
        self.pod_watch: WorkloadWatch | None = None
        self.group: GroupWatch | None = None
        self._status = TailStatus("connecting", message=f"finding the pods of {workload.ref}")
        #: pod name -> the newest warning event Kubernetes recorded of it
        self._said_of: dict[str, str] = {}
        self._rows_key: object = None
        #: the history's median compile seconds for this workload's setup, and whether the history was asked
        self.compile_eta_s: float | None = None
        self.history_known = False

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="workload-body"):
            yield StartupPanel(id="workload-panel")
            with Vertical(id="workload-right"):
                yield Static(Text(f"finding the pods of {printable(self.workload.ref)}…", style="dim"),
                             id="workload-status")
                yield DataTable(id="workload-pods", cursor_type="row", zebra_stripes=True)
                yield RichLog(id="workload-log", max_lines=MAX_LINES, markup=False, highlight=False, wrap=False)
        yield ConsoleFooter()

    def on_resize(self, event: events.Resize) -> None:
        """Below :data:`STACK_BELOW` columns the panel sits over the pods and the log."""
        super().on_resize(event)
        self.set_class(event.size.width < STACK_BELOW, "-stacked")

    def on_mount(self) -> None:
        w = self.workload
        self.sub_title = f"startup · {w.cluster}/{w.namespace}/{w.ref}"
        self.query_one("#workload-pods", DataTable).add_columns(*POD_COLUMNS)
        self.set_class(self.size.width < STACK_BELOW, "-stacked")
        self.set_interval(REFRESH_S, self._refresh)
        self._watch()

    def action_back(self) -> None:
        """Back to the fleet (the watch stops with the view)."""
        self.app.pop_screen()

    def action_rollback(self) -> None:
        """Roll the workload back to its previous revision (the rollback view: preview, confirm, the rollout)."""
        if self.console.need_services("Roll back") and not self.console.refuse_readonly("rollback"):
            from console.screens.workload_swap import WorkloadSwapScreen

            self.app.push_screen(WorkloadSwapScreen(self.workload, self.config, rollback=True))

    def action_history(self) -> None:
        """The history pane with this workload's launches (``N`` there: its launches only)."""
        from console.flows.gke_target import lint_node

        self.console.open_feature("history", lint_node(self.workload))

    def action_bench(self) -> None:
        """The benchmark view of the workload's serving pod (through its forward)."""
        if self.console.need_services("Bench"):
            from console.flows.gke_target import lint_node
            from console.screens.bench import BenchScreen

            self.app.push_screen(BenchScreen(lint_node(self.workload), workload=self.workload))

    def action_metrics(self) -> None:
        """The metrics view of the workload's serving pod (through its forward)."""
        if self.console.need_services("Metrics"):
            from console.flows.gke_target import lint_node
            from console.screens.metrics import MetricsScreen

            self.app.push_screen(MetricsScreen(lint_node(self.workload), workload=self.workload))

    def action_forward(self) -> None:
        """Forward ``localhost:PORT`` to the workload's serving pod (through the API server), in the app's
        forwards: it stays open when this view is left and moves to the new pod after a rollout."""
        if self.console.need_services("Forward"):
            self._forward()

    @work(group="workload-forward", exit_on_error=False)
    async def _forward(self) -> None:
        from console.flows.workload_forward import open_workload_forward
        from remote.errors import RemoteError

        w = self.workload
        try:
            forward = await open_workload_forward(self.services.forwards, w, self.config, notify=lambda s: self.app.notify(
                s, title=f"Forward {w.ref}", markup=False, timeout=8))
        except RemoteError as exc:
            self.app.notify(exc.message, title=f"No forward to {w.ref}", severity="error", timeout=10, markup=False)
            return
        self.app.notify(f"{forward.url} -> {w.ref} pod {forward.pod} port {forward.container_port}; it stays open "
                        "(F lists forwards).", title="Forward open", markup=False)

    # --- what the watch says ---------------------------------------------------------------------

    def _event(self, event: WorkloadEvent | GroupEvent) -> None:
        self.events.append(event)
        text = event.line() if isinstance(event, GroupEvent) else event.text
        style = _STYLES.get(event.kind, "dim" if event.kind in ("status", "phase") else "")
        self.query_one("#workload-log", RichLog).write(Text(f"» {printable(text)}", style=style or "bold"))
        if event.kind in _STATUS_KINDS and not (isinstance(event, GroupEvent) and event.worker
                                                and event.kind in ("status", "phase", "kv_cache")):
            self.query_one("#workload-status", Static).update(Text(printable(text), style=style))
        if event.kind == "event" and event.text.startswith("pod "):
            name, _, said = event.text[4:].partition(": ")
            self._said_of[name] = said
        if event.kind in ("following", "resumed"):
            self._status = TailStatus("connected", message=event.text)
        elif event.kind in ("status", "event") and self._status.kind == "connecting":
            self._status = TailStatus("waiting", message=event.text)

    def _lines(self, batch: list[tuple[datetime | None, str]], worker: int | None = None) -> None:
        log = self.query_one("#workload-log", RichLog)
        prefix = f"w{worker}| " if worker is not None else ""
        for _, text in batch:
            log.write(Text(prefix + printable(text)))

    # --- the panel and the pods ------------------------------------------------------------------

    def panel_info(self) -> PanelInfo:
        """What the panel shows now: the watch's state (the group's, HBM summed over its pods)."""
        now = datetime.now(UTC)
        if self.group is not None:
            states = self.group.states()
            return PanelInfo(state=self.group.state, now=now, status=self._status, workers=len(states),
                             slice_hbm=tuple(slice_hbm(states)) if len(states) > 1 else (),
                             compile_eta_s=self.compile_eta_s, history_known=self.history_known)
        state = self.pod_watch.state if self.pod_watch is not None else StartupState()
        return PanelInfo(state=state, now=now, status=self._status, compile_eta_s=self.compile_eta_s,
                         history_known=self.history_known)

    def pod_rows(self) -> list[tuple[str, str, str, str, str, str, str]]:
        """One row per pod: name, what Kubernetes says (phase / condition), Ready, the log's phase, restarts,
        the newest warning event, node (``-`` where nothing is known yet)."""
        followed: list[tuple[str, Any, StartupState, bool]] = []
        if self.group is not None:
            followed = [(f.name, f.latest, f.state, f.log_ready) for f in self.group.followers]
        elif self.pod_watch is not None and self.pod_watch.latest is not None:
            followed = [(self.pod_watch.latest.name, self.pod_watch.latest, self.pod_watch.state, self.pod_watch.state.ready)]
        rows = []
        for name, pod, state, log_ready in followed:
            failure = state.failure if state.failure is not None and state.failure.fatal else None
            log = "ready" if log_ready else f"failed: {failure.kind.value}" if failure else (
                state.phase.value if state.lines_read else "-")
            rows.append((name, pod.headline if pod else "no pod yet", ("Ready" if pod.ready else "not Ready")
                         if pod else "-", log, str(pod.restarts) if pod else "-", self._said_of.get(name, "-"),
                         (pod.node or "-") if pod else "-"))
        return rows

    def _refresh(self) -> None:
        self.query_one("#workload-panel", StartupPanel).show(self.panel_info())
        rows = self.pod_rows()
        if rows == self._rows_key:
            return
        self._rows_key = rows
        table = self.query_one("#workload-pods", DataTable)
        table.clear()
        for row in rows:
            style = "green" if row[3] == "ready" else "red" if row[3].startswith("failed") else ""
            table.add_row(*(plain(cell, style=style if i == 3 else "") for i, cell in enumerate(row)))

    # --- the watch -------------------------------------------------------------------------------

    @work(exclusive=True, group="workload-watch", exit_on_error=False)
    async def _watch(self) -> None:
        from console.flows.gke_fleet import gke_source
        from console.flows.gke_target import WorkloadSpec, WorkloadSpecError, find_workload
        from remote.errors import RemoteError

        source = gke_source(self.config)
        if source is None:
            self._event(WorkloadEvent("warning", "the config has no [gke] table"))
            return
        w = self.workload
        poll_s = min(2.0, self.config.refresh_interval_s)
        try:
            workload, kube = await find_workload(source, WorkloadSpec(w.kind, w.name, w.namespace, w.cluster))
            self._compile_eta(workload)
            if workload.kind == "LeaderWorkerSet":
                self.group = GroupWatch(workload, kube, on_event=self._event, poll_s=poll_s,
                                        on_lines=lambda worker, batch: self._lines(batch, worker))
                self.outcome = await self.group.run()
            else:
                self.pod_watch = WorkloadWatch(workload, kube, on_event=self._event, on_lines=self._lines, poll_s=poll_s)
                self.outcome = await self.pod_watch.run()
            self._ended()
            await self._keep_polling(poll_s)
        except (WorkloadSpecError, RemoteError) as exc:
            self._status = TailStatus("error", message=str(exc))
            self._event(WorkloadEvent("failed", str(exc)))
        finally:
            await source.close()
            self._refresh()

    def _compile_eta(self, workload: Workload) -> None:
        """The history's median compile time for this workload's setup (its chips, model and compile flags, as
        the swap and ``watch`` record them); no history or no launch: no ETA."""
        from console.flows.workload_swap import accelerator_type_of
        from remote.gke.edit import spec_of
        from remote.secrets import scrub_args
        from store.errors import StoreError
        from store.records import compile_key

        accelerator = accelerator_type_of(workload)
        try:
            spec = spec_of(workload)
        except ValueError:
            return
        if not accelerator:
            return
        key = compile_key(accelerator, spec.model, scrub_args(spec.serve_args()))
        try:
            store = self.services.store
            self.compile_eta_s = store.compile_eta_s(key)   # the console's store lives on this thread (one SELECT)
        except StoreError as exc:               # no ETA is fine; the log says why
            self._event(WorkloadEvent("warning", f"compile ETA: {exc}"))
            return
        self.history_known = True

    async def _keep_polling(self, poll_s: float) -> None:
        """After the verdict, keep the pods' rows current (a pod turns Ready once its probe passes, a group is
        made anew) until the view closes; an API failure ends the polling quietly."""
        import asyncio

        from remote.errors import RemoteError

        followers: list[WorkloadWatch] = list(self.group.followers) if self.group is not None else (
            [self.pod_watch] if self.pod_watch is not None else [])
        try:
            while followers:
                await asyncio.sleep(max(poll_s, 1.0))
                for follower in followers:
                    pod = await follower.current_pod()
                    if self.group is None and pod is not None:
                        follower.latest = pod
        except RemoteError:
            return

    def _ended(self) -> None:
        """The status line's last word: ready / failed / stopped, the leader pod, the KV cache tokens."""
        code, summary = self.outcome.code, self.outcome.summary or {}
        word = "ready" if code == 0 else "failed" if code == 1 else "stopped"
        self._status = TailStatus("exited" if code else "connected", message=f"{word}: {summary.get('pod') or '-'}")
        kv = summary.get("kv_cache_tokens")
        pods = len(summary.get("pods") or []) or 1
        text = f"{word} · {summary.get('pod')}" + (f" (+{pods - 1} pods)" if pods > 1 else "") + (
            f" · KV cache {kv:,} tokens" if isinstance(kv, int) else "")
        self.query_one("#workload-status", Static).update(
            Text(printable(text), style=_STYLES.get("ready" if code == 0 else "failed", "")))
        if self.group is None and self.pod_watch is not None and self.pod_watch.state.phase == Phase.READY:
            self.query_one("#workload-panel", StartupPanel).show(self.panel_info())
