"""Running a confirmed swap plan: the one runner behind ``tpu-console swap`` and the swap screen.

:class:`SwapRunner` runs a :class:`~remote.container.swap.SwapPlan` on an open connection,
records the launch in the history before its first remote step (with the launch of the container
it replaces, recorded first as an observed launch when the history never saw it), marks that one
``replaced`` once ``docker rm -f`` removed it, completes the new one with the outcome, and reads the new image's digest. The history is optional: a
store that cannot be opened or written is reported through ``on_history_error`` and the swap
goes on. Textual-free; the caller shows the steps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from console.flows import swap as swap_flow
from console.flows.history_access import HistoryAccess, LaunchHistory
from remote.container.swap import (
    SwapPlan,
    SwapResult,
    SwapStep,
    execute_swap,
    ssh_runner,
)
from remote.errors import RemoteError
from remote.models import Node
from remote.ssh import CommandResult
from store.errors import StoreError

if TYPE_CHECKING:
    import asyncssh

_T = TypeVar("_T")

#: A step's state as shown: ``running``, ``ok`` or ``failed``.
StepStates = dict[str, str]


@dataclass(frozen=True)
class SwapOutcome:
    """How a run ended.

    Attributes:
        result: what :func:`~remote.container.swap.execute_swap` reported.
        launch_id: the launch recorded for the new container, or ``None`` (no history, or
            the run step never started).
        image_digest: ``repo@sha256:...`` of the new image after a successful swap, when
            ``docker image inspect`` names one.
    """

    result: SwapResult
    launch_id: int | None
    image_digest: str | None


def step_state(step: SwapStep, res: CommandResult | None) -> str:
    """``running`` before a step, then ``ok`` or ``failed`` (``rm`` of a missing container is ok)."""
    if res is None:
        return "running"
    gone = step.kind == "rm" and "no such container" in res.stderr.lower()
    return "ok" if res.exit_status == 0 or gone else "failed"


class SwapRunner:
    """Runs plans on one node over one open connection, recording each in the history.

    The launch is recorded before the first remote step (``running``, linked to the replaced
    container's launch, which is marked ``replaced`` once ``docker rm -f`` removed it), and completed
    after the last step: started,
    or failed with the failing step's kind and stderr. :meth:`abandon` marks it ``interrupted``
    when the console quits mid-run.

    Args:
        conn: an open ``asyncssh`` connection to the node's worker 0.
        node: the node.
        label: the node as messages name it.
        history: the history (:class:`~console.flows.history_access.HistoryAccess`, may hold nothing).
        running_id: the id of the container the plan replaces, if one runs.
        running_started_at: when that container was started (``docker inspect``), the requested
            time of its launch if the history records it only now.
        on_step: called with ``(step, result or None, states)`` before and after each step.
        on_history_error: called with a sentence when the history could not be read or written.
        watched: someone follows the boot after the run (the console's views). ``False`` for a
            verb that exits after ``docker run``: a started launch ends ``unwatched`` instead of
            staying ``running`` (then ``interrupted``) until a later watch completes it.
    """

    def __init__(self, conn: asyncssh.SSHClientConnection, node: Node, *, label: str,
                 history: HistoryAccess | None = None, running_id: str | None = None,
                 running_started_at: datetime | None = None,
                 on_step: Callable[[SwapStep, CommandResult | None, StepStates], None] | None = None,
                 on_history_error: Callable[[str], None] | None = None, watched: bool = True) -> None:
        self.conn = conn
        self.watched = watched
        self.node = node
        self.label = label
        self.running_id = running_id
        self.running_started_at = running_started_at
        self._history_access = history if history is not None else HistoryAccess.none()
        self._on_step = on_step
        self._on_history_error = on_history_error
        self._launch_id: int | None = None
        self._where = "before the first command"

    def _ssh_user(self) -> str | None:
        """The user the connection logged in as (asyncssh's ``username`` extra info), or ``None``."""
        getter = getattr(self.conn, "get_extra_info", None)
        user = getter("username") if getter is not None else None
        return user if isinstance(user, str) and user else None

    def _history(self, write: Callable[[LaunchHistory], _T]) -> _T | None:
        """``write(store)``; ``None`` without a store or when the history fails (reported once)."""
        store = self._history_access.get()
        if store is None:
            return None
        try:
            return write(store)
        except StoreError as exc:
            sentence = self._history_access.failed(exc)
            if self._on_history_error is not None:
                self._on_history_error(f"The launch was not recorded in the history: {sentence}")
            return None

    async def run(self, plan: SwapPlan) -> SwapOutcome:
        """Run ``plan``; never raises for a failed docker command (see ``result.error``).

        Raises:
            SshTimeout, SshUnreachable, SudoPasswordRequired: the connection failed mid-run.
        """
        states: StepStates = {}
        self._launch_id = launch_id = self._history(lambda s: swap_flow.record_attempt(
            s, self.node, plan.new, self.running_id, replaced_spec=plan.old,
            replaced_requested_at=self.running_started_at, ssh_user=self._ssh_user()))

        def on_step(step: SwapStep, res: CommandResult | None) -> None:
            states[step.kind] = step_state(step, res)
            self._where = f"during docker {step.kind}" if res is None else f"after docker {step.kind}"
            if res is not None and step.kind == "rm" and states[step.kind] == "ok":
                self._history(lambda s: swap_flow.record_replaced(s, launch_id))
            if self._on_step is not None:
                self._on_step(step, res, states)

        try:
            result = await execute_swap(ssh_runner(self.conn, label=self.label), plan, on_step=on_step)
        except asyncio.CancelledError:        # Ctrl-C in a verb, a worker cancelled: say where it stopped
            self.abandon()
            raise
        self._launch_id = None
        digest = None
        if result.ok:
            digest = await self._digest(plan)
            self._history(lambda s: swap_flow.record_outcome(
                s, launch_id, ok=True, container_id=result.container_id, image_digest=digest,
                unwatched=not self.watched))
        else:
            kind = result.failed_step.kind if result.failed_step else "run"
            self._history(lambda s: swap_flow.record_outcome(s, launch_id, ok=False, failure_detail=result.error,
                                                             failure_kind=f"docker {kind} failed"))
        return SwapOutcome(result=result, launch_id=launch_id, image_digest=digest)

    def abandon(self) -> None:
        """The console quits while :meth:`run` runs: the launch is marked ``interrupted`` (with the step)."""
        launch_id, self._launch_id = self._launch_id, None
        where = f"the console quit {self._where}"
        self._history(lambda s: swap_flow.record_interrupted(s, launch_id, where))

    async def _digest(self, plan: SwapPlan) -> str | None:
        from remote.container.docker import docker_image_inspect

        try:
            image = await docker_image_inspect(self.conn, plan.new.image, label=self.label)
        except RemoteError:
            return None          # the swap succeeded; the history just lacks the digest
        digests = (image or {}).get("RepoDigests") or []
        return digests[0] if digests else None
