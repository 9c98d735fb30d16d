"""Deleting a queued resource: what it holds, what it has cost, and whether ``--force`` is needed.

Shared by ``tpu-console delete`` and the fleet's delete key. Textual-free; the caller asks for
the typed confirm (the operator types the queued resource's name).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from console.flows.actions import RunningActions, tracked
from console.flows.policy import HasReadonly, refuse_in_readonly
from remote.models import Node, QueuedResource, chips_of, utc_now

if TYPE_CHECKING:
    from remote.tpu.requests import QueuedResourceService

#: States in which the API deletes a queued resource only with ``force`` (it owns live nodes).
FORCE_STATES = ("ACTIVE", "PROVISIONING")


@dataclass(frozen=True)
class DeletePlan:
    """One queued resource about to be deleted.

    Attributes:
        qr: the queued resource.
        nodes: the nodes it owns (``force`` deletes them with it).
        needs_force: it is ACTIVE / PROVISIONING: refused without ``--force``.
        force: the operator passed ``--force``.
        billed_s: flex-start seconds billed so far (start of the run to now or its end), or ``None``.
        cost_so_far_usd: ``billed_s`` x chips x the flex-start price, or ``None``.
        command: the exact ``tpu-console delete`` line.
        gcloud: the equivalent ``gcloud alpha compute tpus queued-resources delete`` line (as the request
            shows its ``create`` line), quoted with ``shlex.join``.
    """

    qr: QueuedResource
    nodes: tuple[Node, ...]
    needs_force: bool
    force: bool
    billed_s: float | None
    cost_so_far_usd: float | None
    command: str
    gcloud: str = ""

    def lines(self) -> list[str]:
        """The plan as plain sentences (resource, nodes, cost, force), for a verb or a confirm screen."""
        q = self.qr
        out = [f"Queued resource {q.name} in {q.project}/{q.zone}: {q.state}, {q.provisioning_model}, "
               f"{q.accelerator_type or 'unknown type'}."]
        if self.nodes:
            out.append("It owns node" + ("s " if len(self.nodes) > 1 else " ")
                       + ", ".join(f"{n.name} ({n.state})" for n in self.nodes) + "; they are deleted with it.")
        if self.cost_so_far_usd is not None and self.billed_s is not None:
            chips = chips_of(q.accelerator_type) or 1
            out.append(f"Flex-start cost so far: ${self.cost_so_far_usd:.2f} "
                       f"({self.billed_s / 3600:.2f} h x {chips} chip{'s' if chips != 1 else ''}).")
        if self.needs_force:
            out.append(f"It is {q.state}: deleting it stops what runs on it"
                       + ("; --force was given." if self.force else "; refused without --force."))
        return out


def flex_billed_s(qr: QueuedResource, node: Node | None, now: datetime) -> float | None:
    """Seconds a flex-start request has been billed: run start (``terminationTime - maxRunDuration``,
    else the node's create time) to ``now`` or the run's end. ``None`` for other models or before a run."""
    if qr.provisioning_model != "flex-start":
        return None
    start = None
    if qr.termination_time is not None and qr.max_run_duration_s:
        start = qr.termination_time - timedelta(seconds=qr.max_run_duration_s)
    elif node is not None and node.create_time is not None:
        start = node.create_time
    if start is None:
        return None
    end = min(now, qr.termination_time) if qr.termination_time is not None else now
    return max(0.0, (end - start).total_seconds())


def plan_delete(qr: QueuedResource, nodes: tuple[Node, ...], prices: dict[str, dict[str, float]],
                now: datetime | None = None, *, force: bool = False) -> DeletePlan:
    """The :class:`DeletePlan` for ``qr`` (``nodes``: the fleet's nodes it owns)."""
    now = now or utc_now()
    billed = flex_billed_s(qr, nodes[0] if nodes else None, now)
    from remote.bench.cost import lookup_price  # (remote.bench imports httpx: not before the first frame)
    from remote.tpu.advice import delete_command

    price = lookup_price(prices, qr.accelerator_type, "flex-start")
    cost = None if billed is None or price is None else billed / 3600 * price * (chips_of(qr.accelerator_type) or 1)
    needs_force = qr.state in FORCE_STATES
    return DeletePlan(qr=qr, nodes=nodes, needs_force=needs_force, force=force, billed_s=billed, cost_so_far_usd=cost,
                      command=delete_command(qr.project, qr.zone, qr.name, force=needs_force or force),
                      gcloud=gcloud_delete_line(qr.project, qr.zone, qr.name, force=needs_force or force))


def gcloud_delete_line(project: str, zone: str, name: str, *, force: bool = False) -> str:
    """``gcloud alpha compute tpus queued-resources delete NAME --project=P --zone=Z [--force]``, quoted."""
    return shlex.join(["gcloud", "alpha", "compute", "tpus", "queued-resources", "delete", name,
                       f"--project={project}", f"--zone={zone}", *(["--force"] if force else [])])


def owned_nodes(qr: QueuedResource, nodes: tuple[Node, ...] | list[Node]) -> tuple[Node, ...]:
    """The nodes of ``nodes`` that ``qr`` owns (same project and zone; by ``queuedResource`` or node id)."""
    return tuple(n for n in nodes if n.project == qr.project and n.zone == qr.zone
                 and (n.queued_resource == qr.name or n.name in qr.node_ids))


@dataclass
class DeleteCase:
    """Deleting one queued resource: the use case behind ``tpu-console delete`` and the fleet's ``d``.

    The policy lives here: read-only mode refuses it (when made and again before the call), an
    ACTIVE / PROVISIONING one needs ``force``, and the operator's typed name must be the queued
    resource's (the verb's ``--yes`` passes the name itself).

    Args:
        config: what the policy reads (``readonly``).
        service: the queued-resource service (``remote.tpu.requests.QueuedResourceService``).
        plan: :func:`plan_delete`'s plan.
        actions: where the call registers itself while it runs (quit asks), or ``None``.

    Raises:
        ReadOnlyRefused: read-only mode is on.
    """

    config: HasReadonly
    service: QueuedResourceService
    plan: DeletePlan
    actions: RunningActions | None = None

    def __post_init__(self) -> None:
        refuse_in_readonly(self.config, "delete")

    def refusal(self, typed_name: str | None) -> str | None:
        """``None`` when the delete may run, else the sentence saying why not."""
        q = self.plan.qr
        if self.plan.needs_force and not self.plan.force:
            return f"Refused: {q.name} is {q.state}. To delete it and its nodes anyway: {self.plan.command}"
        if typed_name != q.name:
            typed = "nothing" if not typed_name else repr(typed_name)
            return f"Not deleted: you typed {typed}, not the queued resource's name {q.name!r}; nothing was changed."
        return None

    async def run(self, *, typed_name: str | None) -> None:
        """Delete the queued resource (and, with ``force``, the nodes it owns).

        Raises:
            ReadOnlyRefused: read-only mode is on.
            ValueError: :meth:`refusal`'s sentence.
            RemoteError: the TPU API refused or did not answer.
        """
        refuse_in_readonly(self.config, "delete")
        refused = self.refusal(typed_name)
        if refused:
            raise ValueError(refused)
        q = self.plan.qr
        with tracked(self.actions, f"delete of {q.name}",
                     "the delete call runs; the queued resource may be deleting already"):
            await self.service.delete(q.project, q.zone, q.name, force=self.plan.force)
