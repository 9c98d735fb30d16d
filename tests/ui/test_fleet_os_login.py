"""The fleet's detail pane says whether a node needs OS Login and which user the console logs in as
(the resolver of ``console.flows.ssh_login``, read only: no key is imported from the fleet), worked out
in the background once per node (Pilot, the whole sandbox, the real clients)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static

from console.app import TpuConsoleApp
from console.screens.fleet import FleetScreen, node_row_key
from tests.ui.conftest import fleet_node, text_of

OS_LOGIN_NODE = "research-v5e-1"
PLAIN_NODE = "vllm-v5e-a"


@pytest.fixture
def box(tmp_path: Path) -> Any:
    from sandbox.runner import Sandbox

    sandbox = Sandbox(tmp_path / "sandbox", boot_s=1.0, fast_boot_s=1.0)
    sandbox.start()
    yield sandbox
    sandbox.stop()


class SilentSampler:
    """A serving sampler that never connects (the real one logs in, importing the key, as a connection must)."""

    def __init__(self, node: Any) -> None:
        self.node = node

    async def sample(self) -> Any:
        await asyncio.Event().wait()

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


async def _until(pilot: Any, predicate: Any, timeout_s: float = 60.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return
        await pilot.pause(0.05)
    raise AssertionError("timed out waiting for the fleet")


async def test_the_detail_pane_names_os_login_and_the_user_without_importing_a_key(box: Any, tmp_path: Path) -> None:
    from console.config import load_config
    from console.services import build_services

    config = load_config(box.config_path)
    services = build_services(config, db_path=tmp_path / "history.db", sandbox=box)
    services.serving_sampler = SilentSampler
    try:
        app = TpuConsoleApp(services)
        async with app.run_test(size=(200, 50)) as pilot:
            await _until(pilot, lambda: isinstance(pilot.app.screen, FleetScreen) and pilot.app.screen.snapshot)
            screen = pilot.app.screen
            assert isinstance(screen, FleetScreen)
            detail = screen.query_one("#detail-body", Static)
            for name in (OS_LOGIN_NODE, PLAIN_NODE):
                node = await fleet_node(services, name)
                screen.select_node(node)
                await _until(pilot, lambda node=node: node_row_key(node) in screen.logins
                             and "working out" not in text_of(detail))
            screen.select_node(await fleet_node(services, OS_LOGIN_NODE))
            await pilot.pause()
            text = " ".join(text_of(detail, width=300).split())
            assert "OS Login needed (project metadata)" in text
            assert ("SSH user alice_example_com (OS Login profile of alice@example.com); the console's SSH public "
                    "key is not in the OS Login profile of alice@example.com yet: it is imported at the first "
                    "connection") in text
            screen.select_node(await fleet_node(services, PLAIN_NODE))
            await pilot.pause()
            text = " ".join(text_of(detail, width=300).split())
            assert "OS Login not needed (default)" in text
            assert f"SSH user {config.ssh.user} (local user)" in text
        assert box.google_apis.imported["alice@example.com"] == []            # the fleet only read the profile
    finally:
        services.close()
