"""Outside text as Rich ``Text``: sanitized by :func:`remote.printable.printable`, never parsed as markup.

Every renderer, verb and screen shows API fields, log lines, docker inspect values, server
answers and error messages through :func:`plain` (or :func:`printable` when the target is a
``str`` sink such as ``print``), so ``[/x]`` and ``[link=...]`` appear literally and no control
byte reaches the terminal.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from remote.printable import printable

__all__ = ["plain", "printable"]


def plain(value: object, style: str = "") -> Text:
    """``value`` as one line of literal Rich text (``None`` -> ``-``), in ``style``."""
    return Text("-" if value is None else printable(value), style=style)


def safe(cell: object) -> Any:
    """One table cell or printed renderable, made safe: ``str`` -> :func:`plain`, ``Text`` sanitized
    (its styles kept when it had nothing to strip), ``None`` -> ``-``, other renderables unchanged."""
    if cell is None or isinstance(cell, str):
        return plain(cell)
    if isinstance(cell, Text):
        if cell.plain.isprintable():
            return cell
        return Text(printable(cell.plain), style=cell.style, justify=cell.justify, no_wrap=cell.no_wrap)
    return cell


def row(*cells: object) -> list[Any]:
    """``[safe(c) for c in cells]``: the cells of one ``Table.add_row`` / ``DataTable.add_row``."""
    return [safe(c) for c in cells]
