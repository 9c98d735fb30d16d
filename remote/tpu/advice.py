"""What to try when capacity is refused: other zones, fewer chips, another provisioning model.

Pure (stdlib and ``remote.models`` only). The caller supplies what the zones offer (zone ->
accelerator types, from ``acceleratorTypes.list`` per zone: :meth:`remote.tpu.api.FleetSource.offered_types`)
and the verdict (a probe's, or one read from a stuck queued resource: ``waiting`` for
WAITING_FOR_RESOURCES). The article's lessons drive the rules: quota is not availability, a
spot request fails fast with the reason where a flex-start one queues, and fewer chips are
granted sooner (a v6e-8 flex-start request expired after 26 minutes, a v6e-4 was granted at once).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from remote.models import chip_generation, chips_of

#: Verdicts that get advice (``available`` gets none).
ADVISED = ("stockout", "quota", "refused", "waiting")
#: A quota's limit as Google words it: ``Limit: 0``, ``Limit 32``, ``limit 4`` (any case, ``0.0`` too).
_QUOTA_LIMIT = re.compile(r"\blimit:?\s*(\d+)(?:\.0+)?\b", re.IGNORECASE)
#: Where a quota applies: ``... in region us-east5.`` / ``... in zone us-east5-a`` / the metric's
#: ``PerProjectPerRegion`` / ``PerProjectPerZone``.
_QUOTA_WHERE = re.compile(r"\bin (region|zone) ([a-z]+-[a-z]+\d+(?:-[a-z])?)\b", re.IGNORECASE)
_QUOTA_METRIC_SCOPE = re.compile(r"PerProjectPer(Region|Zone)", re.IGNORECASE)
#: Other zones named at most (the nearest are not known; they are listed in name order).
MAX_ZONES = 4


@dataclass(frozen=True)
class TryOption:
    """One thing to try.

    Attributes:
        kind: ``other_zone``, ``fewer_chips``, ``provisioning_model`` or ``quota``.
        zone, accelerator_type, provisioning_model: what to ask for instead.
        why: one sentence.
        command: the exact line to run (a ``probe``, a ``request --dry-run`` or the quota page).
    """

    kind: str
    zone: str
    accelerator_type: str
    provisioning_model: str
    why: str
    command: str

    def to_json(self) -> dict[str, Any]:
        """``{"kind", "zone", "accelerator_type", "provisioning_model", "why", "command"}``."""
        return {"kind": self.kind, "zone": self.zone, "accelerator_type": self.accelerator_type,
                "provisioning_model": self.provisioning_model, "why": self.why, "command": self.command}


def quota_limit_chips(message: str) -> int | None:
    """The chip limit a quota error states, or ``None``.

    Google writes it ``Limit: 0 in region us-east5.`` (the TPU API's 429, seen in 2025-2026),
    ``Limit 32`` or ``limit 4 in zone ...``; case does not matter, ``0.0`` reads as 0.
    """
    found = _QUOTA_LIMIT.search(message or "")
    return int(found.group(1)) if found else None


def region_of(zone: str) -> str:
    """``us-east5-a`` -> ``us-east5`` (a zone is its region and a letter)."""
    head, dash, letter = zone.rpartition("-")
    return head if dash and len(letter) == 1 else zone


def quota_scope(message: str) -> tuple[str, str] | None:
    """Where a quota error's limit applies: ``("region", "us-east5")``, ``("zone", "us-east5-a")``, or ``None``.

    Read from ``in region R`` / ``in zone Z`` first, then from the quota metric's name
    (``TPUV6EPreemptiblePerProjectPerRegionForTPUAPI``: scope without a name, ``("region", "")``).
    """
    text = message or ""
    found = _QUOTA_WHERE.search(text)
    if found:
        return found.group(1).lower(), found.group(2).lower()
    metric = _QUOTA_METRIC_SCOPE.search(text)
    return (metric.group(1).lower(), "") if metric else None


def smaller_types(accelerator_type: str, offered: Sequence[str]) -> list[str]:
    """Types of ``offered`` of the same generation with fewer chips, largest first."""
    generation, chips = chip_generation(accelerator_type), chips_of(accelerator_type) or 0
    same = [t for t in offered if chip_generation(t) == generation and 0 < (chips_of(t) or 0) < chips]
    return sorted(set(same), key=lambda t: -(chips_of(t) or 0))


def zones_offering(accelerator_type: str, offered: Mapping[str, Sequence[str]], *, besides: str) -> list[str]:
    """Zones other than ``besides`` whose list has ``accelerator_type``, in name order."""
    return sorted(z for z, types in offered.items() if z != besides and accelerator_type in types)


def _probe(project: str, zone: str, accelerator_type: str) -> str:
    return shlex.join(["tpu-console", "probe", "--project", project, "--zone", zone,
                       "--accelerator-type", accelerator_type])


def _request(project: str, zone: str, accelerator_type: str, model: str) -> str:
    name = f"{chip_generation(accelerator_type) or 'tpu'}-{chips_of(accelerator_type) or 0}-{model.split('-')[0]}"
    words = ["tpu-console", "request", name, "--project", project, "--zone", zone, "--accelerator-type",
             accelerator_type, "--provisioning-model", model]
    if model == "flex-start":
        words += ["--max-run-duration", "4h", "--valid-until", "1h"]
    return shlex.join([*words, "--dry-run"])


def what_to_try(verdict: str, *, project: str, zone: str, accelerator_type: str, provisioning_model: str,
                offered: Mapping[str, Sequence[str]], reason: str = "") -> list[TryOption]:
    """The options for ``verdict`` on a ``provisioning_model`` request of ``accelerator_type`` in ``zone``.

    Args:
        verdict: ``stockout``, ``quota``, ``refused``, ``waiting`` (others: no advice).
        offered: zone -> accelerator types offered (zones absent were not listed).
        reason: the API's words (a quota error's ``limit N`` bounds the fewer-chips advice).

    Returns:
        Options in the order worth trying: a cheaper tier answer first where it tells more
        (a spot probe for a waiting flex-start request), then fewer chips here, then other zones.
    """
    if verdict not in ADVISED:
        return []
    out: list[TryOption] = []
    here = list(offered.get(zone, ()))
    limit = quota_limit_chips(reason) if verdict == "quota" else None
    if verdict == "waiting":
        out.append(TryOption("provisioning_model", zone, accelerator_type, "spot",
                             "a spot probe fails fast with the reason: it tells a stockout from missing quota, "
                             "which both wait like this", _probe(project, zone, accelerator_type)))
    if verdict == "stockout" and provisioning_model == "spot":
        out.append(TryOption("provisioning_model", zone, accelerator_type, "flex-start",
                             "flex-start queues until capacity frees (up to its validUntil) instead of failing; "
                             "billed only once ACTIVE", _request(project, zone, accelerator_type, "flex-start")))
    if verdict == "refused" and provisioning_model == "flex-start":
        out.append(TryOption("provisioning_model", zone, accelerator_type, "spot",
                             "this zone refused flex-start; spot (or on-demand) may be accepted here",
                             _probe(project, zone, accelerator_type)))
    if verdict in ("stockout", "waiting") or (verdict == "quota" and limit):
        smaller = smaller_types(accelerator_type, here)
        if limit is not None:
            smaller = [t for t in smaller if (chips_of(t) or 0) <= limit]
        if smaller:
            fewer = smaller[0]
            why = (f"fits the quota of {limit} chips" if limit is not None
                   else f"fewer chips are granted sooner ({fewer} instead of {accelerator_type})")
            out.append(TryOption("fewer_chips", zone, fewer, provisioning_model, why,
                                 _probe(project, zone, fewer)))
    out += _other_zones(verdict, project=project, zone=zone, accelerator_type=accelerator_type,
                        provisioning_model=provisioning_model, offered=offered, reason=reason)
    if verdict == "quota":
        scope = quota_scope(reason)
        where = f"region {region_of(zone)}" if scope and scope[0] == "region" else "this zone"
        out.append(TryOption("quota", zone, accelerator_type, provisioning_model,
                             f"or ask for quota in {where} (IAM & Admin > Quotas)",
                             f"https://console.cloud.google.com/iam-admin/quotas?project={project}"))
    return out


def _other_zones(verdict: str, *, project: str, zone: str, accelerator_type: str, provisioning_model: str,
                 offered: Mapping[str, Sequence[str]], reason: str) -> list[TryOption]:
    """Other zones offering the type; after a per-region quota only zones of other regions (same quota)."""
    zones = zones_offering(accelerator_type, offered, besides=zone)
    scope = quota_scope(reason) if verdict == "quota" else None
    if scope is not None and scope[0] == "region":
        region = scope[1] or region_of(zone)
        zones = [z for z in zones if region_of(z) != region]
    out = []
    for other in zones[:MAX_ZONES]:
        if scope is not None and scope[0] == "region":
            why = f"quota is per region: {other} is in {region_of(other)}, which may have it"
        elif verdict == "quota":
            why = f"quota is per zone: {other} may have it"
        else:
            why = f"{other} offers {accelerator_type}"
        out.append(TryOption("other_zone", other, accelerator_type, provisioning_model, why,
                             _probe(project, other, accelerator_type)))
    return out


#: Words of an API error text that say the zone (or the reservation) has no capacity (lower case).
#: ``There is no more capacity in the zone "..."`` (code 8, the TPU API since v1);
#: ``Insufficient reserved capacity. Contact customer support to increase your reservation.`` (code 8).
_STOCKOUT_WORDS = ("no more capacity", "no capacity", "stockout", "resource_exhausted: capacity",
                   "not enough resources available", "insufficient reserved capacity", "insufficient capacity",
                   "zone_resource_pool_exhausted")
_QUOTA_WORDS = ("quota",)


def classify_failure(message: str) -> str | None:
    """``"stockout"`` or ``"quota"`` from an API error text (any case), or ``None`` when it is neither."""
    text = (message or "").lower()
    if any(w in text for w in _QUOTA_WORDS):
        return "quota"
    if any(w in text for w in _STOCKOUT_WORDS):
        return "stockout"
    return None


def capacity_verdict(message: str, *, http_code: int | None = None) -> str:
    """The one verdict for one capacity answer, for the probe and the fleet's triage alike.

    Args:
        message: the API's words (a create call's error, or a FAILED queued resource's
            ``failedData.error.message``).
        http_code: the create call's HTTP status, when the answer was one (429 is a quota).

    Returns:
        ``"quota"``, ``"stockout"`` (the zone's or the reservation's capacity) or ``"refused"``
        (anything else: a bad request, a refused provisioning model, a reason we cannot read).
    """
    kind = classify_failure(message)
    if kind is None and http_code == 429:
        return "quota"
    return kind or "refused"


def delete_command(project: str, zone: str, name: str, *, force: bool = False) -> str:
    """The exact ``tpu-console delete`` line for one queued resource (quoted with ``shlex.join``)."""
    return shlex.join(["tpu-console", "delete", name, f"--project={project}", f"--zone={zone}",
                       *(["--force"] if force else [])])
