"""What to try after a stockout / quota / refusal / a waiting request (remote.tpu.advice, console.flows.triage)."""

from __future__ import annotations

from datetime import UTC, datetime

from console.flows.triage import advice_for, stuck_verdict
from remote.models import QueuedResource
from remote.tpu.advice import quota_limit_chips, smaller_types, what_to_try

OFFERED = {"europe-west4-a": ("v5litepod-4", "v6e-1", "v6e-4", "v6e-8"), "us-east5-a": ("v6e-4", "v6e-8"),
           "asia-northeast1-b": ("v6e-1", "v6e-8"), "us-west4-a": ("v5litepod-1", "v5litepod-8")}


def kinds(options) -> list[tuple[str, str, str, str]]:
    return [(o.kind, o.zone, o.accelerator_type, o.provisioning_model) for o in options]


def test_smaller_types_are_the_same_generation_largest_first() -> None:
    assert smaller_types("v6e-8", OFFERED["europe-west4-a"]) == ["v6e-4", "v6e-1"]
    assert smaller_types("v5litepod-8", ("v5litepod-1", "v5litepod-4", "v6e-4")) == ["v5litepod-4", "v5litepod-1"]
    assert smaller_types("v6e-1", OFFERED["europe-west4-a"]) == []


def test_a_spot_stockout_suggests_flex_start_the_next_smaller_type_and_other_zones() -> None:
    options = what_to_try("stockout", project="p", zone="europe-west4-a", accelerator_type="v6e-8",
                          provisioning_model="spot", offered=OFFERED)
    assert kinds(options) == [("provisioning_model", "europe-west4-a", "v6e-8", "flex-start"),
                              ("fewer_chips", "europe-west4-a", "v6e-4", "spot"),
                              ("other_zone", "asia-northeast1-b", "v6e-8", "spot"),
                              ("other_zone", "us-east5-a", "v6e-8", "spot")]
    assert options[0].command == ("tpu-console request v6e-8-flex --project p --zone europe-west4-a "
                                  "--accelerator-type v6e-8 --provisioning-model flex-start --max-run-duration 4h "
                                  "--valid-until 1h --dry-run")
    assert options[1].command == "tpu-console probe --project p --zone europe-west4-a --accelerator-type v6e-4"


def test_quota_advice_respects_the_stated_limit() -> None:
    assert quota_limit_chips("... has been exceeded: 8 chips requested, limit 4 in zone x.") == 4
    four = what_to_try("quota", project="p", zone="europe-west4-a", accelerator_type="v6e-8",
                       provisioning_model="spot", offered=OFFERED, reason="8 chips requested, limit 4 in zone x")
    assert ("fewer_chips", "europe-west4-a", "v6e-4", "spot") in kinds(four)
    zero = what_to_try("quota", project="p", zone="europe-west4-a", accelerator_type="v6e-8",
                       provisioning_model="spot", offered=OFFERED, reason="8 chips requested, limit 0 in zone x")
    assert not [k for k in kinds(zero) if k[0] == "fewer_chips"]
    assert kinds(zero)[-1][0] == "quota" and zero[-1].command.endswith("quotas?project=p")
    assert not [k for k in kinds(zero) if k[0] == "provisioning_model"]   # flex-start would only wait


def test_a_refused_flex_start_suggests_spot_here_and_other_zones() -> None:
    options = what_to_try("refused", project="p", zone="asia-northeast1-b", accelerator_type="v6e-8",
                          provisioning_model="flex-start", offered=OFFERED)
    assert kinds(options) == [("provisioning_model", "asia-northeast1-b", "v6e-8", "spot"),
                              ("other_zone", "europe-west4-a", "v6e-8", "flex-start"),
                              ("other_zone", "us-east5-a", "v6e-8", "flex-start")]


def test_available_gets_no_advice() -> None:
    assert what_to_try("available", project="p", zone="us-west4-a", accelerator_type="v5litepod-1",
                       provisioning_model="spot", offered=OFFERED) == []


def _qr(state: str, failure: str | None = None) -> QueuedResource:
    return QueuedResource(name="q", project="p", zone="europe-west4-a", state=state, accelerator_type="v6e-8",
                          provisioning_model="flex-start", failure=failure,
                          create_time=datetime(2026, 12, 1, tzinfo=UTC))


def test_a_stuck_request_gets_the_probe_first_then_fewer_chips_then_zones() -> None:
    assert stuck_verdict(_qr("ACTIVE")) is None and advice_for(_qr("ACTIVE"), OFFERED) == []
    waiting = advice_for(_qr("WAITING_FOR_RESOURCES"), OFFERED)
    assert kinds(waiting)[:2] == [("provisioning_model", "europe-west4-a", "v6e-8", "spot"),
                                  ("fewer_chips", "europe-west4-a", "v6e-4", "flex-start")]
    failed = _qr("FAILED", 'There is no more capacity in the zone "europe-west4-a"')
    assert stuck_verdict(failed) == "stockout"
    assert ("other_zone", "us-east5-a", "v6e-8", "flex-start") in kinds(advice_for(failed, OFFERED))
