"""Snapshot tests of the swap form and the confirm dialog (an injected spec: no SSH, frozen clock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from console.screens.confirm import ConfirmScreen
from console.screens.swap.screen import SwapScreen
from tests.ui.test_swap import FormApp


async def _edited(pilot: Any) -> None:
    for _ in range(100):
        await pilot.pause(0.05)
        screen = pilot.app.screen
        if isinstance(screen, SwapScreen) and screen.plan is not None:
            break
    else:
        raise AssertionError("the swap form never loaded")
    screen.query_one("#f-max-model-len").value = "131072"
    screen.query_one("#f-gpu-memory-utilization").value = "0.95"
    await pilot.pause()
    await pilot.pause()
    screen.query_one("#swap-lint").focus()      # no blinking text cursor in the picture
    await pilot.pause()


def test_swap_form(snap_compare: Any, tmp_path: Path) -> None:
    """The form after two edits: lint (hbm-utilization, compile-cache), diff and commands, secrets masked."""
    assert snap_compare(FormApp(tmp_path), terminal_size=(180, 48), run_before=_edited)


def test_swap_form_invalid(snap_compare: Any, tmp_path: Path) -> None:
    """Invalid values: each field's reason and the disabled swap."""
    async def invalid(pilot: Any) -> None:
        await _edited(pilot)
        screen = pilot.app.screen
        screen.query_one("#f-max-model-len").value = "abc"
        screen.query_one("#f-gpu-memory-utilization").value = "1.5"
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(FormApp(tmp_path), terminal_size=(180, 48), run_before=invalid)


def test_swap_confirm_dialog(snap_compare: Any, tmp_path: Path) -> None:
    """The confirm modal with the exact, masked commands."""
    async def confirm(pilot: Any) -> None:
        await _edited(pilot)
        await pilot.press("ctrl+s")
        for _ in range(40):
            await pilot.pause(0.05)
            if isinstance(pilot.app.screen, ConfirmScreen):
                break
        await pilot.pause()

    assert snap_compare(FormApp(tmp_path), terminal_size=(140, 40), run_before=confirm)
