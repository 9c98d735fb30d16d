"""The sandbox's capacity facts per zone: what a new queued resource request gets.

The facts are the article's (a v5e-1 flex-start request in us-west4-a, a v6e-8 in europe-west4-a
answered with stockout while a v6e-4 is granted, a zone with v6e hardware but no v6e quota,
a zone that refuses flex-start):

- ``us-west4-a``: everything is granted after a short wait (``v5litepod-1`` flex-start waits
  :data:`FLEX_WAIT_S` in ``WAITING_FOR_RESOURCES``).
- ``europe-west4-a``: ``v6e-8`` (and larger) is out of stock: spot / on-demand requests fail at
  once with the API's stockout error; a flex-start request waits until its ``validUntil``;
  ``v6e-4`` and smaller are granted.
- ``asia-northeast1-b``: no v6e quota: a spot (or on-demand) request fails with a quota error;
  a flex-start request waits in ``WAITING_FOR_RESOURCES`` and looks exactly like a stockout.
- ``us-central1-b``: refuses flex-start at create time (400); other tiers are granted.
- ``us-east5-a``: no v5p quota in the region ``us-east5``: a spot / on-demand request is refused at
  create time with HTTP 429 ``RESOURCE_EXHAUSTED`` (the per-region quota error, as the TPU API
  answered a create in us-east5-b in marin-community/marin#3200); a ``reserved`` v6e-8 request fails
  with the reservation's ``Insufficient reserved capacity`` (skypilot-org/skypilot#4579).
- every other zone: granted after :data:`DEFAULT_WAIT_S`.

Accelerator types offered per zone (``acceleratorTypes.list``): :data:`OFFERED_TYPES`, so a
stockout or quota answer can name the other zones that have the type and the smaller types of
the same generation.

Error texts, in Google's words (tests/fixtures/capacity_errors.json has each with its source):
the stockout message is the one the API writes in ``failedData.error`` (code 8,
hashicorp/terraform-provider-google#21243); the region quota is the TPU API's 429 text
(``... has been exceeded. Limit: 0 in region us-east5.``), the zone quota the same sentence for a
``PerProjectPerZone`` metric (no public capture of one was found); the reservation text is the
API's code-8 answer. The flex-start refusal and the expiry texts are illustrative.
"""

from __future__ import annotations

from dataclasses import dataclass

from remote.models import chip_generation, chips_of

#: Seconds a granted flex-start request waits for capacity in us-west4-a (before the time scale).
FLEX_WAIT_S = 8.0
#: Seconds any other granted request waits (before the time scale).
DEFAULT_WAIT_S = 3.0

#: Provisioning tiers a request can ask for.
TIERS = ("flex-start", "spot", "on-demand", "reserved")

_V5E = ("v5litepod-1", "v5litepod-4", "v5litepod-8", "v5litepod-16")
_V6E = ("v6e-1", "v6e-4", "v6e-8", "v6e-16")
#: Accelerator types each zone offers (what ``acceleratorTypes.list`` answers); other zones: none.
OFFERED_TYPES: dict[str, tuple[str, ...]] = {
    "us-west4-a": _V5E,
    "us-central1-a": _V5E,
    "us-east5-a": (*_V6E, "v5p-8"),
    "us-central1-b": _V6E,
    "asia-northeast1-b": _V6E,
    "europe-west4-a": (*_V5E, *_V6E),
}
#: ``AcceleratorConfig.type`` and the 2-D topology per chip count, as the API writes them.
_CONFIG_TYPE = {"v5litepod": "V5LITE_POD", "v6e": "V6E", "v5p": "V5P"}
_TOPOLOGY = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4"}


def accelerator_types_json(project: str, zone: str) -> list[dict[str, object]]:
    """``acceleratorTypes.list`` items for ``zone``: ``{"name", "type", "acceleratorConfigs"}``."""
    out: list[dict[str, object]] = []
    for accel in OFFERED_TYPES.get(zone, ()):
        family, _, chips = accel.rpartition("-")
        topology = "2x2x1" if family == "v5p" else _TOPOLOGY.get(int(chips), "1x1")
        out.append({"name": f"projects/{project}/locations/{zone}/acceleratorTypes/{accel}", "type": accel,
                    "acceleratorConfigs": [{"type": _CONFIG_TYPE[family], "topology": topology}]})
    return out


