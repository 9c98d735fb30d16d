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
from remote.secrets import scrub_text
from remote.vllm_log.patterns import ANSI, overlay_cr

__all__ = ["log_line_text", "plain", "printable"]


def log_line_text(raw: str) -> str:
    """One log line as the log pane shows it (a ``str``, no Rich).

    CR redraws (tqdm, ``docker run -t``) give the line's last state as a terminal shows it,
    whole escape sequences (a log's colours) go the way the reader drops them, tabs are
    expanded, the one sanitizer removes every other control byte, and secrets are masked
    (:func:`remote.secrets.scrub_text`: vLLM logs its ``api_key`` with its arguments).
    Printable text costs one ``isprintable`` check plus the masking's cheap test.
    """
    if "\r" in raw:
        raw = overlay_cr(raw)
    text = raw if raw.isprintable() else printable(ANSI.sub("", raw.expandtabs()))
    return scrub_text(text)


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
