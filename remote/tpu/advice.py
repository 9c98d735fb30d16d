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
_QUOTA_LIMIT = re.compile(r"\blimit (\d+)\b")
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
    """The chip limit a quota error states (``... limit 4 in zone ...`` -> 4), or ``None``."""
    found = _QUOTA_LIMIT.search(message or "")
    return int(found.group(1)) if found else None


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
    for other in zones_offering(accelerator_type, offered, besides=zone)[:MAX_ZONES]:
        why = (f"quota is per zone: {other} may have it" if verdict == "quota"
               else f"{other} offers {accelerator_type}")
        out.append(TryOption("other_zone", other, accelerator_type, provisioning_model, why,
                             _probe(project, other, accelerator_type)))
    if verdict == "quota":
        out.append(TryOption("quota", zone, accelerator_type, provisioning_model,
                             "or ask for quota in this zone (IAM & Admin > Quotas)",
                             f"https://console.cloud.google.com/iam-admin/quotas?project={project}"))
    return out


#: Words of an API error text that say the zone has no capacity (lower case).
_STOCKOUT_WORDS = ("no more capacity", "stockout", "resource_exhausted: capacity", "not enough resources available")
_QUOTA_WORDS = ("quota",)


def classify_failure(message: str) -> str | None:
    """``"stockout"`` or ``"quota"`` from an API error text, or ``None`` when it is neither."""
    text = message.lower()
    if any(w in text for w in _QUOTA_WORDS):
        return "quota"
    if any(w in text for w in _STOCKOUT_WORDS):
        return "stockout"
    return None


def delete_command(project: str, zone: str, name: str, *, force: bool = False) -> str:
    """The exact ``tpu-console delete`` line for one queued resource (quoted with ``shlex.join``)."""
    return shlex.join(["tpu-console", "delete", name, f"--project={project}", f"--zone={zone}",
                       *(["--force"] if force else [])])
