"""The fleet's serving samples resolve each node's SSH target once (one getGuestAttributes call to the
TPU API), not once per sample: the real google-cloud-tpu client against the sandbox's TPU API, which
records the requests it serves."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from console.config import Config, ProjectConfig, SshConfig
from console.flows.serving import sample_within
from console.services import Services, serving_sampler_for
from tests.ui.conftest import FROZEN_NOW


@pytest.fixture
def services(tmp_path: Path) -> Iterator[tuple[Services, Any]]:
    from remote.tpu.api import FleetSource
    from sandbox.fleet_data import scale_world
    from sandbox.tpu_server import SandboxTpuApi

    server = SandboxTpuApi(scale_world(20, 1, FROZEN_NOW), page_size=100)
    server.start()
    projects = (ProjectConfig("scale-00"),)
    ssh = SshConfig(private_key=tmp_path / "no-key", known_hosts=tmp_path / "known_hosts", connect_timeout_s=2)
    config = Config(projects=projects, api_endpoint=server.endpoint, ssh=ssh)
    fleet = FleetSource(projects, api_endpoint=server.endpoint, timeout_s=10)
    services = Services(config=config, fleet=fleet, db_path=tmp_path / "history.db", clock=lambda: FROZEN_NOW)
    yield services, server
    services.close()
    server.stop()


def guest_calls(server: Any) -> int:
    return sum(":getGuestAttributes" in path for _, path in server.requests)


async def test_each_node_is_resolved_once_while_it_and_the_config_stay(services: tuple[Services, Any]) -> None:
    services_, server = services
    snapshot = await services_.fleet.list_fleet()
    ready = [n for n in snapshot.nodes if n.state == "READY"][:2]
    assert len(ready) == 2
    for _ in range(3):                     # a fresh sampler per sample, as the fleet makes for rows off screen
        for node in ready:
            sample = await sample_within(serving_sampler_for(services_, node), 5)
            assert sample.serving == "unreachable" and "No private key" in (sample.reason or "")
    assert guest_calls(server) == 2        # one per node, not one per sample (6)
    moved = dataclasses.replace(ready[0], health="UNHEALTHY_MAINTENANCE")   # the node changed: resolved anew
    await sample_within(serving_sampler_for(services_, moved), 5)
    services_.config = dataclasses.replace(services_.config)                  # a reloaded config: anew
    await sample_within(serving_sampler_for(services_, ready[1]), 5)
    assert guest_calls(server) == 4
    services_.serving_targets.keep([ready[1].key])                            # no longer READY: forgotten
    assert len(services_.serving_targets) == 1
