"""Snapshot tests of the fleet and help screens (frozen clock, sandbox TPU API)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from console.app import TpuConsoleApp
from console.config import GkeConfig
from console.flows.serving import PENDING, ServingSample
from console.screens.fleet import FleetScreen
from console.services import Services
from tests.ui.conftest import FROZEN_NOW

#: What the serving columns show per node in the snapshots: every state the column can say
#: (the samplers themselves are tested against the sandbox in test_forwards.py; the demo fleet's
#: nodes have no VMs here, so these snapshots pin the layout, not the sampling).
SAMPLES = {
    "vllm-spot-c": ServingSample("ready", "meta-llama/Llama-3.1-8B-Instruct", 1234.6, 3, 1, sampled_at=FROZEN_NOW),
    "vllm-flex-b": ServingSample("booting 60%", "google/gemma-3-27b-it", reason="compiling", sampled_at=FROZEN_NOW),
    "vllm-ondemand-g": ServingSample("failed", "meta-llama/Llama-3.1-8B-Instruct", reason="exit code 1",
                                     sampled_at=FROZEN_NOW),
    "vllm-reserved-d": ServingSample("no container", sampled_at=FROZEN_NOW),
    "vllm-v5e-16": ServingSample("unreachable", reason="no answer within 5 s", sampled_at=FROZEN_NOW),
    "vllm-v5e-a": ServingSample("ready", "Qwen/Qwen3-8B", 8.25, 0, 0, sampled_at=FROZEN_NOW),
}


class FixedSampler:
    """Answers :data:`SAMPLES` (a node not listed stays pending, as a slow node does)."""

    def __init__(self, node: Any) -> None:
        self.node = node

    async def sample(self) -> ServingSample:
        if self.node.name not in SAMPLES:
            await asyncio.Event().wait()         # never answers: the fleet's timeout would say so
        return SAMPLES[self.node.name]

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


def fleet_app(services: Services) -> TpuConsoleApp:
    services.serving_sampler = FixedSampler
    # the detail pane's SSH user row: the local user name would differ per machine
    # the GKE workloads table has its own test (test_workloads.py): these snapshots pin the TPU layout
    services.config = dataclasses.replace(services.config, ssh=dataclasses.replace(services.config.ssh, user="operator"),
                                          gke=GkeConfig())
    return TpuConsoleApp(services)


async def _wait_loaded(pilot: Any) -> None:
    await pilot.pause()                          # the fleet screen mounts and starts its first refresh
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, FleetScreen) and screen.snapshot is not None, "the fleet never loaded"
    table = screen.query_one("#nodes")
    sampled = [k for k in table.rows if k.value.rsplit("/", 1)[-1] in SAMPLES]
    for _ in range(200):                         # the samples drawn (one redraw after they came back)
        if all(PENDING not in [str(c) for c in table.get_row(k)] for k in sampled):
            break
        await pilot.pause(0.05)
    else:
        raise AssertionError("the serving samples were never drawn")


def test_fleet_screen(snap_compare: Any, services: Services) -> None:
    assert snap_compare(fleet_app(services), terminal_size=(180, 40), run_before=_wait_loaded)


def test_help_screen(snap_compare: Any, services: Services) -> None:
    async def open_help(pilot: Any) -> None:
        await _wait_loaded(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(fleet_app(services), terminal_size=(120, 40), run_before=open_help)


def test_fleet_screen_100x30(snap_compare: Any, services: Services) -> None:
    """A laptop terminal: the detail pane hides itself; name, state, accelerator, provisioning and
    time left are shown whole, the rest are hidden whole (the title says how many)."""
    assert snap_compare(fleet_app(services), terminal_size=(100, 30), run_before=_wait_loaded)


def test_fleet_screen_160x45(snap_compare: Any, services: Services) -> None:
    """160 columns with the detail pane: no column cut to a sliver (ZONE was cut to one letter)."""
    assert snap_compare(fleet_app(services), terminal_size=(160, 45), run_before=_wait_loaded)
