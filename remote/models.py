"""Domain vocabulary of the fleet: frozen dataclasses, no I/O, no styling.

Times are timezone-aware UTC ``datetime`` objects; durations are seconds
(``_s``). The JSON forms (``to_json``) follow the ``tpu-console nodes --json``
contract: ISO 8601 UTC strings, ``None`` for anything the API did not state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

#: Provisioning models as shown to operators.
PROVISIONING_MODELS = ("on-demand", "spot", "preemptible", "reserved", "flex-start")
#: Provisioning models a queued-resource request can ask for (``request --provisioning-model``).
REQUEST_MODELS = ("flex-start", "spot", "on-demand", "reserved")


def iso_utc(value: datetime | None) -> str | None:
    """Format ``value`` as ISO 8601 UTC (``2025-06-01T14:05:31Z``), ``None`` stays ``None``."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def utc_now() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class WorkerEndpoint:
    """One worker VM of a TPU node (multi-host slices have several).

    Attributes:
        worker: worker index (0 is the first host).
        internal_ip: VPC address (``networkEndpoints[i].ipAddress``), or ``None``.
        external_ip: public address (``accessConfig.externalIp``), or ``None``.
    """

    worker: int
    internal_ip: str | None
    external_ip: str | None


@dataclass(frozen=True)
class Node:
    """A TPU VM node as listed by the TPU API (v2, with v2alpha1 flex-start fields).

    Attributes:
        project: GCP project id.
        zone: zone, e.g. ``us-east5-a``.
        name: short node id (last part of the resource name).
        state: ``READY``, ``CREATING``, ``PREEMPTED`` ... (API enum name).
        accelerator_type: e.g. ``v6e-8``.
        provisioning_model: one of ``PROVISIONING_MODELS``.
        termination_time: when a flex-start (or other time-limited) node is terminated.
        health: API health enum name (``HEALTHY``...) or ``None``.
        health_description: free text from the API, or ``None``.
        symptoms: symptom type names (``HBM_OUT_OF_MEMORY``...), newest last.
        runtime_version: e.g. ``v2-alpha-tpuv6e``.
        queued_resource: short name of the owning queued resource, or ``None``.
        create_time: creation time.
        node_id: numeric id as a decimal string (used for gcloud's SSH host-key alias).
        workers: one endpoint per worker; ``workers[0]`` is worker 0.
        raw: the merged REST JSON (camelCase) for the detail view.
    """

    project: str
    zone: str
    name: str
    state: str
    accelerator_type: str
    provisioning_model: str = "on-demand"
    termination_time: datetime | None = None
    health: str | None = None
    health_description: str | None = None
    symptoms: tuple[str, ...] = ()
    runtime_version: str | None = None
    queued_resource: str | None = None
    create_time: datetime | None = None
    node_id: str | None = None
    workers: tuple[WorkerEndpoint, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> tuple[str, str, str]:
        """``(project, zone, name)``: unique across the fleet."""
        return (self.project, self.zone, self.name)

    @property
    def external_ip(self) -> str | None:
        """Worker 0's external IP, or ``None``."""
        return self.workers[0].external_ip if self.workers else None

    @property
    def internal_ip(self) -> str | None:
        """Worker 0's internal IP, or ``None``."""
        return self.workers[0].internal_ip if self.workers else None

    @property
    def chips(self) -> int | None:
        """Number of chips from the accelerator type's suffix (``v6e-8`` -> 8), or ``None``.

        For v2-v4 and v5p the suffix counts TensorCores (two per chip); this
        returns the chip count for those too.
        """
        return chips_of(self.accelerator_type)

    def time_left_s(self, now: datetime | None = None) -> float | None:
        """Seconds until ``termination_time`` (never negative), or ``None`` when there is none."""
        if self.termination_time is None:
            return None
        now = now or utc_now()
        return max(0.0, (self.termination_time - now).total_seconds())

    def to_json(self, now: datetime | None = None) -> dict[str, Any]:
        """The ``nodes --json`` object for this node (keys fixed by the CLI contract)."""
        left = self.time_left_s(now)
        return {
            "project": self.project,
            "zone": self.zone,
            "name": self.name,
            "state": self.state,
            "accelerator_type": self.accelerator_type,
            "provisioning_model": self.provisioning_model,
            "external_ip": self.external_ip,
            "internal_ip": self.internal_ip,
            "termination_time": iso_utc(self.termination_time),
            "time_left_s": None if left is None else int(left),
            "health": self.health,
            "runtime_version": self.runtime_version,
            "queued_resource": self.queued_resource,
            "create_time": iso_utc(self.create_time),
        }


@dataclass(frozen=True)
class QueuedResource:
    """A queued resource (a request for TPU capacity), v2 with v2alpha1 flex-start fields.

    Attributes:
        project, zone, name: identity (``name`` is the short id).
        state: ``ACCEPTED``, ``PROVISIONING``, ``WAITING_FOR_RESOURCES``, ``ACTIVE``,
            ``SUSPENDED``, ``FAILED`` ... (API enum name).
        state_initiator: ``USER`` or ``SERVICE`` when given.
        provisioning_model: one of ``PROVISIONING_MODELS``.
        accelerator_type: from the first node spec, e.g. ``v6e-8``.
        max_run_duration_s: ``runDuration.maxRunDuration`` in seconds (flex-start), or ``None``.
        termination_time: ``runDuration.terminationTime``, or ``None``.
        create_time: creation time.
        failure: ``failedData.error.message`` for a FAILED request, else ``None``.
        node_ids: the node ids the request creates.
        raw: the merged REST JSON for the detail view.
    """

    project: str
    zone: str
    name: str
    state: str
    provisioning_model: str = "on-demand"
    state_initiator: str | None = None
    accelerator_type: str | None = None
    max_run_duration_s: float | None = None
    termination_time: datetime | None = None
    create_time: datetime | None = None
    failure: str | None = None
    node_ids: tuple[str, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> tuple[str, str, str]:
        """``(project, zone, name)``."""
        return (self.project, self.zone, self.name)

    def time_left_s(self, now: datetime | None = None) -> float | None:
        """Seconds until ``termination_time`` (never negative), or ``None``."""
        if self.termination_time is None:
            return None
        now = now or utc_now()
        return max(0.0, (self.termination_time - now).total_seconds())

    def to_json(self) -> dict[str, Any]:
        """The ``nodes --json`` object for this queued resource."""
        return {
            "project": self.project,
            "zone": self.zone,
            "name": self.name,
            "state": self.state,
            "state_initiator": self.state_initiator,
            "provisioning_model": self.provisioning_model,
            "accelerator_type": self.accelerator_type,
            "max_run_duration_s": None if self.max_run_duration_s is None else int(self.max_run_duration_s),
            "termination_time": iso_utc(self.termination_time),
            "create_time": iso_utc(self.create_time),
            "failure": self.failure,
        }


@dataclass(frozen=True)
class FleetProblem:
    """One project (or zone of it) that did not list: a 403, 404, 429, 5xx, timeout or unreachable zone.

    Attributes:
        project: the project id.
        zone: the zone, or ``None`` when the whole project failed.
        code: HTTP status, or 0 for a timeout / transport failure.
        message: the API's own message (or ours for a timeout).
    """

    project: str
    zone: str | None
    code: int
    message: str

    def to_json(self) -> dict[str, Any]:
        """The ``errors`` object of ``nodes --json``."""
        return {"project": self.project, "zone": self.zone, "code": self.code, "message": self.message}


@dataclass(frozen=True)
class FleetSnapshot:
    """Everything one fleet refresh saw, across all configured projects.

    Attributes:
        nodes: every node, sorted by (project, zone, name).
        queued_resources: every queued resource, sorted likewise.
        problems: projects or zones that did not answer.
        fetched_at: when the refresh finished (UTC).
        elapsed_s: wall time of the refresh in seconds.
    """

    nodes: tuple[Node, ...] = ()
    queued_resources: tuple[QueuedResource, ...] = ()
    problems: tuple[FleetProblem, ...] = ()
    fetched_at: datetime | None = None
    elapsed_s: float = 0.0

    def to_json(self, now: datetime | None = None) -> dict[str, Any]:
        """``{"nodes": [...], "queued_resources": [...], "errors": [...]}``."""
        return {
            "nodes": [n.to_json(now) for n in self.nodes],
            "queued_resources": [q.to_json() for q in self.queued_resources],
            "errors": [p.to_json() for p in self.problems],
        }


def chips_of(accelerator_type: str | None) -> int | None:
    """Chips in an accelerator type: ``v5litepod-8`` -> 8, ``v6e-16`` -> 16, ``v5p-8`` -> 4.

    Returns ``None`` for an unparseable name. v2, v3, v4 and v5p count
    TensorCores in the suffix (two per chip); v5e (``v5litepod``) and v6e count chips.
    """
    if not accelerator_type or "-" not in accelerator_type:
        return None
    family, _, count = accelerator_type.rpartition("-")
    if not count.isdigit():
        return None
    n = int(count)
    if family in ("v2", "v3", "v4", "v5p"):
        return max(1, n // 2)
    return n


def chip_generation(accelerator_type: str | None) -> str | None:
    """Chip generation of an accelerator type, lower case: ``v5litepod-8`` / ``v5lite-8`` /
    ``v5e-4`` -> ``v5e``, ``V6E-8`` -> ``v6e``, ``v5p-8`` -> ``v5p``; a bare family (``v6e``)
    is its own generation. ``None`` for an empty name. The one mapping used by lint, prices,
    diagnosis and the sandbox."""
    if not accelerator_type:
        return None
    family = accelerator_type.strip().lower()
    head, _, count = family.rpartition("-")
    if head and count.isdigit():
        family = head
    return "v5e" if family in ("v5litepod", "v5lite") else family
