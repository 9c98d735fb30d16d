"""The fleet's table keeps what it drew: a cursor move draws only the two rows it moved between, a
changed cell only itself (the rest of its row and the other rows come from the render caches), and
the row under the cursor is still drawn in the cursor's style."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.strip import Strip
from textual.widgets import DataTable

from console.widgets.fleet_table import FleetTable, OneLine, one_line

COLUMNS = {"NAME": 12, "STATE": 9, "ZONE": 14, "TIME LEFT": 9}


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield FleetTable(id="nodes", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one(FleetTable)
        for column, width in COLUMNS.items():
            table.add_column(column, key=column, width=width)
        table.add_rows_keyed((f"n{i}", [f"node-{i:03d}", "READY", "us-east5-b", f"{i}m"]) for i in range(200))


def lines(table: FleetTable) -> list[Strip]:
    return [table.render_line(y) for y in range(table.size.height)]


@contextmanager
def cells_rendered(app: App[Any]) -> Iterator[list[str]]:
    """The cells DataTable renders through Rich meanwhile (each cell is one ``render_lines`` call from
    ``DataTable._render_cell``; Rich's own nested calls are not counted)."""
    console = app.console
    original = console.render_lines
    rendered: list[str] = []

    def counted(renderable: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(renderable, *args, **kwargs)
        if sys._getframe(1).f_code.co_name == "_render_cell":
            rendered.append("".join(segment.text for segment in result[0]).strip())
        return result

    console.render_lines = counted  # type: ignore[method-assign]
    try:
        yield rendered
    finally:
        console.render_lines = original  # type: ignore[method-assign]


def cursor_background(table: FleetTable, strip: Strip) -> bool:
    cursor = table.get_component_rich_style("datatable--cursor")
    return any(s.style is not None and s.style.bgcolor == cursor.bgcolor for s in strip if s.text.strip())


async def test_a_cursor_move_draws_the_two_rows_it_moved_between_and_no_other() -> None:
    app = TableApp()
    async with app.run_test(size=(60, 20)) as pilot:
        table = app.query_one(FleetTable)
        for row in (5, 6, 5):                 # each of the two rows drawn with and without the cursor
            table.move_cursor(row=row, animate=False)
            await pilot.pause()
        before = lines(table)
        assert cursor_background(table, before[6]) and not cursor_background(table, before[7])   # header is line 0
        with cells_rendered(app) as rendered:
            table.move_cursor(row=6, animate=False)
            await pilot.pause()               # the frame drawn
            after = lines(table)
        assert rendered == []                 # every cell as drawn before
        assert [y for y in range(len(after)) if after[y] is not before[y]] == [6, 7]   # the other lines kept
        assert not cursor_background(table, after[6]) and cursor_background(table, after[7])
        assert after[7].text.split() == ["node-006", "READY", "us-east5-b", "6m"]
        with cells_rendered(app) as rendered:
            table.move_cursor(row=7, animate=False)
            await pilot.pause()
        assert rendered == ["node-007", "READY", "us-east5-b", "7m"]   # a row the cursor had not been on


async def test_a_changed_cell_is_drawn_alone_and_the_other_rows_stay_as_drawn() -> None:
    app = TableApp()
    async with app.run_test(size=(60, 20)) as pilot:
        table = app.query_one(FleetTable)
        await pilot.pause()
        before = lines(table)
        with cells_rendered(app) as rendered:
            table.update_cells([("n3", "TIME LEFT", "59s"), ("n4", "STATE", "REPAIRING")])
            await pilot.pause()
            after = lines(table)
        assert sorted(rendered) == ["59s", "REPAIRING"]
        assert [y for y in range(len(after)) if after[y] is not before[y]] == [4, 5]
        assert after[4].text.split() == ["node-003", "READY", "us-east5-b", "59s"]
        assert after[5].text.split() == ["node-004", "REPAIRING", "us-east5-b", "4m"]


CELLS = [
    [Text("node-001"), Text("READY", style="green"), Text("-", style="dim"), Text("v5litepod-16")],
    [Text(""), Text("PREEMPTED", style="bold red"), Text("3h 12m", style=Style(color="yellow")), Text("x" * 30)],
    [Text.assemble(("a", "red"), ("b", "blue")), Text("12.5", justify="right"), Text("ünï"), Text("cut", overflow="ellipsis")],
]


class BothTablesApp(App[None]):
    """Textual's own DataTable and the fleet's, the same columns and cells."""

    def compose(self) -> ComposeResult:
        yield DataTable(id="theirs", cursor_type="row", zebra_stripes=True)
        yield FleetTable(id="ours", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        for table in self.query(DataTable):
            for column, width in zip(COLUMNS, (10, 9, 6, 8), strict=True):
                table.add_column(column, key=column, width=width)
        theirs, ours = self.query_one("#theirs", DataTable), self.query_one("#ours", FleetTable)
        for i, cells in enumerate(CELLS):
            theirs.add_row(*cells, key=f"r{i}")
        ours.add_rows_keyed((f"r{i}", [one_line(c) for c in cells]) for i, cells in enumerate(CELLS))


async def test_one_line_cells_draw_exactly_what_rich_text_draws_in_textuals_table() -> None:
    app = BothTablesApp()
    async with app.run_test(size=(60, 12)) as pilot:
        theirs, ours = app.query_one("#theirs", DataTable), app.query_one("#ours", FleetTable)
        app.set_focus(None)                               # neither drawn focused
        ours.move_cursor(row=1, animate=False)
        theirs.move_cursor(row=1, animate=False)
        await pilot.pause()
        assert sum(isinstance(c, OneLine) for row in ours._data.values() for c in row.values()) == 8
        for y in range(len(CELLS) + 1):                  # the header and each row, cursor row included
            assert list(ours.render_line(y)) == list(theirs.render_line(y)), y
        ours.update_cells([("r0", "STATE", Text("STOPPED", style="red"))])
        theirs.update_cell("r0", "STATE", Text("STOPPED", style="red"))
        await pilot.pause()
        assert list(ours.render_line(1)) == list(theirs.render_line(1))
        assert str(ours.get_cell("r0", "STATE")) == "STOPPED"
