"""The fleet's tables: a ``DataTable`` whose column widths the screen sets, for fleets of thousands.

Textual's ``DataTable`` measures every cell of every new row when it is next idle (a Rich
measure per cell: ~25 s for 5,000 nodes, the blank first frame at 50,000). The fleet screen
knows each column's width already (it fits columns from the cells' plain text,
:func:`console.render.columns.column_widths`), so here every column has a fixed width and new
rows are counted, not measured. Relies on ``DataTable``'s internals of Textual 8.2.8 (pinned in
pyproject.toml): ``_update_dimensions``, ``_update_count``, ``_require_update_dimensions``, and
for adding rows at once ``_row_locations``, ``_data``, ``_new_rows``, ``_highlight_cursor``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from textual.coordinate import Coordinate
from textual.geometry import Size
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, Row, RowKey


class FleetTable(DataTable[Any]):
    """A ``DataTable`` of one-line rows and fixed-width columns (``add_column(..., width=N)``)."""

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
        without its per-row cursor check and idle wake-up (~1 ms a row: seconds for a fleet).

        Raises:
            textual.widgets.data_table.DuplicateKey: a key is already a row.
        """
        from textual.widgets.data_table import DuplicateKey

        columns = [column.key for column in self.ordered_columns]
        was_empty = self.row_count == 0
        for key, cells in rows:
            row_key = RowKey(key)
            if row_key in self._row_locations:
                raise DuplicateKey(f"The row key {row_key!r} already exists.")
            self._row_locations[row_key] = self.row_count
            self._data[row_key] = dict(zip(columns, cells, strict=False))
            self.rows[row_key] = Row(row_key, 1, None, False)
            self._new_rows.add(row_key)
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate
        if was_empty and self.row_count and self.columns and self.show_cursor and self.cursor_type != "none":
            self._highlight_cursor()
        self._update_count += 1
        self.check_idle()

    def update_cells(self, cells: Iterable[tuple[str, str, Any]]) -> None:
        """Set each ``(row key, column key, value)`` and redraw once: ``DataTable.update_cell`` per cell
        drops the table's render caches per cell (and each drop costs a walk of every row).

        Raises:
            textual.widgets.data_table.CellDoesNotExist: a row or column key is not in the table.
        """
        from textual.widgets.data_table import CellDoesNotExist

        changed = False
        for row_key, column_key, value in cells:
            row = self._data.get(RowKey(row_key))
            if row is None or ColumnKey(column_key) not in self._column_locations:
                raise CellDoesNotExist(f"No cell exists for row_key={row_key!r}, column_key={column_key!r}.")
            row[ColumnKey(column_key)] = value
            changed = True
        if changed:
            self._update_count += 1
            self.refresh()

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
