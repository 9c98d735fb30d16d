"""A benchmark figure across launches: one row per launch, one bar column per concurrency.

Bars are scaled per concurrency column (the best value of that column fills the bar) and
coloured by how far each value is from the column's best, so a regression between two
launches shows at a glance. Plain Rich/Unicode: no plotting dependency.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from remote.printable import printable
from store.records import BenchmarkRecord, Launch

_EIGHTHS = " ▏▎▍▌▋▊▉"


@dataclass(frozen=True)
class PlotMetric:
    """A benchmark figure the plot can show.

    Attributes:
        attr: :class:`~store.records.BenchmarkRecord` attribute (``output_tokens_per_s``...).
        label: heading, with its unit.
        higher_is_better: direction used to colour regressions.
    """

    attr: str
    label: str
    higher_is_better: bool


#: The figures ``p`` cycles through, first is the default.
METRICS: tuple[PlotMetric, ...] = (
    PlotMetric("output_tokens_per_s", "Output tokens/s", True),
    PlotMetric("ttft_median_ms", "TTFT median (ms)", False),
    PlotMetric("tpot_median_ms", "TPOT median (ms)", False),
    PlotMetric("usd_per_mtok", "$ per million output tokens", False),
)


def bar(fraction: float, width: int) -> str:
    """A horizontal bar ``width`` cells wide filled to ``fraction`` (0..1) in eighths of a cell."""
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, rest = divmod(eighths, 8)
    text = "█" * full + (_EIGHTHS[rest] if rest else "")
    return text.ljust(width)


Points = dict[tuple[int, int], float]


def series(launches: Sequence[Launch], benches: Mapping[int, Sequence[BenchmarkRecord]],
           metric: PlotMetric, *, max_launches: int = 8) -> tuple[list[Launch], list[int], Points]:
    """The points to plot: ``(launches, concurrencies, {(launch id, concurrency): value})``.

    Only throughput benchmarks with a concurrency and a value for ``metric`` count; when a
    launch ran the same concurrency twice the newest run wins. Launches keep the given
    order (newest first in the pane), at most ``max_launches`` of those with a point.
    """
    points: Points = {}
    chosen: list[Launch] = []
    for launch in launches:
        found = False
        for b in benches.get(launch.id, ()):  # oldest first: later runs overwrite
            value = getattr(b, metric.attr)
            if b.kind == "throughput" and b.concurrency is not None and isinstance(value, (int, float)):
                points[(launch.id, b.concurrency)] = float(value)
                found = True
        if found:
            chosen.append(launch)
            if len(chosen) == max_launches:
                break
    ids = {x.id for x in chosen}
    points = {k: v for k, v in points.items() if k[0] in ids}
    return chosen, sorted({c for _, c in points}), points


def _style(value: float, best: float, higher_is_better: bool) -> str:
    """Green within 10 % of the column's best, yellow within 30 %, red beyond."""
    if best == 0 or value == best:
        return "green"
    loss = (best - value) / best if higher_is_better else (value - best) / best
    return "green" if loss <= 0.10 else "yellow" if loss <= 0.30 else "red"


