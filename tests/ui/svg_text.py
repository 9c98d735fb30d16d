"""The text of a pytest-textual-snapshot SVG, row by row (what a text capture of the screen shows)."""

from __future__ import annotations

import html
import re
from pathlib import Path

#: One ``<text>`` run: its x, its y and its characters (Textual's exporter: 12.2 px per cell).
_RUN = re.compile(r'<text class="[^"]*" x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>')
CELL_PX = 12.2


def svg_rows(path: Path) -> list[str]:
    """Each screen row's text, trailing spaces dropped (no-break spaces read as spaces)."""
    rows: dict[float, list[tuple[float, str]]] = {}
    for match in _RUN.finditer(path.read_text(encoding="utf-8")):
        rows.setdefault(float(match.group(2)), []).append((float(match.group(1)), html.unescape(match.group(3))))
    out = []
    for y in sorted(rows):
        line = ""
        for x, text in sorted(rows[y]):
            line = line.ljust(round(x / CELL_PX)) + text
        out.append(line.replace("\xa0", " ").rstrip())
    return out
