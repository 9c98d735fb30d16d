"""Rich tables of a launch compare (:mod:`console.flows.launch_compare`), for the compare view
and ``tpu-console history compare``."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from console.flows.launch_compare import NOISE_PCT, FigureDelta, FlagChange
from console.render import format as fmt
from console.render.history_detail import number, short_time, styled_outcome
from console.render.plain import printable, row
from store.records import Launch

_VERDICT_STYLES = {"better": "green", "worse": "bold red", "same": "dim", "within noise": "dim"}


def _digits(figure: str) -> int:
    if "tokens)" in figure or "(1" in figure:
        return 0
    if "$" in figure:
        return 3
    if "GiB" in figure or "(0-1)" in figure or (":" in figure and figure.endswith("(s)")):
        return 2
    return 1


def _value(v: float | None, figure: str) -> str:
    return "-" if v is None else number(v, _digits(figure))


def flag_table(changes: Sequence[FlagChange]) -> Table:
    """The spec diff as a Rich table (setting, A, B, change)."""
    table = Table(title="Spec: image, flags, env, volumes", title_justify="left", title_style="bold")
    table.add_column("setting", style="bold", no_wrap=True)
    table.add_column("A", overflow="fold")
    table.add_column("B", overflow="fold")
    table.add_column("change", no_wrap=True)
    styles = {"added": "green", "removed": "red", "changed": "yellow", "pinned": "dim", "unpinned": "dim"}
    for c in changes:
        table.add_row(*row(c.setting, Text(fmt.dash(c.a), style="dim" if c.a is None else ""),
                           Text(fmt.dash(c.b), style="dim" if c.b is None else ""),
                           Text(c.change, style=styles[c.change])))
    if not changes:
        table.add_row(Text("same image, model, flags, env and volumes", style="dim"), "", "", "")
    return table


def noise_note() -> str:
    """One line saying when a change counts as better or worse."""
    return (f"better/worse only beyond the figure's run-to-run noise: ±{NOISE_PCT['time_to_ready_s']:g}% for "
            f"boot times, tok/s and $/Mtok, ±{NOISE_PCT['ttft_ms']:g}% for latency medians, any change for "
            "KV cache, concurrency and pass/fail results")


def figure_table(rows: Sequence[FigureDelta]) -> Table:
    """The figure diff as a Rich table (figure, A, B, Δ, Δ %, noise, verdict)."""
    table = Table(title="Figures", title_justify="left", title_style="bold", caption=noise_note(),
                  caption_justify="left")
    table.add_column("figure", style="bold", no_wrap=True)
    for name in ("A", "B", "Δ (B−A)", "Δ %", "noise"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for r in rows:
        delta, pct = "-", "-"
        if r.delta is not None:
            delta = ("+" if r.delta > 0 else "") + _value(r.delta, r.figure)
            pct = f"{r.delta_pct:+.1f}%" if r.delta_pct is not None else "-"
        noise = f"±{r.noise_pct:g}%" if r.noise_pct and r.higher_is_better is not None else ""
        style = _VERDICT_STYLES.get(r.verdict, "")
        table.add_row(*row(r.figure, _value(r.a, r.figure), _value(r.b, r.figure), Text(delta, style=style),
                           Text(pct, style=style), Text(noise, style="dim"), Text(r.verdict, style=style)))
    return table


def who(tag: str, launch: Launch) -> Text:
    """``A  launch 3  ready  2026-11-29 11:00  node · accelerator · model``."""
    return Text.assemble((f"{tag}  launch {launch.id}  ", "bold"), styled_outcome(launch.outcome),
                         printable(f"  {short_time(launch.requested_at)}  {launch.node} · "
                                   f"{fmt.dash(launch.accelerator_type)} · {fmt.dash(launch.model)}"))