def plot_layout(width: int | None, label_cells: int, value_cells: int, header_cells: int,
                levels: int) -> tuple[int, int, int]:
    """How the plot fits ``width`` cells: ``(label cells, concurrency columns kept, bar cells)``.

    The launch label gets at most 28 cells and a quarter of the width (at least 12), then as many concurrency columns as
    keep a bar of at least 4 cells next to the value (bars of at most 12); ``width`` ``None``
    keeps every column with 12-cell bars.
    """
    if width is None:
        return label_cells, levels, 12
    label = max(12, min(label_cells, 28, width // 4))
    for kept in range(levels, 0, -1):
        per_column = (width - label) // kept - 2           # two cells of padding between columns
        bar_cells = min(12, per_column - value_cells - 1)
        if bar_cells >= 4 and per_column >= header_cells:
            return label, kept, bar_cells
    return label, 1, max(1, min(12, width - label - value_cells - 3))


def render_plot(launches: Sequence[Launch], benches: Mapping[int, Sequence[BenchmarkRecord]],
                metric: PlotMetric = METRICS[0], *, selected_id: int | None = None,
                width: int | None = None, max_concurrencies: int = 4) -> RenderableType:
    """The plot as a Rich renderable (a sentence when no launch has that figure).

    Args:
        launches: launches in display order (newest first).
        benches: ``{launch id: benchmarks oldest first}``.
        metric: the figure.
        selected_id: this launch's row is marked ``▶``.
        width: cells available; the label, the concurrency columns kept (lowest first) and the
            bars shrink to fit it whole (see :func:`plot_layout`), never cut to "…".
        max_concurrencies: the lowest concurrencies kept when more were run.
    """
    chosen, levels, points = series(launches, benches, metric)
    title = Text.assemble((f"{metric.label} by concurrency", "bold"),
                          (" · throughput benchmarks · p: next figure", "dim"))
    if not chosen:
        return Group(title, Text("No throughput benchmark among these launches.", style="dim"))
    levels = levels[:max_concurrencies]
    labels = {}
    for launch in chosen:
        mark = "▶ " if launch.id == selected_id else "  "
        model = (launch.model or "?").rsplit("/", 1)[-1]
        labels[launch.id] = printable(f"{mark}{launch.id} {launch.accelerator_type or '?'} {model}")
    value_cells = max(len(f"{v:,.1f}") for v in points.values())
    headers = {level: f"{level} stream{'s' if level != 1 else ''}" for level in levels}
    label_cells, kept, bar_width = plot_layout(width, max(len(t) for t in labels.values()), value_cells,
                                               max(len(h) for h in headers.values()), len(levels))
    levels = levels[:kept]
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1))
    table.add_column("launch", no_wrap=True, max_width=label_cells, overflow="crop")
    for level in levels:
        table.add_column(headers[level], no_wrap=True)
    best = {}
    for level in levels:
        column = [v for (_, c), v in points.items() if c == level]
        best[level] = max(column) if metric.higher_is_better else min(column)
    scale = {level: max(v for (_, c), v in points.items() if c == level) for level in levels}
    for launch in chosen:
        cells: list[Text | str] = [Text(labels[launch.id][:label_cells])]
        for level in levels:
            value = points.get((launch.id, level))
            if value is None:
                cells.append(Text("·".ljust(bar_width) + " " + "-".rjust(value_cells), style="dim"))
                continue
            fraction = value / scale[level] if scale[level] else 0.0
            style = _style(value, best[level], metric.higher_is_better)
            cells.append(Text.assemble((bar(fraction, bar_width), style), " ", f"{value:,.1f}".rjust(value_cells)))
        table.add_row(*cells)
    parts: list[RenderableType] = [title, table]
    if kept < len(headers):
        parts.append(Text(f"{len(headers) - kept} more concurrencies: widen the terminal", style="dim"))
    return Group(*parts)


class BenchPlot(Static):
    """Shows :func:`render_plot` for the launches it is given."""

    DEFAULT_CSS = """
    BenchPlot {
        height: auto;
        padding: 0 1;
    }
    """

    #: What was last shown, so a resize can refit it.
    _shown: tuple[Sequence[Launch], Mapping[int, Sequence[BenchmarkRecord]], PlotMetric, int | None] | None = None

    def show(self, launches: Sequence[Launch], benches: Mapping[int, Sequence[BenchmarkRecord]],
             metric: PlotMetric = METRICS[0], *, selected_id: int | None = None) -> None:
        """Redraw for these launches (newest first) and their benchmarks, fitted to the widget's width."""
        self._shown = (launches, benches, metric, selected_id)
        width = self.content_size.width or None
        self.update(render_plot(launches, benches, metric, selected_id=selected_id, width=width))

    def on_resize(self) -> None:
        """Refit to the new width."""
        if self._shown is not None:
            launches, benches, metric, selected_id = self._shown
            self.update(render_plot(launches, benches, metric, selected_id=selected_id,
                                    width=self.content_size.width or None))
