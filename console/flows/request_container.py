"""The container a request starts once its node is READY: the use-case pieces behind ``request
--image --model --set`` and the request form's container fields.

:class:`ContainerLaunch` (built by :func:`container_launch` from the image, model and ``--set``
items), the node the request will create as the lint sees it (:func:`planned_node`), the digest the
history recorded for an image tag (:func:`known_digest`), the swap's lint and commands on that node
(:func:`preview_launch`) and the start itself through the swap machinery (:func:`launch_container`;
:meth:`console.flows.request.RequestCase.start_container` adds the policy). Textual-free.
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from console.flows.history_access import HistoryAccess
from console.flows.policy import HasReadonly
from remote.models import Node, utc_now

if TYPE_CHECKING:
    from console.config import Config, ContainerConfig
    from console.flows.ssh_login import LoginResolver
    from console.flows.swap_case import SwapPreview
    from console.flows.swap_run import StepStates, SwapOutcome
    from console.services import FleetLister
    from remote.container.spec import ContainerSpec
    from remote.container.swap import SwapStep
    from remote.ssh import CommandResult
    from remote.tpu.requests import QueuedResourceRequest

#: Called with a new host key's fingerprint (``SHA256:...``); ``True`` records it.
TrustHostKey = Callable[[str], Awaitable[bool]]


@dataclass(frozen=True)
class ContainerLaunch:
    """The serving container a request starts on its node once READY (``request --image --model --set``).

    Attributes:
        image: the image to run, or ``None`` for the config's ``[container]`` image.
        changes: ``ContainerSpec.with_changes`` keys over the config's template
            (``{"model": "google/gemma-4-E2B-it", "max-model-len": "8192"}``).
    """

    image: str | None
    changes: Mapping[str, str | None] = field(default_factory=dict)

    def spec(self, container: ContainerConfig) -> ContainerSpec:
        """The spec that will run: the config's template with :attr:`changes` and :attr:`image`.

        Raises:
            ValueError: the template or a change is invalid (the reason names it).
        """
        from console.flows.swap import template_spec

        return template_spec(container).with_changes(dict(self.changes), image=self.image)


def container_launch(*, image: str | None, model: str | None, settings: Sequence[str]) -> ContainerLaunch | None:
    """The container of ``--image``, ``--model`` and ``--set KEY=VALUE``... (the form's fields), or
    ``None`` when none is given (capacity only).

    Raises:
        ValueError: a setting without ``=``, or a value any container spec refuses (checked before
            anything is created).
    """
    from console.flows.swap_case import parse_changes
    from remote.container.spec import ContainerSpec

    image = (image or "").strip() or None
    model = (model or "").strip() or None
    if not (image or model or settings):
        return None
    changes = parse_changes(settings)
    if model:
        changes["model"] = model
    ContainerSpec.from_template(name="vllm", image="vllm/vllm-tpu:latest", model="org/model").with_changes(
        changes, image=image)
    return ContainerLaunch(image=image, changes=changes)


def split_settings(text: str) -> list[str]:
    """The form's settings line (``max-model-len=8192 gpu-memory-utilization=0.9``, shell-quoted) as
    ``--set`` items.

    Raises:
        ValueError: unbalanced quotes.
    """
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"settings: {exc}") from None


def planned_node(request: QueuedResourceRequest, now: datetime | None = None) -> Node:
    """The node ``request`` will create, as the lint and the startup view see it before it exists:
    its type and provisioning model, ``queued_resource`` set, state ``ACCEPTED``, and for flex-start
    the termination its run duration gives from ``now`` (the lint's boot-time check)."""
    end = None
    if request.provisioning_model == "flex-start" and request.max_run_duration_s:
        end = (now or utc_now()) + timedelta(seconds=request.max_run_duration_s)
    return Node(project=request.project, zone=request.zone, name=request.node, state="ACCEPTED",
                accelerator_type=request.accelerator_type, provisioning_model=request.provisioning_model,
                termination_time=end, runtime_version=request.runtime_version, queued_resource=request.name)


def known_digest(history: HistoryAccess, image: str) -> str | None:
    """The pullable digest (``repo@sha256:...``) the history recorded for ``image`` (a tag), newest
    launch first, or ``None`` (a digest already, not recorded, or no history)."""
    from remote.container.spec import repo_digest
    from store.errors import StoreError

    store = history.get()
    if store is None or "@sha256:" in image:
        return None
    try:
        launches = store.list_launches(limit=200)
    except StoreError as exc:
        history.failed(exc)
        return None
    return next((d for launch in launches if launch.image == image
                 and (d := repo_digest(launch.image_digest)) is not None), None)


def preview_launch(config: HasReadonly, request: QueuedResourceRequest, launch: ContainerLaunch,
                   container: ContainerConfig, history: HistoryAccess, now: datetime | None = None) -> SwapPreview:
    """The container's commands and the swap's lint (:class:`console.flows.swap_case.SwapCase`) on the
    node ``request`` creates (:func:`planned_node`): the same rules and history facts as a swap (the
    request form and ``request --dry-run`` show it; read-only mode allows a preview).

    Raises:
        ValueError: the container's spec is invalid.
    """
    from console.flows.swap_case import SwapCase

    spec = launch.spec(container)
    case = SwapCase(planned_node(request, now), config, container, history, preview_only=True,
                    clock=lambda: now or utc_now())
    case.first_launch(spec)
    return case.preview(spec)


async def launch_container(config: Config, node: Node, changes: Mapping[str, str | None], *, image: str | None,
                           history: HistoryAccess | None = None,
                           on_step: Callable[[SwapStep, CommandResult | None, StepStates], None] | None = None,
                           watched: bool = True, fleet: FleetLister | None = None,
                           logins: LoginResolver | None = None,
                           accept_new_host_key: TrustHostKey | None = None) -> SwapOutcome:
    """Run the serving container on a node that just turned READY, through the swap machinery.

    The spec is the running container's, or the config's ``[container]`` template when none runs,
    with ``changes`` (``{"model": "...", "max-model-len": "8192"}``) and ``image`` applied; the
    :class:`console.flows.swap_run.SwapRunner` pulls, runs and records it (a first launch in the
    history).

    Args:
        watched: ``False`` for a verb that exits after ``docker run`` (the launch ends ``unwatched``).
        fleet, logins: the console's TPU source and SSH-login resolver (a verb: ``None``).
        accept_new_host_key: asked about a host key the node does not publish (``None`` refuses).

    Returns:
        The runner's ``SwapOutcome`` (``outcome.result.ok``, ``container_id``, ``error``).

    Raises:
        ValueError: a change the container spec refuses (nothing ran).
        RemoteError: SSH or docker failed before the plan ran.
    """
    from console.flows.ssh_target import resolve_target
    from console.flows.swap import read_running
    from console.flows.swap_run import SwapRunner
    from remote.container.swap import plan_swap
    from remote.ssh import connect

    target = await resolve_target(node, config, 0, fleet, logins=logins)
    async with await connect(target, accept_new_host_key=accept_new_host_key) as conn:
        current = await read_running(conn, config.container, label=target.label)
        spec = current.spec.with_changes(dict(changes), image=image)
        plan = plan_swap(current.spec if current.inspect is not None else None, spec)
        runner = SwapRunner(conn, node, label=target.label, history=history, watched=watched,
                            running_id=(current.inspect or {}).get("Id"), on_step=on_step)
        outcome = await runner.run(plan)
    return outcome
