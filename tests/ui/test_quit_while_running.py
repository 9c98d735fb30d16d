"""Quitting while an action changes a node asks first, says the node's state, and records the interruption."""

from __future__ import annotations

from pathlib import Path

from console.app import TpuConsoleApp
from console.config import Config
from console.flows.history_access import HistoryAccess
from console.flows.swap_run import SwapRunner
from console.screens.confirm import ConfirmScreen
from console.services import Services
from remote.models import Node
from tests.ui.conftest import FROZEN_NOW, text_of
from tests.ui.test_swap import _NoFleet

NODE = Node(project="p", zone="us-west4-a", name="vllm-v5e-a", state="READY", accelerator_type="v5litepod-4")


async def test_quit_asks_while_a_swap_runs_and_records_it_interrupted(tmp_path: Path) -> None:
    services = Services(config=Config(), fleet=_NoFleet(), db_path=tmp_path / "history.db", clock=lambda: FROZEN_NOW)
    runner = SwapRunner(object(), NODE, label=NODE.name,           # type: ignore[arg-type]
                        history=HistoryAccess(lambda: services.store, owned=False))
    # the state a swap is in between ``docker rm -f`` and ``docker run``: recorded, old container gone
    runner._launch_id = services.store.start_launch(node=NODE.name, model="m", outcome="running")
    runner._where = "after docker rm"
    services.actions.begin("swap on vllm-v5e-a", "the old container is removed: no container runs on vllm-v5e-a "
                           "until docker run finishes", on_abandon=runner.abandon)
    app = TpuConsoleApp(services)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        await pilot.press("q")
        await pilot.pause()
        ask = app.screen
        assert isinstance(ask, ConfirmScreen), "q quit at once while a swap ran"
        message = text_of(ask.query_one("#confirm-message"), width=200)
        assert "swap on vllm-v5e-a: the old container is removed: no container runs on vllm-v5e-a" in message
        await pilot.press("escape")                                 # keep running
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and app.is_running
        assert services.actions.active()
        await pilot.press("q")
        await pilot.pause()
        await pilot.press("y")                                      # quit anyway
        await pilot.pause()
    assert not services.actions.active()
    launch = services.store.list_launches(node=NODE.name)[0]
    assert (launch.outcome, launch.failure_detail) == ("interrupted", "the console quit after docker rm")
    services.close()


async def test_quit_without_a_running_action_does_not_ask(tmp_path: Path) -> None:
    services = Services(config=Config(), fleet=_NoFleet(), db_path=tmp_path / "history.db", clock=lambda: FROZEN_NOW)
    app = TpuConsoleApp(services)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and app.return_code == 0     # exited at once
    services.close()
