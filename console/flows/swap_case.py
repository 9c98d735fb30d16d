"""Swap, rollback and relaunch: one use case behind ``tpu-console swap|rollback``, the swap form, the
rollback view and the history's relaunch.

:class:`SwapCase` holds the policy, so every door behaves the same:

- read-only mode refuses it when it is made and again before its first remote step
  (:func:`console.flows.policy.refuse_in_readonly`);
- :meth:`SwapCase.prepare` reads what runs on the node, the model's maximum length from the
  container (kept for the lint even when the history cannot be written), and where the edits
  start from (``swap``: the running spec; ``rollback``: the spec the last swap replaced, from this
  session or the history, pinned to its digest; ``relaunch``: a recorded launch's spec);
- :meth:`SwapCase.preview` lints a spec with the same facts for every door;
- :meth:`SwapCase.refusal` is the lint gate: an ``error`` finding needs the typed node name
  (screens) or ``--force`` (verbs);
- :meth:`SwapCase.run` records the launch before the first remote step, completes it after
  (or marks it interrupted when the console quits mid-run) and keeps the node's state in
  :class:`console.flows.actions.RunningActions` so quitting can ask.

Textual-free; the callers only collect input and show results.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from console.flows import swap as swap_flow
from console.flows.actions import RunningAction, RunningActions, tracked
from console.flows.history_access import HistoryAccess
from console.flows.policy import HasReadonly, refuse_in_readonly
from remote.container.lint import Finding
from remote.container.spec import ContainerSpec
from remote.container.swap import SwapPlan, SwapStep, plan_swap
from remote.models import Node, utc_now
from remote.ssh import CommandResult
from store.errors import StoreError
from store.records import Launch

if TYPE_CHECKING:
    import asyncssh

    from console.config import ContainerConfig
    from console.flows.swap_run import StepStates, SwapOutcome

#: What a swap case does: replace with edits, run the replaced spec again, run a recorded launch again.
SwapMode = Literal["swap", "rollback", "relaunch"]


class NothingToRun(ValueError):
    """There is no spec to start from (a rollback with no earlier launch); ``str()`` says why."""


@dataclass(frozen=True)
class SwapDraft:
    """Where a swap starts.

    Attributes:
        current: what runs on the node now (the config's template when nothing runs).
        base: the spec the edits start from.
        note: where ``base`` came from, one sentence ("Rolling back to launch 4 from the history ...").
        model_limit_tokens: the running model's maximum length read from its container, or ``None``.
    """

    current: swap_flow.RunningSpec
    base: ContainerSpec
    note: str
    model_limit_tokens: int | None


@dataclass(frozen=True)
class SwapPreview:
    """A spec about to run: the exact commands and the lint findings.

    Attributes:
        spec: the spec to run.
        plan: the commands (``docker pull``, ``rm -f``, ``run -d``) and the diff.
        findings: the lint findings, errors first as the lint orders them.
    """

    spec: ContainerSpec
    plan: SwapPlan
    findings: list[Finding]

    @property
    def errors(self) -> list[Finding]:
        """The ``error`` findings: the swap needs the typed confirm or ``--force``."""
        return [f for f in self.findings if f.severity == "error"]

    def verdict(self) -> str:
        """``2 lint errors (max-model-len-model, ...)``, or ``""`` without errors."""
        errors = self.errors
        if not errors:
            return ""
        return (f"{len(errors)} lint error{'s' if len(errors) != 1 else ''} "
                f"({', '.join(dict.fromkeys(f.rule_id for f in errors))})")


@dataclass
class SwapCase:
    """One swap, rollback or relaunch of the vLLM container on one node.

    Args:
        node: the node (its container is replaced; the node itself is never touched).
        config: what the policy reads (``readonly``) and the ``[container]`` template.
        container: the config's ``[container]`` (the name looked up, the template when none runs).
        history: the history (:class:`HistoryAccess`; may hold nothing).
        mode: ``swap``, ``rollback`` or ``relaunch``.
        previous: for ``rollback``, the spec this session's last swap on the node replaced, if any.
        launch: for ``relaunch``, the recorded launch to run again.
        actions: where the run registers itself while it runs (quit asks), or ``None``.
        clock: the current UTC time.
        preview_only: only :meth:`prepare` and :meth:`preview` will be used (``--dry-run``): allowed
            in read-only mode; :meth:`run` still refuses.

    Raises:
        ReadOnlyRefused: read-only mode is on (and not ``preview_only``).
        ValueError: ``relaunch`` without a launch, or a launch with no usable container spec.
    """

    node: Node
    config: HasReadonly
    container: ContainerConfig
    history: HistoryAccess
    mode: SwapMode = "swap"
    previous: ContainerSpec | None = None
    launch: Launch | None = None
    actions: RunningActions | None = None
    clock: Callable[[], datetime] = utc_now
    preview_only: bool = False
    draft: SwapDraft | None = field(default=None, init=False)
    _facts: dict[tuple[str, tuple[str, ...]], dict[str, object]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if not self.preview_only:
            refuse_in_readonly(self.config, self.mode)
        if self.mode == "relaunch":
            if self.launch is None:
                raise ValueError("a relaunch needs a recorded launch")
            swap_flow.spec_from_launch(self.launch, None)     # a sentence now rather than after connecting

    # ---- prepare ----------------------------------------------------------------------------

    async def prepare(self, conn: asyncssh.SSHClientConnection, *, label: str) -> SwapDraft:
        """Read what runs on the node, the model's maximum length, and the spec to start from.

        Raises:
            NothingToRun: ``rollback`` and neither this session nor the history has an earlier spec.
            ValueError: the running container is not a vLLM server, the template is invalid, or a
                recorded spec does not make a valid spec.
            RemoteError: SSH or docker failed.
        """
        current = await swap_flow.read_running(conn, self.container, label=label)
        limit = await swap_flow.learn_model_limit(conn, current, self._store(), label=label)
        base, note = self.base_for(current)
        self.draft = SwapDraft(current=current, base=base, note=note, model_limit_tokens=limit)
        return self.draft

    def first_launch(self, spec: ContainerSpec) -> SwapDraft:
        """A draft for a node where nothing runs yet (a request's container, linted before the node
        exists): the plan is ``docker pull`` and ``docker run`` alone; no SSH."""
        self.draft = SwapDraft(current=swap_flow.RunningSpec(spec, None), base=spec, note="", model_limit_tokens=None)
        return self.draft

    def prepared(self, spec: ContainerSpec, running: ContainerSpec | None = None) -> SwapDraft:
        """A draft from a spec already at hand (no SSH: tests, snapshots); the swap still connects to run."""
        current = swap_flow.RunningSpec(running if running is not None else spec, {})   # "runs", id unknown
        self.draft = SwapDraft(current=current, base=spec, note="", model_limit_tokens=None)
        return self.draft

    def base_for(self, current: swap_flow.RunningSpec) -> tuple[ContainerSpec, str]:
        """The spec the edits start from and where it came from (see the class docstring).

        Raises:
            NothingToRun, ValueError: as :meth:`prepare`.
        """
        if self.mode == "relaunch":
            assert self.launch is not None
            when = self.launch.requested_at[:16].replace("T", " ")
            return (swap_flow.spec_from_launch(self.launch, current.running),
                    f"Relaunching launch {self.launch.id} from the history ({when} UTC).")
        if self.mode == "swap":
            note = ("" if current.inspect is not None else
                    f"No container named {self.container.name} runs: starting from the config's template.")
            return current.spec, note
        if self.previous is not None:
            return self.previous.pinned(), "Rolling back to the spec this session's last swap replaced."
        found = self._from_history(current)
        if found is None:
            raise NothingToRun(f"Nothing to roll back to on {self.node.name}: no swap was made on it in this "
                               "session and the history has no earlier launch of it with a container spec.")
        spec, launch = found
        when = launch.requested_at[:16].replace("T", " ")
        return spec.pinned(), f"Rolling back to launch {launch.id} from the history ({when} UTC)."

    def _from_history(self, current: swap_flow.RunningSpec) -> tuple[ContainerSpec, Launch] | None:
        store = self._store()
        try:
            return swap_flow.previous_from_history(store, self.node, current) if store is not None else None
        except StoreError as exc:
            self.history.failed(exc)
            return None

    # ---- preview and gate -------------------------------------------------------------------

    def preview(self, spec: ContainerSpec) -> SwapPreview:
        """The commands and lint findings of running ``spec`` (the same facts for every door).

        Raises:
            RuntimeError: :meth:`prepare` (or :meth:`prepared`) was not called.
        """
        if self.draft is None:
            raise RuntimeError("SwapCase.preview before prepare")
        running = self.draft.current.running
        plan = plan_swap(running, spec)
        findings = swap_flow.lint_spec(self.node, spec, self.draft.current.spec, self._lint_facts(spec),
                                       self.clock())
        return SwapPreview(spec=spec, plan=plan, findings=findings)

    def _lint_facts(self, spec: ContainerSpec) -> dict[str, object]:
        key = (spec.model, tuple(spec.serve_args()))
        if key not in self._facts:
            store = self._store()
            try:
                facts = dict(swap_flow.history_facts(store, self.node, spec)) if store is not None else {}
            except StoreError as exc:
                self.history.failed(exc)
                facts = {}
            self._facts[key] = facts
        facts = dict(self._facts[key])
        draft = self.draft
        if draft is not None and draft.model_limit_tokens is not None and spec.model == draft.current.spec.model:
            facts["model_max_len"] = draft.model_limit_tokens     # read from the container: wins
        return facts

    def refusal(self, preview: SwapPreview, *, force: bool = False, typed_name: str | None = None) -> str | None:
        """The lint gate: ``None`` when the swap may run, else the sentence saying why not.

        An ``error`` finding needs ``force`` (a verb's ``--force``) or ``typed_name`` equal to the
        node's name (a screen's typed confirm).
        """
        if not preview.errors or force or typed_name == self.node.name:
            return None
        return (f"Refused: {preview.verdict()}; apply the fixes shown, or confirm by typing the node's name "
                "(--force for the verb). Nothing was changed.")

    # ---- run --------------------------------------------------------------------------------

    async def run(self, conn: asyncssh.SSHClientConnection, preview: SwapPreview, *, label: str,
                  on_step: Callable[[SwapStep, CommandResult | None, StepStates], None] | None = None,
                  on_history_error: Callable[[str], None] | None = None, watched: bool = True,
                  force: bool = False, typed_name: str | None = None) -> SwapOutcome:
        """Run ``preview``'s plan: recorded before the first remote step, completed after.

        Raises:
            ReadOnlyRefused: read-only mode is on (checked again here: no door can skip it).
            ValueError: the lint gate refused (:meth:`refusal`'s sentence).
            SshTimeout, SshUnreachable, SudoPasswordRequired: the connection failed mid-run.
        """
        from console.flows.swap_run import SwapRunner

        refuse_in_readonly(self.config, self.mode)
        refused = self.refusal(preview, force=force, typed_name=typed_name)
        if refused:
            raise ValueError(refused)
        current = self.draft.current if self.draft is not None else swap_flow.RunningSpec(preview.spec, None)
        runner = SwapRunner(conn, self.node, label=label, history=self.history,
                            running_id=current.container_id, running_started_at=current.started_at,
                            on_step=self._tracking(on_step), on_history_error=on_history_error, watched=watched)
        return await self._run_tracked(runner, preview.plan)

    async def run_again(self, conn: asyncssh.SSHClientConnection, plan: SwapPlan, *, label: str,
                        watched: bool = True) -> SwapOutcome:
        """Run a rollback plan right after a failed swap removed the old container (the verb's offer).

        Raises:
            ReadOnlyRefused: read-only mode is on.
        """
        from console.flows.swap_run import SwapRunner

        refuse_in_readonly(self.config, "rollback")
        runner = SwapRunner(conn, self.node, label=label, history=self.history, running_id=None,
                            on_step=self._tracking(None), watched=watched)
        return await self._run_tracked(runner, plan)

    async def _run_tracked(self, runner: object, plan: SwapPlan) -> SwapOutcome:
        from console.flows.swap_run import SwapRunner

        assert isinstance(runner, SwapRunner)
        with tracked(self.actions, f"{self.mode} on {self.node.name}", _state_before(plan, self.node),
                     on_abandon=runner.abandon) as self._action:
            return await runner.run(plan)

    def _tracking(self, on_step: Callable[[SwapStep, CommandResult | None, StepStates], None] | None
                  ) -> Callable[[SwapStep, CommandResult | None, StepStates], None]:
        def step(step: SwapStep, res: CommandResult | None, states: StepStates) -> None:
            action: RunningAction | None = getattr(self, "_action", None)
            if action is not None:
                action.state = _state_at(step, res, self.node)
            if on_step is not None:
                on_step(step, res, states)
        return step

    def _store(self) -> swap_flow.StoreLike | None:
        return self.history.get()


def _state_before(plan: SwapPlan, node: Node) -> str:
    if plan.old is None:
        return f"nothing ran on {node.name}; the new container is about to start"
    return f"the old container still serves on {node.name}"


def _state_at(step: SwapStep, res: CommandResult | None, node: Node) -> str:
    """The node's state while (``res is None``) or after ``step`` runs, one sentence."""
    if step.kind == "pull":
        return f"docker pull runs; the old container still serves on {node.name}"
    if step.kind == "rm":
        return (f"docker rm -f runs: the old container on {node.name} is being removed" if res is None else
                f"the old container is removed: no container runs on {node.name} until docker run finishes")
    return (f"docker run runs: no container serves on {node.name} yet" if res is None else
            f"the new container was started on {node.name}")


def parse_changes(sets: Sequence[str], unsets: Sequence[str] = ()) -> dict[str, str | None]:
    """``["max-model-len=4096"]``, ``["kv-cache-dtype"]`` -> ``{"max-model-len": "4096", "kv-cache-dtype": None}``:
    the ``--set KEY=VALUE`` / ``--unset KEY`` of ``swap`` and ``request`` and the request form's settings.

    Raises:
        ValueError: a ``--set`` without ``=`` or with an empty key.
    """
    changes: dict[str, str | None] = {}
    for item in sets:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        changes[key.strip()] = value
    for key in unsets:
        if not key.strip():
            raise ValueError("--unset needs a KEY")
        changes[key.strip()] = None
    return changes


def apply_edits(draft: SwapDraft, changes: Mapping[str, str | None], image: str | None) -> ContainerSpec:
    """The verb's ``--set/--unset/--image`` applied to ``draft.base``.

    Raises:
        ValueError: an edit is invalid for this container.
    """
    return draft.base.with_changes(dict(changes), image=image)


__all__ = ["NothingToRun", "SwapCase", "SwapDraft", "SwapMode", "SwapPreview", "apply_edits", "parse_changes"]
