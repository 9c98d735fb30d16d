"""``tpu-console request``: ask the TPU API for capacity (create a queued resource).

Usage: ``tpu-console request NAME --project P --zone Z --accelerator-type T
--provisioning-model flex-start|spot|on-demand|reserved [--runtime-version V] [--max-run-duration 4h]
[--valid-until 1h] [--node-id N] [--image I] [--model M] [--set KEY=VALUE]... [--dry-run] [--yes] [--wait]
[--json]``.

Prints the exact REST call and body, the equivalent ``gcloud alpha compute tpus
queued-resources create`` line and what it costs (with a container: its commands and the swap's
lint on the node the request creates), then asks (on a terminal; ``--yes`` skips it,
and without a terminal nothing is created without ``--yes``) and creates it. ``--wait`` follows
the states (WAITING_FOR_RESOURCES -> PROVISIONING -> ACTIVE, node CREATING -> READY), one
line each, until the node is READY or the request FAILED. ``--image`` / ``--model`` / ``--set``
(they imply ``--wait``) then run the serving container on the READY node through the swap
machinery (pull, run, recorded in the history as a first launch); the config is read again first.

Exit codes: 0 created (ready, with ``--wait``; the container started, with ``--image``) or
``--dry-run`` printed, 1 not created (refused by the operator, the API or read-only mode), FAILED
while waiting, or the container did not start, 2 bad input or config.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from console.verbs.common import say
from remote.names import console_command

if TYPE_CHECKING:
    from console.config import Config
    from console.flows.request import RequestCase, RequestPreview
    from console.flows.request_container import ContainerLaunch
    from console.flows.swap_case import SwapPreview
    from console.flows.swap_run import StepStates
    from console.verbs.common import Subparsers
    from remote.container.swap import SwapStep
    from remote.models import Node, QueuedResource
    from remote.ssh import CommandResult
    from remote.tpu.requests import QueuedResourceRequest


def add_parser(subparsers: Subparsers) -> None:
    """Register the ``request`` verb."""
    from console.verbs.common import add_location_arguments
    from remote.models import REQUEST_MODELS

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
    parser.add_argument("--image", metavar="IMAGE", help="once READY, run this vLLM image (implies --wait)")
    parser.add_argument("--model", metavar="M", help="once READY, serve this model (implies --wait)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="set_",
                        help="once READY, a container setting, as for swap (max-model-len=8192); implies --wait")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=run)


_say = say   # one line through the one sanitizer (console.verbs.common.say)


def run(args: argparse.Namespace) -> int:
    """Run the verb; returns the exit code (see the module docstring)."""
    import asyncio
    import json

    from console.flows.request import build_request, preview
    from console.flows.request_container import container_launch
    from console.verbs.common import ask_yes_no, config_or_exit, refused_readonly
    from console.verbs.swap import plan_json

    config = config_or_exit(args)
    if config is None:
        return 2
    try:
        request = build_request(name=args.name, project=args.project, zone=args.zone,
                                accelerator_type=args.accelerator_type, provisioning_model=args.provisioning_model,
                                runtime_version=args.runtime_version, max_run_duration=args.max_run_duration,
                                valid_until=args.valid_until, node_id=args.node_id)
        launch = container_launch(image=args.image, model=args.model, settings=args.set_)
    except ValueError as exc:
        _say(f"tpu-console: {exc}; nothing was created.", err=True)
        return 2
    if launch is not None:
        args.wait = True
    shown = preview(request, config.prices, api_endpoint=config.api_endpoint)
    out: dict[str, Any] = {**request.to_json(config.api_endpoint), "cost": shown.cost, "created": False, "queued_resource": None}
    if not args.json:
        _print_preview(shown)
    if launch is not None:
        try:
            container = _container_preview(config, request, launch, args)
        except ValueError as exc:
            _say(f"tpu-console: container: {exc}; nothing was created.", err=True)
            return 2
        out["container_plan"] = plan_json(container.plan, container.findings)
        if not args.json:
            _print_container(container)
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
    return asyncio.run(_create(config, request, args, out, launch))


def _container_preview(config: Config, request: QueuedResourceRequest, launch: ContainerLaunch,
                       args: argparse.Namespace) -> SwapPreview:
    """The container's commands and the swap's lint on the node the request creates (with the history's
    facts: past failures, boot times, the model's maximum length).

    Raises:
        ValueError: the container's spec is invalid.
    """
    from console.flows.history_access import HistoryAccess
    from console.flows.history_store import open_history
    from console.flows.request_container import preview_launch

    history = HistoryAccess(lambda: open_history(config, getattr(args, "db", None)))
    try:
        return preview_launch(config, request, launch, config.container, history)
    finally:
        history.close()


def _print_container(container: SwapPreview) -> None:
    _say("Container, started once READY:")
    for f in container.findings:
        fix = (" [fix: --set " + " --set ".join(f"{k}={'' if v is None else v}" for k, v in f.fix.items()) + "]"
               if f.fix else "")
        _say(f"  {f.severity.upper():7} {f.rule_id}: {f.message}{fix}")
    if not container.findings:
        _say("  Lint: no findings.")
    for i, command in enumerate(container.plan.commands, 1):
        _say(f"  {i}. {command}")


def _print_preview(shown: RequestPreview) -> None:
    r = shown.request
    _say(f"Request {r.name}: {r.accelerator_type} {r.provisioning_model} in {r.project}/{r.zone} (node {r.node})")
    _say(f"Cost: {shown.cost}")
    _say(f"REST call: {shown.rest_call}")
    _say("Body:")
    for line in shown.body_text.splitlines():
        _say(f"  {line}")
    _say("Equivalent gcloud:")
    _say(f"  {shown.gcloud}")


async def _create(config: Config, request: QueuedResourceRequest, args: argparse.Namespace, out: dict[str, Any],
                  launch: ContainerLaunch | None) -> int:
    import json

    from console.flows.node_lookup import fleet_source_for
    from console.flows.request import RequestCase, explain, is_ready, is_settled
    from remote.errors import RemoteError
    from remote.tpu.requests import QueuedResourceService

    code = 0
    with fleet_source_for(config, project=request.project, zone=request.zone) as source:
        service = QueuedResourceService(source)
        try:
            case = RequestCase(config, service, request, launch=launch)
            qr = await case.submit(timeout_s=max(60.0, config.request_timeout_s * 3))
            out["created"] = True
            out["queued_resource"] = qr.to_json()
            if not args.json:
                _say(f"Created: {qr.name} is {qr.state}: {explain(qr, None)}")
            if args.wait:
                def changed(q: QueuedResource, node: Node) -> None:
                    if not args.json:
                        _say(f"  {q.state}" + (f" / node {node.state}" if node else "") + f": {explain(q, node)}")

                qr, node = await service.follow(request.project, request.zone, request.name, on_change=changed,
                                                until=is_settled, poll_s=2.0, timeout_s=6 * 3600)
                out["queued_resource"] = qr.to_json()
                out["node"] = None if node is None else node.to_json()
                code = 0 if is_ready(qr, node) else 1
                if code == 0 and launch is not None:
                    code = await _launch(config, case, node, args, out)
            elif not args.json:
                from remote.tpu.advice import delete_command

                _say(f"Follow it: {console_command(['nodes', '--project', request.project])}   (or again with "
                     f"--wait); delete: {delete_command(request.project, request.zone, request.name)}")
        except RemoteError as exc:
            out["error"] = str(exc)
            if not args.json:
                _say(f"tpu-console: {'not created' if not out['created'] else 'while following'}: {exc}", err=True)
            code = 1
    if args.json:
        print(json.dumps(out, indent=2))
    return code


async def _launch(config: Config, case: RequestCase, node: Node, args: argparse.Namespace,
                  out: dict[str, Any]) -> int:
    """Run the request's container on the READY node (the use case's swap machinery); returns 0
    started, 1 not."""
    from console.config import ConfigError, load_config
    from console.flows.policy import ReadOnlyRefused
    from remote.errors import RemoteError

    try:
        config = load_config(config.path) if config.path is not None else config   # new [ssh.hosts]
    except ConfigError as exc:
        _say(f"tpu-console: config error: {exc}; the container was not started.", err=True)
        return 1
    from console.flows.history_access import HistoryAccess
    from console.flows.history_store import open_history

    history = HistoryAccess(lambda: open_history(config, getattr(args, "db", None)))

    def step(s: SwapStep, res: CommandResult | None, _states: StepStates) -> None:
        if not args.json:
            if res is None:
                _say(f"$ {s.display}")
            elif res.exit_status != 0:
                _say(f"  exit {res.exit_status}")

    try:
        outcome = await case.start_container(config, node, history=history, on_step=step, watched=False)
    except (RemoteError, ValueError, ReadOnlyRefused) as exc:
        _say(f"tpu-console: the container was not started on {node.name}: {exc}", err=True)
        out["container"] = {"started": False, "error": str(exc)}
        return 1
    finally:
        history.close()
    if history.problem:
        _say(f"tpu-console: the launch was not recorded: {history.problem}", err=True)
    result = outcome.result
    out["container"] = {"started": result.ok, "container_id": result.container_id,
                        "error": None if result.ok else str(result.error)}
    if not result.ok:
        _say(f"tpu-console: the container did not start on {node.name}: {result.error}", err=True)
        return 1
    if not args.json:
        _say(f"Container started on {node.name} ({(result.container_id or '')[:12]}). "
             "Follow its startup: " + console_command(["watch", node.name, "--project", node.project,
                                                       "--zone", node.zone]))
    return 0
