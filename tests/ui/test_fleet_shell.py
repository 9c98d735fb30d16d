"""``S`` on a READY node: a shell as ``tpu-console ssh NODE`` opens it (gcloud's command line). Headless,
the terminal cannot be handed over, so the console says the exact command instead."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import DataTable

from console.app import TpuConsoleApp
from console.config import load_config
from console.flows.ssh_shell import NodeShell, ShellOptions
from console.screens.fleet import FleetScreen
from console.services import Services, build_services
from sandbox.runner import Sandbox


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    box = Sandbox(tmp_path / "sandbox", boot_s=2.0, fast_boot_s=0.3)
    box.start()
    svc = build_services(load_config(str(box.config_path)), db_path=box.db_path)
    yield svc
    svc.close()
    box.stop()


async def test_shell_key_gives_the_ssh_verbs_command_line(services: Services) -> None:
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        for _ in range(400):
            if isinstance(app.screen, FleetScreen) and app.screen.snapshot is not None:
                break
            await pilot.pause(0.05)
        fleet = app.screen
        assert isinstance(fleet, FleetScreen)
        node = next(n for n in fleet.snapshot.nodes if n.name == "vllm-v5e-a")
        expected = (await NodeShell(services.config, services.fleet).plan(node, ShellOptions(), dry_run=True)
                    ).shells[0].command_line
        table = fleet.query_one("#nodes", DataTable)
        table.focus()
        names = [str(table.get_cell(row, "NAME")) for row in table.rows]
        table.move_cursor(row=names.index("vllm-v5e-a"), animate=False)
        await pilot.pause()
        await pilot.press("S")
        await app.workers.wait_for_complete([w for w in app.workers if w.group == "shell"])  # (the fleet's
        # refreshes run beside it; a newer one cancels an older: not this test's)
        await pilot.pause()
        said = [n.message for n in app._notifications if n.title == "Shell"]
        assert said == [f"This terminal cannot be handed over; run: {expected}"]
        assert "HostKeyAlias=" in expected and expected.startswith("ssh ")
        table.move_cursor(row=names.index("vllm-new-e"), animate=False)      # CREATING
        await pilot.pause()
        await pilot.press("S")
        await pilot.pause()
        assert any("vllm-new-e is CREATING: a shell needs a READY node." in n.message for n in app._notifications)
