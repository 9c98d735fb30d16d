"""The metrics view (``m`` on a READY node, ``:metrics NODE``) against the whole sandbox: ``/metrics``
read through the node's forward, the figures and their sparklines growing sample by sample."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Static

from console.app import TpuConsoleApp
from console.screens.fleet import FleetScreen
from console.screens.metrics import MetricsScreen
from console.widgets.serving_panel import ServingPanel
from tests.ui.conftest import running_sandbox, services_on, text_of

NODE = "vllm-v5e-a"


@pytest.fixture
def sandbox(tmp_path: Path) -> Any:
    with running_sandbox(tmp_path / "sandbox", boot_s=1.0, fast_boot_s=0.3) as box:
        yield box


@pytest.fixture
def sandbox_services(sandbox: Any, tmp_path: Path) -> Any:
    with services_on(sandbox, tmp_path / "history.db") as services:
        yield services


async def until(pilot: Any, predicate: Any, what: str, timeout_s: float = 40.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_m_on_a_serving_node_shows_its_live_figures_and_their_history(
        sandbox: Any, sandbox_services: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import console.screens.metrics as metrics_module

    monkeypatch.setattr(metrics_module, "INTERVAL_S", 0.3)   # (3 s in use: three samples, not nine seconds)
    app = TpuConsoleApp(sandbox_services)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, FleetScreen) and app.screen.snapshot is not None,
                    "the fleet")
        fleet = app.screen
        nodes = fleet.query_one("#nodes", DataTable)
        names = [str(nodes.get_cell(r, "NAME")) for r in nodes.rows]
        nodes.move_cursor(row=names.index("vllm-new-e"))                 # CREATING: nothing serves
        await pilot.pause()
        await pilot.press("m")
        await pilot.pause()
        assert app.screen is fleet
        assert any("vllm-new-e is CREATING, not READY" in n.message for n in app._notifications)
        nodes.move_cursor(row=names.index(NODE))
        await pilot.pause()
        await pilot.press("m")
        try:
            await until(pilot, lambda: isinstance(app.screen, MetricsScreen) and app.screen.samples >= 3, "3 samples")
        except AssertionError as exc:        # say what the view said instead (its status line)
            shown = (text_of(app.screen.query_one("#metrics-status", Static))
                     if isinstance(app.screen, MetricsScreen) else type(app.screen).__name__)
            raise AssertionError(f"{exc}; the view showed: {shown}") from exc
        view = app.screen
        assert isinstance(view, MetricsScreen) and view.node.name == NODE
        figures = text_of(view.query_one("#serving-figures", Static))
        assert "running" in figures and "KV cache" in figures and "tok/s" in figures
        panel = view.query_one("#metrics-panel", ServingPanel)
        assert len(panel.queue) >= 3                                      # the session's history grows
        assert view.forward is not None and view.forward.state == "open"
        status = text_of(view.query_one("#metrics-status", Static))
        assert f"-> {NODE}" in status and "samples this session" in status
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is fleet
        assert sandbox_services.forwards.get(view.node.key) is not None    # the forward stays open
        await pilot.press("colon", *f"metrics {NODE}", "enter")           # command mode opens it too
        await until(pilot, lambda: isinstance(app.screen, MetricsScreen), "the metrics view")
