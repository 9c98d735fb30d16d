"""The fleet's tables: a ``DataTable`` whose column widths the screen sets, for fleets of thousands.

Textual's ``DataTable`` measures every cell of every new row when it is next idle (a Rich
measure per cell: ~25 s for 5,000 nodes, the blank first frame at 50,000). The fleet screen
knows each column's width already (it fits columns from the cells' plain text,
:func:`console.render.columns.column_widths`), so here every column has a fixed width and new
rows are counted, not measured. Every row is one line, so the line -> row map is the row order
itself (:class:`_OneLineOffsets`: ``DataTable`` rebuilt a list of every row at each change). Cells
that change are set without dropping the render caches of the other rows (:meth:`update_cells`:
the countdown of the rows on screen redrew every cell on screen each second). A row's render is
cached by whether the row cursor is on it, not by where the cursor is (:meth:`FleetTable._render_line_in_row`:
a key that moved the cursor drew every row on screen again). Relies on
``DataTable``'s internals of Textual 8.2.8 (pinned in pyproject.toml): ``_update_dimensions``,
``_update_count``, ``_require_update_dimensions``, ``_y_offsets``, the render caches
(``_row_renderable_cache``, ``_cell_render_cache``, ``_row_render_cache``, ``_line_cache``,
``_clear_caches``), ``_render_line_in_row`` and ``_render_line`` (their arguments), and
for adding rows at once ``_row_locations``, ``_data``, ``_new_rows``, ``_highlight_cursor``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, overload

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._types import SegmentLines
from textual.cache import LRUCache
from textual.coordinate import Coordinate
from textual.geometry import Size
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, Row, RowKey

#: Rendered cells, and rendered rows and lines, each table keeps (a few screenfuls of a wide terminal).
CACHED_CELLS = 2500
CACHED_LINES = 300
#: Rows :meth:`FleetTable.update_cells` forgets one by one; more drop every cached render at once.
FORGET_ROWS_AT_MOST = 100
#: Where a row-cursor table's render caches put the cursor and the mouse when they are not on the row
#: drawn (no row, and not the header's -1).
_ELSEWHERE = Coordinate(-2, -2)


class OneLine:
    """A cell of one line in one style, for what Rich's ``Text`` would draw of it without its wrapping
    and justifying (half the time a cell takes: a fleet's screenful is ~500 cells drawn at each filter
    keystroke). What it draws is what ``Text(text, style=style)`` draws in a one-line cell (checked
    in ``tests/ui/test_fleet_table.py``); ``str()`` is its text.

    Args:
        text: printable text, already made safe (:func:`console.render.plain.plain`); shown as is.
        style: a Rich style or style name.
    """

    __slots__ = ("style", "text")

    def __init__(self, text: str, style: str | Style = "") -> None:
        self.text = text
        self.style = style

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"OneLine({self.text!r}, {self.style!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OneLine) and (self.text, self.style) == (other.text, other.style)

    __hash__ = None  # type: ignore[assignment]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.text:
            style = console.get_style(self.style, default=Style.null()) if isinstance(self.style, str) else self.style
            yield Segment(self.text[:options.max_width], style)
        yield Segment.line()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(len(self.text), len(self.text))


def one_line(cell: Any) -> Any:
    """``cell`` as a :class:`OneLine` when it is a ``Text`` that draws the same so (one style, no
    spans, left-justified, one line of ASCII: a character per terminal cell); else ``cell`` itself."""
    if (isinstance(cell, Text) and not cell.spans and cell.justify in (None, "default", "left")
            and cell.overflow in (None, "fold", "crop") and cell.plain.isascii() and cell.plain.isprintable()):
        return OneLine(cell.plain, cell.style)
    return cell


class _OneLineOffsets(Sequence[tuple[RowKey, int]]):
    """``DataTable._y_offsets`` of a table whose rows are all one line: line ``y`` is row ``y``."""

    def __init__(self, table: DataTable[Any]) -> None:
        self.table = table

    def __len__(self) -> int:
        return self.table.row_count

    @overload
    def __getitem__(self, index: int) -> tuple[RowKey, int]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[RowKey, int]]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        return self.table._row_locations.get_key(index % len(self)), 0

    def clear(self) -> None:
        """Nothing is kept (``DataTable.clear`` clears its list)."""


class FleetTable(DataTable[Any]):
    """A ``DataTable`` of one-line rows and fixed-width columns (``add_column(..., width=N)``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # a screenful's renders, not DataTable's 10,000 cells and 1,000 lines: what the caches hold is
        # walked by every full garbage collection (100-300 ms of the keys every few seconds at 5,000 rows)
        self._cell_render_cache.maxsize = CACHED_CELLS
        for cache in (self._row_render_cache, self._row_renderable_cache, self._line_cache):
            cache.maxsize = CACHED_LINES
        #: composed lines by whether the cursor and the mouse are on them (:meth:`_render_line`)
        self._row_lines: LRUCache[tuple[Any, ...], Strip] = LRUCache(CACHED_LINES)

    @property
    def _y_offsets(self) -> Any:
        """Line -> (row key, line in the row): the row order itself when every row is one line, without
        a list of every row per change (``DataTable`` builds one: a fleet's rows at every countdown tick)."""
        return super()._y_offsets if self._any_tall else _OneLineOffsets(self)

    #: a row of more than one line was added (none in the fleet's tables: :meth:`add_rows_keyed`)
    _any_tall = False

    def _render_line_in_row(self, row_key: RowKey, line_no: int, base_style: Style, cursor_location: Coordinate,
                            hover_location: Coordinate) -> tuple[SegmentLines, SegmentLines]:
        """``DataTable``'s render of a row's line, cached by whether the row cursor and the mouse are on
        this row rather than by where they are (``DataTable`` keys it by both: each cursor move drew
        every row on screen again, cells included, ~20 ms a key while it scrolls a fleet)."""
        if self.cursor_type == "row":
            index = self._row_locations.get(row_key) if row_key in self._row_locations else -1
            if cursor_location.row != index:
                cursor_location = _ELSEWHERE
            if hover_location.row != index:
                hover_location = _ELSEWHERE
        return super()._render_line_in_row(row_key, line_no, base_style, cursor_location, hover_location)

    def _render_line(self, y: int, x1: int, x2: int, base_style: Style) -> Strip:
        """``DataTable``'s composed line ``y`` (header lines included), cached as :meth:`_render_line_in_row`
        is when the cursor is a row cursor and every row one line."""
        if self.cursor_type != "row" or self._any_tall:
            return super()._render_line(y, x1, x2, base_style)
        row = y - (self.header_height if self.show_header else 0)
        key = (y, x1, x2, self.size.width, self.cursor_coordinate.row == row, self.hover_coordinate.row == row,
               base_style, self._show_hover_cursor, self._update_count, self._pseudo_class_state)
        strip = self._row_lines.get(key)
        if strip is None:
            strip = self._row_lines[key] = super()._render_line(y, x1, x2, base_style)
        return strip

    def _clear_caches(self) -> None:
        super()._clear_caches()
        if hasattr(self, "_row_lines"):        # DataTable may clear before __init__ is done
            self._row_lines.clear()

    def add_row(self, *cells: Any, height: int | None = 1, key: str | None = None, label: Any = None) -> RowKey:
        """``DataTable.add_row``; a row of another height than one line makes the table count lines as
        ``DataTable`` does."""
        if height != 1:
            self._any_tall = True
        return super().add_row(*cells, height=height, key=key, label=label)

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        """The virtual size from the fixed widths and the row count (no cell measured); a table with
        an auto-width column or an auto-height row is measured as ``DataTable`` does."""
        if any(column.auto_width for column in self.columns.values()) or any(
                row.auto_height for row in (self.rows.get(key) for key in new_rows) if row is not None):
            super()._update_dimensions(new_rows)
            return
        width = sum(column.get_render_width(self) for column in self.columns.values())
        header = self.header_height if self.show_header else 0
        self.virtual_size = Size(width + self._row_label_column_width, self._total_row_height + header)

    def add_rows_keyed(self, rows: Iterable[tuple[str, Sequence[Any]]]) -> None:
        """Add one-line rows ``(key, cells)`` at the bottom at once: ``DataTable.add_row``'s work
        without its per-row cursor check and idle wake-up (~1 ms a row: seconds for a fleet). Cells
        are kept as given (make them :func:`one_line` first where they may be).

        Raises:
            textual.widgets.data_table.DuplicateKey: a key is already a row.
        """
        from textual.widgets.data_table import DuplicateKey

        columns = [column.key for column in self.ordered_columns]
        was_empty = self.row_count == 0
        added = 0
        for key, cells in rows:
            added += 1
            row_key = RowKey(key)
            if row_key in self._row_locations:
                raise DuplicateKey(f"The row key {row_key!r} already exists.")
            self._row_locations[row_key] = self.row_count
            self._data[row_key] = dict(zip(columns, cells, strict=False))
            self.rows[row_key] = Row(row_key, 1, None, False)
            self._new_rows.add(row_key)
        if not added:                   # nothing to lay out or redraw
            return
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate
        if was_empty and self.row_count and self.columns and self.show_cursor and self.cursor_type != "none":
            self._highlight_cursor()
        self._update_count += 1
        self.check_idle()

    def update_cells(self, cells: Iterable[tuple[str, str, Any]]) -> None:
        """Set each ``(row key, column key, value)`` and redraw once. ``DataTable.update_cell`` drops
        every render cache per cell; here a few rows (up to :data:`FORGET_ROWS_AT_MOST`) lose only the
        renders of their changed cells and of their lines, more rows drop the caches once.

        Raises:
            textual.widgets.data_table.CellDoesNotExist: a row or column key is not in the table.
        """
        from textual.widgets.data_table import CellDoesNotExist

        changed: dict[RowKey, set[ColumnKey]] = {}
        for row_key, column_key, value in cells:
            key, column = RowKey(row_key), ColumnKey(column_key)
            row = self._data.get(key)
            if row is None or column not in self._column_locations:
                raise CellDoesNotExist(f"No cell exists for row_key={row_key!r}, column_key={column_key!r}.")
            row[column] = one_line(value)
            changed.setdefault(key, set()).add(column)
        if not changed:
            return
        if len(changed) > FORGET_ROWS_AT_MOST:
            self._update_count += 1
        else:
            self._forget_cells(changed)
        self.refresh()

    def _forget_cells(self, changed: Mapping[RowKey, set[ColumnKey]]) -> None:
        """Drop the cached renders of the ``changed`` cells (row key -> column keys), of their rows'
        lines and renderables, and the composed lines; the other cells of those rows stay rendered."""
        lines: set[int] = set()
        header = self.header_height if self.show_header else 0
        for index in (self._row_locations.get(key) for key in changed):
            if index is not None:
                self._row_renderable_cache.discard((self._update_count, index))
                lines.add(index + header)
        cells = self._cell_render_cache
        for cache_key in [k for k in list(cells.keys()) if k[0] in changed and k[1] in changed[k[0]]]:
            cells.discard(cache_key)
        rows = self._row_render_cache
        for row_cache_key in [k for k in list(rows.keys()) if k[0] in changed]:
            rows.discard(row_cache_key)
        self._line_cache.clear()
        for cache_key in [k for k in list(self._row_lines.keys()) if k[0] in lines]:
            self._row_lines.discard(cache_key)

    def set_widths(self, widths: Mapping[str, int]) -> bool:
        """Give the columns named in ``widths`` (by key) these content widths; ``True`` when one changed
        (the table is then laid out and drawn again)."""
        changed = False
        for key, width in widths.items():
            column = self.columns.get(ColumnKey(key))
            if column is not None and column.width != width:
                column.width = width
                changed = True
        if changed:
            self._update_count += 1           # the rendered rows are cached by this count
            self._require_update_dimensions = True
            self.check_idle()
            self.refresh()
        return changed

    def visible_row_keys(self) -> list[str]:
        """The keys of the rows on screen, top to bottom (every row is one line high)."""
        if not self.columns:
            return []
        header = self.header_height if self.show_header else 0
        first = int(self.scroll_y)
        last = min(self.row_count, first + max(0, self.size.height - header))
        keys = []
        for index in range(first, last):
            value = self.coordinate_to_cell_key(Coordinate(index, 0)).row_key.value
            if value is not None:
                keys.append(value)
        return keys
