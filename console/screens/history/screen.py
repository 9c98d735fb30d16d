"""The history pane: every recorded launch, newest first, with its detail, compare, relaunch, export.

Keys (ids in brackets, remappable through ``[keys]`` in the config): ``/`` filter [filter],
``m`` mark [history_mark], ``c`` compare the marked launch with the selected one
[history_compare], ``L`` relaunch [history_relaunch], ``e`` export [history_export],
``p`` next plot figure [history_plot], ``r`` refresh [refresh], ``escape`` back [history_back];
opened from a node, every launch is listed with that node's newest launch selected, and ``N``
shows that node's launches only, again every launch [history_node_only]. The list is read again
each time the pane comes back on top (after a relaunch, a compare...).

Every database read runs in the pane's reader thread (:class:`HistoryReader`): the table
fills first, then the benchmarks of the rows shown (detail panel and plot).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.timer import Timer
from textual.widgets import DataTable, Input, Static

from console.flows.history_query import (
    HistoryReader,
    LaunchFilter,
    parse_filter,
    query_launches,
)
from console.flows.launch_log import find_launch_log
from console.render.history_detail import (
    LAUNCH_COLUMNS,
    TableCell,
    launch_cells,
    launch_detail,
    masked_secrets,
)
from console.render.plain import plain, printable
from console.screens.base import ConsoleScreen
from console.screens.history.compare import CompareScreen
from console.screens.history.export import (
    ExportScreen,
    default_export_name,
    write_export,
)
from console.widgets.bench_plot import METRICS, BenchPlot
from console.widgets.footer import ConsoleFooter
from console.widgets.header import ConsoleHeader
from remote.errors import RemoteError
from store.errors import StoreError
from store.records import BenchmarkRecord, Launch

if TYPE_CHECKING:
    from remote.models import Node

#: Seconds of typing quiet before the filter is applied.
FILTER_DEBOUNCE_S = 0.15
#: Widest a launch table column gets (cells), longer values end in an ellipsis.
MAX_COLUMN_WIDTH = {"model": 40, "node": 28, "failure": 28, "accelerator": 16}


class HistoryScreen(ConsoleScreen):
    """Launches from the history database, filterable, with detail, compare, relaunch and export.

    Args:
        node: a ``remote.models.Node`` whose newest launch is selected first (``N`` filters to it), or ``None``.
    """

    CSS_PATH = "history.tcss"
    READONLY_ACTIONS = {"relaunch": "relaunch"}
    BINDINGS = [
        Binding("slash", "focus_filter", "Filter", key_display="/", id="filter"),
        Binding("m", "mark", "Mark", id="history_mark"),
        Binding("c", "compare", "Compare", id="history_compare"),
        Binding("L", "relaunch", "Relaunch", id="history_relaunch"),
        Binding("e", "export", "Export", id="history_export"),
        Binding("p", "next_metric", "Plot figure", id="history_plot"),
        Binding("N", "node_only", "This node only", id="history_node_only"),
        Binding("r", "reload", "Refresh", id="refresh"),
        Binding("escape", "back", "Back", id="history_back"),
    ]

    def __init__(self, node: Node | None = None) -> None:
        super().__init__()
        self.node = node
        self.launch_filter = LaunchFilter()
        self.launches: list[Launch] = []
        self.benches: dict[int, list[BenchmarkRecord]] = {}
        self.marked: Launch | None = None
        self.metric_index = 0
        self.loads = 0  # completed table loads (tests and the bench wait on it)
        self.benches_loaded = False
        self.problem: str | None = None
        self._selected_id: int | None = None
        self._debounce: Timer | None = None
        self._reader: HistoryReader | None = None

    def compose(self) -> ComposeResult:
        yield ConsoleHeader()
        node = self.node.name if self.node is not None else "NAME"
        yield Input("", placeholder=f"filter: node:{node} model:M accelerator:TYPE outcome:failed words… (Enter)",
                    id="history-filter")
        yield Static("Loading the history…", id="history-status")
        yield DataTable(id="launches", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="history-lower"):
            with VerticalScroll(id="launch-detail"):
                yield Static("", id="launch-detail-body")
            with VerticalScroll(id="plot-box"):
                yield BenchPlot(id="bench-plot")
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self._set_columns([])
        table = self.query_one("#launches", DataTable)
        self.sub_title = "history"
        self._reader = HistoryReader(self.services.db_path)
        table.focus()
        self._load(self.launch_filter)

    def on_unmount(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def on_screen_resume(self) -> None:
        """Back on top (from a relaunch's swap, a compare...): read the list again, the selection kept."""
        if self.loads:
            self._load(self.launch_filter)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``N`` (this node only) exists when the pane was opened from a node."""
        return not (action == "node_only" and self.node is None)

    def _say(self, message: str, **kwargs: Any) -> None:
        """A notification whose text is never read as markup (paths, error messages)."""
        self.app.notify(message, markup=False, **kwargs)

    @property
    def selected(self) -> Launch | None:
        """The launch under the cursor."""
        return next((x for x in self.launches if x.id == self._selected_id), None)

    # --- loading ------------------------------------------------------------------------

    @work(group="history-load", exclusive=True, exit_on_error=False)
    async def _load(self, flt: LaunchFilter) -> None:
        assert self._reader is not None
        try:
            launches = await self._reader.call(lambda store: query_launches(store, flt))
        except StoreError as exc:
            self._show_problem(f"The history cannot be read: {exc}")
            return
        self.launch_filter, self.problem = flt, None
        self._show_launches(launches)
        self.call_after_refresh(self._load_benches, launches)

    @work(group="history-benches", exclusive=True, exit_on_error=False)
    async def _load_benches(self, launches: list[Launch]) -> None:
        """The benchmarks of the rows shown (detail panel and plot), once the table is drawn."""
        assert self._reader is not None
        if launches is not self.launches:
            return  # another load replaced these rows meanwhile
        missing = [x.id for x in launches if x.id not in self.benches]
        try:
            found = await self._reader.call(lambda store: store.benchmarks_by_launch(missing)) if missing else {}
        except StoreError as exc:
            self._say(f"Benchmarks not loaded: {exc}", severity="warning")
            return
        self.benches.update({i: found.get(i, []) for i in missing})
        if launches is not self.launches:
            return  # kept for later; the rows shown now have their own load
        self.benches_loaded = True
        self._render_detail()
        self._render_plot()

    def _show_problem(self, message: str) -> None:
        self.problem = message
        self.query_one("#history-status", Static).update(plain(message, style="bold red"))

    def _show_launches(self, launches: list[Launch]) -> None:
        self.launches = launches
        self.benches_loaded = False
        table = self.query_one("#launches", DataTable)
        keep = self._selected_id
        marked = self.marked.id if self.marked else None
        rows = [(str(x.id), launch_cells(x, marked=x.id == marked)) for x in launches]
        self._set_columns([cells for _, cells in rows])
        for key, cells in rows:
            table.add_row(*(TableCell(text, style) for text, style in cells), key=key)
        if keep is None and self.loads == 0 and self.node is not None:
            keep = next((x.id for x in launches if x.node == self.node.name
                         and x.project in (None, "", self.node.project)), None)
        if keep is not None and str(keep) in table.rows:
            table.move_cursor(row=table.get_row_index(str(keep)), animate=False)
        self._selected_id = self._row_id(table)
        self._render_status()
        self._render_detail()
        self._render_plot()
        self.loads += 1

    def _set_columns(self, rows: list[list[tuple[str, str]]]) -> None:
        """Clear the table and add its columns, each as wide as its widest value (capped)."""
        table = self.query_one("#launches", DataTable)
        table.clear(columns=True)
        for index, (key, title) in enumerate(LAUNCH_COLUMNS):
            width = max([len(title), *(len(cells[index][0]) for cells in rows)])
            table.add_column(title, key=key, width=min(width, MAX_COLUMN_WIDTH.get(key, width)))

    def _render_status(self) -> None:
        n, flt = len(self.launches), self.launch_filter
        text = Text()
        if n == 0:
            text.append("No launch matches this filter: / edits it, an empty filter shows every launch."
                        if flt.describe() else "No launch recorded yet: swaps and startup watches record theirs here.",
                        style="yellow")
        else:
            text.append(f"{n} launch{'es' if n != 1 else ''}", style="bold")
            text.append(" · newest first")
            if n >= flt.limit:
                text.append(f" · the {flt.limit} newest (limit:N shows more)", style="yellow")
        if flt.describe():
            text.append(f" · filter {flt.describe()}", style="dim")
        if self.node is not None and flt.node != self.node.name:
            if not any(x.node == self.node.name for x in self.launches):
                text.append(f" · no launch of {printable(self.node.name)} in this list", style="yellow")
            text.append(f" · N: {printable(self.node.name)}'s launches only", style="dim")
        if self.marked is not None:
            text.append(f" · marked {self.marked.id}: select another, c compares", style="magenta")
        self.query_one("#history-status", Static).update(text)

    @staticmethod
    def _row_id(table: DataTable[Any]) -> int | None:
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return int(key) if key is not None else None

    # --- detail and plot ----------------------------------------------------------------

    @on(DataTable.RowHighlighted, "#launches")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None and int(event.row_key.value) != self._selected_id:
            self._selected_id = int(event.row_key.value)
            self._render_detail()
            self._render_plot()

    def _render_detail(self) -> None:
        body = self.query_one("#launch-detail-body", Static)
        launch = self.selected
        if launch is None:
            body.update(Text("Select a launch to see its spec, timeline, figures and benchmarks.", style="dim"))
            return
        log = find_launch_log(self.services.config.logs.folder, launch.node, launch.container_id)
        body.update(launch_detail(launch, self.benches.get(launch.id), log))

    def _render_plot(self) -> None:
        self.query_one("#bench-plot", BenchPlot).show(self.launches, self.benches, METRICS[self.metric_index],
                                                      selected_id=self._selected_id)

    def action_next_metric(self) -> None:
        """Plot the next benchmark figure (tok/s, TTFT, TPOT, $/Mtok)."""
        self.metric_index = (self.metric_index + 1) % len(METRICS)
        self._render_plot()

    # --- filter -------------------------------------------------------------------------

    def action_node_only(self) -> None:
        """Show only the launches of the node the pane was opened from; again: every launch."""
        if self.node is None:
            return
        line = "" if self.launch_filter.node == self.node.name else f"node:{self.node.name}"
        box = self.query_one("#history-filter", Input)
        with box.prevent(Input.Changed):
            box.value = line
        self.apply_filter(line)

    def action_focus_filter(self) -> None:
        """Focus the filter line."""
        self.query_one("#history-filter", Input).focus()

    @on(Input.Changed, "#history-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        if self._debounce is not None:
            self._debounce.stop()
        self._debounce = self.set_timer(FILTER_DEBOUNCE_S, lambda: self.apply_filter(event.value))

    @on(Input.Submitted, "#history-filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        if self._debounce is not None:
            self._debounce.stop()
        if self.apply_filter(event.value):
            self.query_one("#launches", DataTable).focus()

    def apply_filter(self, line: str) -> bool:
        """Parse ``line`` and load its launches (in a worker); ``False`` with the reason shown
        in the status line when it does not parse (the rows stay)."""
        try:
            flt = parse_filter(line)
        except ValueError as exc:
            self._show_problem(f"{exc} (the rows below are for the previous filter)")
            return False
        self._load(flt)
        return True

    def action_reload(self) -> None:
        """Read the history again (benchmarks too)."""
        self.benches.clear()
        self._load(self.launch_filter)

    def action_back(self) -> None:
        """From the filter line back to the table; from the table back to the previous screen."""
        if self.query_one("#history-filter", Input).has_focus:
            self.query_one("#launches", DataTable).focus()
            return
        self.app.pop_screen()

    # --- mark and compare ---------------------------------------------------------------

    def action_mark(self) -> None:
        """Mark the selected launch as the baseline of a compare (again: unmark)."""
        launch = self.selected
        if launch is None:
            self._say("Select a launch to mark.", severity="warning")
            return
        previous = self.marked
        self.marked = None if previous is not None and previous.id == launch.id else launch
        table = self.query_one("#launches", DataTable)
        for item in (previous, self.marked):
            if item is not None and str(item.id) in table.rows:
                cells = launch_cells(item, marked=self.marked is not None and item.id == self.marked.id)
                table.update_cell(str(item.id), "id", TableCell(*cells[0]))
        self._render_status()

    def action_compare(self) -> None:
        """Compare the marked launch with the selected one (no mark: with the launch it replaced)."""
        launch = self.selected
        if launch is None:
            self._say("Select a launch to compare.", severity="warning")
            return
        if self.marked is not None and self.marked.id != launch.id:
            self._compare(self.marked, launch.id)
        elif launch.replaced_launch_id is not None:
            self._compare(launch, launch.replaced_launch_id)
        else:
            self._say("Mark a launch with m, select another, then press c.", severity="warning")

    @work(group="history-compare", exclusive=True, exit_on_error=False)
    async def _compare(self, one: Launch, other_id: int) -> None:
        assert self._reader is not None
        other = next((x for x in self.launches if x.id == other_id), None)
        try:
            if other is None:
                other = await self._reader.call(lambda store: store.get_launch(other_id))
            if other is None:
                self._say(f"Launch {other_id} is no longer in the history.", severity="warning")
                return
            ids = [x for x in (one.id, other.id) if x not in self.benches]
            if ids:
                found = await self._reader.call(lambda store: store.benchmarks_by_launch(ids))
                self.benches.update({i: found.get(i, []) for i in ids})
        except StoreError as exc:
            self._say(f"The history cannot be read: {exc}", severity="error")
            return
        a, b = sorted((one, other), key=lambda x: x.id)
        self.app.push_screen(CompareScreen(a, b, self.benches[a.id], self.benches[b.id]))

    # --- relaunch -----------------------------------------------------------------------

    def action_relaunch(self) -> None:
        """Open the swap form on the selected launch's node, starting from its spec."""
        launch = self.selected
        if launch is None:
            self._say("Select a launch to relaunch.", severity="warning")
        elif not launch.container_spec:
            self._say(f"Launch {launch.id} recorded no container spec, so it cannot be relaunched.",
                            severity="warning")
        else:
            self._relaunch(launch)

    @work(group="history-relaunch", exclusive=True, exit_on_error=False)
    async def _relaunch(self, launch: Launch) -> None:
        from console.screens.history.relaunch import RelaunchScreen, find_node

        try:
            snapshot = await self.services.fleet.list_fleet()
        except RemoteError as exc:
            self._say(f"The fleet cannot be listed, so the node is unknown: {exc}", severity="error")
            return
        node = find_node(snapshot.nodes, launch)
        if node is None:
            where = "/".join(p for p in (launch.project, launch.zone) if p)
            self._say(f"Node {launch.node}{f' ({where})' if where else ''} is no longer in the fleet, "
                            f"so launch {launch.id} cannot be relaunched there.", title="Relaunch", severity="warning",
                            timeout=10)
            return
        try:
            screen = RelaunchScreen(node, launch)
        except ValueError as exc:
            self._say(f"Launch {launch.id} cannot be relaunched: {exc}", severity="error")
            return
        secrets = masked_secrets(launch)
        if secrets:
            self._say(f"Secrets were masked when launch {launch.id} was stored ({', '.join(secrets)}): the form "
                            "reuses the running container's, else asks you to type them.", title="Relaunch",
                            timeout=10)
        if node.state != "READY":
            self._say(f"{node.name} is {node.state}: the swap needs it READY.", severity="warning")
        self.app.push_screen(screen)

    # --- export -------------------------------------------------------------------------

    def action_export(self) -> None:
        """Export the launches shown to a JSON or CSV file."""
        if not self.launches:
            self._say("No launch to export.", severity="warning")
            return
        launches = list(self.launches)
        now = self.services.clock()
        self.app.push_screen(ExportScreen(len(launches), default_export_name(now)),
                             lambda target: self._export_to(launches, target))

    def _export_to(self, launches: list[Launch], target: tuple[Path, str] | None) -> None:
        if target is not None:
            self._export(launches, *target)

    @work(group="history-export", exclusive=True, exit_on_error=False)
    async def _export(self, launches: list[Launch], path: Any, fmt: str) -> None:
        assert self._reader is not None
        try:
            size = await self._reader.call(lambda store: write_export(store, launches, path, fmt))
        except (OSError, ValueError) as exc:
            self._say(f"Nothing exported: {exc}", title="Export", severity="error", timeout=10)
            return
        except StoreError as exc:
            self._say(f"Nothing exported: the history cannot be read: {exc}", severity="error")
            return
        self._say(f"{len(launches)} launches as {fmt.upper()} ({size:,} bytes) in {path}", title="Exported",
                        timeout=10)
