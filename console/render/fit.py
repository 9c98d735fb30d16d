"""Lists cut to the rows a box has, saying what was cut ("+N more"): no silent drop.

Pure Rich: the rows a line takes are counted as Rich wraps it (:meth:`rich.text.Text.wrap`) at the
box's width, so a long line that wraps at 80 columns counts twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.text import Text


def rows_of(line: Text, console: Console, width: int) -> int:
    """Rows ``line`` takes wrapped at ``width`` cells (at least 1)."""
    return max(1, len(line.wrap(console, max(1, width))))


def fit_items(items: Sequence[tuple[str, Sequence[Text]]], console: Console, width: int,
              max_rows: int) -> Text:
    """The items (each a label and its lines) that fit in ``max_rows`` rows at ``width`` cells, whole,
    in order; when some do not fit, a last row ``+N more: LABEL, LABEL…`` names them.

    Args:
        items: ``(label, lines)``; the label names the item in the "+N more" row (a zone, a project).
        console: the console that wraps (the app's).
        width: the box's content width in cells.
        max_rows: the box's height in rows (at least 1).

    Returns:
        The lines shown, joined by newlines (no trailing newline).
    """
    heights = [sum(rows_of(line, console, width) for line in lines) for _, lines in items]
    if sum(heights) <= max_rows:
        shown = len(items)
    else:
        budget, shown = max(0, max_rows - 1), 0      # one row kept for "+N more"
        while shown < len(items) and heights[shown] <= budget:
            budget -= heights[shown]
            shown += 1
    out = Text("\n").join(line for _, lines in items[:shown] for line in lines)
    if shown < len(items):
        rest = items[shown:]
        more = Text(f"+{len(rest)} more: " + ", ".join(label for label, _ in rest), style="bold")
        more.truncate(max(1, width), overflow="ellipsis")
        if out:
            out.append("\n")
        out.append_text(more)
    return out
