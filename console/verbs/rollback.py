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

``rollback deploy/NAME`` (a GKE Deployment) restores the previous revision's pod template instead, as
``kubectl rollout undo`` does (:mod:`console.verbs.swap_workload`): the template of the ReplicaSet of the
revision before the newest, sent as a JSON patch guarded by a ``test`` of the resourceVersion, after the
same preview (args before and after, lint, patch) and confirm; recorded with cluster, namespace, workload
and the revision it makes, then the rollout is followed to the new pod's ready. One revision only:
"Nothing to roll back to" (exit 1).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from console.verbs.swap import SwapCommand

if TYPE_CHECKING:
    from console.verbs.common import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """Register the ``rollback`` verb."""
    from console.verbs.common import add_node_arguments

    parser = subparsers.add_parser(
        "rollback", help="run the container the last swap on a node replaced again",
        description="Roll a node's vLLM container back to the spec its last swap replaced (from the "
                    "history), with the swap's preview and confirm. Never touches the node itself.")
    add_node_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="print lint, diff and commands; change nothing")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument("--force", action="store_true",
                        help="roll back even when the lint finds errors (vLLM is expected to refuse or fail)")
    parser.add_argument("--json", action="store_true", help="print the plan and the outcome as JSON on stdout")
    parser.set_defaults(run=run, image=None)


class RollbackCommand(SwapCommand):
    """The swap command whose use case runs in ``rollback`` mode: the previous spec from the history
    (pinned to its digest; a recorded spec that does not make a valid spec is skipped)."""

    verb = "rollback"


def run(args: argparse.Namespace) -> int:
    """Run the verb; returns the exit code (see the module docstring)."""
    import asyncio

    from console.verbs.common import config_or_exit

    config = config_or_exit(args)
    if config is None:
        return 2
    from console.verbs.common import refused_readonly

    if not args.dry_run and refused_readonly(config, "rollback"):
        return 1
    from console.verbs.common import workload_spec_or_none

    spec = workload_spec_or_none(args)
    if spec is False:
        return 2
    if spec is not None:
        from console.verbs.swap_workload import run_workload_rollback

        return run_workload_rollback(args, config, spec)  # type: ignore[arg-type]
    return asyncio.run(RollbackCommand(config, args, {}).run())
