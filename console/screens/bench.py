"""The benchmark screen: a small form, live progress, then the results, recorded in the history.

Keys (ids in brackets, remappable through ``[keys]`` in the config):
``ctrl+r`` run [bench_run], ``escape`` back, or cancel a running benchmark after asking [bench_back].

The run connects to worker 0 of the node over SSH (an unknown host key is shown in a
modal with its fingerprint and recorded once accepted), forwards the config's
``container.port`` to a local port and runs :mod:`remote.bench` against it in a worker,
through :mod:`console.flows.bench` like the ``bench`` verb. Progress callbacks only store
the latest snapshot; a 10 Hz timer draws it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import (
    Button,
    Checkbox,
    Input,
    Label,
    ProgressBar,
    Select,
    Static,
)
from textual.worker import Worker

from console.flows.bench import (
    KINDS,
    BenchCase,
    BenchParams,
    Pricing,
    parse_depths,
    parse_positive,
    parse_streams,
    pricing_for,
)
from console.flows.history_access import HistoryAccess
from console.render import format as fmt
from console.render.bench_tables import result_view
from console.render.plain import safe
from console.screens.base import ConsoleScreen
from console.screens.confirm import ConfirmScreen, host_key_question
from console.widgets.check_box import MarkedCheckbox
from console.widgets.footer import ConsoleFooter
from console.widgets.header import ConsoleHeader
from remote.models import Node

if TYPE_CHECKING:
    from console.flows.bench import BenchResult
    from remote.gke.models import NodePool, Workload

#: form field -> (label, default text, parser of the text; raises ValueError with the reason)
FIELDS: dict[str, tuple[str, str, Callable[[str], Any]]] = {
    "streams": ("Streams", "1,16,64", parse_streams),
    "prompt_tokens": ("Prompt tokens", "512", lambda t: parse_positive(t, int)),
    "output_tokens": ("Output tokens", "128", lambda t: parse_positive(t, int)),
    "requests": ("Requests per level", "", lambda t: parse_positive(t, int) if t.strip() else None),
    "duration_s": ("Seconds per level", "", lambda t: parse_positive(t, float) if t.strip() else None),
    "depths": ("Depths", "0.1,0.5,0.9", parse_depths),
    "context_tokens": ("Context tokens", "16000", lambda t: parse_positive(t, int)),
}
#: placeholder of an empty optional field
EMPTY = {"requests": "4 per stream, at least 8", "duration_s": "or a duration"}
ROWS = {"throughput": ("streams", "prompt_tokens", "output_tokens", "requests", "duration_s"),
        "longctx": ("depths", "context_tokens")}
#: Seconds between progress redraws while a benchmark runs.
PROGRESS_INTERVAL_S = 0.1


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


class BenchScreen(ConsoleScreen):
    """Benchmark one node: smoke, throughput sweep or long-context recall."""

    CSS_PATH = "bench.tcss"
    BINDINGS = [
        Binding("ctrl+r", "run", "Run", id="bench_run"),
        Binding("escape", "back_or_cancel", "Back / cancel", id="bench_back"),
    ]

    def __init__(self, node: Node, workload: Workload | None = None, pool: NodePool | None = None) -> None:
        super().__init__()
        self.node = node
        #: a GKE workload (``b`` on the Workloads table; ``node`` is its ``CLUSTER/NAMESPACE/deploy/NAME``): run
        #: through its forward (the API server's, to the serving pod), priced by its node ``pool``
        self.workload = workload
        self.pool = pool
        self.results: list[Any] = []
        self.pricing: Pricing | None = None
        self.recorded: list[int] = []
        self._worker: Worker[None] | None = None
        self._params: BenchParams | None = None
        self._progress: Any = None
        self._level = 0
        self._started = 0.0

    # --- layout ------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield ConsoleHeader()
        yield Static(id="bench-node")
        with Vertical(id="bench-form"):
            with Horizontal(classes="form-row", id="row-kind"):
                with Vertical(classes="field"):
                    yield Label("Kind")
                    yield Select([(k, k) for k in KINDS], value="throughput", allow_blank=False, id="f-kind")
                with Vertical(classes="field wide"):
                    yield Label("Model")
                    yield Input(placeholder="first of /v1/models", id="f-model")
                with Vertical(classes="field wide", id="over-limit-field"):
                    yield Label(" ")
                    yield MarkedCheckbox("also probe just over max-model-len", id="f-over_limit")
            for kind, names in ROWS.items():
                with Horizontal(classes="form-row", id=f"row-{kind}"):
                    for name in names:
                        label, default, _ = FIELDS[name]
                        with Vertical(classes="field"):
                            yield Label(label)
                            yield Input(default, id=f"f-{name}", placeholder=EMPTY.get(name, ""))
                            yield Static("", id=f"why-{name}", classes="reason")
            with Horizontal(id="form-actions"):
                yield Button("Run  ctrl+r", id="run", variant="primary")
                yield Static("", id="bench-status")
        with Horizontal(id="bench-progress-row"):
            yield ProgressBar(id="bench-bar", show_eta=False)
            yield Static("", id="bench-progress")
        with VerticalScroll(id="bench-results"):
            yield Static(Text("Results appear here.", style="dim"), id="results-body")
        yield ConsoleFooter()

    def on_mount(self) -> None:
        node = self.node
        config = self.services.config
        self.pricing = pricing_for(node, config.prices)
        self.sub_title = f"benchmark {node.name}"
        line = Text()
        line.append(f"Node {node.name}", style="bold")
        if self.workload is not None:
            from console.flows.workload_bench import workload_pricing

            self.pricing = workload_pricing(self.workload, self.pool, config.prices)
            line = Text(f"Workload {self.workload.ref}", style="bold")
            line.append(f"  {node.accelerator_type} · {self.pricing.provisioning_model} · node pool "
                        f"{self.workload.node_pool or '?'} · {self.workload.cluster}/{self.workload.namespace} · "
                        "through the API server's port-forward to its serving pod")
        else:
            line.append(f"  {node.accelerator_type} · {node.provisioning_model} · {fmt.count(node.chips, 'chip') if node.chips else '? chips'} · "
                        f"{node.project}/{node.zone} · vLLM port {config.container.port} over SSH")
        line.append(f"\nPrice: {self.pricing.describe()}", style="dim")
        if node.state != "READY":
            line.append(f"\nNode is {node.state}, not READY: the benchmark will likely not reach it.",
                        style="bold yellow")
        self.query_one("#bench-node", Static).update(line)
        self.query_one("#bench-progress-row").display = False
        self._show_rows("throughput")
        self._ticker = self.set_interval(PROGRESS_INTERVAL_S, self._draw_progress, pause=True)
        self.query_one("#f-kind", Select).focus()      # not an Input, so "?" still opens the help

    def _show_rows(self, kind: str) -> None:
        for name in ROWS:
            self.query_one(f"#row-{name}").display = name == kind
        self.query_one("#over-limit-field").display = kind == "longctx"

    @on(Select.Changed, "#f-kind")
    def _kind_changed(self, event: Select.Changed) -> None:
        self._show_rows(str(event.value))

    # --- validation --------------------------------------------------------------------------

    def _check(self, name: str) -> tuple[Any, str | None]:
        """Parse field ``name``; show the reason beside it. Returns ``(value, reason)``."""
        box = self.query_one(f"#f-{name}", Input)
        try:
            value, reason = FIELDS[name][2](box.value), None
        except ValueError as exc:
            value, reason = None, str(exc)
        if name == "duration_s" and value is not None and self.query_one("#f-requests", Input).value.strip():
            reason = "give requests or seconds, not both"
        box.set_class(reason is not None, "-invalid")
        self.query_one(f"#why-{name}", Static).update(Text(reason or "", style="bold red"))
        return value, reason

    @on(Input.Changed)
    def _field_changed(self, event: Input.Changed) -> None:
        name = (event.input.id or "").removeprefix("f-")
        if name in FIELDS:
            self._check(name)
            if name == "requests":
                self._check("duration_s")

    def read_params(self) -> BenchParams | None:
        """The form as :class:`BenchParams`, or ``None`` with every reason shown beside its field."""
        kind = str(self.query_one("#f-kind", Select).value)
        values: dict[str, Any] = {}
        bad = []
        for name in ROWS.get(kind, ()):
            values[name], reason = self._check(name)
            if reason:
                bad.append(FIELDS[name][0].lower())
        if bad:
            self.app.notify(f"Fix {', '.join(bad)} first (the reason is beside each field).",
                            title="Benchmark not started", severity="warning")
            return None
        model = self.query_one("#f-model", Input).value.strip() or None
        over_limit = self.query_one("#f-over_limit", Checkbox).value
        return BenchParams(kind=kind, model=model, over_limit=over_limit and kind == "longctx", **values)

    # --- running -----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """A benchmark is in flight."""
        return self._worker is not None and not self._worker.is_finished

    @on(Button.Pressed, "#run")
    def _run_pressed(self) -> None:
        self.action_run()

    def action_run(self) -> None:
        """Validate the form and start the benchmark (one at a time)."""
        if self.running:
            self.app.notify("A benchmark is already running (escape cancels it).", severity="warning")
            return
        params = self.read_params()
        if params is None:
            return
        self._params, self.results, self.recorded = params, [], []
        self._progress = None
        self._level, self._started = 0, time.monotonic()
        self.query_one("#results-body", Static).update(Text("Running…", style="dim"))
        self.query_one("#bench-progress-row").display = True
        self.query_one("#bench-bar", ProgressBar).update(total=None, progress=0)
        self._ticker.resume()
        self._worker = self._run(params)

    def _status(self, text: str | Text) -> None:
        """The status line; node names, server and error messages in it shown literally."""
        self.query_one("#bench-status", Static).update(safe(text))

    @work(group="bench", exclusive=True, exit_on_error=False)
    async def _run(self, params: BenchParams) -> None:
        from remote.errors import RemoteError

        services = self.services
        assert self.pricing is not None
        history = HistoryAccess(lambda: services.store, owned=False)
        try:
            if self.workload is not None:
                await self._run_workload(params, history)
            else:
                case = BenchCase(self.node, services.config, params, self.pricing, history, fleet=services.fleet,
                                 logins=services.logins)
                await case.run(accept_new_host_key=self._ask_host_key, on_status=self._status,
                               on_progress=self._on_progress,
                               on_result=lambda r, row: self._on_result(params, r, row))
            if history.problem:
                self.app.notify(f"Results not recorded: {history.problem}", severity="warning")
            self._finish(Text(self._summary("Done"), style="green"))
        except asyncio.CancelledError:
            self._finish(Text(self._summary("Cancelled"), style="yellow"))
            raise
        except RemoteError as exc:
            self._finish(Text(str(exc), style="bold red"))
        except ValueError as exc:      # arguments the library refuses
            self._finish(Text(f"Benchmark not run: {exc}", style="bold red"))
        except Exception as exc:
            # Broad on purpose, and re-raised: the finished levels stay on screen with a status
            # line, then the app's worker-failure route shows the traceback (a bug).
            self._finish(Text(f"Unexpected error ({type(exc).__name__}): {exc}", style="bold red"))
            raise

    async def _run_workload(self, params: BenchParams, history: HistoryAccess) -> None:
        """The workload's benchmark: its forward (the app's, kept open), :class:`WorkloadBenchCase`.

        Raises:
            RemoteError: no forward (no Ready pod...) or the server failed.
        """
        from console.flows.workload_bench import WorkloadBenchCase
        from console.flows.workload_forward import open_workload_forward

        assert self.workload is not None and self.pricing is not None
        self._status(f"Opening the forward to {self.workload.ref}…")
        forward = await open_workload_forward(self.services.forwards, self.workload, self.services.config)
        case = WorkloadBenchCase(self.workload, forward, params, self.pricing, history)
        await case.run(on_status=self._status, on_progress=self._on_progress,
                       on_result=lambda r, row: self._on_result(params, r, row))

    def _summary(self, word: str) -> str:
        elapsed = time.monotonic() - self._started
        kept = _count(len(self.results), "result")
        if not self.results:
            saved = "nothing to record"
        elif self.recorded:
            saved = f"recorded in the history ({_count(len(self.recorded), 'row')})"
        else:
            saved = "not recorded in the history"
        return f"{word} after {elapsed:.1f} s: {kept}, {saved}."

    def _finish(self, status: Text) -> None:
        self._ticker.pause()
        if self._progress is None and self.results:        # smoke reports no progress: one step, done
            self.query_one("#bench-bar", ProgressBar).update(total=1, progress=1)
        self._draw_progress()
        self._status(status)
        if not self.results:
            self.query_one("#results-body", Static).update(Text("No results.", style="dim"))

    async def _ask_host_key(self, target: Any, fingerprint: str) -> bool:
        return await self.ask(host_key_question(target, fingerprint))

    def _on_progress(self, progress: Any) -> None:
        last = self._progress
        if last is None or progress.concurrency != last.concurrency or progress.elapsed_s < last.elapsed_s:
            self._level += 1
        self._progress = progress

    def _on_result(self, params: BenchParams, result: BenchResult, row: int | None) -> None:
        self.results.append(result)
        assert self.pricing is not None
        if row is not None:
            self.recorded.append(row)
        self.show_results(params.kind, self.results, self.pricing)

    def _draw_progress(self) -> None:
        p, params = self._progress, self._params
        if params is None:
            return
        line = Text(f"{params.kind}", style="bold")
        line.append(f" · elapsed {time.monotonic() - self._started:.1f} s")
        if p is not None:
            bar = self.query_one("#bench-bar", ProgressBar)
            if p.requests_total:
                bar.update(total=p.requests_total, progress=p.requests_done)
            elif params.duration_s:          # a duration-bound level: time is the progress
                bar.update(total=params.duration_s, progress=min(p.elapsed_s, params.duration_s))
            if p.concurrency is not None:
                levels = len(params.streams)
                line.append(f" · {_count(p.concurrency, 'stream')} (level {min(self._level, levels)} of {levels})")
            total = f"/{p.requests_total}" if p.requests_total else ""
            line.append(f" · {p.requests_done}{total} requests · {p.output_tokens:,} output tokens · "
                        f"{p.output_tokens_per_s:,.1f} tok/s")
        self.query_one("#bench-progress", Static).update(line)

    # --- results -----------------------------------------------------------------------------

    def show_results(self, kind: str, results: list[Any], pricing: Pricing) -> None:
        """Render ``results`` of ``kind`` (also used by tests with fixed results)."""
        if not results:
            return
        node = self.node
        head = f"{results[0].model} on {node.name} ({node.accelerator_type}, {node.provisioning_model})"
        self.query_one("#results-body", Static).update(result_view(kind, head, results, pricing))

    # --- leaving -----------------------------------------------------------------------------

    def action_back_or_cancel(self) -> None:
        """Back to the fleet; while a benchmark runs, ask whether to cancel it."""
        if not self.running:
            self.dismiss()
            return

        def answered(yes: bool | None) -> None:
            if yes and self._worker is not None:
                self._worker.cancel()

        self.app.push_screen(ConfirmScreen(
            "Cancel the running benchmark?",
            "Levels already finished stay on screen and in the history; the level in flight is dropped.",
            confirm_label="Cancel it", cancel_label="Keep running"), answered)
