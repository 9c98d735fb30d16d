"""An unreachable TPU API endpoint is one sentence naming the endpoint and why (refused, DNS, TLS, timed
out), never urllib3's ``HTTPConnectionPool(... Max retries exceeded ...)``: the real google-cloud-tpu
client against loopback sockets that refuse, never answer, or speak plain HTTP to a TLS client."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from google.auth.credentials import AnonymousCredentials

from console.config import ProjectConfig
from remote.models import utc_now
from remote.tpu.api import FleetSource
from sandbox.fleet_data import default_world
from sandbox.tpu_server import SandboxTpuApi


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def _problem(endpoint: str, timeout_s: float = 5.0) -> str:
    source = FleetSource([ProjectConfig("p1")], api_endpoint=endpoint, timeout_s=timeout_s,
                         credentials=AnonymousCredentials())
    try:
        snapshot = await source.list_fleet()
    finally:
        source.close()
    assert snapshot.problems and snapshot.problems[0].code == 0
    message = snapshot.problems[0].message
    assert "HTTPConnectionPool" not in message and "Max retries" not in message and "%24alt" not in message
    return message


async def test_refused() -> None:
    port = _free_port()
    assert await _problem(f"http://127.0.0.1:{port}") == \
        f"cannot reach http://127.0.0.1:{port}: the connection was refused (nothing listens there)"


async def test_dns() -> None:
    assert await _problem("http://no-such-host.invalid") == \
        "cannot reach http://no-such-host.invalid: its host name could not be resolved (DNS)"


async def test_tls_to_a_plain_http_server() -> None:
    server = SandboxTpuApi(default_world(utc_now()))
    endpoint = server.start().replace("http://", "https://")
    try:
        message = await _problem(endpoint)
    finally:
        server.stop()
    assert message.startswith(f"cannot reach {endpoint}: the TLS handshake failed (")


async def test_timed_out(silent_port: int) -> None:
    message = await _problem(f"http://127.0.0.1:{silent_port}", timeout_s=1.0)
    assert message.startswith("no answer within 1 s (timed out)")
    assert f"http://127.0.0.1:{silent_port}" in message
