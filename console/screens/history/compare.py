"""Two recorded launches side by side: what changed in the flags, and what it did to the figures.

:func:`flag_diff` and :func:`figure_diff` are pure (tests call them directly);
:class:`CompareScreen` shows them. ``A`` is the older launch, ``B`` the newer, so deltas
read as "what changed since".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Footer, Header, Static

from console.render import format as fmt
from console.render.history_detail import (
    number,
    peak_hbm_gib,
    short_time,
    styled_outcome,
)
from console.render.plain import printable, row
from console.screens.base import ConsoleScreen
from store.records import BenchmarkRecord, Launch, parse_flags


@dataclass(frozen=True)
class FlagChange:
    """One setting that differs: ``change`` is ``added``, ``removed`` or ``changed``."""

    setting: str
    a: str | None
    b: str | None
    change: str


@dataclass(frozen=True)
class FigureDelta:
    """One figure of both launches.

    Attributes:
        figure: name with unit (``out tok/s @16``).
        a, b: values, ``None`` when not recorded.
        higher_is_better: ``True``/``False``, or ``None`` when neither direction is better.
    """

    figure: str
    a: float | None
    b: float | None
    higher_is_better: bool | None

    @property
    def delta(self) -> float | None:
        """``b - a``, or ``None`` when either is missing."""
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def verdict(self) -> str:
        """``better``, ``worse``, ``same`` or ``""`` (no direction or a value missing)."""
        if self.delta is None:
            return ""
        if self.delta == 0:
            return "same"
        if self.higher_is_better is None:
            return ""
        return "better" if (self.delta > 0) == self.higher_is_better else "worse"


def _settings(launch: Launch) -> dict[str, str]:
    spec = launch.container_spec or {}
    out = {"image": launch.image or spec.get("image") or "", "model": launch.model or spec.get("model") or ""}
    out.update({f"--{k}": v for k, v in parse_flags(launch.serve_args).items()})
    out.update({f"env {k}": str(v) for k, v in (spec.get("env") or {}).items()})
    return {k: v for k, v in out.items() if v != ""}


def flag_diff(a: Launch, b: Launch) -> list[FlagChange]:
    """Image, model, ``vllm serve`` flags and env that differ from ``a`` to ``b``, in ``a``'s
    order then ``b``'s. Flags are normalized (``--a=b``/``--a b``, ``_``/``-``)."""
    sa, sb = _settings(a), _settings(b)
    changes = []
    for key in list(sa) + [k for k in sb if k not in sa]:
        va, vb = sa.get(key), sb.get(key)
        if va == vb:
            continue
        changes.append(FlagChange(key, va, vb, "added" if va is None else "removed" if vb is None else "changed"))
    return changes


def latest_by_concurrency(benches: Sequence[BenchmarkRecord]) -> dict[int, BenchmarkRecord]:
    """The newest throughput benchmark per concurrency (``benches`` oldest first)."""
    out: dict[int, BenchmarkRecord] = {}
    for b in benches:
        if b.kind == "throughput" and b.concurrency is not None:
            out[b.concurrency] = b
    return out


def figure_diff(a: Launch, b: Launch, benches_a: Sequence[BenchmarkRecord],
                benches_b: Sequence[BenchmarkRecord]) -> list[FigureDelta]:
    """Startup figures, then per concurrency the throughput figures, of ``a`` and ``b``."""
    rows = [
        FigureDelta("peak HBM used (GiB/chip)", peak_hbm_gib(a), peak_hbm_gib(b), None),
        FigureDelta("KV cache (tokens)", a.kv_cache_tokens, b.kv_cache_tokens, True),
        FigureDelta("max concurrency", a.max_concurrency, b.max_concurrency, True),
        FigureDelta("max-model-len (tokens)", a.max_model_len, b.max_model_len, None),
        FigureDelta("XLA compile (s)", a.compile_seconds, b.compile_seconds, False),
        FigureDelta("engine init (s)", a.engine_init_seconds, b.engine_init_seconds, False),
        FigureDelta("time to ready (s)", a.time_to_ready_s, b.time_to_ready_s, False),
    ]
    by_a, by_b = latest_by_concurrency(benches_a), latest_by_concurrency(benches_b)
    for level in sorted(set(by_a) | set(by_b)):
        ra, rb = by_a.get(level), by_b.get(level)
        for attr, label, higher in (("output_tokens_per_s", "out tok/s", True), ("ttft_median_ms", "TTFT ms", False),
                                    ("tpot_median_ms", "TPOT ms", False), ("usd_per_mtok", "$/Mtok", False)):
            va = getattr(ra, attr) if ra else None
            vb = getattr(rb, attr) if rb else None
            if va is not None or vb is not None:
                rows.append(FigureDelta(f"{label} @{level} stream{'' if level == 1 else 's'}", va, vb, higher))
    return rows


