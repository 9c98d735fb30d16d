"""``tpu-console swap``: replace a node's vLLM container with new flags while the node stays.

Usage: ``tpu-console swap NODE [--project P] [--zone Z] [--set KEY=VALUE]... [--unset KEY]...
[--image IMAGE] [--dry-run] [--yes] [--force] [--json]``.

Reads the running container over SSH (``docker inspect``; the config's ``[container]``
template when none runs) and its model's ``config.json`` (``docker exec``: the model's maximum
length, remembered in the history), applies the edits, prints the lint findings, the diff and the exact
commands (secrets masked), then, once confirmed, pulls the image while the old container
still serves, removes it and runs the new one. KEYs: a ``vllm serve`` flag
(``max-model-len``), ``env.NAME``, ``volume:/container/path``, ``image``, ``model``...
(see ``remote.container.spec``). The launch is recorded in the history database; follow the
boot with ``tpu-console watch NODE``, which records its outcome.

Lint verdicts drive it: with an ``error`` finding, ``--dry-run`` exits 1 and the swap is refused
(``--yes`` or not) unless ``--force``. Without a terminal to ask on, it refuses unless ``--yes``.

``--json``: the text goes to stderr and stdout gets one object, :meth:`SwapCommand.report`:
``{"node", "plan": {"old", "new", "changes", "commands", "lint"}, "dry_run", "confirmed",
"outcome": {"ok", "failed_step", "error", "container_id", "old_container_removed",
"launch_id", "image_digest", "rolled_back"} or null}``.

``swap deploy/NAME`` (a GKE workload) patches its Deployment instead: :mod:`console.verbs.swap_workload`.

Exit codes: 0 swapped (or ``--dry-run`` printed a plan without lint errors), 1 refused (lint errors,
not confirmed), failed or unreachable,
2 bad input (bad ``--set``/value, unknown node, bad config), all before anything runs.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING, Any

from remote.printable import printable

if TYPE_CHECKING:
    from console.verbs.common import Subparsers


if TYPE_CHECKING:
    import asyncssh

    from console.config import Config
    from console.flows.swap_case import SwapCase, SwapMode, SwapPreview
    from console.flows.swap_run import StepStates, SwapOutcome
    from remote.container.lint import Finding
    from remote.container.swap import SwapPlan, SwapResult, SwapStep
    from remote.models import Node
    from remote.ssh import CommandResult, SshTarget


def add_parser(subparsers: Subparsers) -> None:
    """Register the ``swap`` verb."""
    from console.verbs.common import add_node_arguments

    parser = subparsers.add_parser(
        "swap", help="replace a node's vLLM container with new flags (the node stays)",
        description="Edit the vLLM container's flags, lint, show the commands, confirm, "
                    "then docker pull, rm -f and run on the node. Never touches the node itself.")
    add_node_arguments(parser)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="set_",
                        help="set a flag (max-model-len=131072), env.NAME=V, volume:/path=/host, image=...")
    parser.add_argument("--unset", action="append", default=[], metavar="KEY", help="remove a flag or setting")
    parser.add_argument("--image", metavar="IMAGE", help="image to run (default: the running one)")
    parser.add_argument("--dry-run", action="store_true", help="print lint, diff and commands; change nothing")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument("--force", action="store_true",
                        help="swap even when the lint finds errors (vLLM is expected to refuse or fail)")
    parser.add_argument("--json", action="store_true", help="print the plan and the outcome as JSON on stdout")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the verb; returns the exit code (see the module docstring)."""
    import asyncio

    from console.verbs.common import config_or_exit

    config = config_or_exit(args)
    if config is None:
        return 2
    from console.verbs.common import refused_readonly

    if not args.dry_run and refused_readonly(config, "swap"):
        return 1
    from console.flows.swap_case import parse_changes
    from remote.container.spec import ContainerSpec

    try:
        changes = parse_changes(args.set_, args.unset)
        # Values that are invalid whatever runs now are refused before any connection is made.
        ContainerSpec.from_template(name="vllm", image="vllm/vllm-tpu:latest", model="org/model").with_changes(
            changes, image=args.image)
    except ValueError as exc:
        print(printable(f"tpu-console: {exc}; nothing was changed."), file=sys.stderr)
        return 2
    from console.verbs.common import workload_spec_or_none

    spec = workload_spec_or_none(args)
    if spec is False:
        return 2
    if spec is not None:
        from console.verbs.swap_workload import run_workload_swap

        return run_workload_swap(args, config, spec, changes)  # type: ignore[arg-type]
    return asyncio.run(SwapCommand(config, args, changes).run())


