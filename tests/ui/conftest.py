"""Fixtures for Pilot and snapshot tests: the sandbox TPU API and a frozen clock."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from console.config import Config, ProjectConfig
from console.services import Services

#: The frozen "now" of UI tests, so countdowns and ages are stable in snapshots.
FROZEN_NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def tpu_endpoint() -> Iterator[str]:
    """The sandbox TPU REST API (demo fleet at :data:`FROZEN_NOW`) on a loopback port."""
    from sandbox.fleet_data import default_world
    from sandbox.tpu_server import SandboxTpuApi

    server = SandboxTpuApi(default_world(FROZEN_NOW))
    endpoint = server.start()
    yield endpoint
    server.stop()


@pytest.fixture
def services(tpu_endpoint: str, tmp_path: Path) -> Iterator[Services]:
    """Services over the real FleetSource against the sandbox, with a frozen clock."""
    from remote.tpu.api import FleetSource

    projects = tuple(ProjectConfig(p) for p in ("inference-prod", "research-sandbox", "denied-project"))
    config = Config(projects=projects, api_endpoint=tpu_endpoint, refresh_interval_s=3600)
    fleet = FleetSource(projects, api_endpoint=tpu_endpoint, timeout_s=10)
    svc = Services(config=config, fleet=fleet, db_path=tmp_path / "history.db", clock=lambda: FROZEN_NOW)
    yield svc
    svc.close()


def text_of(widget: object, width: int = 200) -> str:
    """Plain text of a Static's content (Rich renderables rendered without colour)."""
    from io import StringIO

    from rich.console import Console

    console = Console(file=StringIO(), width=width, color_system=None, legacy_windows=False)
    console.print(widget.content)  # type: ignore[attr-defined]
    return console.file.getvalue()  # type: ignore[attr-defined]


async def fleet_node(services: Services, name: str) -> Any:
    """The node ``name`` as the console sees it: listed by the real client through ``services.fleet``."""
    snapshot = await services.fleet.list_fleet()
    return next(n for n in snapshot.nodes if n.name == name)


@contextmanager
def running_sandbox(state_dir: Path, *, boot_s: float, fast_boot_s: float, time_scale: float = 1.0) -> Iterator[Any]:
    """The whole sandbox (TPU API, SSH VMs, simulated vLLM, OpenAI servers) in ``state_dir``,
    stopped on exit; ``boot_s`` for the slow nodes, ``fast_boot_s`` for the others, ``time_scale``
    on the queued resources' state durations."""
    from sandbox.runner import Sandbox

    box = Sandbox(state_dir, boot_s=boot_s, fast_boot_s=fast_boot_s, time_scale=time_scale)
    box.start()
    try:
        yield box
    finally:
        box.stop()


@contextmanager
def services_on(box: Any, db_path: Path) -> Iterator[Services]:
    """The console's services on ``box``'s config, with the history at ``db_path``, closed on exit."""
    from console.config import load_config
    from console.services import build_services

    services = build_services(load_config(box.config_path), db_path=db_path, sandbox=box)
    try:
        yield services
    finally:
        services.close()


async def detail_settled(pilot: Any, screen: Any) -> None:
    """Wait until the fleet's detail pane shows the row under the cursor: a cursor moved again within
    ``DETAIL_SETTLE_S`` of its last move (the first row highlighted at load, then the test's move) draws
    the pane from a timer once it settles (``FleetScreen._detail_timer``)."""
    for _ in range(500):
        if screen._detail_timer is None:
            await pilot.pause()
            return
        await pilot.pause(0.01)
    raise AssertionError("the detail pane never settled")
