"""Two recorded launches side by side: what changed in the spec, and what it did to the figures.

The diff is :mod:`console.flows.launch_compare` (shared with ``tpu-console history compare``),
the tables :mod:`console.render.launch_compare`. ``A`` is the older launch, ``B`` the newer,
so deltas read as "what changed since".
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from console.flows.launch_compare import FigureDelta, FlagChange, figure_diff, spec_diff
from console.render.launch_compare import figure_table, flag_table, who
from console.screens.base import ConsoleScreen
from console.widgets.footer import ConsoleFooter
from console.widgets.header import ConsoleHeader
from store.records import BenchmarkRecord, Launch


class CompareScreen(ConsoleScreen):
    """Two launches side by side: spec diff and figure diff with deltas.

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
        yield ConsoleHeader()
        with VerticalScroll(id="compare-body"):
            yield Static(id="compare-who")
            yield Static(id="flag-diff")
            yield Static(id="figure-diff")
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self.sub_title = f"compare launches {self.a.id} and {self.b.id}"
        self._show_diff()

    def _show_diff(self) -> None:
        self.flag_rows = spec_diff(self.a, self.b)
        self.figure_rows = figure_diff(self.a, self.b, self.benches_a, self.benches_b)
        self.query_one("#compare-who", Static).update(Text("\n").join([who("A", self.a), who("B", self.b)]))
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
