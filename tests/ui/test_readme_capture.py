"""The README's fleet capture is the fleet snapshot's text (``test_fleet_screen_160x45``), so it cannot
drift from the screen: regenerate the snapshot, then paste ``svg_rows`` of it into the README."""

from __future__ import annotations

import re
from pathlib import Path

from tests.ui.svg_text import svg_rows

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "tests" / "ui" / "__snapshots__" / "test_fleet_snapshots" / "test_fleet_screen_160x45.svg"


def test_the_readme_fleet_capture_is_the_160_column_snapshot() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## The fleet view\n.*?```\n(.*?)```", readme, re.S)
    assert block is not None, "the README lost its fleet capture"
    shown = [line.rstrip() for line in block.group(1).splitlines()]
    while shown and not shown[-1]:
        shown.pop()
    screen = svg_rows(SNAPSHOT)
    while screen and not screen[-1]:
        screen.pop()
    assert shown == screen, "README's capture differs from the snapshot:\n" + "\n".join(screen)
