"""``tpu-console delete``: delete one queued resource, behind a typed confirm.

Usage: ``tpu-console delete NAME --project P --zone Z [--yes] [--force] [--json]``.

Reads the queued resource, prints what it holds (its nodes), the flex-start cost so far and
the exact command; the operator confirms by typing its name (``--yes`` skips that; without a
terminal nothing is deleted without ``--yes``). An ACTIVE (or PROVISIONING) one is refused
without ``--force``, which also deletes its nodes, as the API's ``force`` does.

Exit codes: 0 deleted, 1 not deleted (refused: ACTIVE without --force, not confirmed, read-only,
or the API failed; no such queued resource), 2 bad input or config.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from console.verbs.common import say

if TYPE_CHECKING:
    from console.config import Config
    from console.verbs.common import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """Register the ``delete`` verb."""
    from console.verbs.common import add_location_arguments

    parser = subparsers.add_parser(
        "delete", help="delete a queued resource (typed confirm; ACTIVE only with --force)",
        description="Delete one queued resource after typing its name; shows the flex-start cost so far.")
    parser.add_argument("name", metavar="NAME", help="queued resource id")
    add_location_arguments(parser)
    parser.add_argument("--force", action="store_true",
                        help="also delete an ACTIVE one and the nodes it owns (they stop serving)")
    parser.add_argument("--yes", action="store_true", help="delete without the typed confirm")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=run)


_say = say   # one line through the one sanitizer (console.verbs.common.say)


def run(args: argparse.Namespace) -> int:
    """Run the verb; returns the exit code (see the module docstring)."""
    import asyncio

    from console.verbs.common import config_or_exit, refused_readonly

    config = config_or_exit(args)
    if config is None:
        return 2
    if refused_readonly(config, "delete"):
        return 1
    return asyncio.run(_delete(config, args))


async def _delete(config: Config, args: argparse.Namespace) -> int:
    import json

    from console.flows.delete import DeleteCase, plan_delete
    from console.flows.node_lookup import fleet_source_for
    from console.verbs.common import ask_typed
    from remote.errors import RemoteError, TpuApiError
    from remote.tpu.requests import QueuedResourceService

    out: dict[str, Any] = {"name": args.name, "project": args.project, "zone": args.zone, "deleted": False}

    def finish(code: int, message: str | None = None) -> int:
        if message:
            out["message"] = message
            if not args.json:
                _say(message, err=code != 0)
        if args.json:
            print(json.dumps(out, indent=2))
        return code

    with fleet_source_for(config, project=args.project, zone=args.zone) as source:
        service = QueuedResourceService(source)
        try:
            qr = await service.get(args.project, args.zone, args.name)
        except TpuApiError as exc:
            if exc.code == 404:
                return finish(1, f"tpu-console: no queued resource {args.name} in {args.project}/{args.zone}.")
            return finish(1, f"tpu-console: {exc}")
        except RemoteError as exc:
            return finish(1, f"tpu-console: {exc}")
        nodes = []
        for node_id in qr.node_ids:
            try:
                nodes.append(await source.get_node(args.project, args.zone, node_id))
            except RemoteError:
                pass                    # not created yet, or already gone
        plan = plan_delete(qr, tuple(nodes), config.prices, force=args.force)
        out.update(state=qr.state, provisioning_model=qr.provisioning_model, needs_force=plan.needs_force,
                   nodes=[n.name for n in plan.nodes], cost_so_far_usd=None if plan.cost_so_far_usd is None
                   else round(plan.cost_so_far_usd, 2), command=plan.command, gcloud=plan.gcloud)
        if not args.json:
            for line in plan.lines():
                _say(line)
        if plan.needs_force and not args.force:
            return finish(1, f"Refused: {qr.name} is {qr.state}. To delete it and its nodes anyway: {plan.command}")
        if not args.yes and (args.json or not ask_typed(f"Type the queued resource's name ({qr.name}) to delete it:",
                                                        qr.name)):
            hint = " (pass --yes without a terminal)" if args.json or not sys.stdin.isatty() else ""
            return finish(1, f"Not deleted{hint}: nothing was changed.")
        try:
            await DeleteCase(config, service, plan).run(typed_name=qr.name)
        except RemoteError as exc:
            return finish(1, f"tpu-console: not deleted: {exc}")
        out["deleted"] = True
        owned = ", ".join(n.name for n in plan.nodes)
        return finish(0, f"Deleted queued resource {qr.name}" + (f" and its node(s) {owned}." if owned else "."))
