"""Requesting TPU capacity: the use case shared by ``tpu-console request`` and the fleet's form.

build -> preview (the exact REST body, the REST call, the equivalent gcloud line, what it
costs; with a container: its spec and the swap's lint for the requested type) -> the operator
confirms -> submit -> follow the states, each wait explained -> once READY, start the container
through the swap machinery (:meth:`RequestCase.start_container`; the container's pieces are in
:mod:`console.flows.request_container`).
Textual-free and Rich-free: callers render :class:`RequestPreview` and the state sentences.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from console.flows.actions import RunningActions, tracked
from console.flows.history_access import HistoryAccess
from console.flows.policy import HasReadonly, refuse_in_readonly
from console.flows.request_container import ContainerLaunch, TrustHostKey, launch_container
from remote.bench.cost import lookup_price
from remote.models import Node, QueuedResource, chips_of, utc_now
from remote.names import console_command
from remote.tpu.advice import capacity_verdict, delete_command, quota_scope
from remote.tpu.requests import (
    QueuedResourceRequest,
    default_runtime_version,
    format_duration,
    parse_duration_s,
)

if TYPE_CHECKING:
    from console.config import Config
    from console.flows.ssh_login import LoginResolver
    from console.flows.swap_run import StepStates, SwapOutcome
    from console.services import FleetLister
    from remote.container.swap import SwapStep
    from remote.ssh import CommandResult
    from remote.tpu.requests import QueuedResourceService

#: Queued-resource states after which nothing more happens on its own.
SETTLED_STATES = ("FAILED", "SUSPENDED", "DELETING")


def build_request(*, name: str, project: str, zone: str, accelerator_type: str, provisioning_model: str,
                  runtime_version: str | None = None, max_run_duration: str | None = None,
                  valid_until: str | None = None, node_id: str | None = None) -> QueuedResourceRequest:
    """A checked :class:`QueuedResourceRequest` from the operator's text fields.

    Args:
        max_run_duration, valid_until: durations as typed (``4h``, ``90m``, ``1h30m``, ``600``), or
            ``None`` / empty.
        runtime_version: ``None`` / empty takes the usual one for the chip generation.

    Raises:
        ValueError: any field is unusable; the message names it and says what is allowed.
    """
    runtime = (runtime_version or "").strip() or default_runtime_version(accelerator_type.strip())
    if not runtime:
        if not accelerator_type.strip():
            raise ValueError("accelerator type is empty (for example v5litepod-1, v6e-8)")
        raise ValueError(f"no default runtime version for {accelerator_type!r}: give a runtime version")
    run_s = parse_duration_s(max_run_duration) if max_run_duration and max_run_duration.strip() else None
    valid_s = parse_duration_s(valid_until) if valid_until and valid_until.strip() else None
    return QueuedResourceRequest(name=name.strip(), project=project.strip(), zone=zone.strip(),
                                 accelerator_type=accelerator_type.strip(), runtime_version=runtime,
                                 provisioning_model=provisioning_model.strip(), max_run_duration_s=run_s,
                                 valid_until_s=valid_s, node_id=(node_id or "").strip() or None)


@dataclass(frozen=True)
class RequestPreview:
    """What the operator sees before confirming.

    Attributes:
        request: the request.
        rest_call: ``POST https://tpu.googleapis.com/v2alpha1/.../queuedResources?queuedResourceId=N``.
        body_text: the REST body, JSON indented by 2.
        gcloud: the equivalent ``gcloud alpha compute tpus queued-resources create`` line (shlex-quoted).
        price_per_chip_hour_usd: the configured price, or ``None`` when unknown.
        cost: one sentence on what it costs and until when it bills.
    """

    request: QueuedResourceRequest
    rest_call: str
    body_text: str
    gcloud: str
    price_per_chip_hour_usd: float | None
    cost: str


def preview(request: QueuedResourceRequest, prices: dict[str, dict[str, float]], *,
            api_endpoint: str | None = None) -> RequestPreview:
    """The :class:`RequestPreview` of ``request`` with prices from ``prices[generation][model]``;
    the REST call names ``api_endpoint`` (the config's; default the Google API)."""
    price = lookup_price(prices, request.accelerator_type, request.provisioning_model)
    chips = chips_of(request.accelerator_type) or 1
    if price is None:
        cost = f"no price configured for {request.accelerator_type} {request.provisioning_model} ([prices])."
    else:
        hourly = price * chips
        cost = f"${price:.2f}/chip-hour x {chips} chip{'s' if chips != 1 else ''} = ${hourly:.2f}/h"
        if request.provisioning_model == "flex-start" and request.max_run_duration_s:
            most = hourly * request.max_run_duration_s / 3600
            cost += (f", billed from ACTIVE until the run ends "
                     f"({format_duration(request.max_run_duration_s)}: at most ${most:.2f}) or it is deleted.")
        elif request.provisioning_model == "spot":
            cost += ", billed while it runs; it can be preempted at any time."
        else:
            cost += ", billed until it is deleted."
    return RequestPreview(request=request, rest_call=request.rest_call(api_endpoint),
                          body_text=json.dumps(request.rest_body(), indent=2), gcloud=request.gcloud_line(),
                          price_per_chip_hour_usd=price, cost=cost)


def is_ready(qr: QueuedResource, node: Node | None) -> bool:
    """The request is ACTIVE and its node READY."""
    return qr.state == "ACTIVE" and node is not None and node.state == "READY"


def is_settled(qr: QueuedResource, node: Node | None) -> bool:
    """Nothing more will happen on its own: ready, or FAILED / SUSPENDED / DELETING."""
    return is_ready(qr, node) or qr.state in SETTLED_STATES


def valid_until_left_s(qr: QueuedResource, now: datetime | None = None) -> float | None:
    """Seconds until a waiting request's ``queueingPolicy.validUntilDuration`` runs out (>= 0), or ``None``."""
    text = ((qr.raw.get("queueingPolicy") or {}).get("validUntilDuration")) if isinstance(qr.raw, dict) else None
    if not text or qr.create_time is None:
        return None
    try:
        valid_s = parse_duration_s(str(text).removesuffix("s"))
    except ValueError:
        return None
    return max(0.0, (qr.create_time + timedelta(seconds=valid_s) - (now or utc_now())).total_seconds())


def explain(qr: QueuedResource, node: Node | None, now: datetime | None = None) -> str:
    """One sentence on what the request is doing now and, for a wait or failure, what to try."""
    where = f"{qr.project}/{qr.zone}"
    state = qr.state
    if state in ("ACCEPTED", "CREATING"):
        return "accepted by the API; it is queued for capacity."
    if state == "WAITING_FOR_RESOURCES":
        accel = qr.accelerator_type or "-"
        hint = (f"A flex-start request without quota waits exactly like a stockout: "
                f"`{console_command(['probe', '--project', qr.project, '--zone', qr.zone, '--accelerator-type', accel])}` "
                "tells them apart; "
                "fewer chips or another zone may be granted sooner.")
        left = valid_until_left_s(qr, now)
        expiry = "" if left is None else (
            f" Its validUntil runs out in {int(left // 60)} min: it fails then unless capacity comes."
            if left < 600 else f" It may wait {int(left // 60)} more min (validUntil).")
        return f"waiting for capacity in {where}.{expiry} {hint}"
    if state == "PROVISIONING":
        return "capacity granted; the TPU VM is being created" + (f" (node {node.state})." if node else ".")
    if state == "ACTIVE":
        if node is None:
            return "active; its node is not listed yet."
        if node.state == "READY":
            return (f"active: node {node.name} is READY at {node.external_ip or node.internal_ip or 'no address yet'}"
                    + (f", {int((node.time_left_s() or 0) // 60)} min of run time left." if node.termination_time
                       else "."))
        return f"active; node {node.name} is {node.state}."
    if state == "FAILED":
        kind = capacity_verdict(qr.failure or "")
        scope = quota_scope(qr.failure or "")
        where = "a region" if scope is not None and scope[0] == "region" else "a zone"
        advice = {"stockout": "no hardware right now: try fewer chips, another zone that offers this type, or spot.",
                  "quota": f"no quota for this type here: request quota, or use {where} where you have it."}.get(
            kind, "read the reason; it may still hold quota until deleted.")
        return (f"failed: {qr.failure or 'no reason given'} - {advice} Delete it: "
                f"{delete_command(qr.project, qr.zone, qr.name)}")
    if state == "SUSPENDED":
        return (f"suspended ({qr.state_initiator or 'initiator unknown'}); it may still hold quota. Delete it: "
                f"{delete_command(qr.project, qr.zone, qr.name)}")
    return f"{state.lower()}."


@dataclass
class RequestCase:
    """Submitting one queued-resource request: the use case behind ``tpu-console request`` and the
    fleet's request form (``n``).

    The policy lives here: read-only mode refuses it (when made and again before the call); the
    call is registered in ``actions`` while it runs, so quitting asks.

    Args:
        config: what the policy reads (``readonly``).
        service: the queued-resource service.
        request: the checked request (:func:`build_request`).
        actions: the console's actions in flight, or ``None``.
        launch: the container to start once the node is READY, or ``None`` (capacity only).

    Raises:
        ReadOnlyRefused: read-only mode is on.
    """

    config: HasReadonly
    service: QueuedResourceService
    request: QueuedResourceRequest
    actions: RunningActions | None = None
    launch: ContainerLaunch | None = None

    def __post_init__(self) -> None:
        refuse_in_readonly(self.config, "request")

    async def submit(self, *, timeout_s: float = 120.0) -> QueuedResource:
        """Create the queued resource; returns it as the API answered.

        Raises:
            ReadOnlyRefused: read-only mode is on.
            RemoteError: the TPU API refused (quota, a bad name) or did not answer within ``timeout_s``.
        """
        refuse_in_readonly(self.config, "request")
        r = self.request
        with tracked(self.actions, f"request {r.name}", f"the create call for {r.name} in {r.zone} runs"):
            return await self.service.create(r, timeout_s=timeout_s)

    async def start_container(self, config: Config, node: Node, *, history: HistoryAccess | None = None,
                              on_step: Callable[[SwapStep, CommandResult | None, StepStates], None] | None = None,
                              watched: bool = True, fleet: FleetLister | None = None,
                              logins: LoginResolver | None = None,
                              accept_new_host_key: TrustHostKey | None = None) -> SwapOutcome:
        """Run :attr:`launch` on the READY ``node`` (:func:`launch_container`): pull, run, recorded in the
        history as a first launch; registered in ``actions`` while it runs.

        Raises:
            ReadOnlyRefused: read-only mode is on.
            ValueError: no container to start, or a change the container spec refuses.
            RemoteError: SSH or docker failed before the plan ran.
        """
        refuse_in_readonly(self.config, "request")
        launch = self.launch
        if launch is None:
            raise ValueError(f"request {self.request.name} names no container to start")
        with tracked(self.actions, f"container start on {node.name}",
                     f"the container is being started on {node.name} (docker pull, docker run)"):
            return await launch_container(config, node, launch.changes, image=launch.image, history=history,
                                          on_step=on_step, watched=watched, fleet=fleet, logins=logins,
                                          accept_new_host_key=accept_new_host_key)
