"""The real google-cloud-tpu client (FleetSource) against the loopback sandbox TPU REST server."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from datetime import datetime

import pytest
import requests
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.auth.transport.requests import AuthorizedSession
from google.cloud import tpu_v2

from console.cli import main
from console.config import ProjectConfig
from remote.errors import CredentialsError, TpuApiError
from remote.models import PROVISIONING_MODELS, FleetSnapshot, utc_now
from remote.tpu.api import FleetSource, api_error
from remote.tpu.parse import message_to_json, node_from_json, queued_resource_from_json
from sandbox.fleet_data import SandboxWorld, default_world
from sandbox.tpu_server import SandboxTpuApi

PROJECTS = [ProjectConfig("inference-prod"), ProjectConfig("research-sandbox"), ProjectConfig("denied-project")]


@pytest.fixture
def now() -> datetime:
    return utc_now()


@pytest.fixture
def start_server(now: datetime) -> Iterator[Callable[..., SandboxTpuApi]]:
    """Factory: a started sandbox server on the default world (stopped after the test)."""
    servers: list[SandboxTpuApi] = []

    def start(world: SandboxWorld | None = None, **options) -> SandboxTpuApi:
        server = SandboxTpuApi(world or default_world(now), **options)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


async def list_fleet(server: SandboxTpuApi, projects=PROJECTS, timeout_s: float = 5.0) -> FleetSnapshot:
    source = FleetSource(projects, api_endpoint=server.endpoint, timeout_s=timeout_s)
    try:
        return await source.list_fleet()
    finally:
        source.close()


def names(snapshot: FleetSnapshot, project: str) -> set[str]:
    return {n.name for n in snapshot.nodes if n.project == project}


async def test_lists_every_project_following_pages(start_server) -> None:
    server = start_server()
    snapshot = await list_fleet(server)
    world = server.world
    expected = {name.rsplit("/", 1)[1] for name in world.projects["inference-prod"].nodes}
    assert names(snapshot, "inference-prod") == expected and len(expected) == 9
    assert names(snapshot, "research-sandbox") == {"research-v5e-1"}     # europe-west4-a is unreachable
    assert {q.name for q in snapshot.queued_resources} == {
        "qr-flex-b", "qr-spot-c", "qr-flex-wait", "qr-flex-done", "qr-failed"}
    v2_pages = [p for m, p in server.requests if p.startswith("/v2/projects/inference-prod/locations/-/nodes")]
    assert len(v2_pages) == 3 and "pageToken=" in v2_pages[1] and "pageToken=" in v2_pages[2]
    alpha_pages = [p for m, p in server.requests if p.startswith("/v2alpha1/projects/inference-prod/locations/-/nodes")]
    assert len(alpha_pages) == 3
    assert [n.key for n in snapshot.nodes] == sorted(n.key for n in snapshot.nodes)


async def test_denied_project_and_unreachable_zone_are_problem_lines(start_server) -> None:
    snapshot = await list_fleet(start_server())
    problems = {(p.project, p.zone, p.code): p.message for p in snapshot.problems}
    assert problems == {
        ("denied-project", None, 403): "Permission 'tpu.nodes.list' denied on 'projects/denied-project/locations/-/nodes'",
        ("research-sandbox", "europe-west4-a", 503): "zone unreachable",
    }
    assert names(snapshot, "inference-prod")            # the others still list


async def test_flex_start_fields_reach_the_models(start_server, now: datetime) -> None:
    snapshot = await list_fleet(start_server())
    nodes = {n.name: n for n in snapshot.nodes}
    qrs = {q.name: q for q in snapshot.queued_resources}
    flex = nodes["vllm-flex-b"]
    assert flex.provisioning_model == "flex-start" and flex.queued_resource == "qr-flex-b"
    assert abs(flex.time_left_s(now) - 7200) < 1
    assert {n.provisioning_model for n in snapshot.nodes} == set(PROVISIONING_MODELS)
    assert (nodes["vllm-spot-c"].provisioning_model, nodes["vllm-reserved-d"].provisioning_model,
            nodes["batch-preempt-f"].provisioning_model) == ("spot", "reserved", "preemptible")
    assert nodes["batch-preempt-f"].symptoms == ("EXECUTE_TIMED_OUT",)
    assert len(nodes["vllm-v5e-16"].workers) == 4 and nodes["vllm-v5e-16"].workers[3].external_ip == "203.0.113.74"
    assert nodes["vllm-new-e"].workers == () and nodes["vllm-new-e"].state == "CREATING"
    assert (qrs["qr-flex-b"].max_run_duration_s, qrs["qr-flex-b"].termination_time) == (14400, flex.termination_time)
    assert (qrs["qr-flex-wait"].state, qrs["qr-flex-wait"].provisioning_model) == ("WAITING_FOR_RESOURCES", "flex-start")
    assert (qrs["qr-flex-done"].state, qrs["qr-flex-done"].state_initiator) == ("SUSPENDED", "SERVICE")
    assert qrs["qr-failed"].failure.startswith("There is no more capacity")


async def test_queued_resources_fall_back_to_zone_by_zone(start_server) -> None:
    server = start_server(refuse_wildcard_qr=True)
    snapshot = await list_fleet(server, PROJECTS[:2])
    assert {q.name for q in snapshot.queued_resources} == {
        "qr-flex-b", "qr-spot-c", "qr-flex-wait", "qr-flex-done", "qr-failed"}
    assert next(q for q in snapshot.queued_resources if q.name == "qr-flex-b").provisioning_model == "flex-start"
    paths = [p.split("?")[0] for _, p in server.requests]
    locations = [p for _, p in server.requests if p.split("?")[0] == "/v2/projects/inference-prod/locations"]
    assert len(locations) == 2 and "pageToken=" in locations[1]     # 4 zones, 2 pages; shared by v2 and v2alpha1
    for zone in ("us-east5-a", "us-west4-a", "us-central1-a", "asia-northeast1-b"):
        assert f"/v2/projects/inference-prod/locations/{zone}/queuedResources" in paths
        assert f"/v2alpha1/projects/inference-prod/locations/{zone}/queuedResources" in paths
    # listed per zone, the unreachable zone answers 503 with the API's message: one line, not two
    assert [(p.project, p.zone, p.code, p.message) for p in snapshot.problems] == [
        ("research-sandbox", "europe-west4-a", 503, "The zone europe-west4-a is currently unreachable")]


async def test_configured_zones_list_only_those_zones(start_server) -> None:
    server = start_server()
    snapshot = await list_fleet(server, [ProjectConfig("inference-prod", zones=("us-east5-a",))])
    assert names(snapshot, "inference-prod") == {"vllm-flex-b", "vllm-reserved-d", "vllm-ondemand-g"}
    assert not any("/locations/-/" in p for _, p in server.requests)
    assert snapshot.problems == ()


async def test_v2_and_v2alpha1_agree_on_everything_but_flex_fields(start_server) -> None:
    server = start_server()
    client = tpu_v2.TpuClient(transport="rest", credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": server.endpoint})
    session = AuthorizedSession(AnonymousCredentials())
    parent = "projects/inference-prod/locations/-"
    v2_nodes = {n.name: n for n in (node_from_json(message_to_json(m)) for m in client.list_nodes(parent=parent, timeout=5))}
    v2_qrs = {q.name: q for q in (queued_resource_from_json(message_to_json(m))
                                  for m in client.list_queued_resources(parent=parent, timeout=5))}
    alpha_nodes, alpha_qrs = {}, {}
    for collection, into, convert in (("nodes", alpha_nodes, node_from_json), ("queuedResources", alpha_qrs, queued_resource_from_json)):
        token = ""
        while True:
            body = session.get(f"{server.endpoint}/v2alpha1/{parent}/{collection}", params={"pageToken": token}, timeout=5).json()
            for item in body[collection]:
                model = convert(item)
                into[model.name] = model
            if not (token := body.get("nextPageToken")):
                break
    session.close()
    client.transport.close()
    assert v2_nodes.keys() == alpha_nodes.keys() and len(v2_nodes) == 9
    assert v2_qrs.keys() == alpha_qrs.keys() and len(v2_qrs) == 5
    for name, alpha in alpha_nodes.items():
        v2 = v2_nodes[name]
        assert dataclasses.replace(v2, provisioning_model=alpha.provisioning_model,
                                   termination_time=alpha.termination_time) == alpha, name
    assert v2_nodes["vllm-flex-b"].termination_time is None and alpha_nodes["vllm-flex-b"].termination_time
    for name, alpha in alpha_qrs.items():
        assert dataclasses.replace(v2_qrs[name], provisioning_model=alpha.provisioning_model,
                                   max_run_duration_s=alpha.max_run_duration_s,
                                   termination_time=alpha.termination_time) == alpha, name
    assert v2_qrs["qr-flex-b"].provisioning_model == "on-demand" and alpha_qrs["qr-flex-b"].provisioning_model == "flex-start"


async def test_supplement_failure_keeps_rows_and_notes_it(start_server) -> None:
    snapshot = await list_fleet(start_server(refuse_v2alpha1=True), PROJECTS[:1])
    nodes = {n.name: n for n in snapshot.nodes}
    assert len(nodes) == 9
    assert nodes["vllm-spot-c"].provisioning_model == "spot"            # from v2 schedulingConfig
    assert nodes["vllm-flex-b"].termination_time is None
    assert [(p.project, p.zone, p.code) for p in snapshot.problems] == [("inference-prod", None, 404)]
    assert snapshot.problems[0].message.startswith("flex-start fields unavailable (v2alpha1 nodes list failed)")


async def test_timeout_is_a_problem_with_code_0(start_server) -> None:
    snapshot = await list_fleet(start_server(latency_s=0.6), PROJECTS[:2], timeout_s=0.2)
    assert snapshot.nodes == ()
    assert {(p.project, p.zone, p.code) for p in snapshot.problems} == {
        ("inference-prod", None, 0), ("research-sandbox", None, 0)}
    assert "timed out" in snapshot.problems[0].message


async def test_get_node_guest_attributes_and_404(start_server, now: datetime) -> None:
    server = start_server()
    source = FleetSource(PROJECTS, api_endpoint=server.endpoint, timeout_s=5)
    try:
        node = await source.get_node("inference-prod", "us-east5-a", "vllm-flex-b")
        assert node.provisioning_model == "flex-start" and abs(node.time_left_s(now) - 7200) < 1
        multi = await source.get_node("inference-prod", "us-west4-a", "vllm-v5e-16")
        attributes = await source.get_guest_attributes(multi, worker=2)
        assert attributes == {item["key"]: item["value"]
                              for item in server.world.guest_attributes[multi.raw["name"]][2]}
        assert attributes["hostname"].endswith("-w-2")
        with pytest.raises(TpuApiError) as info:
            await source.get_node("inference-prod", "us-east5-a", "nope")
        assert info.value.code == 404 and "nope" in info.value.message
    finally:
        source.close()


def test_sandbox_refuses_destructive_calls_and_records_them(start_server) -> None:
    server = start_server()
    client = tpu_v2.TpuClient(transport="rest", credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": server.endpoint})
    name = "projects/inference-prod/locations/us-east5-a/nodes/vllm-flex-b"
    with pytest.raises(gexc.Forbidden, match="sandbox refuses destructive calls"):
        client.delete_node(name=name, timeout=5)
    with pytest.raises(gexc.Forbidden):
        client.stop_node(request={"name": name}, timeout=5)
    client.transport.close()
    assert [m for m, _ in server.requests] == ["DELETE", "POST"]
    assert name in server.world.projects["inference-prod"].nodes


async def test_no_credentials_is_a_credentials_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    source = FleetSource(PROJECTS, api_endpoint=None, timeout_s=1)
    try:
        with pytest.raises(CredentialsError, match="gcloud auth application-default login"):
            await source.list_fleet()
    finally:
        source.close()


# --- the `nodes` verb ---------------------------------------------------------------------------

NODE_KEYS = {"project", "zone", "name", "state", "accelerator_type", "provisioning_model", "external_ip",
             "internal_ip", "termination_time", "time_left_s", "health", "runtime_version", "queued_resource",
             "create_time", "os_login", "os_login_source", "os_login_note"}
QR_KEYS = {"project", "zone", "name", "state", "state_initiator", "provisioning_model", "accelerator_type",
           "max_run_duration_s", "termination_time", "create_time", "failure"}


def test_nodes_json_contract(start_server, capsys, tmp_path) -> None:
    server = start_server()
    config = tmp_path / "config.toml"
    config.write_text('[[projects]]\nid = "inference-prod"\n')
    assert main(["--config", str(config), "nodes", "--json", "--api-endpoint", server.endpoint]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"nodes", "queued_resources", "errors"} and out["errors"] == []
    assert all(set(n) == NODE_KEYS for n in out["nodes"]) and len(out["nodes"]) == 9
    assert all(set(q) == QR_KEYS for q in out["queued_resources"]) and len(out["queued_resources"]) == 5
    initiators = {q["name"]: q["state_initiator"] for q in out["queued_resources"]}
    assert initiators["qr-flex-done"] == "SERVICE" and initiators["qr-flex-b"] is None
    flex = next(n for n in out["nodes"] if n["name"] == "vllm-flex-b")
    assert flex["termination_time"].endswith("Z") and 7100 < flex["time_left_s"] <= 7200
    assert datetime.fromisoformat(flex["create_time"]).utcoffset().total_seconds() == 0
    creating = next(n for n in out["nodes"] if n["name"] == "vllm-new-e")
    assert (creating["external_ip"], creating["health"], creating["termination_time"]) == (None, None, None)


def test_nodes_exit_codes(start_server, capsys, tmp_path) -> None:
    server = start_server()
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    argv = ["--config", str(empty), "nodes", "--json", "--api-endpoint", server.endpoint]
    assert main([*argv, "--project", "inference-prod", "--project", "denied-project"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["errors"] == [{"project": "denied-project", "zone": None, "code": 403,
                              "message": "Permission 'tpu.nodes.list' denied on 'projects/denied-project/locations/-/nodes'"}]
    assert main(argv) == 2
    assert "no projects to list" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("projectz = 1\n")
    assert main(["--config", str(bad), "nodes", "--project", "x"]) == 2
    assert "projectz" in capsys.readouterr().err
    assert main([*argv, "--project", "p", "--api-endpoint", "ftp://x"]) == 2


def test_nodes_table_output(start_server, capsys, tmp_path) -> None:
    server = start_server()
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    code = main(["--config", str(empty), "nodes", "--api-endpoint", server.endpoint,
                 "--project", "research-sandbox"])
    out = capsys.readouterr().out
    assert code == 1
    assert "research-v5e-1" in out and "203.0.113.111" in out
    assert "problem: research-sandbox/europe-west4-a: 503: zone unreachable" in out


@pytest.mark.parametrize(("status", "word"), [(429, "RESOURCE_EXHAUSTED"), (500, "INTERNAL"), (503, "UNAVAILABLE")])
def test_api_errors_keep_the_status_and_the_apis_message(status: int, word: str) -> None:
    response = requests.Response()
    response.status_code = status
    response._content = json.dumps({"error": {"code": status, "message": f"quota or outage {status}",
                                              "status": word}}).encode()
    response.request = requests.Request("GET", "https://tpu.googleapis.com/v2/projects/p/locations/-/nodes").prepare()
    error = api_error(gexc.from_http_response(response), 5)
    assert (error.code, error.message, error.status) == (status, f"quota or outage {status}", word)
    assert api_error(requests.ConnectTimeout("x"), 2.5).code == 0
    assert "2.5 s" in api_error(requests.ReadTimeout("x"), 2.5).message
    assert api_error(ConnectionRefusedError(111, "refused"), 1).code == 0


def test_sandbox_v2_answers_lack_v2alpha1_fields_and_honour_page_size(start_server) -> None:
    server = start_server()
    session = AuthorizedSession(AnonymousCredentials())
    try:
        for collection in ("nodes", "queuedResources"):
            url = f"{server.endpoint}/v2/projects/inference-prod/locations/-/{collection}"
            text = session.get(url, params={"pageSize": "100"}, timeout=5).text
            alpha = session.get(url.replace("/v2/", "/v2alpha1/"), params={"pageSize": "100"}, timeout=5).text
            for field_name in ("provisioningModel", "runDuration", "terminationTimestamp"):
                assert field_name not in text
            assert "FLEX_START" in alpha or "terminationTimestamp" in alpha
            body = json.loads(text)
            assert "nextPageToken" not in body and len(body[collection]) == {"nodes": 9, "queuedResources": 5}[collection]
        small = session.get(f"{server.endpoint}/v2/projects/inference-prod/locations/-/nodes",
                            params={"pageSize": "4"}, timeout=5).json()
        assert len(small["nodes"]) == 4 and small["nextPageToken"]
    finally:
        session.close()
