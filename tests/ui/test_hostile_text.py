"""Hostile text from the TPU API in the TUI (Pilot): the fleet rows, the detail pane, problems."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Static

from console.app import TpuConsoleApp
from console.config import Config, ProjectConfig
from console.screens.fleet import FleetScreen
from console.services import Services
from tests.hostile import HOSTILE_NAME, SHOWN, SHOWN_NAME, assert_clean, hostile_world
from tests.ui.conftest import FROZEN_NOW, text_of


@pytest.fixture
def hostile_services(tmp_path: Path):
    from remote.tpu.api import FleetSource
    from sandbox.tpu_server import SandboxTpuApi

    server = SandboxTpuApi(hostile_world(FROZEN_NOW))
    endpoint = server.start()
    projects = (ProjectConfig("inference-prod"),)
    config = Config(projects=projects, api_endpoint=endpoint, refresh_interval_s=3600)
    svc = Services(config=config, fleet=FleetSource(projects, api_endpoint=endpoint, timeout_s=10),
                   db_path=tmp_path / "history.db", clock=lambda: FROZEN_NOW)
    yield svc
    svc.close()
    server.stop()


async def _loaded(pilot: Any) -> FleetScreen:
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, FleetScreen) and screen.snapshot is not None
    return screen


def _cells(table: DataTable, column: str) -> list[str]:
    return [str(table.get_cell(row, column)) for row in table.rows]


async def test_fleet_rows_and_detail_show_hostile_fields_literally(hostile_services: Services) -> None:
    app = TpuConsoleApp(hostile_services)
    async with app.run_test(size=(220, 50)) as pilot:
        screen = await _loaded(pilot)
        nodes = screen.query_one("#nodes", DataTable)
        names = _cells(nodes, "NAME")
        assert SHOWN_NAME in names and HOSTILE_NAME not in names
        row = names.index("vllm-v5e-a")
        assert _cells(nodes, "RUNTIME")[row] == SHOWN
        qrs = screen.query_one("#qrs", DataTable)
        failures = dict(zip(_cells(qrs, "NAME"), _cells(qrs, "FAILURE"), strict=True))
        assert failures["qr-failed"] == SHOWN
        nodes.focus()
        nodes.move_cursor(row=row)                      # selecting the row used to raise MarkupError
        await pilot.pause()
        detail = text_of(screen.query_one("#detail-body", Static), width=400)
        assert_clean(detail)
        assert f"health_description {SHOWN}" in " ".join(detail.split())
        assert f"runtime_version    {SHOWN}" in detail or f"runtime_version {SHOWN}" in " ".join(detail.split())
        nodes.move_cursor(row=names.index(SHOWN_NAME))
        await pilot.pause()
        detail = text_of(screen.query_one("#detail-body", Static), width=400)
        assert f"Node {SHOWN_NAME}" in detail
        assert isinstance(pilot.app.screen, FleetScreen)      # no error screen, still running


async def test_the_filter_takes_markup_literally(hostile_services: Services) -> None:
    app = TpuConsoleApp(hostile_services)
    async with app.run_test(size=(220, 50)) as pilot:
        screen = await _loaded(pilot)
        await pilot.press("slash", *"[/x]")
        await pilot.pause()
        nodes = screen.query_one("#nodes", DataTable)
        assert _cells(nodes, "NAME") == ["vllm-v5e-a"]          # only its fields contain "[/x]"
        assert "(filter: [/x])" in str(screen.query_one("#nodes-title").render())
        assert isinstance(pilot.app.screen, FleetScreen)


def test_toasts_never_parse_markup() -> None:
    """The app's one notify: markup and controls in a message are shown literally."""
    import asyncio

    async def run() -> None:
        from tests.hostile import HOSTILE

        services = Services(config=Config(projects=(), refresh_interval_s=3600), fleet=_NoFleet(),
                            db_path=Path("/nonexistent/h.db"), clock=lambda: FROZEN_NOW)
        app = TpuConsoleApp(services)
        async with app.run_test() as pilot:
            app.notify(HOSTILE, title=HOSTILE, markup=True)
            await pilot.pause()
            (toast,) = list(app._notifications)
            assert (toast.message, toast.title, toast.markup) == (SHOWN, SHOWN, False)

    asyncio.run(run())


class _NoFleet:
    async def list_fleet(self) -> Any:
        from remote.models import FleetSnapshot

        return FleetSnapshot(fetched_at=FROZEN_NOW)
