"""Snapshot tests of the history pane and the compare view (seeded SQLite history, frozen clock)."""

from __future__ import annotations

from typing import Any

import pytest

from console.app import TpuConsoleApp
from console.screens.history.compare import CompareScreen
from console.screens.history.screen import HistoryScreen
from console.services import Services
from tests.ui.history_seed import seed_history


@pytest.fixture
def seeded(services: Services) -> Services:
    seed_history(services.db_path)
    return services


async def _open_history(pilot: Any) -> HistoryScreen:
    pilot.app.open_feature("history", None)
    for _ in range(300):
        await pilot.pause(0.02)
        screen = pilot.app.screen
        if isinstance(screen, HistoryScreen) and screen.benches_loaded:
            return screen
    raise AssertionError("the history pane never loaded")


def test_history_pane(snap_compare: Any, seeded: Services) -> None:
    async def run_before(pilot: Any) -> None:
        screen = await _open_history(pilot)
        table = screen.query_one("#launches")
        table.move_cursor(row=table.get_row_index("3"))
        await pilot.pause()

    assert snap_compare(TpuConsoleApp(seeded), terminal_size=(200, 50), run_before=run_before)


def test_history_compare(snap_compare: Any, seeded: Services) -> None:
    async def run_before(pilot: Any) -> None:
        screen = await _open_history(pilot)
        table = screen.query_one("#launches")
        table.move_cursor(row=table.get_row_index("1"))
        await pilot.press("m")
        table.move_cursor(row=table.get_row_index("3"))
        await pilot.press("c")
        for _ in range(100):
            await pilot.pause(0.02)
            if isinstance(pilot.app.screen, CompareScreen):
                break
        await pilot.pause()

    assert snap_compare(TpuConsoleApp(seeded), terminal_size=(160, 45), run_before=run_before)


def test_history_pane_160(snap_compare: Any, seeded: Services) -> None:
    """At 160x45 the plot fits its half of the screen: bars and values whole, no "…"."""
    async def run_before(pilot: Any) -> None:
        screen = await _open_history(pilot)
        table = screen.query_one("#launches")
        table.move_cursor(row=table.get_row_index("3"))
        await pilot.pause()

    assert snap_compare(TpuConsoleApp(seeded), terminal_size=(160, 45), run_before=run_before)