@dataclass(frozen=True)
class CapacityAnswer:
    """What the zone does with one request.

    Attributes:
        outcome: ``"grant"`` (waits ``wait_s`` then provisions), ``"stockout"`` or ``"quota"``
            or ``"reservation"`` (FAILED after the ACCEPTED step, with ``message``), ``"wait"``
            (WAITING_FOR_RESOURCES until ``validUntil``), ``"refuse"`` (the create call itself answers
            400 ``message``), ``"region_quota"`` (the create call answers 429 RESOURCE_EXHAUSTED).
        message: the API's error text for a failure or refusal.
        wait_s: seconds in WAITING_FOR_RESOURCES before provisioning (``grant`` only).
    """

    outcome: str
    message: str = ""
    wait_s: float = 0.0


def stockout_message(zone: str) -> str:
    """The API's stockout text for ``zone`` (``failedData.error.message``, code 8)."""
    return (f'There is no more capacity in the zone "{zone}"; you can try in another zone where Cloud TPU '
            "Nodes are offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0x5e1f00d5a1b2c3d4]")


def quota_message(zone: str, accelerator_type: str, tier: str, *, per_region: bool = False) -> str:
    """A quota failure text for ``accelerator_type`` in ``zone`` (or its region), in the API's words.

    ``Quota limit 'TPUV6EPreemptiblePerProjectPerZoneForTPUAPI' has been exceeded. Limit: 0 in zone Z.``
    (``...PerRegion... Limit: 0 in region R.`` with ``per_region``).
    """
    family = (chip_generation(accelerator_type) or "tpu").upper()
    kind = "Preemptible" if tier in ("spot", "flex-start") else ""
    where = f"region {zone.rpartition('-')[0]}" if per_region else f"zone {zone}"
    scope = "Region" if per_region else "Zone"
    return f"Quota limit 'TPU{family}{kind}PerProjectPer{scope}ForTPUAPI' has been exceeded. Limit: 0 in {where}."


#: The reservation's answer when it has no room (code 8).
RESERVATION_MESSAGE = ("Insufficient reserved capacity. Contact customer support to increase your reservation. "
                       "[EID: 0x7adf6d58c08b0aa4]")


def expired_message(valid_until_s: float) -> str:
    """The failure text of a request whose ``queueingPolicy.validUntilDuration`` ran out."""
    return (f"The queued resource could not be provisioned before its validUntilDuration "
            f"({valid_until_s:g}s) ran out; no capacity became available.")


def answer_request(zone: str, accelerator_type: str, tier: str) -> CapacityAnswer:
    """What ``zone`` does with a request for ``accelerator_type`` on ``tier``.

    Args:
        zone: e.g. ``europe-west4-a``.
        accelerator_type: e.g. ``v6e-8``.
        tier: one of :data:`TIERS`.

    Returns:
        The :class:`CapacityAnswer` (see the module docstring for the facts).
    """
    generation = chip_generation(accelerator_type)
    chips = chips_of(accelerator_type) or 1
    if zone == "us-central1-b" and tier == "flex-start":
        return CapacityAnswer("refuse", f"Provisioning model FLEX_START is not supported for {accelerator_type} "
                                        f"in zone {zone}.")
    if zone == "asia-northeast1-b" and generation == "v6e":
        if tier == "flex-start":
            return CapacityAnswer("wait")
        return CapacityAnswer("quota", quota_message(zone, accelerator_type, tier))
    if zone == "europe-west4-a" and generation == "v6e" and chips >= 8:
        if tier == "flex-start":
            return CapacityAnswer("wait")
        return CapacityAnswer("stockout", stockout_message(zone))
    if zone == "us-east5-a" and generation == "v5p" and tier in ("spot", "on-demand"):
        return CapacityAnswer("region_quota", quota_message(zone, accelerator_type, tier, per_region=True))
    if zone == "us-east5-a" and tier == "reserved" and chips >= 8:
        return CapacityAnswer("reservation", RESERVATION_MESSAGE)
    if zone == "us-west4-a" and tier == "flex-start":
        return CapacityAnswer("grant", wait_s=FLEX_WAIT_S)
    return CapacityAnswer("grant", wait_s=DEFAULT_WAIT_S)
