"""Plain-text tables for the CLI verbs' long listings (``tpu-console nodes``).

A Rich ``Table`` renders every cell through padding, measuring and wrapping: ~0.4 ms a cell, so
a fleet of 5,000 nodes (80,000 cells) took 29 s and 50,000 took 63 s and 862 MB. These tables
are laid out once from the cells' widths (terminal cells, :func:`rich.cells.cell_len`) and
written as lines, like ``kubectl get`` or ``gcloud ... list``: a title, a header, one line a row,
columns two spaces apart, nothing wrapped or cut (a pager's ``less -S`` scrolls wide ones).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.cells import cell_len

from remote.printable import printable

#: Spaces between two columns.
GAP = "  "


def _width(text: str) -> int:
    return len(text) if text.isascii() else cell_len(text)


def text_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """``title``, then ``columns`` and ``rows`` aligned in columns, as one string ending in a newline.

    Args:
        title: the first line (shown as given, sanitized).
        columns: the header labels.
        rows: one sequence of cells per row (``None`` -> ``-``); each cell goes through
            :func:`remote.printable.printable` (one line, no control bytes) and tabs become spaces.

    Returns:
        The lines joined; trailing spaces are stripped from each line.
    """
    cells = [[("-" if c is None else printable(c)).replace("\t", " ") for c in r] for r in rows]
    widths = [_width(c) for c in columns]
    for r in cells:
        for i, c in enumerate(r):
            w = _width(c)
            if w > widths[i]:
                widths[i] = w
    lines = [printable(title)]
    for r in [list(columns), *cells]:
        lines.append(GAP.join(c + " " * (w - _width(c)) for c, w in zip(r, widths, strict=False)).rstrip())
    return "\n".join(lines) + "\n"
