"""``tpu-console probe``: is there capacity for an accelerator type in a zone right now?

Usage: ``tpu-console probe --project P --zone Z --accelerator-type T [--runtime-version V]
[--wait-s 120] [--json]``.

Says first that it **creates and deletes** one spot queued resource (``probe-...``, with a short
``validUntilDuration``): a spot request fails fast with the reason, while a flex-start request
without quota waits exactly like a stockout. It reads the answer, deletes the request and
prints ``{"verdict": "stockout"|"quota"|"available"|"refused", "reason": ..., "try": [...]}``.

Unless available, it says what to try (:func:`remote.tpu.advice.what_to_try`): the next smaller
type of the same generation this zone offers, the project's other zones that offer the type
(``acceleratorTypes.list`` per zone), flex-start after a spot stockout, quota after a quota
answer; each with its exact command (``try`` in ``--json``).

Exit codes: 0 available, 1 stockout / quota / refused (or read-only mode), 2 bad input or
config, 3 the probe's queued resource could not be deleted (its delete command is printed).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from console.verbs.common import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """Register the ``probe`` verb."""
    from console.verbs.common import add_location_arguments

    parser = subparsers.add_parser(
        "probe", help="probe capacity with a short spot request (creates and deletes one queued resource)",
        description="Create a spot queued resource with a short validUntil, read why it fails or succeeds, "
                    "delete it, print the verdict.")
    add_location_arguments(parser)
    parser.add_argument("--accelerator-type", required=True, metavar="T", help="e.g. v6e-8")
    parser.add_argument("--runtime-version", metavar="V", help="TPU VM runtime (default: the usual one for the type)")
    parser.add_argument("--wait-s", type=float, default=120.0, metavar="S",
                        help="seconds to wait for an answer before calling it a stockout (default 120)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the verb; returns the exit code (see the module docstring)."""
    import asyncio
    import json

    from console.flows.node_lookup import fleet_source_for
    from console.flows.probe import ProbeAnswer, ProbeCase
    from console.verbs.common import config_or_exit, refused_readonly, say
    from remote.errors import RemoteError
    from remote.tpu.probe import probe_name
    from remote.tpu.requests import QueuedResourceRequest, QueuedResourceService, default_runtime_version

    config = config_or_exit(args)
    if config is None:
        return 2
    runtime = args.runtime_version or default_runtime_version(args.accelerator_type)
    try:
        if not runtime:
            raise ValueError(f"no default runtime version for {args.accelerator_type!r}: pass --runtime-version")
        if args.wait_s <= 0:
            raise ValueError("--wait-s must be positive")
        QueuedResourceRequest(name=probe_name(args.accelerator_type), project=args.project, zone=args.zone,
                              accelerator_type=args.accelerator_type, runtime_version=runtime,
                              provisioning_model="spot")
    except ValueError as exc:
        print(f"tpu-console: {exc}; nothing was created.", file=sys.stderr)
        return 2
    if refused_readonly(config, "probe"):
        return 1
    print(f"Probing {args.accelerator_type} in {args.project}/{args.zone}: this creates a spot queued resource "
          "(probe-...) and deletes it again.", file=sys.stderr, flush=True)

    async def go() -> ProbeAnswer:
        with fleet_source_for(config, project=args.project, zone=args.zone) as source:
            case = ProbeCase(config, QueuedResourceService(source), args.project, args.zone, args.accelerator_type,
                             runtime, wait_s=args.wait_s)
            return await case.answer(source.offered_types,
                                     on_state=lambda state: print(f"  {state}", file=sys.stderr, flush=True))

    try:
        answer = asyncio.run(go())
    except RemoteError as exc:
        print(f"tpu-console: {exc}", file=sys.stderr)
        return 1
    result, tries = answer.result, answer.tries
    if answer.note:
        print(f"tpu-console: {answer.note}", file=sys.stderr)
    if args.json:
        print(json.dumps({**result.to_json(), "try": [t.to_json() for t in tries]}, indent=2))
    else:
        say(f"verdict: {result.verdict}")
        say(f"reason:  {result.reason}")
        say(f"probe:   {result.queued_resource} ({result.last_state or 'not created'}, "
            f"{result.elapsed_s:.1f} s) " + ("deleted" if result.deleted else "NOT deleted"))
        if tries:
            say("try:")
            for option in tries:
                say(f"  {option.why}:")
                say(f"    {option.command}")
    if not result.deleted:
        print(f"tpu-console: the probe's queued resource is still there ({result.cleanup_error}); delete it: "
              f"{result.to_json()['delete_command']}", file=sys.stderr)
        return 3
    return 0 if result.verdict == "available" else 1
