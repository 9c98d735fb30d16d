"""Fleet triage: inactive queued resources that may still hold quota, zone by zone.

A SUSPENDED or FAILED queued resource can keep holding quota until it is deleted
(marin-community/marin#87), so the fleet shows one banner per zone with the exact delete
command of each. Textual-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from remote.models import FleetSnapshot, QueuedResource

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
    from remote.tpu.requests import delete_command  # (google-cloud-tpu: not before the first frame)

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
