"""Requesting capacity: the real google-cloud-tpu client (QueuedResourceService, probe) against the
sandbox TPU API, whose queued resources move through their states (time scaled down 50x)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import requests
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud import tpu_v2

from console.config import ProjectConfig
from remote.errors import TpuApiError
from remote.models import utc_now
from remote.tpu.advice import classify_failure
from remote.tpu.api import FleetSource
from remote.tpu.probe import probe
from remote.tpu.requests import QueuedResourceRequest, QueuedResourceService, parse_duration_s
from sandbox.capacity import FLEX_WAIT_S
from sandbox.fleet_data import default_world
from sandbox.queued_lifecycle import ACCEPTED_S, NODE_CREATING_S, OPERATION_S, PROVISIONING_S
from sandbox.tpu_server import SandboxTpuApi

P = "inference-prod"
SCALE = 0.02


@pytest.fixture
def server() -> Iterator[SandboxTpuApi]:
    api = SandboxTpuApi(default_world(utc_now()), time_scale=SCALE)
    api.start()
    yield api
    api.stop()


@pytest.fixture
async def service(server: SandboxTpuApi) -> AsyncIterator[QueuedResourceService]:
    source = FleetSource([ProjectConfig(P)], api_endpoint=server.endpoint, timeout_s=5)
    yield QueuedResourceService(source, poll_initial_s=0.02, poll_max_s=0.05)
    source.close()


def flex(name: str = "demo-v5e", zone: str = "us-west4-a", accelerator: str = "v5litepod-1",
         **kw) -> QueuedResourceRequest:
    return QueuedResourceRequest(name=name, project=P, zone=zone, accelerator_type=accelerator,
                                 runtime_version="v2-alpha-tpuv5-lite", provisioning_model="flex-start",
                                 max_run_duration_s=kw.pop("max_run_duration_s", 4 * 3600), **kw)


class SteppedClock:
    """The queued-resource lifecycle's clock, moved only by the test: a state changes when the test
    says so, never because a loaded machine was slow to poll."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


