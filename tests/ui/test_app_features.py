"""open_feature: the same view of the same node on top is replaced, not stacked."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.screen import Screen
from textual.widgets import Static

from console import app as app_module
from console.app import TpuConsoleApp
from console.config import Config
from console.services import Services
from remote.models import Node


class DummyScreen(Screen[None]):
    """Stands in for a feature view: remembers its node."""

    def __init__(self, node: Node) -> None:
        super().__init__()
        self.node = node

    def compose(self):  # type: ignore[no-untyped-def]
        yield Static(self.node.name)


class _NoFleet:
    async def list_fleet(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("not used")


def _node(name: str) -> Node:
    return Node(project="p", zone="z", name=name, state="READY", accelerator_type="v5litepod-4")


async def test_same_view_same_node_replaces_the_top(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(app_module.FEATURES, "startup", (__name__, "DummyScreen"))
    app = TpuConsoleApp(Services(config=Config(), fleet=_NoFleet(), db_path=tmp_path / "h.db"))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        depth = len(app.screen_stack)
        app.open_feature("startup", _node("a"))
        await pilot.pause()
        first = app.screen
        app.open_feature("startup", _node("a"))       # e.g. after a rollback from that view
        await pilot.pause()
        assert len(app.screen_stack) == depth + 1 and app.screen is not first
        app.open_feature("startup", _node("b"))       # another node stacks
        await pilot.pause()
        assert len(app.screen_stack) == depth + 2


async def test_an_unexpected_worker_error_opens_the_error_screen_and_the_console_carries_on(tmp_path: Path) -> None:
    """A bug in a worker (here the fleet lister) reaches the one route: an error screen with the
    traceback as plain text (markup in the message stays literal), Escape back to a live console."""
    from console.screens.error import ErrorScreen
    from console.screens.fleet import FleetScreen

    class Broken:
        async def list_fleet(self):  # type: ignore[no-untyped-def]
            raise ZeroDivisionError("bug [/x] [bold]here")

    services = Services(config=Config(), fleet=Broken(), db_path=tmp_path / "history.db")
    app = TpuConsoleApp(services)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, ErrorScreen)
        traceback_text = str(app.screen.query_one("#error-traceback", Static).render())
        assert "ZeroDivisionError: bug [/x] [bold]here" in traceback_text
        assert "list_fleet" in traceback_text            # the frame that raised
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)
        assert app.is_running
