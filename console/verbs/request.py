"""``tpu-console request``: ask the TPU API for capacity (create a queued resource).

Usage: ``tpu-console request NAME --project P --zone Z --accelerator-type T
--provisioning-model flex-start|spot|on-demand|reserved [--runtime-version V] [--max-run-duration 4h]
[--valid-until 1h] [--node-id N] [--dry-run] [--yes] [--wait] [--json]``.

Prints the exact REST call and body, the equivalent ``gcloud alpha compute tpus
queued-resources create`` line and what it costs, then asks (on a terminal; ``--yes`` skips it,
and without a terminal nothing is created without ``--yes``) and creates it. ``--wait`` follows
the states (WAITING_FOR_RESOURCES -> PROVISIONING -> ACTIVE, node CREATING -> READY), one
line each, until the node is READY or the request FAILED.

Exit codes: 0 created (ready, with ``--wait``) or ``--dry-run`` printed, 1 not created (refused by
the operator, the API or read-only mode) or FAILED while waiting, 2 bad input or config.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(subparsers: Any) -> None:
    """Register the ``request`` verb."""
    from console.verbs.common import add_location_arguments
    from remote.tpu.requests import REQUEST_MODELS

    parser = subparsers.add_parser(
        "request", help="request TPU capacity (create a queued resource): preview, confirm, create",
        description="Create a queued resource: shows the REST body and the gcloud line, confirms, creates.")
    parser.add_argument("name", metavar="NAME", help="queued resource id (also the node id unless --node-id)")
    add_location_arguments(parser)
    parser.add_argument("--accelerator-type", required=True, metavar="T", help="e.g. v5litepod-1, v6e-8")
    parser.add_argument("--provisioning-model", required=True, choices=REQUEST_MODELS, metavar="MODEL",
                        help="flex-start, spot, on-demand or reserved")
    parser.add_argument("--runtime-version", metavar="V", help="TPU VM runtime (default: the usual one for the type)")
    parser.add_argument("--max-run-duration", metavar="D", help="flex-start run duration, 10m to 7d (e.g. 4h)")
    parser.add_argument("--valid-until", metavar="D", help="how long it may wait in the queue (e.g. 1h)")
    parser.add_argument("--node-id", metavar="N", help="node id (default: NAME)")
    parser.add_argument("--dry-run", action="store_true", help="print the request; create nothing")
    parser.add_argument("--yes", action="store_true", help="create without asking")
    parser.add_argument("--wait", action="store_true", help="follow the states until READY or FAILED")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=run)


def _say(text: str = "", *, err: bool = False) -> None:
    print(text, file=sys.stderr if err else sys.stdout, flush=True)


def run(args: argparse.Namespace) -> int:
    """Run the verb; returns the exit code (see the module docstring)."""
    import asyncio
    import json

    from console.flows.request import build_request, preview
    from console.verbs.common import ask_yes_no, config_or_exit, refused_readonly

    config = config_or_exit(args)
    if config is None:
        return 2
    try:
        request = build_request(name=args.name, project=args.project, zone=args.zone,
                                accelerator_type=args.accelerator_type, provisioning_model=args.provisioning_model,
                                runtime_version=args.runtime_version, max_run_duration=args.max_run_duration,
                                valid_until=args.valid_until, node_id=args.node_id)
    except ValueError as exc:
        _say(f"tpu-console: {exc}; nothing was created.", err=True)
        return 2
    shown = preview(request, config.prices)
    out: dict[str, Any] = {**request.to_json(), "cost": shown.cost, "created": False, "queued_resource": None}
    if not args.json:
        _print_preview(shown)
    if args.dry_run:
        if args.json:
            print(json.dumps(out, indent=2))
        else:
            _say("Dry run: nothing was created.")
        return 0
    if refused_readonly(config, "request"):
        return 1
    if not args.yes and (args.json or not ask_yes_no(f"Create queued resource {request.name} in {request.zone}?")):
        _say("Not created" + (": pass --yes to create without a terminal." if not sys.stdin.isatty() or args.json
                              else "."), err=True)
        if args.json:
            print(json.dumps(out, indent=2))
        return 1
    return asyncio.run(_create(config, request, args, out))


def _print_preview(shown: Any) -> None:
    r = shown.request
    _say(f"Request {r.name}: {r.accelerator_type} {r.provisioning_model} in {r.project}/{r.zone} (node {r.node})")
    _say(f"Cost: {shown.cost}")
    _say(f"REST call: {shown.rest_call}")
    _say("Body:")
    for line in shown.body_text.splitlines():
        _say(f"  {line}")
    _say("Equivalent gcloud:")
    _say(f"  {shown.gcloud}")


async def _create(config: Any, request: Any, args: argparse.Namespace, out: dict[str, Any]) -> int:
    import json

    from console.flows.node_lookup import fleet_source_for
    from console.flows.request import explain, is_ready, is_settled
    from remote.errors import RemoteError
    from remote.tpu.requests import QueuedResourceService

    code = 0
    with fleet_source_for(config, project=request.project, zone=request.zone) as source:
        service = QueuedResourceService(source)
        try:
            qr = await service.create(request, timeout_s=max(60.0, config.request_timeout_s * 3))
            out["created"] = True
            out["queued_resource"] = qr.to_json()
            if not args.json:
                _say(f"Created: {qr.name} is {qr.state}: {explain(qr, None)}")
            if args.wait:
                def changed(q: Any, node: Any) -> None:
                    if not args.json:
                        _say(f"  {q.state}" + (f" / node {node.state}" if node else "") + f": {explain(q, node)}")

                qr, node = await service.follow(request.project, request.zone, request.name, on_change=changed,
                                                until=is_settled, poll_s=2.0, timeout_s=6 * 3600)
                out["queued_resource"] = qr.to_json()
                out["node"] = None if node is None else node.to_json()
                code = 0 if is_ready(qr, node) else 1
            elif not args.json:
                _say(f"Follow it: tpu-console nodes --project {request.project}   "
                     f"(or again with --wait); delete: tpu-console delete {request.name} "
                     f"--project {request.project} --zone {request.zone}")
        except RemoteError as exc:
            out["error"] = str(exc)
            if not args.json:
                _say(f"tpu-console: {'not created' if not out['created'] else 'while following'}: {exc}", err=True)
            code = 1
    if args.json:
        print(json.dumps(out, indent=2))
    return code
