"""The startup view of a GKE workload: ``w`` on a row of the fleet's Workloads table.

Drives :class:`console.flows.workload_watch.WorkloadWatch` (the one behind ``tpu-console watch deploy/NAME``):
what Kubernetes says of the current template's pod (Pending / Unschedulable with its events,
ContainerCreating), then the pod's log read by the startup reader; the status line says the phase, the KV
cache tokens and the concurrency, "Kubernetes says Ready while the log still compiles" when that happens,
and ready or failed at the end. The log pane keeps the newest :data:`MAX_LINES` lines. ``R`` rolls the
workload back to its previous revision (:class:`console.screens.workload_swap.WorkloadSwapScreen`), ``H``
opens its launches in the history, ``f`` its forward (through the API server to the serving pod), ``b`` and
``m`` its benchmark and metrics views, as on the fleet's Workloads table.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Header, RichLog, Static

from console.flows.workload_watch import WorkloadEvent
from console.screens.base import ConsoleScreen
from console.widgets.footer import ConsoleFooter
from remote.gke.models import Workload
from remote.printable import printable

#: Lines the log pane keeps.
MAX_LINES = 5000
_STYLES = {"failed": "bold red", "ready": "bold green", "ready_early": "bold yellow", "event": "yellow",
           "warning": "yellow", "kv_cache": "cyan"}


class WorkloadStartupScreen(ConsoleScreen):
    """Follow one workload's current pod to ready or failed."""

    BINDINGS = [Binding("R", "rollback", "Roll back", id="rollback"),
                Binding("H", "history", "History", id="history"),
                Binding("f", "forward", "Forward", id="forward"),
                Binding("b", "bench", "Bench", id="bench"),
                Binding("m", "metrics", "Metrics", id="metrics"),
                Binding("escape", "back", "Back", id="workload_back")]
    READONLY_ACTIONS = {"rollback": "rollback"}
    DEFAULT_CSS = """
    WorkloadStartupScreen #workload-status { padding: 0 1; height: auto; }
    WorkloadStartupScreen #workload-log { height: 1fr; }
    """

    def __init__(self, workload: Workload, config: Any) -> None:
        super().__init__()
        self.workload = workload
        self.config = config
        #: every event the watch said, oldest first (tests read it)
        self.events: list[WorkloadEvent] = []
        self.outcome: Any = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text(f"finding the pod of {printable(self.workload.ref)}…", style="dim"), id="workload-status")
        yield RichLog(id="workload-log", max_lines=MAX_LINES, markup=False, highlight=False, wrap=False)
        yield ConsoleFooter()

    def on_mount(self) -> None:
        w = self.workload
        self.sub_title = f"startup · {w.cluster}/{w.namespace}/{w.ref}"
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

    def _event(self, event: WorkloadEvent) -> None:
        self.events.append(event)
        style = _STYLES.get(event.kind, "dim" if event.kind in ("status", "phase") else "")
        self.query_one("#workload-log", RichLog).write(Text(f"» {printable(event.text)}", style=style or "bold"))
        if event.kind in ("status", "phase", "kv_cache", "ready_early", "ready", "failed", "warning", "event"):
            self.query_one("#workload-status", Static).update(Text(printable(event.text), style=style))

    def _lines(self, batch: list[tuple[datetime | None, str]]) -> None:
        log = self.query_one("#workload-log", RichLog)
        for _, text in batch:
            log.write(Text(printable(text)))

    @work(exclusive=True, group="workload-watch", exit_on_error=False)
    async def _watch(self) -> None:
        from console.flows.gke_fleet import gke_source
        from console.flows.gke_target import WorkloadSpec, WorkloadSpecError, find_workload
        from console.flows.workload_watch import WorkloadWatch
        from remote.errors import RemoteError

        source = gke_source(self.config)
        if source is None:
            self._event(WorkloadEvent("warning", "the config has no [gke] table"))
            return
        w = self.workload
        try:
            workload, kube = await find_workload(source, WorkloadSpec(w.kind, w.name, w.namespace, w.cluster))
            watch = WorkloadWatch(workload, kube, on_event=self._event, on_lines=self._lines,
                                  poll_s=min(2.0, self.config.refresh_interval_s))
            self.outcome = await watch.run()
            if self.outcome.summary:
                s = self.outcome.summary
                kv = s.get("kv_cache_tokens")
                self.query_one("#workload-status", Static).update(Text(
                    f"{'ready' if self.outcome.code == 0 else 'failed' if self.outcome.code == 1 else 'stopped'}"
                    f" · {s.get('pod')} · KV cache {kv:,} tokens" if isinstance(kv, int) else f"ended · {s.get('pod')}",
                    style=_STYLES.get("ready" if self.outcome.code == 0 else "failed", "")))
        except (WorkloadSpecError, RemoteError) as exc:
            self._event(WorkloadEvent("failed", str(exc)))
        finally:
            await source.close()
