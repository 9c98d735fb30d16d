"""Fleet triage: inactive queued resources that may still hold quota, and stuck requests.

A SUSPENDED or FAILED queued resource can keep holding quota until it is deleted
(marin-community/marin#87), so the fleet shows one banner per zone with the exact delete
command of each. A request that waits (WAITING_FOR_RESOURCES) or failed for capacity gets the
same advice as ``probe`` (:func:`remote.tpu.advice.what_to_try`): a spot probe, fewer chips,
other zones that offer the type. Textual-free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from remote.models import FleetSnapshot, QueuedResource
from remote.tpu.advice import TryOption, capacity_verdict, delete_command, what_to_try

#: Queued-resource states that do nothing but may hold quota.
INACTIVE_STATES = ("SUSPENDED", "FAILED")


@dataclass(frozen=True)
class InactiveZone:
    """The inactive queued resources of one ``(project, zone)``.

    Attributes:
        project, zone: where.
        resources: the SUSPENDED / FAILED queued resources, by name.
        commands: the exact ``tpu-console delete`` line of each, in the same order.
    """

    project: str
    zone: str
    resources: tuple[QueuedResource, ...]
    commands: tuple[str, ...]

    @property
    def headline(self) -> str:
        """``2 inactive queued resources may hold quota in inference-prod/us-east5-a``."""
        n = len(self.resources)
        return (f"{n} inactive queued resource{'s' if n != 1 else ''} may hold quota in "
                f"{self.project}/{self.zone}")


def inactive_by_zone(snapshot: FleetSnapshot) -> list[InactiveZone]:
    """One :class:`InactiveZone` per zone that has SUSPENDED / FAILED queued resources, sorted."""
    zones: dict[tuple[str, str], list[QueuedResource]] = {}
    for qr in snapshot.queued_resources:
        if qr.state in INACTIVE_STATES:
            zones.setdefault((qr.project, qr.zone), []).append(qr)
    out = []
    for (project, zone), qrs in sorted(zones.items()):
        qrs.sort(key=lambda q: q.name)
        out.append(InactiveZone(project, zone, tuple(qrs),
                                tuple(delete_command(q.project, q.zone, q.name) for q in qrs)))
    return out


def stuck_verdict(qr: QueuedResource) -> str | None:
    """``waiting`` (WAITING_FOR_RESOURCES), ``stockout`` / ``quota`` / ``refused`` (FAILED, by its
    reason), or ``None`` for a request that is not stuck."""
    if qr.state == "WAITING_FOR_RESOURCES":
        return "waiting"
    if qr.state == "FAILED":
        return capacity_verdict(qr.failure or "")
    return None


def advice_for(qr: QueuedResource, offered: Mapping[str, Sequence[str]]) -> list[TryOption]:
    """What to try for a stuck request (empty when it is not stuck or has no accelerator type).

    Args:
        qr: the queued resource.
        offered: zone -> accelerator types of its project (``FleetSource.offered_types``).
    """
    verdict = stuck_verdict(qr)
    if verdict is None or not qr.accelerator_type:
        return []
    return what_to_try(verdict, project=qr.project, zone=qr.zone, accelerator_type=qr.accelerator_type,
                       provisioning_model=qr.provisioning_model, offered=offered, reason=qr.failure or "")