async def ask(question: str) -> bool:
    """``question [y/N]`` on the terminal (stderr, through the one sanitizer); ``False`` when stdin
    is not a terminal or at EOF."""
    import asyncio

    if not sys.stdin.isatty():
        return False
    print(printable(f"{question} [y/N] "), end="", file=sys.stderr, flush=True)
    try:
        answer = await asyncio.to_thread(input)
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def plan_json(plan: SwapPlan, findings: list[Finding]) -> dict[str, Any]:
    """A plan as JSON: specs (secrets masked), changes, the exact commands (masked) and lint findings."""
    return {"old": plan.old.to_dict() if plan.old is not None else None, "new": plan.new.to_dict(),
            "changes": [{"field": f, "old": a, "new": b} for f, a, b in plan.changes],
            "commands": list(plan.commands),
            "lint": [{"rule_id": f.rule_id, "severity": f.severity, "message": f.message, "fix": f.fix}
                     for f in findings]}


def outcome_json(outcome: SwapOutcome) -> dict[str, Any]:
    """A :class:`console.flows.swap_run.SwapOutcome` as JSON."""
    result = outcome.result
    return {"ok": result.ok, "failed_step": result.failed_step.kind if result.failed_step else None,
            "error": result.error, "container_id": result.container_id,
            "old_container_removed": result.old_container_removed, "launch_id": outcome.launch_id,
            "image_digest": outcome.image_digest, "rolled_back": None}