async def until(condition: Callable[[], bool], what: str, deadline_s: float = 60.0) -> None:
    """Poll ``condition`` every 10 ms until it holds; fail after a generous deadline."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"never saw {what} within {deadline_s:g} s"
        await asyncio.sleep(0.01)


async def test_flex_start_request_goes_from_accepted_to_active_with_a_ready_node() -> None:
    clock = SteppedClock()
    server = SandboxTpuApi(default_world(utc_now()), clock=clock)      # states in the documented seconds
    server.start()
    source = FleetSource([ProjectConfig(P)], api_endpoint=server.endpoint, timeout_s=30)
    service = QueuedResourceService(source, poll_initial_s=0.01, poll_max_s=0.05)
    try:
        create = asyncio.ensure_future(service.create(flex(valid_until_s=3600), timeout_s=120))
        stored = f"projects/{P}/locations/us-west4-a/queuedResources/demo-v5e"
        await until(lambda: server.world.get(P, "queuedResources", stored) is not None, "the request stored")
        clock.now_s = OPERATION_S + 0.1                                # the create operation is done
        qr = await create
        assert (qr.name, qr.provisioning_model, qr.max_run_duration_s) == ("demo-v5e", "flex-start", 14400.0)
        assert qr.state == "ACCEPTED"
        seen: list[tuple[str, str | None]] = []
        follow = asyncio.ensure_future(service.follow(
            P, "us-west4-a", "demo-v5e", on_change=lambda q, n: seen.append((q.state, n and n.state)),
            until=lambda q, n: n is not None and n.state == "READY", poll_s=0.01, timeout_s=120))
        waiting_at = ACCEPTED_S + 0.1
        provisioning_at = ACCEPTED_S + FLEX_WAIT_S + 0.1
        active_at = provisioning_at + PROVISIONING_S
        await until(lambda: seen == [("ACCEPTED", None)], "ACCEPTED")
        for at, expected in ((waiting_at, "WAITING_FOR_RESOURCES"), (provisioning_at, "PROVISIONING"),
                             (active_at, "ACTIVE")):
            clock.now_s = at
            await until(lambda e=expected: bool(seen) and seen[-1][0] == e, expected)
        assert seen[-1] == ("ACTIVE", "CREATING")
        clock.now_s = active_at + NODE_CREATING_S
        qr, node = await follow
        assert [s for s, _ in seen] == ["ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE", "ACTIVE"]
        assert seen[-1] == ("ACTIVE", "READY")
        assert node is not None and node.queued_resource == "demo-v5e" and node.accelerator_type == "v5litepod-1"
        assert node.provisioning_model == "flex-start" and node.external_ip and node.external_ip.startswith("203.0.113.")
        assert qr.termination_time is not None and node.termination_time == qr.termination_time
        left = qr.time_left_s()
        assert left is not None and 4 * 3600 - 60 < left <= 4 * 3600
        # flex-start went to v2alpha1 (the library drops its fields); the operation was polled through v2
        posts = [path for method, path in server.requests if method == "POST"]
        assert posts == ["/v2alpha1/projects/inference-prod/locations/us-west4-a/queuedResources?"
                         "queuedResourceId=demo-v5e"]
        assert any(m == "GET" and "/v2/projects/inference-prod/locations/us-west4-a/operations/" in p
                   for m, p in server.requests)
    finally:
        source.close()
        server.stop()


async def test_the_body_the_sandbox_received_is_the_one_shown(service: QueuedResourceService,
                                                              server: SandboxTpuApi) -> None:
    request = QueuedResourceRequest(name="spot-a", project=P, zone="us-west4-a", accelerator_type="v5litepod-4",
                                    runtime_version="v2-alpha-tpuv5-lite", provisioning_model="spot",
                                    valid_until_s=900)
    await service.create(request)
    stored = server.world.get(P, "queuedResources", f"{request.parent}/queuedResources/spot-a")
    assert stored is not None
    body = request.rest_body()
    assert stored["tpu"] == body["tpu"] and stored["spot"] == {} and stored["queueingPolicy"] == {
        "validUntilDuration": "900s"}
    assert [m for m, p in server.requests if m == "POST"] == ["POST"]
    assert next(p for m, p in server.requests if m == "POST").startswith("/v2/")     # spot: the v2 library


@pytest.mark.parametrize(("zone", "accelerator", "verdict", "words"), [
    ("europe-west4-a", "v6e-8", "stockout", "no more capacity"),
    ("europe-west4-a", "v6e-4", "available", "granted"),
    ("us-west4-a", "v5litepod-1", "available", "granted"),
    ("asia-northeast1-b", "v6e-8", "quota", "Quota limit"),
])
async def test_probe_verdicts_follow_the_zones_capacity(service: QueuedResourceService, server: SandboxTpuApi,
                                                        zone: str, accelerator: str, verdict: str,
                                                        words: str) -> None:
    states: list[str] = []
    result = await probe(service, P, zone, accelerator, "v2-alpha-tpuv6e", poll_s=0.02, wait_s=10,
                         on_state=states.append)
    assert (result.verdict, result.deleted) == (verdict, True)
    assert words in result.reason
    assert states and states[-1] == result.last_state
    # the probe was a spot request with a short validUntil, and it is gone again
    created = server.world.list(P, "queuedResources", zone)[0]
    assert all(not q["name"].endswith(result.queued_resource) for q in created)
    assert ("DELETE", f"/v2/projects/{P}/locations/{zone}/queuedResources/{result.queued_resource}"
            "?force=true&%24alt=json%3Benum-encoding%3Dint") in server.requests


async def test_probe_of_a_zone_that_refuses_the_create_is_refused(service: QueuedResourceService,
                                                                  server: SandboxTpuApi) -> None:
    result = await probe(service, P, "us-central1-b", "v5litepod-1", "v2-alpha-tpuv5-lite", poll_s=0.02, wait_s=0.5)
    assert result.verdict == "available"       # spot is not refused there; flex-start is (next test)
    with pytest.raises(TpuApiError) as err:
        await service.create(flex("flex-c", zone="us-central1-b"))
    assert err.value.code == 400 and "FLEX_START is not supported" in err.value.message


async def test_flex_start_without_quota_waits_like_a_stockout_until_valid_until(
        service: QueuedResourceService) -> None:
    await service.create(flex("flex-asia", zone="asia-northeast1-b", accelerator="v6e-8", valid_until_s=100))
    qr, _ = await service.follow(P, "asia-northeast1-b", "flex-asia", on_change=lambda q, n: None,
                                 until=lambda q, n: q.state != "ACCEPTED", poll_s=0.01, timeout_s=5)
    assert qr.state == "WAITING_FOR_RESOURCES"
    qr, _ = await service.follow(P, "asia-northeast1-b", "flex-asia", on_change=lambda q, n: None,
                                 until=lambda q, n: q.state == "FAILED", poll_s=0.05, timeout_s=10)
    assert qr.failure is not None and "validUntilDuration (100s)" in qr.failure


async def test_delete_needs_force_for_active_and_then_removes_request_and_node(
        service: QueuedResourceService, server: SandboxTpuApi) -> None:
    with pytest.raises(TpuApiError) as err:
        await service.delete(P, "us-east5-a", "qr-flex-b")
    assert err.value.code == 400 and "ACTIVE" in err.value.message
    assert server.world.get(P, "queuedResources", f"projects/{P}/locations/us-east5-a/queuedResources/qr-flex-b")
    await service.delete(P, "us-east5-a", "qr-flex-b", force=True)
    with pytest.raises(TpuApiError) as gone:
        await service.get(P, "us-east5-a", "qr-flex-b")
    assert gone.value.code == 404
    assert server.world.get(P, "nodes", f"projects/{P}/locations/us-east5-a/nodes/vllm-flex-b") is None
    # an inactive one needs no force
    await service.delete(P, "us-east5-a", "qr-flex-done")
    with pytest.raises(TpuApiError):
        await service.get(P, "us-east5-a", "qr-flex-done")


def test_node_delete_and_other_writes_stay_refused(server: SandboxTpuApi) -> None:
    client = tpu_v2.TpuClient(transport="rest", credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": server.endpoint})
    with pytest.raises(gexc.Forbidden):
        client.delete_node(name=f"projects/{P}/locations/us-west4-a/nodes/vllm-v5e-a", timeout=5)
    with pytest.raises(gexc.Forbidden):
        client.stop_node(request={"name": f"projects/{P}/locations/us-west4-a/nodes/vllm-v5e-a"}, timeout=5)
    assert server.world.get(P, "nodes", f"projects/{P}/locations/us-west4-a/nodes/vllm-v5e-a") is not None


@pytest.mark.parametrize(("body", "query", "words"), [
    ({}, "queuedResourceId=x1", "node_spec is required"),
    ({"tpu": {"nodeSpec": [{"parent": f"projects/{P}/locations/us-west4-a", "nodeId": "n",
                            "node": {"acceleratorType": "v5litepod-1", "runtimeVersion": "r"}}]},
      "provisioningModel": "FLEX_START"}, "queuedResourceId=x2", "maxRunDuration is required"),
    ({"tpu": {"nodeSpec": [{"parent": f"projects/{P}/locations/us-west4-a", "nodeId": "vllm-v5e-a",
                            "node": {"acceleratorType": "v5litepod-1", "runtimeVersion": "r"}}]}},
     "queuedResourceId=x3", "already exists"),
    ({"tpu": {}}, "queuedResourceId=Bad_Name", "Invalid queued resource id"),
])
def test_the_sandbox_refuses_bad_creates_with_the_api_envelope(server: SandboxTpuApi, body: dict, query: str,
                                                               words: str) -> None:
    url = f"{server.endpoint}/v2alpha1/projects/{P}/locations/us-west4-a/queuedResources?{query}"
    response = requests.post(url, data=json.dumps(body), timeout=5)
    assert response.status_code in (400, 409)
    error = response.json()["error"]
    assert error["code"] == response.status_code and words in error["message"]


@pytest.mark.parametrize(("message", "kind"), [
    ('There is no more capacity in the zone "europe-west4-a"; you can try in another zone', "stockout"),
    ("Quota limit 'TPUV6EPreemptiblePodPerProjectPerZoneForTPUAPI' has been exceeded", "quota"),
    ("Invalid runtime version", None),
])
def test_classify_failure(message: str, kind: str | None) -> None:
    assert classify_failure(message) == kind


@pytest.mark.parametrize(("text", "seconds"), [("4h", 14400), ("90m", 5400), ("1h30m", 5400), ("7d", 604800),
                                               ("600", 600), ("45s", 45)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize("text", ["", "4x", "h", "-1h", "0s", "1h 30m"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration_s(text)


async def test_a_region_quota_is_a_429_at_create_and_the_probe_reads_it_as_quota(
        service: QueuedResourceService, server: SandboxTpuApi) -> None:
    result = await probe(service, P, "us-east5-a", "v5p-8", "v2-alpha-tpuv5", poll_s=0.02, wait_s=5)
    assert (result.verdict, result.last_state, result.deleted) == ("quota", None, True)
    assert result.reason == ("Quota limit 'TPUV5PPreemptiblePerProjectPerRegionForTPUAPI' has been exceeded. "
                             "Limit: 0 in region us-east5.")
    url = f"{server.endpoint}/v2/projects/{P}/locations/us-east5-a/queuedResources?queuedResourceId=q429"
    body = {"tpu": {"nodeSpec": [{"parent": f"projects/{P}/locations/us-east5-a", "nodeId": "n429",
                                  "node": {"acceleratorType": "v5p-8", "runtimeVersion": "r"}}]}, "spot": {}}
    response = requests.post(url, data=json.dumps(body), timeout=5)
    assert response.status_code == 429
    assert response.json()["error"]["status"] == "RESOURCE_EXHAUSTED"


async def test_a_full_reservation_fails_with_googles_words_and_reads_as_stockout(
        service: QueuedResourceService) -> None:
    from console.flows.triage import stuck_verdict
    from remote.tpu.probe import verdict_of

    await service.create(QueuedResourceRequest(name="res-8", project=P, zone="us-east5-a", accelerator_type="v6e-8",
                                               runtime_version="v2-alpha-tpuv6e", provisioning_model="reserved"))
    qr, _ = await service.follow(P, "us-east5-a", "res-8", on_change=lambda q, n: None,
                                 until=lambda q, n: q.state == "FAILED", poll_s=0.02, timeout_s=10)
    assert qr.failure is not None and qr.failure.startswith("Insufficient reserved capacity.")
    assert stuck_verdict(qr) == "stockout" and verdict_of(qr) == ("stockout", qr.failure)
