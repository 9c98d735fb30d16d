"""The startup view of the sandbox's OS Login node (research-v5e-1): it logs in as the OS Login POSIX
name on the first try, says so in the log, follows the boot to ready and records the user (Pilot, the
whole sandbox, the real clients)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from console.app import TpuConsoleApp
from console.screens.startup import StartupScreen
from console.widgets.log_view import LogView
from tests.ui.conftest import fleet_node, running_sandbox

NODE = "research-v5e-1"


class OneNodeApp(TpuConsoleApp):
    """The console opened straight on one node's startup view."""

    CSS_PATH = str(Path(__file__).resolve().parents[2] / "console" / "app.tcss")

    def __init__(self, services: Any, node: Any) -> None:
        super().__init__(services)
        self.node = node

    def on_mount(self, event: Any) -> None:
        event.prevent_default()
        self.push_screen(StartupScreen(self.node))


@pytest.fixture
def box(tmp_path: Path) -> Any:
    with running_sandbox(tmp_path / "sandbox", boot_s=1.0, fast_boot_s=1.0) as box:
        yield box


async def _until(pilot: Any, predicate: Any, timeout_s: float = 60.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return
        await pilot.pause(0.05)
    raise AssertionError("timed out waiting for the startup view")


async def test_the_os_login_node_connects_as_the_posix_user_and_records_it(box: Any, tmp_path: Path) -> None:
    from console.config import load_config
    from console.services import build_services

    services = build_services(load_config(box.config_path), db_path=tmp_path / "history.db", sandbox=box)
    try:
        app = OneNodeApp(services, await fleet_node(services, NODE))
        async with app.run_test(size=(160, 45)) as pilot:
            await _until(pilot, lambda: isinstance(pilot.app.screen, StartupScreen)
                         and pilot.app.screen.watcher is not None and pilot.app.screen.watcher.state.ready)
            screen = pilot.app.screen
            assert screen.problem is None
            first = screen.query_one("#log", LogView).buffer.entries[0].text
            assert first == ("──── logging in as alice_example_com (OS Login profile of alice@example.com; OS Login "
                             "on (project metadata)); imported the SSH public key into the OS Login profile of "
                             "alice@example.com ────")
            await _until(pilot, lambda: [launch.ssh_user for launch in services.store.list_launches(node=NODE)]
                         == ["alice_example_com"])
        assert set(box.vms[NODE].auth_users) == {"alice_example_com"}       # never the local user
    finally:
        services.close()
