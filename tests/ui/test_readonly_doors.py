"""Read-only mode refuses every fleet-changing action through every door (issue: one door per action).

The doors: the keys of each view (fleet ``s R n d``, startup ``s R``, history ``L``, the swap form's
``ctrl+s``), the command palette, command mode (``:swap NODE``...), the app's ``open_feature``,
the history's relaunch, a swap form opened anyway (the use case itself refuses), and the CLI verbs
(``tests/integration/test_request_verbs.py::test_readonly_refuses_every_mutating_verb``). The
sandbox is the whole one (TPU API, SSH VMs with simulated docker), so a refusal that leaked would
show as a docker command on the VM or a new queued resource.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable

from console.app import TpuConsoleApp
from console.config import load_config
from console.flows.policy import FLEET_CHANGING_ACTIONS
from console.screens.fleet import FleetScreen
from console.screens.history.relaunch import RelaunchScreen
from console.screens.history.screen import HistoryScreen
from console.screens.startup import StartupScreen
from console.screens.swap.rollback import RollbackScreen
from console.screens.swap.screen import SwapScreen
from console.services import Services, build_services
from sandbox.runner import Sandbox
from tests.ui.conftest import running_sandbox

NODE = "vllm-v5e-a"


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    with running_sandbox(tmp_path / "sandbox", boot_s=2.0, fast_boot_s=0.3) as box:
        yield box


@pytest.fixture
def services(sandbox: Sandbox) -> Iterator[Services]:
    config = dataclasses.replace(load_config(str(sandbox.config_path)), readonly=True)
    svc = build_services(config, db_path=sandbox.db_path)
    yield svc
    svc.close()


async def _until(pilot: Any, cond: Callable[[], Any], what: str, timeout_s: float = 20.0) -> Any:
    for _ in range(int(timeout_s / 0.05)):
        value = cond()
        if value:
            return value
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _docker_writes(box: Sandbox) -> list[str]:
    """Every ``docker pull/rm/run`` any VM of the sandbox received."""
    out = []
    for vm in box.vms.values():
        for line in vm.commands:
            argv = shlex.split(line)
            if argv[:3] == ["sudo", "-n", "docker"] and argv[3] in ("pull", "rm", "run"):
                out.append(f"{vm.name}: {line}")
    return out


def _refusals(app: TpuConsoleApp) -> list[str]:
    return [n.message for n in app._notifications if "read-only mode is on" in n.message]


async def _fleet(pilot: Any) -> FleetScreen:
    return await _until(pilot, lambda: isinstance(pilot.app.screen, FleetScreen) and pilot.app.screen.snapshot
                        and pilot.app.screen, "the fleet")


async def _select(pilot: Any, fleet: FleetScreen, table_id: str, name: str) -> None:
    table = fleet.query_one(table_id, DataTable)
    table.focus()
    names = [str(table.get_cell(row, "NAME")) for row in table.rows]
    table.move_cursor(row=names.index(name), animate=False)
    await pilot.pause()


async def _press_refused(pilot: Any, key: str, screen: Any) -> None:
    """``key`` leaves ``screen`` on top and adds one read-only toast."""
    app = pilot.app
    app.clear_notifications()
    await pilot.press(key)
    await pilot.pause()
    assert app.screen is screen, f"{key} opened {type(app.screen).__name__} in read-only mode"
    assert _refusals(app), f"{key} said nothing in read-only mode"


async def test_every_fleet_changing_action_is_refused_through_every_door(sandbox: Sandbox,
                                                                         services: Services) -> None:
    launch_id = _seed_launch(services)
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        fleet = await _fleet(pilot)
        assert "READ-ONLY" in app.title                                        # the header says so
        # keys of the fleet view: hidden from the footer, and a press says why
        shown = {b.binding.key for b in fleet.active_bindings.values()}
        assert shown.isdisjoint({"s", "R", "n", "d"})
        await _select(pilot, fleet, "#nodes", NODE)
        for key in ("s", "R", "n"):
            await _press_refused(pilot, key, fleet)
        await _select(pilot, fleet, "#qrs", "qr-failed")
        await _press_refused(pilot, "d", fleet)
        # the palette lists none of them
        titles = [c.title for c in app.get_system_commands(fleet)]
        assert not any(t.startswith(("Swap", "Roll back", "Request", "Delete QR")) for t in titles)
        # command mode and open_feature
        for text in (f"swap {NODE}", f"rollback {NODE}", "request"):
            app.clear_notifications()
            app.run_command(text)
            await pilot.pause()
            assert app.screen is fleet and _refusals(app), text
        # the startup view's keys
        node = next(n for n in fleet.snapshot.nodes if n.name == NODE)
        app.open_feature("startup", node)
        startup = await _until(pilot, lambda: isinstance(app.screen, StartupScreen) and app.screen, "startup")
        assert startup.check_action("swap", ()) is False and startup.check_action("rollback", ()) is False
        for key in ("s", "R"):
            await _press_refused(pilot, key, startup)
        # the history's relaunch
        app.pop_screen()
        app.open_feature("history", node)
        history = await _until(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen, "history")
        await _until(pilot, lambda: history.launches, "the history's launches")
        assert any(launch.id == launch_id for launch in history.launches)
        await _press_refused(pilot, "L", history)
        app.pop_screen()
        # a swap, rollback or relaunch view opened anyway: the use case refuses, ctrl+s does nothing
        for screen in (SwapScreen(node), RollbackScreen(node),
                       RelaunchScreen(node, services.store.get_launch(launch_id))):
            app.push_screen(screen)
            await _until(pilot, lambda s=screen: s.problem, f"{type(screen).__name__}'s refusal")
            assert "read-only mode is on" in screen.problem and screen.case is None
            await _press_refused(pilot, "ctrl+s", screen)
            app.pop_screen()
            await pilot.pause()
        assert "qr-failed" in {q.name for q in (await services.fleet.list_fleet()).queued_resources}
        await _workload_doors(pilot, fleet)
    assert _docker_writes(sandbox) == []


async def _workload_doors(pilot: Any, fleet: FleetScreen) -> None:
    """A GKE workload's doors: the Workloads table's ``s`` and ``R``, its startup view's ``R``, and a rollback
    view opened anyway (the use case refuses; ``ctrl+s`` patches nothing)."""
    from console.screens.workload_startup import WorkloadStartupScreen
    from console.screens.workload_swap import WorkloadSwapScreen

    app = pilot.app
    table = fleet.query_one("#workloads", DataTable)
    await _until(pilot, lambda: table.row_count > 0, "the workloads")
    table.focus()
    await pilot.pause()
    for key in ("s", "R"):
        await _press_refused(pilot, key, fleet)
    for text in ("swap deploy/vllm-llama", "rollback deploy/vllm-llama"):        # command mode
        app.clear_notifications()
        app.run_command(text)
        await pilot.pause()
        assert app.screen is fleet and _refusals(app), text
    workload = fleet.query_one("WorkloadsPane").selected
    app.push_screen(WorkloadStartupScreen(workload, fleet.services.config))
    startup = await _until(pilot, lambda: isinstance(app.screen, WorkloadStartupScreen) and app.screen, "its startup")
    assert startup.check_action("rollback", ()) is False
    await _press_refused(pilot, "R", startup)
    app.pop_screen()
    screen = WorkloadSwapScreen(workload, fleet.services.config, rollback=True)
    app.push_screen(screen)

    def refused() -> bool:
        plans = screen.query("#workload-swap-plan")
        return bool(plans) and "read-only mode is on" in str(plans.first().render())

    await _until(pilot, refused, "the rollback view's refusal")
    assert screen.preview is None and screen.case is None
    await pilot.press("ctrl+s")
    await pilot.pause()
    assert screen.outcome is None
    app.pop_screen()


def _seed_launch(services: Services) -> int:
    """A launch of NODE with a container spec (what the history's relaunch runs again)."""
    from remote.container.spec import ContainerSpec

    spec = ContainerSpec.from_template(name="vllm", image="vllm/vllm-tpu:v0.29.1", model="google/gemma-3-4b-it",
                                       args=["--max-model-len", "8192"])
    return services.store.start_launch(node=NODE, project="inference-prod", zone="us-west4-a",
                                       accelerator_type="v5litepod-4", model=spec.model, image=spec.image,
                                       container_spec=spec.to_dict(), serve_args=spec.serve_args(),
                                       outcome="ready")


def test_every_use_case_refuses_in_readonly_mode(sandbox: Sandbox) -> None:
    """The objects themselves, made and run with read-only on: the policy is not the screens'."""
    import asyncio

    from console.flows.delete import DeleteCase, plan_delete
    from console.flows.history_access import HistoryAccess
    from console.flows.policy import ReadOnlyRefused
    from console.flows.probe import ProbeCase
    from console.flows.request import RequestCase, build_request
    from console.flows.swap_case import SwapCase
    from remote.models import Node, QueuedResource

    config = dataclasses.replace(load_config(str(sandbox.config_path)), readonly=True)
    node = Node(project="inference-prod", zone="us-west4-a", name=NODE, state="READY", accelerator_type="v5litepod-4")
    qr = QueuedResource(project="inference-prod", zone="asia-northeast1-b", name="qr-failed", state="FAILED")
    request = build_request(name="rq-x", project="inference-prod", zone="us-west4-a",
                            accelerator_type="v5litepod-1", provisioning_model="spot")
    makers: dict[str, Callable[[Any], Any]] = {
        "swap": lambda c: SwapCase(node, c, c.container, HistoryAccess.none(), mode="swap"),
        "rollback": lambda c: SwapCase(node, c, c.container, HistoryAccess.none(), mode="rollback"),
        "relaunch": lambda c: SwapCase(node, c, c.container, HistoryAccess.none(), mode="relaunch"),
        "request": lambda c: RequestCase(c, object(), request),      # type: ignore[arg-type]
        "delete": lambda c: DeleteCase(c, object(), plan_delete(qr, (), {})),   # type: ignore[arg-type]
        "probe": lambda c: ProbeCase(c, object(), "inference-prod", "us-west4-a", "v5litepod-1", "v2"),  # type: ignore[arg-type]
    }
    assert set(makers) == FLEET_CHANGING_ACTIONS
    for action, make in makers.items():
        with pytest.raises(ReadOnlyRefused, match=f"^{action} changes the fleet and read-only mode is on"):
            make(config)
    # a GKE workload's swap and rollback: the same policy in WorkloadSwapCase
    from console.flows.workload_swap import WorkloadSwapCase
    from remote.gke.models import ClusterRef
    from remote.gke.parse import workload_from_json
    from tests.unit.test_gke_parse import DEPLOYMENT

    workload = workload_from_json(DEPLOYMENT, ClusterRef("inference-prod", "us-east5", "tpu-serving"))
    for verb in ("swap", "rollback"):
        with pytest.raises(ReadOnlyRefused, match=f"^{verb} changes the fleet and read-only mode is on"):
            WorkloadSwapCase(workload, object(), config, HistoryAccess.none(), verb=verb)  # type: ignore[arg-type]
    # made while writable, then read-only switched on: the run refuses before any remote step
    writable = dataclasses.replace(config, readonly=False)
    case = RequestCase(writable, object(), request)                 # type: ignore[arg-type]
    case.config = config
    with pytest.raises(ReadOnlyRefused):
        asyncio.run(case.submit())
    delete = DeleteCase(writable, object(), plan_delete(qr, (), {}))  # type: ignore[arg-type]
    delete.config = config
    with pytest.raises(ReadOnlyRefused):
        asyncio.run(delete.run(typed_name="qr-failed"))
    assert _docker_writes(sandbox) == []
