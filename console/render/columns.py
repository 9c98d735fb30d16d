"""Which table columns fit a width, by priority; and sort keys for table cells.

Pure functions over cell widths (terminal cells, as :func:`rich.cells.cell_len` counts them)
and plain cell text, so the fleet screen can decide its layout before it draws a row.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from rich.cells import cell_len


def fit_columns(widths: Sequence[int], available: int, *, keep: int = 1,
                needs: Mapping[int, int] | None = None) -> list[int]:
    """Which columns (indexes, in priority order) fit in ``available`` cells.

    Each column in turn is shown when it fits beside the more important ones already shown
    (a wide free-text column, say a failure message, is hidden whole and the narrower ones
    after it can still show); never cut to a sliver. A column that only means something beside
    another (a node's TOK/S beside its SERVING state) is hidden with it.

    Args:
        widths: the width of each column in cells, padding included, most important first.
        available: cells the table may use (its width minus the scrollbar).
        keep: the first ``keep`` columns are shown even when they do not fit (the name).
        needs: column index -> the index of the column it is shown only beside.

    Returns:
        The indexes shown, ascending.
    """
    shown: list[int] = []
    used = 0
    needs = needs or {}
    for index, width in enumerate(widths):
        if index in needs and needs[index] not in shown:
            continue
        if index < keep or used + width <= available:
            shown.append(index)
            used += width
    return shown


def column_widths(labels: Sequence[str], rows: Sequence[Sequence[str]], *, padding: int = 1) -> list[int]:
    """Width in cells of each column: its widest cell or label, plus ``padding`` on each side."""
    widths = [cell_len(label) for label in labels]
    for cells in rows:
        for index, cell in enumerate(cells):
            if cell.isascii() and "\n" not in cell:      # one cell per character: most cells, at a fleet's scale
                widest = len(cell)
            else:
                widest = max((cell_len(line) for line in cell.splitlines()), default=0)
            if widest > widths[index]:
                widths[index] = widest
    return [w + 2 * padding for w in widths]


def cell_widths(cells: Sequence[str]) -> tuple[int, ...]:
    """Width in terminal cells of each cell's widest line (a row's, worked out once per row)."""
    return tuple(len(cell) if cell.isascii() and "\n" not in cell
                 else max((cell_len(line) for line in cell.splitlines()), default=0) for cell in cells)


def widest_cells(labels: Sequence[str], rows: Sequence[Sequence[int]], *, padding: int = 1) -> list[int]:
    """:func:`column_widths` from each row's :func:`cell_widths`: each column's widest cell or label,
    plus ``padding`` on each side (the maximum is taken column by column in C: a fleet's rows at once)."""
    labelled = [cell_len(label) for label in labels]
    if not rows:
        return [w + 2 * padding for w in labelled]
    return [max(w, max(column)) + 2 * padding for w, column in zip(labelled, zip(*rows, strict=True), strict=False)]


_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[Any, ...]:
    """Sort key of a cell's plain text: case-insensitive, numbers by value (``v5litepod-4`` before
    ``v5litepod-16``), empty and ``-`` cells last whatever the direction is handled by the caller."""
    return tuple(int(part) if part.isdigit() else part.lower() for part in _DIGITS.split(text))