class SwapCommand:
    """One ``swap`` invocation: the door of :class:`console.flows.swap_case.SwapCase` for the terminal.

    Resolves the node, then the use case reads, lints and runs; this class only collects the
    arguments, prints and asks. ``tpu-console rollback`` is the same command with ``mode``
    ``rollback``. Text goes to stdout, or to stderr with ``--json`` (then :attr:`report` is printed
    on stdout at the end).

    Args:
        config: the loaded config.
        args: the parsed arguments (``node``, ``project``, ``zone``, ``dry_run``, ``yes``, ``json``,
            ``image``, ``db``).
        changes: :func:`console.flows.swap_case.parse_changes` of ``--set``/``--unset``.
    """

    verb: SwapMode = "swap"

    def __init__(self, config: Config, args: argparse.Namespace, changes: dict[str, str | None]) -> None:
        from console.flows.history_access import HistoryAccess
        from console.flows.history_store import open_history

        self.config, self.args, self.changes = config, args, changes
        self.history = HistoryAccess(lambda: open_history(config, getattr(args, "db", None)))
        self.json = bool(getattr(args, "json", False))
        self.report: dict[str, object] = {"node": args.node, "plan": None, "dry_run": bool(args.dry_run),
                                          "confirmed": False, "outcome": None, "history": None}

    def say(self, text: str = "", *, err: bool = False) -> None:
        """One line of text through the one sanitizer (a value from the node or the API cannot add
        lines to the plan, hide the command with escapes or be read as markup): stdout, or stderr
        for errors and in ``--json`` mode."""
        print(printable(text), file=sys.stderr if err or self.json else sys.stdout, flush=True)

    async def run(self) -> int:
        """Run the command; returns the exit code (see the module docstring)."""
        import json

        from console.flows.policy import ReadOnlyRefused
        from remote.errors import RemoteError

        found = await self._resolve_node()
        if isinstance(found, int):
            return found
        self.report["node"] = found[0].name
        try:
            return await self._on_node(*found)
        except ReadOnlyRefused as exc:
            self.say(f"tpu-console: {exc}", err=True)
            return 1
        except RemoteError as exc:
            self.say(f"tpu-console: {exc}", err=True)
            return 1
        finally:
            self.history.close()
            if self.history.problem:
                self.say(f"tpu-console: {self.history.problem}", err=True)
                self.report["history"] = self.history.problem
            if self.json:
                print(json.dumps(self.report, indent=2))

    async def _resolve_node(self) -> tuple[Node, SshTarget] | int:
        """``(node, SSH target)`` (:func:`console.flows.node_lookup.find_node`,
        :func:`console.flows.ssh_target.resolve_target`), or the exit code after saying why not."""
        from console.flows import node_lookup
        from console.flows.ssh_target import resolve_target
        from remote.errors import RemoteError

        try:
            with node_lookup.fleet_source_for(self.config, project=self.args.project, zone=self.args.zone) as source:
                node = await node_lookup.find_node(source, self.args.node, project=self.args.project,
                                                   zone=self.args.zone)
                target = await resolve_target(node, self.config, getattr(self.args, "worker", 0) or 0, source)
        except node_lookup.NodeLookupError as exc:     # bad input, or the API did not answer (lookup_exit_code)
            self.say(f"tpu-console: {exc}", err=True)
            return node_lookup.lookup_exit_code(exc)
        except RemoteError as exc:
            self.say(f"tpu-console: {exc}", err=True)
            return 1
        return node, target

    async def _on_node(self, node: Node, target: SshTarget) -> int:
        from console.flows.swap_case import SwapCase
        from remote.ssh import connect

        case = SwapCase(node, self.config, self.config.container, self.history, mode=self.verb,
                        preview_only=bool(self.args.dry_run))

        async def trust(fingerprint: str) -> bool:
            return await ask(f"{target.label} presents the unknown host key {fingerprint}. Trust it?")

        async with await connect(target, accept_new_host_key=trust) as conn:
            code = await self._swap(case, conn, target.label)
        return code

    async def _prepare(self, case: SwapCase, conn: asyncssh.SSHClientConnection, label: str) -> SwapPreview | int:
        """The draft with the edits applied, previewed; or the exit code after saying why not."""
        from console.flows.swap_case import NothingToRun, apply_edits

        try:
            draft = await case.prepare(conn, label=label)
            if draft.note:
                self.say(draft.note)
            new = apply_edits(draft, self.changes, self.args.image)
        except NothingToRun as exc:
            self.say(f"tpu-console: {exc} Nothing was changed.", err=True)
            return 1
        except ValueError as exc:
            self.say(f"tpu-console: {exc}; nothing was changed.", err=True)
            return 2
        if self.verb == "rollback" and case.launch is None:
            self.report["rollback_to_launch_id"] = _launch_id_of(draft.note)
        return case.preview(new)

    async def _swap(self, case: SwapCase, conn: asyncssh.SSHClientConnection, label: str) -> int:
        preview = await self._prepare(case, conn, label)
        if isinstance(preview, int):
            return preview
        node, plan, findings = case.node, preview.plan, preview.findings
        self.report["plan"] = plan_json(plan, findings)
        self._print_plan(node, plan, findings)
        verdict = preview.verdict()
        if self.args.dry_run:
            if verdict:
                self.say(f"Dry run: nothing was changed. {verdict}: the swap would be refused without --force.")
                return 1
            self.say("Dry run: nothing was changed.")
            return 0
        refused = case.refusal(preview, force=self.args.force)
        if refused:
            self.say(f"Refused: {verdict}; apply the fixes shown or pass --force. Nothing was changed.")
            return 1
        if not self.args.yes:
            if not sys.stdin.isatty():
                self.say("Refused: no terminal to confirm on; pass --yes to swap without asking. Nothing was changed.")
                return 1
            if not await ask(f"Replace the container on {node.name} ({len(plan.steps)} commands)?"):
                self.say("Refused: nothing was changed.")
                return 1
        self.report["confirmed"] = True
        outcome = await case.run(conn, preview, label=label, on_step=self._progress, watched=False,
                                 force=self.args.force,
                                 on_history_error=lambda sentence: self.say(f"tpu-console: {sentence}", err=True))
        self.report["outcome"] = outcome_json(outcome)
        return await self._finish(case, conn, label, plan, outcome.result)

    async def _finish(self, case: SwapCase, conn: asyncssh.SSHClientConnection, label: str, plan: SwapPlan,
                      result: SwapResult) -> int:
        from remote.container.lint import lint
        from remote.container.swap import rollback_plan

        node = case.node
        if result.ok:
            follow = shlex.join(["tpu-console", "watch", node.name, "--project", node.project, "--zone", node.zone])
            self.say(f"Swapped: container {plan.new.name} ({(result.container_id or '')[:12]}) is starting on "
                     f"{node.name}. Follow it (and record its outcome) with: {follow}")
            return 0
        self.say(f"tpu-console: {result.failed_step.kind if result.failed_step else 'swap'} failed: {result.error}",
                 err=True)
        if not result.old_container_removed:
            self.say("The old container was not touched; it is still serving.", err=True)
            return 1
        previous = result.rollback_spec
        if previous is None:
            return 1
        back = rollback_plan(previous, plan.new)
        self.say("The previous container spec is kept. Rollback would run:")
        self._print_plan(node, back, lint(back.new, accelerator_type=node.accelerator_type))
        outcome = self.report["outcome"]
        assert isinstance(outcome, dict)
        if self.args.yes or not await ask("Roll back to the previous container?"):
            again = shlex.join(["tpu-console", "rollback", node.name, "--project", node.project, "--zone", node.zone])
            self.say(f"Not rolled back. To roll back later: {again}, or run the previous command:")
            self.say(f"  {back.steps[-1].display}")
            outcome["rolled_back"] = False
            return 1
        rerun = (await case.run_again(conn, back, label=label, watched=False)).result
        outcome["rolled_back"] = rerun.ok
        self.say("Rolled back." if rerun.ok else f"tpu-console: rollback failed too: {rerun.error}",
                 err=not rerun.ok)
        return 1

    # ---- text ----------------------------------------------------------------------------

    def _progress(self, step: SwapStep, res: CommandResult | None, _states: StepStates) -> None:
        """Each command as it starts (``$ docker ...``) and a non-zero exit status as it ends."""
        if res is None:
            self.say(f"$ {step.display}")
        elif res.exit_status != 0:
            self.say(f"  exit {res.exit_status}")

    def _print_plan(self, node: Node, plan: SwapPlan, findings: list[Finding]) -> None:
        """Lint findings, the diff and the commands, as plain text."""
        say = self.say
        left = node.time_left_s()
        say(f"Node {node.name} ({node.accelerator_type}, {node.provisioning_model}"
            + (f", {int(left // 60)} min left" if left is not None else "") + ")")
        say("Lint:" if findings else "Lint: no findings.")
        for f in findings:
            fix = (" [fix: " + ", ".join(f"{k}={'(unset)' if v is None else v}" for k, v in f.fix.items()) + "]"
                   if f.fix else "")
            say(f"  {f.severity.upper():7} {f.rule_id}: {f.message}{fix}")
        say("Changes:" if plan.changes else "Changes: none (the same spec is run again).")
        for field, before, after in plan.changes:
            say(f"  {field}: {'-' if before is None else before} -> {'(removed)' if after is None else after}")
        say("Commands:")
        for i, command in enumerate(plan.commands, 1):
            say(f"  {i}. {command}")


def _launch_id_of(note: str) -> int | None:
    """The launch id in a rollback note ("Rolling back to launch 4 from the history ..."), or ``None``."""
    words = note.split()
    if "launch" in words:
        after = words[words.index("launch") + 1]
        return int(after) if after.isdigit() else None
    return None