def _value(v: float | None, figure: str) -> str:
    if v is None:
        return "-"
    digits = 0 if "tokens" in figure else 3 if "$" in figure else 2 if "GiB" in figure else 1
    return number(v, digits)


_VERDICT_STYLES = {"better": "green", "worse": "bold red", "same": "dim"}


def flag_table(changes: Sequence[FlagChange]) -> Table:
    """The flag diff as a Rich table (setting, A, B, change)."""
    table = Table(title="Flags and image", title_justify="left", title_style="bold")
    table.add_column("setting", style="bold", no_wrap=True)
    table.add_column("A", overflow="fold")
    table.add_column("B", overflow="fold")
    table.add_column("change", no_wrap=True)
    styles = {"added": "green", "removed": "red", "changed": "yellow"}
    for c in changes:
        table.add_row(*row(c.setting, Text(fmt.dash(c.a), style="dim" if c.a is None else ""),
                      Text(fmt.dash(c.b), style="dim" if c.b is None else ""), Text(c.change, style=styles[c.change])))
    if not changes:
        table.add_row(*row(Text("same image, model, flags and env", style="dim"), "", "", ""))
    return table


def figure_table(rows: Sequence[FigureDelta]) -> Table:
    """The figure diff as a Rich table (figure, A, B, Δ, Δ %, verdict)."""
    table = Table(title="Figures", title_justify="left", title_style="bold")
    table.add_column("figure", style="bold", no_wrap=True)
    for name in ("A", "B", "Δ (B−A)", "Δ %"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for r in rows:
        delta, pct = "-", "-"
        if r.delta is not None:
            delta = ("+" if r.delta > 0 else "") + _value(r.delta, r.figure)
            pct = f"{r.delta / r.a * 100:+.1f}%" if r.a else "-"
        style = _VERDICT_STYLES.get(r.verdict, "")
        table.add_row(*row(r.figure, _value(r.a, r.figure), _value(r.b, r.figure), Text(delta, style=style),
                           Text(pct, style=style), Text(r.verdict, style=style)))
    return table


def _who(tag: str, launch: Launch) -> Text:
    return Text.assemble((f"{tag}  launch {launch.id}  ", "bold"), styled_outcome(launch.outcome),
                         printable(f"  {short_time(launch.requested_at)}  {launch.node} · "
                                   f"{fmt.dash(launch.accelerator_type)} · {fmt.dash(launch.model)}"))


class CompareScreen(ConsoleScreen):
    """Two launches side by side: flag diff and figure diff with deltas.

    Args:
        a, b: the launches (shown as given: ``a`` is the baseline).
        benches_a, benches_b: their benchmarks, oldest first.
    """

    CSS_PATH = "history.tcss"
    BINDINGS = [
        Binding("escape", "close", "Back", id="compare_back"),
        Binding("x", "swap_sides", "Swap A/B", id="compare_swap"),
    ]

    def __init__(self, a: Launch, b: Launch, benches_a: Sequence[BenchmarkRecord],
                 benches_b: Sequence[BenchmarkRecord]) -> None:
        super().__init__()
        self.a, self.b = a, b
        self.benches_a, self.benches_b = list(benches_a), list(benches_b)
        self.flag_rows: list[FlagChange] = []
        self.figure_rows: list[FigureDelta] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="compare-body"):
            yield Static(id="compare-who")
            yield Static(id="flag-diff")
            yield Static(id="figure-diff")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"compare launches {self.a.id} and {self.b.id}"
        self._show_diff()

    def _show_diff(self) -> None:
        self.flag_rows = flag_diff(self.a, self.b)
        self.figure_rows = figure_diff(self.a, self.b, self.benches_a, self.benches_b)
        who = Text("\n").join([_who("A", self.a), _who("B", self.b)])
        self.query_one("#compare-who", Static).update(who)
        self.query_one("#flag-diff", Static).update(flag_table(self.flag_rows))
        self.query_one("#figure-diff", Static).update(figure_table(self.figure_rows))

    def action_swap_sides(self) -> None:
        """Make B the baseline."""
        self.a, self.b = self.b, self.a
        self.benches_a, self.benches_b = self.benches_b, self.benches_a
        self.sub_title = f"compare launches {self.a.id} and {self.b.id}"
        self._show_diff()

    def action_close(self) -> None:
        """Back to the history pane."""
        self.dismiss()
