"""The request / delete / probe verbs end to end: ``main([...])`` against the sandbox TPU API
(real google-cloud-tpu client; queued-resource time scaled down 50x)."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from console.cli import main
from console.config import DEFAULT_PRICES
from console.flows.delete import plan_delete
from console.flows.request import build_request, preview
from console.flows.triage import inactive_by_zone
from remote.models import FleetSnapshot, QueuedResource, utc_now
from sandbox.fleet_data import default_world
from sandbox.tpu_server import SandboxTpuApi

P = "inference-prod"
FLEX = ["request", "demo-v5e", "--project", P, "--zone", "us-west4-a", "--accelerator-type", "v5litepod-1",
        "--provisioning-model", "flex-start", "--max-run-duration", "4h", "--valid-until", "1h"]


@pytest.fixture
def server() -> Iterator[SandboxTpuApi]:
    api = SandboxTpuApi(default_world(utc_now()), time_scale=0.02)
    api.start()
    yield api
    api.stop()


@pytest.fixture
def cli(server: SandboxTpuApi, tmp_path: Path) -> Callable[..., int]:
    """``cli(*argv, readonly=False)`` runs ``tpu-console --config <sandbox config> argv``."""
    def run(*argv: str, readonly: bool = False) -> int:
        config = tmp_path / "config.toml"
        config.write_text(f'api_endpoint = "{server.endpoint}"\nrequest_timeout_s = 5\n'
                          + ("readonly = true\n" if readonly else "") + f'[[projects]]\nid = "{P}"\n')
        return main(["--config", str(config), *argv])
    return run


def writes(server: SandboxTpuApi) -> list[tuple[str, str]]:
    return [(m, p) for m, p in server.requests if m in ("POST", "DELETE", "PATCH", "PUT")]


def qr_json(server: SandboxTpuApi, zone: str, name: str) -> dict | None:
    return server.world.get(P, "queuedResources", f"projects/{P}/locations/{zone}/queuedResources/{name}")


def test_request_dry_run_prints_the_exact_body_and_gcloud_line_and_creates_nothing(cli, server, capsys) -> None:
    assert cli(*FLEX, "--dry-run", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    # The endpoint actually used: the config's (the sandbox's loopback), not Google's.
    assert out["rest_call"] == (f"POST {server.endpoint}/v2alpha1/projects/inference-prod/locations/"
                                "us-west4-a/queuedResources?queuedResourceId=demo-v5e")
    assert server.endpoint.startswith("http://127.0.0.1:")
    assert out["rest_body"] == {
        "tpu": {"nodeSpec": [{"parent": "projects/inference-prod/locations/us-west4-a", "nodeId": "demo-v5e",
                              "node": {"acceleratorType": "v5litepod-1", "runtimeVersion": "v2-alpha-tpuv5-lite"}}]},
        "provisioningModel": "FLEX_START", "runDuration": {"maxRunDuration": "14400s"},
        "queueingPolicy": {"validUntilDuration": "3600s"}}
    assert out["gcloud"] == (
        "gcloud alpha compute tpus queued-resources create demo-v5e --node-id=demo-v5e --project=inference-prod "
        "--zone=us-west4-a --accelerator-type=v5litepod-1 --runtime-version=v2-alpha-tpuv5-lite "
        "--provisioning-model=flex-start --max-run-duration=4h --valid-until-duration=1h")
    assert out["created"] is False and "at most $2.40" in out["cost"]
    assert writes(server) == []


def test_request_without_a_terminal_needs_yes(cli, server, capsys) -> None:
    assert cli(*FLEX) == 1
    assert "pass --yes" in capsys.readouterr().err
    assert writes(server) == [] and qr_json(server, "us-west4-a", "demo-v5e") is None


def test_request_yes_wait_follows_the_states_to_a_ready_node(cli, server, capsys) -> None:
    assert cli(*FLEX, "--yes", "--wait") == 0
    out = capsys.readouterr().out
    states = [line.split(":")[0].strip() for line in out.splitlines() if line.startswith("  ") and ": " in line
              and line.split(":")[0].strip().split(" ")[0].isupper()]
    # the verb polls every 2 s, so at this time scale it may skip the middle states (the service
    # test sees each one); what is certain: it was created, and the last line is the READY node
    assert "Created: demo-v5e is " in out and states[-1] == "ACTIVE / node READY"
    assert "READY at 203.0.113." in out and "min of run time left" in out
    assert qr_json(server, "us-west4-a", "demo-v5e")["state"]["state"] == "ACTIVE"


def test_request_json_reports_the_created_resource(cli, server, capsys) -> None:
    assert cli("request", "spot-b", "--project", P, "--zone", "europe-west4-a", "--accelerator-type", "v6e-4",
               "--provisioning-model", "spot", "--yes", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["created"] is True and out["queued_resource"]["name"] == "spot-b"
    assert out["queued_resource"]["provisioning_model"] == "spot"
    assert writes(server)[0][1].startswith("/v2/projects/inference-prod/locations/europe-west4-a/queuedResources?")


def test_request_refused_by_the_zone_says_why(cli, server, capsys) -> None:
    assert cli("request", "flex-c", "--project", P, "--zone", "us-central1-b", "--accelerator-type", "v5litepod-1",
               "--provisioning-model", "flex-start", "--max-run-duration", "2h", "--yes") == 1
    err = capsys.readouterr().err
    assert "not created" in err and "FLEX_START is not supported" in err and "Traceback" not in err


@pytest.mark.parametrize(("extra", "words"), [
    (["--provisioning-model", "flex-start"], "needs a max run duration"),
    (["--provisioning-model", "flex-start", "--max-run-duration", "8d"], "10 minutes to 7 days"),
    (["--provisioning-model", "spot", "--max-run-duration", "1h"], "only to flex-start"),
    (["--provisioning-model", "spot", "--valid-until", "soon"], "is not a duration"),
])
def test_request_bad_input_exits_2_and_creates_nothing(cli, server, capsys, extra, words) -> None:
    argv = ["request", "x1", "--project", P, "--zone", "us-west4-a", "--accelerator-type", "v5litepod-1", *extra,
            "--yes"]
    assert cli(*argv) == 2
    assert words in capsys.readouterr().err
    assert writes(server) == []


def test_request_bad_name_exits_2(cli, server, capsys) -> None:
    assert cli("request", "Bad_Name", "--project", P, "--zone", "us-west4-a", "--accelerator-type", "v5litepod-1",
               "--provisioning-model", "spot", "--yes") == 2
    assert "queued resource name 'Bad_Name'" in capsys.readouterr().err


def test_delete_refuses_active_without_force_then_deletes_with_force(cli, server, capsys) -> None:
    argv = ["delete", "qr-flex-b", "--project", P, "--zone", "us-east5-a"]
    assert cli(*argv, "--yes") == 1
    captured = capsys.readouterr()
    assert "refused without --force" in captured.out and "--force" in captured.err
    assert qr_json(server, "us-east5-a", "qr-flex-b") is not None and writes(server) == []
    assert cli(*argv, "--yes", "--force", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["deleted"] is True and out["nodes"] == ["vllm-flex-b"] and out["needs_force"] is True
    # 2 h of a v6e-8 flex-start run at $1.35/chip-hour (the run started 2 h ago)
    assert out["cost_so_far_usd"] == pytest.approx(2 * 8 * 1.35, abs=0.05)
    assert qr_json(server, "us-east5-a", "qr-flex-b") is None
    assert server.world.get(P, "nodes", f"projects/{P}/locations/us-east5-a/nodes/vllm-flex-b") is None


def test_delete_typed_confirm_needs_the_exact_name(cli, server, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    answers = iter(["qr-flex", "qr-flex-done"])
    prompts: list[str] = []
    monkeypatch.setattr("builtins.input", lambda prompt="": prompts.append(prompt) or next(answers))
    argv = ["delete", "qr-flex-done", "--project", P, "--zone", "us-east5-a"]
    assert cli(*argv) == 1                                 # a prefix of the name is not the name
    assert qr_json(server, "us-east5-a", "qr-flex-done") is not None
    assert cli(*argv) == 0
    assert "Type the queued resource's name (qr-flex-done)" in prompts[0]
    assert qr_json(server, "us-east5-a", "qr-flex-done") is None
    assert "Flex-start cost so far: $43.20" in capsys.readouterr().out     # 4 h x 8 chips x $1.35


def test_delete_of_a_missing_resource_exits_1(cli, capsys) -> None:
    assert cli("delete", "nope", "--project", P, "--zone", "us-east5-a", "--yes") == 1
    assert "no queued resource nope" in capsys.readouterr().err


@pytest.mark.parametrize(("zone", "accelerator", "verdict", "code", "tries"), [
    ("europe-west4-a", "v6e-8", "stockout", 1, [
        ("provisioning_model", "europe-west4-a", "v6e-8", "flex-start"),
        ("fewer_chips", "europe-west4-a", "v6e-4", "spot"),
        ("other_zone", "asia-northeast1-b", "v6e-8", "spot"), ("other_zone", "us-central1-b", "v6e-8", "spot"),
        ("other_zone", "us-east5-a", "v6e-8", "spot")]),
    ("us-west4-a", "v5litepod-1", "available", 0, []),
    ("asia-northeast1-b", "v6e-8", "quota", 1, [   # "limit 0": no smaller type fits, so no fewer-chips advice
        ("other_zone", "europe-west4-a", "v6e-8", "spot"), ("other_zone", "us-central1-b", "v6e-8", "spot"),
        ("other_zone", "us-east5-a", "v6e-8", "spot"), ("quota", "asia-northeast1-b", "v6e-8", "spot")]),
])
def test_probe_verb(cli, server, capsys, zone, accelerator, verdict, code, tries) -> None:
    assert cli("probe", "--project", P, "--zone", zone, "--accelerator-type", accelerator, "--json") == code
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert (out["verdict"], out["deleted"]) == (verdict, True)
    assert "creates a spot queued resource" in captured.err and "deletes it again" in captured.err
    assert [m for m, _ in writes(server)] == ["POST", "DELETE"]
    # What to try: the zones' types come from acceleratorTypes.list, one call per zone of the project.
    assert [(t["kind"], t["zone"], t["accelerator_type"], t["provisioning_model"]) for t in out["try"]] == tries
    listed = {p.split("/")[5] for m, p in server.requests if m == "GET" and p.split("?")[0].endswith("/acceleratorTypes")}
    assert listed == (set() if verdict == "available" else
                      {"us-east5-a", "us-west4-a", "us-central1-a", "asia-northeast1-b", "europe-west4-a",
                       "us-central1-b"})
    for t in out["try"]:
        if t["kind"] != "quota":
            assert t["command"].startswith("tpu-console ") and f"--zone {t['zone']}" in t["command"]


def test_probe_table_says_what_to_try(cli, server, capsys) -> None:
    assert cli("probe", "--project", P, "--zone", "europe-west4-a", "--accelerator-type", "v6e-8") == 1
    out = capsys.readouterr().out.splitlines()
    assert out[out.index("try:") + 3:out.index("try:") + 5] == [
        "  fewer chips are granted sooner (v6e-4 instead of v6e-8):",
        "    tpu-console probe --project inference-prod --zone europe-west4-a --accelerator-type v6e-4"]


@pytest.mark.parametrize("argv", [
    FLEX + ["--yes"],
    ["delete", "qr-failed", "--project", P, "--zone", "asia-northeast1-b", "--yes"],
    ["probe", "--project", P, "--zone", "us-west4-a", "--accelerator-type", "v5litepod-1"],
    ["swap", "vllm-v5e-a", "--set", "max-model-len=4096", "--yes"],
    ["rollback", "vllm-v5e-a", "--yes"],
])
def test_readonly_refuses_every_mutating_verb(cli, server, capsys, argv) -> None:
    assert cli(*argv, readonly=True) == 1
    assert "read-only mode is on" in capsys.readouterr().err
    assert writes(server) == []


def test_readonly_flag_overrides_the_config(cli, server, capsys) -> None:
    assert cli("--readonly", *FLEX, "--yes") == 1
    assert writes(server) == []


# --- the Textual-free flows -------------------------------------------------------------------


def test_the_rest_call_names_google_without_an_endpoint_override() -> None:
    request = build_request(name="x1", project=P, zone="us-west4-a", accelerator_type="v5litepod-1",
                            provisioning_model="spot")
    assert preview(request, DEFAULT_PRICES).rest_call.startswith("POST https://tpu.googleapis.com/v2/projects/")
    assert preview(request, DEFAULT_PRICES, api_endpoint="tpu.example.internal/").rest_call.startswith(
        "POST https://tpu.example.internal/v2/projects/inference-prod/")


def test_preview_costs_by_model() -> None:
    flex = build_request(name="a", project=P, zone="us-west4-a", accelerator_type="v6e-8",
                         provisioning_model="flex-start", max_run_duration="2h")
    assert preview(flex, DEFAULT_PRICES).cost.startswith("$1.35/chip-hour x 8 chips = $10.80/h")
    assert "at most $21.60" in preview(flex, DEFAULT_PRICES).cost
    assert flex.runtime_version == "v2-alpha-tpuv6e"
    spot = build_request(name="a", project=P, zone="us-west4-a", accelerator_type="v5litepod-4",
                         provisioning_model="spot")
    assert "preempted" in preview(spot, DEFAULT_PRICES).cost and "--spot" in spot.gcloud_argv()


def test_plan_delete_cost_stops_at_the_end_of_the_run() -> None:
    now = utc_now()
    ended = QueuedResource(P, "z-a", "q", "SUSPENDED", provisioning_model="flex-start", accelerator_type="v6e-4",
                           max_run_duration_s=3600, termination_time=now - timedelta(hours=5))
    plan = plan_delete(ended, (), DEFAULT_PRICES, now)
    assert plan.billed_s == 3600 and plan.cost_so_far_usd == pytest.approx(4 * 1.35)
    assert not plan.needs_force and plan.command == "tpu-console delete q --project=inference-prod --zone=z-a"
    spot = QueuedResource(P, "z-a", "s", "ACTIVE", provisioning_model="spot", accelerator_type="v6e-4")
    plan = plan_delete(spot, (), DEFAULT_PRICES, now)
    assert plan.cost_so_far_usd is None and plan.needs_force and plan.command.endswith("--force")


def test_inactive_queued_resources_by_zone() -> None:
    def qr(zone: str, name: str, state: str) -> QueuedResource:
        return QueuedResource(P, zone, name, state)
    snapshot = FleetSnapshot(queued_resources=(
        qr("us-east5-a", "b", "SUSPENDED"), qr("us-east5-a", "a", "FAILED"), qr("us-east5-a", "c", "ACTIVE"),
        qr("asia-northeast1-b", "d", "FAILED"), qr("asia-northeast1-b", "e", "WAITING_FOR_RESOURCES")))
    zones = inactive_by_zone(snapshot)
    assert [(z.zone, [q.name for q in z.resources]) for z in zones] == [
        ("asia-northeast1-b", ["d"]), ("us-east5-a", ["a", "b"])]
    assert zones[1].headline == "2 inactive queued resources may hold quota in inference-prod/us-east5-a"
    assert zones[1].commands[0] == "tpu-console delete a --project=inference-prod --zone=us-east5-a"


def test_readonly_config_key_must_be_a_boolean(tmp_path: Path) -> None:
    from console.config import ConfigError, load_config

    path = tmp_path / "config.toml"
    path.write_text('readonly = "yes"\n')
    with pytest.raises(ConfigError, match="readonly.*true or false"):
        load_config(path)
    path.write_text("readonly = true\n")
    assert load_config(path).readonly is True


def test_explain_a_wait_names_the_valid_until_and_the_probe() -> None:
    from console.flows.request import explain

    now = utc_now()
    waiting = QueuedResource(P, "asia-northeast1-b", "w", "WAITING_FOR_RESOURCES", provisioning_model="flex-start",
                             accelerator_type="v6e-8", create_time=now - timedelta(minutes=55),
                             raw={"queueingPolicy": {"validUntilDuration": "3600s"}})
    text = explain(waiting, None, now)
    assert "validUntil runs out in 5 min" in text
    assert "tpu-console probe --project inference-prod --zone asia-northeast1-b --accelerator-type v6e-8" in text
    early = dataclasses.replace(waiting, create_time=now - timedelta(minutes=10))
    assert "may wait 50 more min" in explain(early, None, now)
    failed = QueuedResource(P, "europe-west4-a", "f", "FAILED", failure='There is no more capacity in the zone "x"')
    assert "try fewer chips, another zone" in explain(failed, None, now)
    assert "tpu-console delete f --project=inference-prod --zone=europe-west4-a" in explain(failed, None, now)
    # the accelerator type comes from the API: the printed probe line quotes it (pasting it ran `id`)
    hostile = dataclasses.replace(waiting, accelerator_type="v6e-8;$(id)")
    assert "--accelerator-type 'v6e-8;$(id)'` tells them apart" in explain(hostile, None, now)


def test_nodes_table_lists_inactive_queued_resources_with_their_delete_commands(cli, capsys) -> None:
    assert cli("nodes") == 0
    out = capsys.readouterr().out
    assert "quota: 1 inactive queued resource may hold quota in inference-prod/us-east5-a:" in out
    assert "  tpu-console delete qr-flex-done --project=inference-prod --zone=us-east5-a" in out
    assert "tpu-console delete qr-flex-b " not in out          # ACTIVE: not inactive


def test_nodes_table_in_read_only_mode_hides_the_delete_commands(cli, capsys) -> None:
    assert cli("nodes", readonly=True) == 0
    out = capsys.readouterr().out
    assert "quota: 1 inactive queued resource may hold quota in inference-prod/us-east5-a (read-only: delete hidden)" in out
    assert "tpu-console delete" not in out
