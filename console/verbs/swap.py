"""``tpu-console swap``: replace a node's vLLM container with new flags while the node stays.

Usage: ``tpu-console swap NODE [--project P] [--zone Z] [--set KEY=VALUE]... [--unset KEY]...
[--image IMAGE] [--dry-run] [--yes]``.

Reads the running container over SSH (``docker inspect``; the config's ``[container]``
template when none runs), applies the edits, prints the lint findings, the diff and the exact
commands (secrets masked), then, once confirmed, pulls the image while the old container
still serves, removes it and runs the new one. KEYs: a ``vllm serve`` flag
(``max-model-len``), ``env.NAME``, ``volume:/container/path``, ``image``, ``model``...
(see ``remote.container.spec``). The launch is recorded in the history database.

Exit codes: 0 swapped (or ``--dry-run`` printed the plan), 1 refused, failed or unreachable,
2 bad input (bad ``--set``/value, unknown node, bad config), all before anything runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from remote.printable import printable


def add_parser(subparsers: Any) -> None:
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
    parser.set_defaults(run=run)


def parse_changes(sets: list[str], unsets: list[str]) -> dict[str, str | None]:
    """``["max-model-len=4096"]``, ``["kv-cache-dtype"]`` -> ``{"max-model-len": "4096", "kv-cache-dtype": None}``.

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


def run(args: argparse.Namespace) -> int:
    """Run the verb; returns the exit code (see the module docstring)."""
    import asyncio

    from console.verbs.common import config_or_exit

    config = config_or_exit(args)
    if config is None:
        return 2
    from remote.container.spec import ContainerSpec

    try:
        changes = parse_changes(args.set_, args.unset)
        # Values that are invalid whatever runs now are refused before any connection is made.
        ContainerSpec.from_template(name="vllm", image="vllm/vllm-tpu:latest", model="org/model").with_changes(
            changes, image=args.image)
    except ValueError as exc:
        print(printable(f"tpu-console: {exc}; nothing was changed."), file=sys.stderr)
        return 2
    return asyncio.run(_SwapFlow(config, args, changes).run())


def _say(text: str = "", *, err: bool = False) -> None:
    """One output line, through the one sanitizer: a value from the node or the API cannot add
    lines to the plan, hide the command with escapes or be read as markup."""
    print(printable(text), file=sys.stderr if err else sys.stdout, flush=True)


async def _ask(question: str) -> bool:
    """``question [y/N]`` on the terminal; ``False`` when stdin is not a terminal or at EOF."""
    import asyncio

    if not sys.stdin.isatty():
        return False
    try:
        answer = await asyncio.to_thread(input, printable(f"{question} [y/N] "))
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


