"""The fleet listed in a child process (remote.tpu.lister_process.ProcessFleetSource) against the loopback
sandbox TPU API: the same snapshot as in this process, unchanged records kept as the same objects, a child
that dies or hangs (real processes that do) and close() killing the child."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from console.config import ProjectConfig
from remote.errors import TpuApiError
from remote.models import utc_now
from remote.tpu.api import FleetSource
from remote.tpu.lister_process import IN_PROCESS_PROJECT, MAX_CHILD_FAILURES, ProcessFleetSource
from sandbox.fleet_data import default_world
from sandbox.tpu_server import SandboxTpuApi

PROJECTS = [ProjectConfig("inference-prod"), ProjectConfig("research-sandbox"), ProjectConfig("denied-project")]
DIES = [sys.executable, "-c", "import sys; sys.exit(3)"]
HANGS = [sys.executable, "-c", "import time; time.sleep(600)"]


@pytest.fixture
def api() -> Iterator[tuple[SandboxTpuApi, Any]]:
    world = default_world(utc_now())
    server = SandboxTpuApi(world)
    server.start()
    yield server, world
    server.stop()


def _gone(process: subprocess.Popen[bytes], within_s: float = 20.0) -> int | None:
    """The process's exit status once it ended (``None``: still running after ``within_s``)."""
    deadline = time.monotonic() + within_s
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return process.poll()


async def test_the_child_lists_what_this_process_lists(api: tuple[SandboxTpuApi, Any]) -> None:
    server, _ = api
    here = FleetSource(PROJECTS, api_endpoint=server.endpoint, timeout_s=10)
    child = ProcessFleetSource(PROJECTS, api_endpoint=server.endpoint, timeout_s=10)
    try:
        expected = await here.list_fleet()
        got = await child.list_fleet()
    finally:
        here.close()
        child.close()
    assert expected.nodes and expected.queued_resources and expected.problems   # denied-project: a 403
    assert got.nodes == expected.nodes and got.queued_resources == expected.queued_resources
    assert [n.raw for n in got.nodes] == [n.raw for n in expected.nodes]
    assert got.problems == expected.problems
    assert child.in_process_reason is None


async def test_an_unchanged_record_is_the_same_object_and_a_changed_one_is_new(
        api: tuple[SandboxTpuApi, Any]) -> None:
    server, world = api
    source = ProcessFleetSource(PROJECTS, api_endpoint=server.endpoint, timeout_s=10)
    try:
        first = await source.list_fleet()
        target = first.nodes[0]
        with world.lock:
            node_json = next(n for n in world.projects[target.project].nodes.values()
                             if n["name"].endswith("/" + target.name))
            node_json["state"] = "REPAIRING"
        second = await source.list_fleet()
    finally:
        source.close()
    assert [n.key for n in second.nodes] == [n.key for n in first.nodes]
    assert second.nodes[0].state == "REPAIRING" and second.nodes[0] is not target
    assert all(after is before for before, after in zip(first.nodes[1:], second.nodes[1:], strict=True))
    assert all(after is before for before, after in zip(first.queued_resources, second.queued_resources,
                                                        strict=True))


async def test_a_child_that_dies_lists_here_and_says_so(api: tuple[SandboxTpuApi, Any]) -> None:
    server, _ = api
    here = FleetSource(PROJECTS, api_endpoint=server.endpoint, timeout_s=10)
    source = ProcessFleetSource(PROJECTS, api_endpoint=server.endpoint, timeout_s=10, child_command=DIES)
    try:
        expected = await here.list_fleet()
        snapshots = [await source.list_fleet() for _ in range(MAX_CHILD_FAILURES + 1)]
    finally:
        here.close()
        source.close()
    for snapshot in snapshots:
        assert snapshot.nodes == expected.nodes and snapshot.problems[:-1] == expected.problems
        note = snapshot.problems[-1]
        assert (note.project, note.zone, note.code) == (IN_PROCESS_PROJECT, None, 0)
        assert note.message.startswith("listed in the console's own process (the lister process ended)")
    assert source.in_process_reason == "the lister process ended"     # given up on after the failures
    assert source.child is None


async def test_a_listing_past_its_deadline_kills_the_child(api: tuple[SandboxTpuApi, Any]) -> None:
    server, _ = api
    source = ProcessFleetSource(PROJECTS, api_endpoint=server.endpoint, timeout_s=10, listing_deadline_s=0.5,
                                child_command=HANGS)
    try:
        listing = asyncio.ensure_future(source.list_fleet())
        while source.child is None:
            await asyncio.sleep(0.01)
        hung = source.child
        with pytest.raises(TpuApiError, match="did not finish within 0.5 s"):
            await listing
    finally:
        source.close()
    assert _gone(hung) == -9 and source.child is None


async def test_close_kills_the_child(api: tuple[SandboxTpuApi, Any]) -> None:
    server, _ = api
    source = ProcessFleetSource(PROJECTS, api_endpoint=server.endpoint, timeout_s=10)
    await source.list_fleet()
    child = source.child
    assert child is not None and child.poll() is None          # long-lived: it waits for the next listing
    source.close()
    assert _gone(child) == -9
