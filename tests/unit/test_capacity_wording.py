"""Capacity verdicts from Google's own wording (tests/fixtures/capacity_errors.json: each text with its source).

One verdict per answer for the probe (:func:`remote.tpu.probe.verdict_of`) and the fleet's triage
(:func:`console.flows.triage.stuck_verdict`); the quota's limit read in any case and spelling; advice that
respects a quota's scope (a per-region quota gets no "try another zone of the same region").
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from console.flows.request import explain
from console.flows.triage import advice_for, stuck_verdict
from remote.models import QueuedResource
from remote.tpu.advice import capacity_verdict, quota_limit_chips, quota_scope, region_of, what_to_try
from remote.tpu.probe import verdict_of

ERRORS = json.loads((Path(__file__).parents[1] / "fixtures" / "capacity_errors.json").read_text())
OFFERED = {"us-east5-a": ("v6e-1", "v6e-4", "v6e-8"), "us-east5-b": ("v6e-1", "v6e-4", "v6e-8"),
           "us-east5-c": ("v6e-8",), "europe-west4-a": ("v6e-4", "v6e-8"), "us-central1-b": ("v6e-8",)}


def _failed(message: str, zone: str = "us-east5-b") -> QueuedResource:
    return QueuedResource(name="q", project="p", zone=zone, state="FAILED", accelerator_type="v6e-8",
                          provisioning_model="spot", failure=message, create_time=datetime(2026, 12, 1, tzinfo=UTC))


@pytest.mark.parametrize(("key", "verdict"), [("stockout_zone", "stockout"), ("quota_region", "quota"),
                                              ("quota_zone", "quota"), ("reservation", "stockout")])
def test_one_verdict_per_answer_in_probe_and_triage(key: str, verdict: str) -> None:
    message = ERRORS[key]["message"]
    qr = _failed(message)
    assert capacity_verdict(message) == verdict
    assert verdict_of(qr) == (verdict, message)
    assert stuck_verdict(qr) == verdict


def test_an_unreadable_failure_is_refused_in_both_and_a_429_is_quota() -> None:
    qr = _failed("Invalid runtime version")
    assert verdict_of(qr) == ("refused", "Invalid runtime version") and stuck_verdict(qr) == "refused"
    assert capacity_verdict("Too many requests", http_code=429) == "quota"
    assert capacity_verdict("THERE IS NO MORE CAPACITY IN THE ZONE") == "stockout"


@pytest.mark.parametrize(("text", "limit"), [
    (ERRORS["quota_region"]["message"], 0), (ERRORS["quota_zone"]["message"], 4),
    ("Quota 'X' exceeded. Limit 32 in zone a-b1-c", 32), ("8 chips requested, limit 4 in zone x", 4),
    ("Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally.", 0), ("LIMIT: 16", 16),
    ("Quota limit 'TPUV6E' has been exceeded.", None), ("", None)])
def test_the_quota_limit_in_every_spelling(text: str, limit: int | None) -> None:
    assert quota_limit_chips(text) == limit


def test_the_quota_scope_and_the_zone_region() -> None:
    assert quota_scope(ERRORS["quota_region"]["message"]) == ("region", "us-east5")
    assert quota_scope(ERRORS["quota_zone"]["message"]) == ("zone", "us-east5-b")
    assert quota_scope("Quota limit 'TPUV5PerProjectPerRegionForTPUAPI' has been exceeded") == ("region", "")
    assert quota_scope(ERRORS["stockout_zone"]["message"]) is None
    assert region_of("us-east5-a") == "us-east5" and region_of("europe-west4-b") == "europe-west4"


def test_a_region_quota_sends_to_other_regions_only() -> None:
    options = advice_for(_failed(ERRORS["quota_region"]["message"]), OFFERED)
    zones = [o.zone for o in options if o.kind == "other_zone"]
    assert zones == ["europe-west4-a", "us-central1-b"]
    assert all("quota is per region" in o.why for o in options if o.kind == "other_zone")
    assert not any("per zone" in o.why for o in options)
    assert options[-1].kind == "quota" and "region us-east5" in options[-1].why
    assert not [o for o in options if o.kind == "fewer_chips"]        # Limit: 0: nothing fits


def test_a_zone_quota_with_a_capital_limit_asks_for_fewer_chips_and_other_zones() -> None:
    options = what_to_try("quota", project="p", zone="us-east5-b", accelerator_type="v6e-8",
                          provisioning_model="spot", offered=OFFERED, reason=ERRORS["quota_zone"]["message"])
    assert [(o.kind, o.zone, o.accelerator_type) for o in options] == [
        ("fewer_chips", "us-east5-b", "v6e-4"), ("other_zone", "europe-west4-a", "v6e-8"),
        ("other_zone", "us-central1-b", "v6e-8"), ("other_zone", "us-east5-a", "v6e-8"),
        ("other_zone", "us-east5-c", "v6e-8"), ("quota", "us-east5-b", "v6e-8")]
    assert options[0].why == "fits the quota of 4 chips"
    assert options[1].why == "quota is per zone: europe-west4-a may have it"


def test_the_request_explanation_names_the_region_for_a_region_quota() -> None:
    text = explain(_failed(ERRORS["quota_region"]["message"]), None, datetime(2026, 12, 1, tzinfo=UTC))
    assert "use a region where you have it" in text