class _SwapFlow:
    """One ``swap`` invocation: resolve, read, edit, lint, show, confirm, execute, record."""

    def __init__(self, config: Any, args: argparse.Namespace, changes: dict[str, str | None]) -> None:
        self.config, self.args, self.changes = config, args, changes
        self.store: Any = None

    async def run(self) -> int:
        from remote.errors import RemoteError

        found = await self._resolve_node()
        if isinstance(found, int):
            return found
        try:
            return await self._on_node(*found)
        except RemoteError as exc:
            _say(f"tpu-console: {exc}", err=True)
            return 1
        finally:
            if self.store is not None:
                self.store.close()

    async def _resolve_node(self) -> tuple[Any, Any] | int:
        """``(node, SSH target)`` (:func:`console.flows.node_lookup.find_node`,
        :func:`console.flows.ssh_target.resolve_target`), or the exit code after saying why not."""
        from console.flows import node_lookup
        from console.flows.ssh_target import resolve_target
        from remote.errors import RemoteError

        try:
            with node_lookup.fleet_source_for(self.config, project=self.args.project, zone=self.args.zone) as source:
                node = await node_lookup.find_node(source, self.args.node, project=self.args.project,
                                                   zone=self.args.zone)
                target = await resolve_target(node, self.config.ssh, 0, source)
        except node_lookup.NodeLookupError as exc:     # bad input, or the API did not answer (lookup_exit_code)
            _say(f"tpu-console: {exc}", err=True)
            return node_lookup.lookup_exit_code(exc)
        except RemoteError as exc:
            _say(f"tpu-console: {exc}", err=True)
            return 1
        return node, target

    async def _on_node(self, node: Any, target: Any) -> int:
        from remote.ssh import connect

        async def trust(fingerprint: str) -> bool:
            return await _ask(f"{target.label} presents the unknown host key {fingerprint}. Trust it?")

        async with await connect(target, accept_new_host_key=trust) as conn:
            code = await self._swap(node, conn, target.label)
        return code

    async def _read_spec(self, conn: Any, label: str) -> tuple[Any, dict[str, Any] | None]:
        from console.flows.swap import read_running

        current = await read_running(conn, self.config.container, label=label)
        if current.inspect is None:
            _say(f"No container named {self.config.container.name} on {label}: starting from the config's template.")
        return current.spec, current.inspect

    async def _swap(self, node: Any, conn: Any, label: str) -> int:
        from console.flows.swap import lint_spec
        from console.flows.swap_run import SwapRunner
        from remote.container.swap import plan_swap

        try:
            old, inspect = await self._read_spec(conn, label)
            new = old.with_changes(self.changes, image=self.args.image)
        except ValueError as exc:
            _say(f"tpu-console: {exc}; nothing was changed.", err=True)
            return 2
        running = old if inspect is not None else None
        plan = plan_swap(running, new)
        findings = lint_spec(node, new, old, self._history_facts(node, new))
        _print_plan(node, plan, findings)
        if self.args.dry_run:
            _say("Dry run: nothing was changed.")
            return 0
        if not self.args.yes and not await _ask(f"Replace the container on {node.name} ({len(plan.steps)} commands)?"):
            _say("Refused: nothing was changed.")
            return 1
        runner = SwapRunner(conn, node, label=label, open_store=self._open_store,
                            running_id=(inspect or {}).get("Id"), on_step=_progress,
                            on_history_error=lambda sentence: _say(f"tpu-console: {sentence}", err=True))
        outcome = await runner.run(plan)
        return await self._finish(node, runner, plan, outcome.result)

    async def _finish(self, node: Any, runner: Any, plan: Any, result: Any) -> int:
        from remote.container.lint import lint
        from remote.container.swap import rollback_plan

        if result.ok:
            _say(f"Swapped: container {plan.new.name} ({(result.container_id or '')[:12]}) is starting on "
                 f"{node.name}. Follow it with: tpu-console watch {node.name}")
            return 0
        _say(f"tpu-console: {result.failed_step.kind} failed: {result.error}", err=True)
        if not result.old_container_removed:
            _say("The old container was not touched; it is still serving.", err=True)
            return 1
        previous = result.rollback_spec
        if previous is None:
            return 1
        back = rollback_plan(previous, plan.new)
        _say("The previous container spec is kept. Rollback would run:")
        _print_plan(node, back, lint(back.new, accelerator_type=node.accelerator_type))
        if self.args.yes or not await _ask("Roll back to the previous container?"):
            _say("Not rolled back. To roll back later, run the previous command:")
            _say(f"  {back.steps[-1].display}")
            return 1
        runner.running_id = None            # the failed swap removed the old container
        again = (await runner.run(back)).result
        _say("Rolled back." if again.ok else f"tpu-console: rollback failed too: {again.error}",
             err=not again.ok)
        return 1

    # ---- history -------------------------------------------------------------------------

    def _open_store(self) -> Any:
        if self.store is None:
            from console.flows.history_store import open_history
            from store import StoreError

            try:
                self.store = open_history(self.config, getattr(self.args, "db", None))
            except StoreError as exc:
                _say(f"tpu-console: history not recorded: {exc}", err=True)
                self.store = False
        return self.store or None

    def _history_facts(self, node: Any, spec: Any) -> dict[str, Any]:
        """Lint inputs from past launches (``console.flows.swap.history_facts``)."""
        from console.flows.swap import history_facts

        return history_facts(self._open_store(), node, spec)


def _progress(step: Any, res: Any, _states: Any) -> None:
    """Each command as it starts (``$ docker ...``) and a non-zero exit status as it ends."""
    if res is None:
        _say(f"$ {step.display}")
    elif res.exit_status != 0:
        _say(f"  exit {res.exit_status}")


def _print_plan(node: Any, plan: Any, findings: list[Any]) -> None:
    """Lint findings, the diff and the commands, as plain text."""
    _say(f"Node {node.name} ({node.accelerator_type}, {node.provisioning_model}"
         + (f", {int(node.time_left_s() // 60)} min left" if node.time_left_s() is not None else "") + ")")
    _say("Lint:" if findings else "Lint: no findings.")
    for f in findings:
        fix = (" [fix: " + ", ".join(f"{k}={'(unset)' if v is None else v}" for k, v in f.fix.items()) + "]"
               if f.fix else "")
        _say(f"  {f.severity.upper():7} {f.rule_id}: {f.message}{fix}")
    _say("Changes:" if plan.changes else "Changes: none (the same spec is run again).")
    for field, before, after in plan.changes:
        _say(f"  {field}: {'-' if before is None else before} -> {'(removed)' if after is None else after}")
    _say("Commands:")
    for i, command in enumerate(plan.commands, 1):
        _say(f"  {i}. {command}")
