"""``tpu-console rollback NODE``: run the container spec the last swap on the node replaced again.

Usage: ``tpu-console rollback NODE [--project P] [--zone Z] [--dry-run] [--yes] [--json]``.

The startup view's ``R`` as a verb: the previous spec comes from the history
(:func:`console.flows.swap.previous_from_history`: the launch the running container replaced,
else the newest other launch of the node with a recorded spec; masked secrets are taken from
the running container), pinned to its image digest when one was recorded. Then the swap
verb's steps (:class:`console.verbs.swap.SwapCommand`, runner :class:`console.flows.swap_run.SwapRunner`):
lint, diff, the exact commands, confirm, pull, ``docker rm -f``, ``docker run -d``; the launch
is recorded. ``--json`` prints the plan and the outcome as ``swap --json`` does.

Exit codes: 0 rolled back (or ``--dry-run`` printed the plan), 1 nothing to roll back to,
refused, failed or unreachable, 2 bad input (unknown node, bad config, a recorded spec that
is not valid).
"""

from __future__ import annotations

import argparse
from typing import Any

from console.verbs.swap import SwapCommand


def add_parser(subparsers: Any) -> None:
    """Register the ``rollback`` verb."""
    from console.verbs.common import add_node_arguments

    parser = subparsers.add_parser(
        "rollback", help="run the container the last swap on a node replaced again",
        description="Roll a node's vLLM container back to the spec its last swap replaced (from the "
                    "history), with the swap's preview and confirm. Never touches the node itself.")
    add_node_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="print lint, diff and commands; change nothing")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument("--json", action="store_true", help="print the plan and the outcome as JSON on stdout")
    parser.set_defaults(run=run, image=None)


class RollbackCommand(SwapCommand):
    """The swap command whose target is the previous spec from the history."""

    verb = "rollback"

    async def target(self, node: Any, current: Any) -> Any:
        """The previous spec (pinned to its digest), or ``None`` after saying there is none
        (a recorded spec that does not make a valid spec is skipped by ``previous_from_history``)."""
        from console.flows.swap import previous_from_history
        from store import StoreError

        try:
            found = previous_from_history(self.open_store(), node, current)
        except StoreError as exc:
            self.say(f"tpu-console: history unreadable: {exc}", err=True)
            found = None
        if found is None:
            self.say(f"tpu-console: nothing to roll back to on {node.name}: the history has no earlier "
                     "launch of it with a container spec; nothing was changed.", err=True)
            return None
        previous, launch = found
        self.report["rollback_to_launch_id"] = launch.id
        self.say(f"Rolling back to launch {launch.id} from the history "
                 f"({launch.requested_at[:16].replace('T', ' ')} UTC).")
        return previous.pinned()


def run(args: argparse.Namespace) -> int:
    """Run the verb; returns the exit code (see the module docstring)."""
    import asyncio

    from console.verbs.common import config_or_exit

    config = config_or_exit(args)
    if config is None:
        return 2
    from console.verbs.common import refused_readonly

    if refused_readonly(config, "rollback") and not args.dry_run:
        return 1
    return asyncio.run(RollbackCommand(config, args, {}).run())
