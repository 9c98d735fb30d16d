"""Capacity probe: is there hardware for an accelerator type in a zone right now?

Quota is not availability, and a flex-start request without quota queues in
WAITING_FOR_RESOURCES exactly like a stockout. A **spot** request fails fast with the reason,
so the probe creates a spot queued resource with a short ``validUntilDuration``, reads why it
fails or succeeds, and deletes it (it creates and deletes one resource; callers say so first).

Verdicts: ``available`` (PROVISIONING / ACTIVE), ``stockout`` (the API's "no more capacity" or
"Insufficient reserved capacity", or still waiting when the probe gives up), ``quota`` (a quota
error, at create or in ``failedData``), ``refused`` (anything else: 400, 403, a reason we cannot
read). A failure's words give the same verdict here as in the fleet's triage
(:func:`remote.tpu.advice.capacity_verdict`).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from remote.errors import TpuApiError
from remote.models import QueuedResource, chip_generation, chips_of
from remote.tpu.advice import capacity_verdict, delete_command
from remote.tpu.requests import QueuedResourceRequest, QueuedResourceService

VERDICTS = ("stockout", "quota", "available", "refused")
@dataclass(frozen=True)
class ProbeResult:
    """What one probe found.

    Attributes:
        verdict: one of :data:`VERDICTS`.
        reason: the API's own words (or ours when it gave none).
        project, zone, accelerator_type: what was probed.
        queued_resource: the probe's queued resource id.
        last_state: the last state read (``FAILED``, ``ACTIVE``...), or ``None`` when create failed.
        elapsed_s: seconds from create to verdict.
        deleted: the probe's queued resource is gone (``True`` also when none was created).
        cleanup_error: why deleting it failed, or ``None``.
    """

    verdict: str
    reason: str
    project: str
    zone: str
    accelerator_type: str
    queued_resource: str
    last_state: str | None
    elapsed_s: float
    deleted: bool
    cleanup_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """``{"verdict", "reason", ...}`` for ``probe --json``."""
        return {"verdict": self.verdict, "reason": self.reason, "project": self.project, "zone": self.zone,
                "accelerator_type": self.accelerator_type, "queued_resource": self.queued_resource,
                "last_state": self.last_state, "elapsed_s": round(self.elapsed_s, 1), "deleted": self.deleted,
                "cleanup_error": self.cleanup_error,
                "delete_command": None if self.deleted else delete_command(
                    self.project, self.zone, self.queued_resource, force=True)}


def probe_name(accelerator_type: str) -> str:
    """A fresh probe id: ``probe-v6e-8-3f9a1c``."""
    generation = chip_generation(accelerator_type) or "tpu"
    return f"probe-{generation}-{chips_of(accelerator_type) or 0}-{secrets.token_hex(3)}"


def verdict_of(qr: QueuedResource) -> tuple[str, str] | None:
    """``(verdict, reason)`` once a probe's queued resource has answered, else ``None`` (still waiting)."""
    if qr.state in ("PROVISIONING", "ACTIVE"):
        return "available", f"spot capacity granted ({qr.state})"
    if qr.state == "FAILED":
        message = qr.failure or "FAILED without a reason"
        return capacity_verdict(message), message
    if qr.state in ("SUSPENDED", "SUSPENDING"):
        return "stockout", f"{qr.state} before the probe could read it"
    return None


async def probe(service: QueuedResourceService, project: str, zone: str, accelerator_type: str,
                runtime_version: str, *, valid_until_s: float = 300.0, wait_s: float = 120.0,
                poll_s: float = 2.0, on_state: Callable[[str], None] | None = None) -> ProbeResult:
    """Create a spot queued resource, read the answer, delete it.

    Args:
        service: the queued-resource service (real client).
        project, zone, accelerator_type, runtime_version: what to probe.
        valid_until_s: the probe's ``validUntilDuration`` (it never waits longer in the queue).
        wait_s: seconds to wait for an answer before calling it a stockout.
        poll_s: seconds between reads.
        on_state: called with each new state (for progress lines).

    Returns:
        The :class:`ProbeResult`; ``deleted`` is ``False`` (with ``cleanup_error``) when the probe's
        resource could not be deleted.

    Raises:
        ValueError: a bad zone / accelerator type / runtime (before anything is created).
        CredentialsError: no usable credentials.
    """
    name = probe_name(accelerator_type)
    request = QueuedResourceRequest(name=name, project=project, zone=zone, accelerator_type=accelerator_type,
                                    runtime_version=runtime_version, provisioning_model="spot",
                                    valid_until_s=valid_until_s)
    started = time.monotonic()

    def result(verdict: str, reason: str, state: str | None, deleted: bool, cleanup: str | None = None) -> ProbeResult:
        return ProbeResult(verdict, reason, project, zone, accelerator_type, name, state,
                           time.monotonic() - started, deleted, cleanup)

    try:
        qr = await service.create(request, timeout_s=wait_s)
    except TpuApiError as exc:
        verdict = capacity_verdict(exc.message, http_code=exc.code)
        return result(verdict, exc.message, None, deleted=await _gone(service, project, zone, name))
    answer: tuple[str, str] | None = None
    last = qr.state
    if on_state is not None:
        on_state(qr.state)
    try:
        deadline = started + wait_s
        while (answer := verdict_of(qr)) is None and time.monotonic() + poll_s <= deadline:
            await asyncio.sleep(poll_s)
            qr = await service.get(project, zone, name)
            if qr.state != last and on_state is not None:
                on_state(qr.state)
            last = qr.state
    except TpuApiError as exc:
        answer = answer or ("refused", f"could not read the probe's state: {exc.message}")
    if answer is None:
        answer = ("stockout", f"still {last} after {wait_s:g} s: no spot capacity right now")
    try:
        await service.delete(project, zone, name, force=True)
    except TpuApiError as exc:
        if exc.code != 404:
            return result(answer[0], answer[1], last, deleted=False, cleanup=exc.message)
    return result(answer[0], answer[1], last, deleted=True)


async def _gone(service: QueuedResourceService, project: str, zone: str, name: str) -> bool:
    """After a failed create: ``True`` when no probe resource exists (deletes one that slipped through)."""
    try:
        await service.get(project, zone, name)
    except TpuApiError as exc:
        return exc.code == 404
    try:
        await service.delete(project, zone, name, force=True)
    except TpuApiError:
        return False
    return True
