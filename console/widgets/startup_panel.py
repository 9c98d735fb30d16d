"""The startup panel: status line, ready/failed banner, HBM bars, KV cache, compile progress, phases.

Everything shown comes from a :class:`PanelInfo` (the reader's ``StartupState`` plus what the
screen knows: tail status, tunnel, history ETA, the time now), so the panel can be fed from a
corpus log in tests exactly as from a live tail. Figures are printed as the log states them:
GiB with two decimals, tokens with thousands separators, concurrency as ``35.15x``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Label, Static

from console.render import format as fmt
from console.render.plain import plain, printable
from console.widgets.hbm_bars import HbmBars
from console.widgets.in_place import update_in_place
from console.widgets.serving_panel import ServingPanel
from remote.accelerators import generation_by_hbm_limit, generation_facts
from remote.container.tail import TailStatus
from remote.secrets import scrub_text
from remote.startup import CompileProgress, Phase, PhaseMark, StartupState
from remote.vllm_log.workers import CompileWatch, SliceHbm

#: The step in flight is cut to this many characters (jax array reprs run to kilobytes).
IN_FLIGHT_CHARS = 110
_STATUS_STYLES = {"connecting": ("…", "yellow"), "connected": ("●", "green"), "reconnecting": ("↻", "yellow"),
                  "waiting": ("…", "cyan"), "exited": ("■", "magenta"), "error": ("✘", "bold red")}


@dataclass(frozen=True)
class ServedKv:
    """What the server's ``/metrics`` says of its KV cache once it serves (summed over its engines).

    Attributes:
        kv_cache_tokens: ``kv_cache_size_tokens`` as stated (never derived from blocks), or ``None``.
        max_concurrency: ``kv_cache_max_concurrency`` (requests at max-model-len), or ``None``.
        engines: data-parallel engines labelled in the samples (1 without labels).
        gpu_memory_utilization: ``gpu_memory_utilization`` of the cache config, or ``None``.
    """

    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    engines: int = 1
    gpu_memory_utilization: float | None = None


@dataclass(frozen=True)
class PanelInfo:
    """What the panel shows.

    Attributes:
        state: the reader's state.
        now: the current UTC time (elapsed and running durations are measured to it).
        status: the tail's status, or ``None`` before the first one.
        problem: a sentence that overrides the status line (could not connect, host key refused).
        compile_eta_s: median compile seconds of past boots with the same compile key, or
            ``None`` (``history_known`` says whether the history could be asked at all).
        history_known: the history was consulted (``False``: spec or store unavailable).
        tunnel_url: ``http://127.0.0.1:PORT`` of the SSH forward to vLLM, once open.
        tunnel_note: a sentence about the tunnel (opening, failed, re-opened).
        served_models: model ids ``/v1/models`` answered through the tunnel.
        node_wait: the node is not READY yet: its state and what the wait is for (a sentence).
        workers: workers followed at once (a multi-host slice), 1 otherwise.
        slice_hbm: per boot stage, HBM summed over the followed workers
            (:func:`remote.vllm_log.workers.slice_hbm`); empty for one worker.
        served_kv: what ``/metrics`` said of the KV cache after ready (the headline's figures
            from then on), or ``None`` before its first read.
        compile_watch: each worker's in-flight compile step, its age and a stuck-step warning
            (:func:`remote.vllm_log.workers.compile_watch`), or ``None`` for one worker.
    """

    state: StartupState = field(default_factory=StartupState)
    now: datetime | None = None
    status: TailStatus | None = None
    problem: str | None = None
    compile_eta_s: float | None = None
    history_known: bool = False
    tunnel_url: str | None = None
    tunnel_note: str | None = None
    served_models: tuple[str, ...] | None = None
    node_wait: str | None = None
    workers: int = 1
    slice_hbm: tuple[SliceHbm, ...] = ()
    served_kv: ServedKv | None = None
    compile_watch: CompileWatch | None = None


def slice_text(info: PanelInfo) -> Text:
    """``4 workers (bars: worker 0's chips)`` and, per stage, the HBM summed over the slice."""
    out = Text.assemble((f"{info.workers} workers", "bold"), " (bars: worker 0's chips)")
    names = {"worker_init": "worker init", "model_loaded": "model loaded", "kv_cache": "KV cache"}
    for item in info.slice_hbm:
        out.append(f"\n{names.get(item.stage, item.stage)}: {item.used_gib:.2f} / {item.limit_gib:.2f} GiB "
                   f"over {fmt.count(item.chips, 'chip')} ({item.workers} of {item.total_workers} workers)")
    watch = info.compile_watch
    if watch is not None:
        for step in watch.steps:
            if step.step is None:
                continue
            shown = step.step if len(step.step) <= IN_FLIGHT_CHARS else step.step[:IN_FLIGHT_CHARS] + "…"
            age = "" if step.age_s is None else f" for {fmt.duration(step.age_s)}"
            out.append(f"\nw{step.worker} compiling{age}: ")
            out.append(printable(shown), style="dim")
        if watch.warning:
            out.append(f"\n⚠ {watch.warning}", style="bold yellow")
    return out


def status_text(info: PanelInfo) -> Text:
    """The status line: connected / reconnecting (attempt n) / waiting / exited (code) / error."""
    if info.problem:
        return Text.assemble(("✘ ", "bold red"), (printable(info.problem), "red"))
    status = info.status
    if status is None and info.node_wait:
        return Text.assemble(("… waiting for the node", "bold yellow"), printable(f": {info.node_wait}"))
    if status is None:
        return Text("… connecting", style="yellow")
    glyph, style = _STATUS_STYLES.get(status.kind, ("?", ""))
    return Text.assemble((f"{glyph} {status.kind}", f"bold {style}".strip()), printable(f": {status.message}"))


def banner(info: PanelInfo) -> RenderableType | None:
    """The ready banner (with the tunnel URL) or the failure banner (kind, evidence, why, what to try)."""
    state = info.state
    failure = state.failure
    if state.ready:
        lines = [Text("✔ READY", style="bold green")]
        if info.tunnel_url:
            lines.append(Text.assemble("Local URL ", (printable(info.tunnel_url), "bold underline"),
                                       " (SSH tunnel to the node's vLLM port)"))
            lines.append(plain(f"curl {info.tunnel_url}/v1/models", style="dim"))
        if info.served_models is not None:
            lines.append(plain(f"/v1/models answers: {', '.join(info.served_models) or 'no models'}",
                               style="green"))
        if info.tunnel_note:
            lines.append(plain(info.tunnel_note, style="yellow"))
        if state.server_url:
            lines.append(plain(f"the log says: serving on {state.server_url}", style="dim"))
        return Group(*lines)
    if failure is not None and failure.fatal:
        return Group(
            Text(f"✘ FAILED: {failure.kind.value}", style="bold red"),
            Text.assemble(("Evidence ", "bold"), (printable(scrub_text(failure.evidence_line.strip()[:300])), "red")),
            Text.assemble(("Why ", "bold"), printable(scrub_text(failure.explanation))),
            Text.assemble(("Try ", "bold"), printable(scrub_text(failure.hint))),
        )
    return None


def kv_text(state: StartupState, served: ServedKv | None = None) -> RenderableType:
    """KV cache tokens and the maximum concurrency at the tokens per request the log states.

    Once the server's ``/metrics`` states a figure (``served``), it is the headline, marked
    ``(/metrics)``, with the log's figure beside it when the two differ. Figures from a boot that
    then failed are marked "reported, never usable" (the engine sized the KV cache but never served
    with it); a maximum concurrency below 1.0x from either source (the cache cannot hold one request
    at max-model-len, vLLM refuses such a boot) is flagged in red with the largest max-model-len the
    cache holds; a one-line KV figure whose size and concurrency disagree is flagged in yellow.
    """
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    failed = not state.ready and state.failure is not None and state.failure.fatal
    unusable = Text("  reported, never usable: the boot failed", style="yellow") if failed else ""
    style = "dim" if failed else ""
    served_tokens = served.kv_cache_tokens if served is not None else None
    served_conc = served.max_concurrency if served is not None else None
    if served_tokens is not None:
        grid.add_row("KV cache", Text.assemble(f"{served_tokens:,} tokens (/metrics{_engines(served)})",
                                               _log_said(state.kv_cache_tokens, served_tokens, ",")))
    elif state.kv_cache_tokens is not None:
        grid.add_row("KV cache", Text.assemble((f"{state.kv_cache_tokens:,} tokens", style), unusable))
    elif state.device_blocks is not None:
        blocks = f"{state.device_blocks:,} {state.device_blocks_label or ''} blocks".replace("  ", " ")
        grid.add_row("KV cache", Text.assemble((blocks, style), unusable))
    else:
        grid.add_row("KV cache", Text("not sized yet", style="dim"))
    per = state.max_concurrency_tokens_per_request
    at = f" at {per:,} tokens per request" if per else ""
    if served_conc is not None:
        grid.add_row("Max concurrency", Text.assemble(f"{served_conc:.2f}x{at} (/metrics)",
                                                      _log_said(state.max_concurrency, served_conc, ".2f", "x")))
    elif state.max_concurrency is not None:
        grid.add_row("Max concurrency", Text.assemble((f"{state.max_concurrency:.2f}x{at}", style), unusable))
    below = [(name, value) for name, value in (("/metrics", served_conc), ("the log", state.max_concurrency))
             if value is not None and value < 1.0]
    if below:
        fits_tokens = served_tokens if served_tokens is not None else state.kv_cache_tokens
        fits = f"; --max-model-len {fits_tokens} fits" if fits_tokens else ""
        sources = ' and '.join(f'{name}: {value:.2f}x' for name, value in below)
        said = "" if served_conc is None else f" ({sources})"      # the log alone: its figure is above
        grid.add_row("", Text(f"below 1.0x{said}: the KV cache cannot hold one request at max-model-len{fits}",
                              style="bold red"))
    if state.kv_cache_note:
        grid.add_row("", Text(state.kv_cache_note, style="yellow"))
    if state.max_model_len is not None:
        grid.add_row("max-model-len", f"{state.max_model_len:,} tokens")
    util_row = utilization_note(state)
    if util_row is not None:
        grid.add_row("HBM utilization", util_row)
    if state.num_gpu_blocks_override is not None:
        grid.add_row("Blocks", Text(f"{state.num_gpu_blocks_computed} fit, override asks "
                                    f"{state.num_gpu_blocks_override}", style="yellow"))
    return grid


def _engines(served: ServedKv | None) -> str:
    return f", {served.engines} engines" if served is not None and served.engines > 1 else ""


def _log_said(logged: float | None, served: float, fmt: str, unit: str = "") -> Text | str:
    """`` · the log said N`` (yellow) when the log's figure differs from the server's, else ``""``."""
    if logged is None or round(logged, 2) == round(served, 2):
        return ""
    return Text(f" · the log said {logged:{fmt}}{unit}", style="yellow")


def utilization_note(state: StartupState) -> Text | None:
    """``--gpu-memory-utilization`` against the generation's ceiling known to work
    (``remote.accelerators``; the generation from ``TPU info``, else from the per-chip HBM limit
    the hbm lines print): yellow above it, "not checked" for a generation without one; ``None``
    when the log states no utilization or nothing tells the generation."""
    util = state.gpu_memory_utilization
    snap = state.hbm_snapshots[-1] if state.hbm_snapshots else None
    by_limit = generation_by_hbm_limit(snap.limit_gib[0]) if snap and snap.limit_gib else None
    if util is None or not (state.tpu_type or by_limit):
        return None
    facts = generation_facts(state.tpu_type) if state.tpu_type else by_limit
    if facts is None or facts.max_hbm_utilization is None:
        where = facts.generation if facts else state.tpu_type
        return Text(f"{util:.2f} (no ceiling known for {where}: not checked)", style="dim")
    ceiling = facts.max_hbm_utilization
    if util > ceiling:
        return Text(f"{util:.2f}, above {ceiling:.2f}, the highest known to work on {facts.generation}",
                    style="bold yellow")
    return Text(f"{util:.2f} (at most {ceiling:.2f} is known to work on {facts.generation})")


def _end_time(state: StartupState, now: datetime | None) -> datetime | None:
    if state.ready or (state.failure is not None and state.failure.fatal):
        return state.last_line_at or now
    return now


def compile_text(info: PanelInfo) -> RenderableType:
    """Steps done, the step in flight, elapsed, s/step and the ETA (or why there is none)."""
    state = info.state
    comp = state.compile
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    if comp.steps_started == 0 and comp.steps_finished == 0 and state.compile_seconds is None:
        grid.add_row("Compile", Text("not started", style="dim"))
        return grid
    grid.add_row("Steps", steps_words(comp))
    failed = state.failure is not None and state.failure.fatal
    if comp.in_flight and not state.ready:
        shown = comp.in_flight if len(comp.in_flight) <= IN_FLIGHT_CHARS else comp.in_flight[:IN_FLIGHT_CHARS] + "…"
        grid.add_row("Failed in" if failed else "In flight", shown)
    end = _end_time(state, info.now)
    elapsed = (end - comp.started_at).total_seconds() if end and comp.started_at else None
    if state.compile_seconds is not None:
        grid.add_row("Compiled", f"in {state.compile_seconds:.2f} s" + (
            f" (engine init {state.engine_init_seconds:.2f} s)" if state.engine_init_seconds else ""))
    elif elapsed is not None:
        grid.add_row("Elapsed", fmt.duration(elapsed))
    if comp.steps_finished:
        rate = comp.step_seconds_total / comp.steps_finished
        last = f" (last {comp.last_step_seconds:.2f} s)" if comp.last_step_seconds is not None else ""
        grid.add_row("Rate", f"{rate:.2f} s/step{last}")
    if state.compile_seconds is None and not state.ready and not failed:
        grid.add_row("ETA", _eta(info, elapsed))
    return grid


def steps_words(comp: CompileProgress) -> str:
    """``95 done (8 compiled in warm-up)``; ``87 done, 8 deferred to warm-up``; ``12 done of 13 started``:
    steps whose AOT lowering was skipped count as done once a warm-up pass (or ready) compiled them."""
    words = f"{comp.steps_done} done"
    if comp.deferred_done:
        words += f" ({comp.deferred_done} compiled in warm-up)"
    if comp.deferred_pending:
        words += f", {comp.deferred_pending} deferred to warm-up"
    if comp.steps_started > comp.steps_done + comp.deferred_pending:
        words += f" of {comp.steps_started} started"
    return words


def _eta(info: PanelInfo, elapsed: float | None) -> Text:
    if info.compile_eta_s is None:
        why = "no history yet" if info.history_known else "no history for this setup"
        return Text(why, style="dim")
    median = fmt.duration(info.compile_eta_s)
    if elapsed is None:
        return Text(f"~{median} (median of past boots)")
    left = info.compile_eta_s - elapsed
    if left >= 0:
        return Text(f"~{fmt.duration(left)} left (median of past boots {median})")
    return Text(f"over the median of past boots ({median}) by {fmt.duration(-left)}", style="yellow")


def phase_spans(marks: Sequence[PhaseMark],
                now: datetime | None) -> list[tuple[Phase, datetime | None, float | None, int]]:
    """Each phase once, in the order first entered: ``(phase, first start, seconds spent in it over all
    its visits or None when a time is missing, visits)``. tpu-inference revisits phases (it sizes the
    KV cache, precompiles, allocates, precompiles again), so the timeline holds ``compiling`` and
    ``allocating_kv_cache`` twice in one boot; the panel lists each once with its total. The last,
    unfinished visit runs to ``now``; READY / FAILED count no time."""
    first: dict[Phase, datetime | None] = {}
    total: dict[Phase, float | None] = {}
    visits: dict[Phase, int] = {}
    for i, mark in enumerate(marks):
        first.setdefault(mark.phase, mark.started_at)
        visits[mark.phase] = visits.get(mark.phase, 0) + 1
        spent = total.setdefault(mark.phase, 0.0)
        if mark.phase in (Phase.READY, Phase.FAILED):
            continue
        end = marks[i + 1].started_at if i + 1 < len(marks) else now
        total[mark.phase] = (None if spent is None or end is None or mark.started_at is None
                             else spent + max(0.0, (end - mark.started_at).total_seconds()))
    return [(phase, first[phase], total[phase], visits[phase]) for phase in first]


def timeline_table(info: PanelInfo) -> RenderableType:
    """Phases entered, each once (:func:`phase_spans`), with first start and time spent (the current one
    runs to ``now``, ``▸``; a phase visited more than once says ``×N``)."""
    state = info.state
    if not state.timeline:
        return Text("no phase yet", style="dim")
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(justify="right", no_wrap=True)
    current = state.timeline[-1].phase
    for phase, first, total, visits in phase_spans(state.timeline, info.now):
        start = first.strftime("%H:%M:%S") if first else "-"
        if phase in (Phase.READY, Phase.FAILED):
            style = "bold green" if phase is Phase.READY else "bold red"
            grid.add_row(Text(phase.value, style=style), start, "")
            continue
        took = fmt.duration(total) if total is not None else ("…" if phase is current else "-")
        label = Text(phase.value) + (Text(f" ×{visits}", style="dim") if visits > 1 else Text(""))
        if phase is current:
            label.stylize("bold yellow", 0, len(phase.value))
            grid.add_row(label, start, Text(f"{took} ▸", style="yellow"))
        else:
            grid.add_row(label, start, took)
    return grid


def facts_text(state: StartupState) -> Text:
    """One line of setup facts the log stated (model, TPU type, chips, vLLM version).

    The line count is in the log pane's title: here it would re-render the panel per batch.
    """
    parts = [p for p in (state.model, state.tpu_type,
                         f"{state.num_chips} chip{'s' if state.num_chips != 1 else ''}" if state.num_chips else None,
                         f"vLLM {state.vllm_version}" if state.vllm_version else None) if p]
    if state.restarts:
        parts.append(f"restarted {state.restarts}x")
    return plain(" · ".join(parts), style="dim")


class StartupPanel(VerticalScroll):
    """The left pane of the startup view; :meth:`show` renders a :class:`PanelInfo`."""

    DEFAULT_CSS = """
    StartupPanel { height: 1fr; padding: 0 1; }
    StartupPanel > .panel-title { color: $text-accent; text-style: bold; margin-top: 1; }
    StartupPanel > #panel-banner { padding: 0 1; margin-top: 1; height: auto; }
    StartupPanel > #panel-banner.ready { border: round $success; }
    StartupPanel > #panel-banner.failed { border: round $error; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.info = PanelInfo()
        self._keys: dict[str, object] = {}

    def compose(self) -> ComposeResult:
        yield Static(status_text(self.info), id="panel-status")
        yield Static("", id="panel-facts")
        yield Static("", id="panel-banner")
        yield ServingPanel(id="panel-serving")
        yield Label("HBM per chip", classes="panel-title")
        yield HbmBars(id="panel-hbm")
        yield Static("", id="panel-slice")
        yield Label("KV cache", classes="panel-title")
        yield Static("", id="panel-kv")
        yield Label("XLA compile", classes="panel-title")
        yield Static("", id="panel-compile")
        yield Label("Phases", classes="panel-title")
        yield Static("", id="panel-timeline")

    def on_mount(self) -> None:
        self.show(self.info)

    def show(self, info: PanelInfo) -> None:
        """Render ``info`` into the sections whose inputs changed.

        A section is only rendered again when what it shows changed (a burst of metrics lines
        changes none of them), and re-lays out the screen only when its height changed
        (:func:`~console.widgets.in_place.update_in_place`: the running compile and phase
        durations tick once a second without a layout).
        """
        self.info = info
        if not self.is_mounted:
            return
        state = info.state
        comp = state.compile
        running_s = int(info.now.timestamp()) if info.now and state.phase not in (Phase.READY, Phase.FAILED) else 0
        self._section("status", (info.problem, info.status, info.node_wait), lambda: status_text(info))
        self._section("facts", (state.model, state.tpu_type, state.num_chips, state.vllm_version, state.restarts),
                      lambda: facts_text(state))
        failure = state.failure if state.failure is not None and state.failure.fatal else None
        key = (state.ready, failure, info.tunnel_url, info.tunnel_note, info.served_models, state.server_url)
        if self._keys.get("banner") != key:
            self._keys["banner"] = key
            shown = banner(info)
            box = self.query_one("#panel-banner", Static)
            box.display = shown is not None
            box.set_class(state.ready, "ready")
            box.set_class(not state.ready and shown is not None, "failed")
            update_in_place(box, shown if shown is not None else "")
        self.query_one("#panel-hbm", HbmBars).show(state.hbm_snapshots)
        if self._keys.get("slice") != (info.workers, info.slice_hbm, info.compile_watch):
            self._keys["slice"] = (info.workers, info.slice_hbm, info.compile_watch)
            box = self.query_one("#panel-slice", Static)
            box.display = info.workers > 1
            update_in_place(box, slice_text(info) if info.workers > 1 else "")
        self._section("kv", (state.kv_cache_tokens, state.device_blocks, state.max_concurrency,
                             state.max_concurrency_tokens_per_request, state.max_model_len,
                             state.num_gpu_blocks_override, state.ready, failure is not None,
                             state.gpu_memory_utilization, state.tpu_type, state.kv_cache_note, info.served_kv),
                      lambda: kv_text(state, info.served_kv))
        self._section("compile", (comp, state.compile_seconds, state.engine_init_seconds, state.ready, failure,
                                  info.compile_eta_s, info.history_known, running_s), lambda: compile_text(info))
        self._section("timeline", (state.timeline, running_s), lambda: timeline_table(info))

    def _section(self, name: str, key: object, render: Callable[[], RenderableType]) -> None:
        if self._keys.get(name) != key:
            self._keys[name] = key
            update_in_place(self.query_one(f"#panel-{name}", Static), render())
