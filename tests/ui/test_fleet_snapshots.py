"""Snapshot tests of the fleet and help screens (frozen clock, sandbox TPU API)."""

from __future__ import annotations

from typing import Any

from console.app import TpuConsoleApp
from console.screens.fleet import FleetScreen
from console.services import Services


async def _wait_loaded(pilot: Any) -> None:
    await pilot.pause()                          # the fleet screen mounts and starts its first refresh
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, FleetScreen) and screen.snapshot is not None, "the fleet never loaded"


def test_fleet_screen(snap_compare: Any, services: Services) -> None:
    assert snap_compare(TpuConsoleApp(services), terminal_size=(180, 40), run_before=_wait_loaded)


def test_help_screen(snap_compare: Any, services: Services) -> None:
    async def open_help(pilot: Any) -> None:
        await _wait_loaded(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(TpuConsoleApp(services), terminal_size=(120, 40), run_before=open_help)


def test_fleet_screen_100x30(snap_compare: Any, services: Services) -> None:
    """A laptop terminal: the detail pane hides itself; name, state, accelerator, provisioning and
    time left are shown whole, the rest are hidden whole (the title says how many)."""
    assert snap_compare(TpuConsoleApp(services), terminal_size=(100, 30), run_before=_wait_loaded)


def test_fleet_screen_160x45(snap_compare: Any, services: Services) -> None:
    """160 columns with the detail pane: no column cut to a sliver (ZONE was cut to one letter)."""
    assert snap_compare(TpuConsoleApp(services), terminal_size=(160, 45), run_before=_wait_loaded)
