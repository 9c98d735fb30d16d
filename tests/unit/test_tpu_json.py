"""REST JSON -> models (remote/tpu_json.py) on the corpus samples, and the v2-library round trip."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.cloud import tpu_v2

from remote.tpu.parse import (
    find_owner,
    merge_v2alpha1,
    message_to_json,
    node_from_json,
    node_provisioning_model,
    parse_duration_s,
    parse_time,
    project_from_json,
    qr_provisioning_model,
    queued_resource_from_json,
    split_name,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gcp_json"


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


FLEX_NODE = "node-v2alpha1-flex-start.schema-derived.json"
FLEX_QR = "queued-resource-v2alpha1-flex-start-active.schema-derived.json"


def via_v2_library(raw: dict, message_type) -> dict:
    """What the google-cloud-tpu v2 REST client makes of this JSON, back as REST JSON."""
    return message_to_json(message_type.from_json(json.dumps(raw), ignore_unknown_fields=True))


def test_flex_start_node_with_its_queued_resource() -> None:
    qr = queued_resource_from_json(load(FLEX_QR))
    node = node_from_json(load(FLEX_NODE), qr)
    assert node.key == ("example-project", "us-east5-a", "vllm-flex-b")
    assert (node.state, node.health, node.accelerator_type) == ("READY", "HEALTHY", "v6e-8")
    assert node.provisioning_model == "flex-start"
    assert node.termination_time == datetime(2025, 6, 1, 14, 5, 31, tzinfo=UTC)
    assert node.time_left_s(datetime(2025, 6, 1, 13, 5, 31, tzinfo=UTC)) == 3600.0
    assert (node.external_ip, node.internal_ip) == ("203.0.113.10", "10.202.0.5")
    assert node.node_id == "1234567890123456789"
    assert node.queued_resource == "qr-flex-b"
    assert node.create_time == datetime(2025, 6, 1, 10, 5, 31, 123456, tzinfo=UTC)
    assert qr.max_run_duration_s == 14400.0 and qr.state == "ACTIVE" and qr.provisioning_model == "flex-start"


def test_v2_library_drops_flex_fields_and_merge_restores_them() -> None:
    alpha = load(FLEX_NODE)
    v2 = via_v2_library(alpha, tpu_v2.Node)
    assert "terminationTimestamp" not in v2.get("schedulingConfig", {})
    assert v2["id"] == "1234567890123456789"                     # int64 back as a decimal string
    lib_only = node_from_json(v2)
    assert (lib_only.provisioning_model, lib_only.termination_time) == ("on-demand", None)
    assert node_from_json(merge_v2alpha1(v2, alpha)) == node_from_json(alpha)


def test_v2_library_and_raw_json_agree_on_everything_else() -> None:
    for name in (FLEX_NODE, "node-v2-get-no-external-ip.kcc-recorded.json"):
        raw = load(name)
        lib = node_from_json(via_v2_library(raw, tpu_v2.Node))
        direct = node_from_json(raw)
        assert dataclasses.replace(lib, provisioning_model=direct.provisioning_model,
                                   termination_time=direct.termination_time) == direct
    for name in (FLEX_QR, "queued-resource-v2-failed.schema-derived.json",
                 "queued-resource-v2-spot-active.schema-derived.json"):
        raw = load(name)
        lib = queued_resource_from_json(via_v2_library(raw, tpu_v2.QueuedResource))
        direct = queued_resource_from_json(raw)
        assert dataclasses.replace(lib, provisioning_model=direct.provisioning_model,
                                   max_run_duration_s=direct.max_run_duration_s,
                                   termination_time=direct.termination_time) == direct


def test_library_keeps_spot_tier_but_loses_flex_start() -> None:
    spot = queued_resource_from_json(via_v2_library(load("queued-resource-v2-spot-active.schema-derived.json"),
                                                    tpu_v2.QueuedResource))
    assert spot.provisioning_model == "spot"
    flex = queued_resource_from_json(via_v2_library(load(FLEX_QR), tpu_v2.QueuedResource))
    assert (flex.provisioning_model, flex.max_run_duration_s, flex.termination_time) == ("on-demand", None, None)
    merged = queued_resource_from_json(merge_v2alpha1(via_v2_library(load(FLEX_QR), tpu_v2.QueuedResource),
                                                      load(FLEX_QR)))
    assert merged == queued_resource_from_json(load(FLEX_QR))


def test_failed_queued_resource_keeps_the_api_error() -> None:
    qr = queued_resource_from_json(load("queued-resource-v2-failed.schema-derived.json"))
    assert qr.state == "FAILED"
    assert qr.failure.startswith('There is no more capacity in the zone "asia-northeast1-b"')
    assert (qr.zone, qr.accelerator_type, qr.node_ids) == ("asia-northeast1-b", "v6e-8", ("d",))
    assert qr.to_json()["failure"] == qr.failure


def test_node_without_external_ip() -> None:
    node = node_from_json(load("node-v2-get-no-external-ip.kcc-recorded.json"))
    assert (node.external_ip, node.internal_ip) == (None, "10.20.30.40")
    assert node.provisioning_model == "on-demand"
    assert node.to_json()["termination_time"] is None


@pytest.mark.parametrize(("scheduling", "expected"), [
    ({}, "on-demand"),
    ({"spot": True}, "spot"),
    ({"provisioningModel": "SPOT"}, "spot"),
    ({"preemptible": True}, "preemptible"),
    ({"reserved": True}, "reserved"),
    ({"provisioningModel": "RESERVATION_BOUND"}, "reserved"),
    ({"provisioningModel": "STANDARD"}, "on-demand"),
    ({"terminationTimestamp": "2025-06-01T14:05:31Z"}, "flex-start"),
])
def test_node_provisioning_model(scheduling: dict, expected: str) -> None:
    assert node_provisioning_model({"schedulingConfig": scheduling}) == expected


@pytest.mark.parametrize(("extra", "expected"), [
    ({}, "on-demand"),
    ({"provisioningModel": "FLEX_START"}, "flex-start"),
    ({"provisioningModel": "SPOT"}, "spot"),
    ({"spot": {}}, "spot"),
    ({"bestEffort": {}}, "preemptible"),
    ({"provisioningModel": "RESERVATION_BOUND"}, "reserved"),
    ({"guaranteed": {"reserved": True}}, "reserved"),
    ({"guaranteed": {"minDuration": "3600s"}}, "on-demand"),
    ({"tpu": {"nodeSpec": [{"node": {"schedulingConfig": {"preemptible": True}}}]}}, "preemptible"),
])
def test_queued_resource_provisioning_model(extra: dict, expected: str) -> None:
    assert qr_provisioning_model(extra) == expected


def test_termination_time_falls_back_to_the_queued_resource() -> None:
    node_json = load(FLEX_NODE)
    node_json["schedulingConfig"] = {}
    qr_json = load(FLEX_QR)
    qr = queued_resource_from_json(qr_json)
    assert node_from_json(node_json, qr).termination_time == qr.termination_time
    del qr_json["runDuration"]["terminationTime"]
    qr = queued_resource_from_json(qr_json)
    node = node_from_json(node_json, qr)
    assert node.termination_time == node.create_time + timedelta(hours=4)
    assert node.provisioning_model == "flex-start"


def test_find_owner_by_name_with_project_number_or_by_node_spec() -> None:
    qr = queued_resource_from_json(load(FLEX_QR))
    by_zone_name = {(qr.zone, qr.name): qr}
    node_json = load(FLEX_NODE)               # queuedResource uses the project *number*
    assert find_owner(node_json, by_zone_name) is qr
    del node_json["queuedResource"]
    assert find_owner(node_json, by_zone_name) is qr          # nodeSpec nodeId == node name
    node_json["name"] = node_json["name"].replace("vllm-flex-b", "other")
    assert find_owner(node_json, by_zone_name) is None


def test_small_parsers() -> None:
    assert parse_time("2025-06-01T10:05:31.123456789Z") == datetime(2025, 6, 1, 10, 5, 31, 123456, tzinfo=UTC)
    assert parse_time(None) is None
    assert parse_duration_s("14400s") == 14400.0 and parse_duration_s("1.5s") == 1.5
    assert split_name("projects/p/locations/z/queuedResources/q") == ("p", "z", "q")
    with pytest.raises(ValueError):
        split_name("zones/z/nodes/n")


def test_project_from_json_merges_by_name_and_reports_unreadable_items() -> None:
    alpha_node, alpha_qr = load(FLEX_NODE), load(FLEX_QR)
    v2_node = via_v2_library(alpha_node, tpu_v2.Node)
    v2_qr = via_v2_library(alpha_qr, tpu_v2.QueuedResource)
    broken = {"name": "zones/z/nodes/broken"}
    nodes, qrs, unreadable = project_from_json([v2_node, broken], [alpha_node], [v2_qr], [alpha_qr])
    assert [n.name for n in nodes] == ["vllm-flex-b"] and [q.name for q in qrs] == ["qr-flex-b"]
    assert nodes[0].termination_time == datetime(2025, 6, 1, 14, 5, 31, tzinfo=UTC)
    assert nodes[0].provisioning_model == "flex-start" and qrs[0].max_run_duration_s == 14400
    assert len(unreadable) == 1 and "zones/z/nodes/broken" in unreadable[0]
    # without the supplement the rows are still there, flex-start fields missing
    nodes, qrs, unreadable = project_from_json([v2_node], [], [v2_qr], [])
    assert (nodes[0].termination_time, qrs[0].provisioning_model, unreadable) == (None, "on-demand", [])
