"""``tpu-console forward``: hold ``localhost:PORT -> node:container.port`` open until Ctrl-C.

Usage::

    tpu-console forward NODE [--project P] [--zone Z] [--worker N] [--port PORT]

NODE (``NAME``, ``ZONE/NAME`` or ``PROJECT/ZONE/NAME``) must be READY; its worker (--worker, default 0) is reached
with the one SSH target resolution (gcloud's user, key and known-hosts alias). The forward is
the TUI's (:class:`console.flows.forwards.Forward`): when its SSH connection drops it is opened
again on the same local port, so ``curl localhost:PORT`` and benchmarks keep their URL, as the
article's ``demo.sh`` keeps ``localhost:8005 -> TPU:8000``. Without ``--port`` the port is the
one the console gives the node: ``[forward.ports]``, else ``[forward] port``, else the node's
stable port within 8005-8104 (derived from its name). Each drop and re-open is one line on
stderr, and so is the target going down (the node refuses the port: ``target down: ...
(Connection refused)``, e.g. the container was removed) and coming back; the URL is printed on
stdout once it listens.

``forward deploy/NAME [--cluster C] [--namespace N]`` (a GKE workload) forwards through the API server
instead (kr8s's port-forward, as ``kubectl port-forward`` does) to the workload's serving pod: its newest
Ready pod, chosen again for every connection, so after a rollout the forward goes to the new pod (said
once on stderr: ``the forward moves to pod NEW (was OLD)``) on the same local port; the port in the pod
is the container's ``http`` port (else ``--port`` in its args, else 8000). The local port: ``--port``, else
the workload's stable port (its ``CLUSTER/NAMESPACE/deploy/NAME``).

Exit codes: 0 held until Ctrl-C, 1 the node or the port could not be reached (or the local
port is taken), 2 bad input (unknown or ambiguous NODE, bad config).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING

from console.verbs.common import config_or_exit
from remote.printable import printable

if TYPE_CHECKING:
    from console.config import Config
    from console.flows.gke_target import WorkloadSpec
    from console.verbs.common import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """Register the ``forward`` verb."""
    from console.verbs.common import add_node_arguments, plain_help

    p = subparsers.add_parser("forward", help="hold localhost:PORT -> the node's vLLM port until Ctrl-C",
                              description=plain_help(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    add_node_arguments(p, optional=False, worker_help="the worker whose vLLM server is used (default 0)")
    p.add_argument("--port", type=int, default=None, metavar="PORT",
                   help="local port (default: the config's, else the node's stable port in 8005-8104); "
                        "kept across reconnects")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the verb; returns the exit code (see the module docstring)."""
    if args.port is not None and not 1 <= args.port <= 65535:
        return _fail(f"--port {args.port}: expected 1-65535", 2)
    config = config_or_exit(args)
    if config is None:
        return 2
    from console.verbs.common import workload_spec_or_none

    spec = workload_spec_or_none(args)
    if spec is False:
        return 2
    try:
        if spec is not None:
            return asyncio.run(_hold_workload(args, config, spec))  # type: ignore[arg-type]
        return asyncio.run(_hold(args, config))
    except KeyboardInterrupt:           # the way out
        return 0


async def _hold(args: argparse.Namespace, config: Config) -> int:
    from console.flows.forwards import Forward, ForwardRegistry
    from console.flows.node_lookup import NodeLookupError, lookup_exit_code
    from console.flows.ssh_target import ready_node_target
    from console.verbs.watch import terminal_host_key_prompt
    from remote.errors import RemoteError

    try:
        node, target = await ready_node_target(config, args.node, project=args.project, zone=args.zone,
                                                 worker=args.worker)
    except NodeLookupError as exc:      # unknown or ambiguous NODE: bad input; not READY or API down: unreachable
        return _fail(str(exc), lookup_exit_code(exc))
    except RemoteError as exc:
        return _fail(str(exc), 1)
    port = config.container.port
    local_port = args.port if args.port is not None else ForwardRegistry().port_for(node.name, config.forward)
    forward = Forward(node.name, target, container_port=port, local_port=local_port,
                      accept_new_host_key=terminal_host_key_prompt(target))
    try:
        try:
            url = await forward.open()
        except RemoteError as exc:
            return _fail(str(exc), 1)
        print(url, flush=True)
        print(printable(f"Forwarding {url} -> {node.name} ({target.label}) port {port}; Ctrl-C stops."),
              file=sys.stderr, flush=True)
        forward.on_change = lambda sentence: print(printable(sentence), file=sys.stderr, flush=True)
        await forward.hold()
        return 0
    finally:
        forward.close()


async def _hold_workload(args: argparse.Namespace, config: Config, spec: WorkloadSpec) -> int:
    """``forward deploy/NAME``: through the API server to the serving pod, following a rollout."""
    from console.flows.forwards import ForwardRegistry
    from console.flows.gke_fleet import gke_source
    from console.flows.gke_target import WorkloadSpecError, find_workload, lint_node
    from console.flows.workload_forward import WorkloadForward
    from remote.errors import RemoteError

    source = gke_source(config)
    if source is None:
        return _fail(f"{spec.ref} is a GKE workload and {config.path or 'the config'} has no [gke] table", 2)
    forward: WorkloadForward | None = None
    try:
        try:
            workload, kube = await find_workload(source, spec)
        except (WorkloadSpecError, RemoteError) as exc:
            return _fail(str(exc), 2 if isinstance(exc, WorkloadSpecError) else 1)
        name = lint_node(workload).name
        local_port = args.port if args.port is not None else ForwardRegistry().port_for(name, config.forward)
        forward = WorkloadForward(workload, kube, local_port=local_port)
        try:
            url = await forward.open()
        except RemoteError as exc:
            return _fail(str(exc), 1)
        print(url, flush=True)
        print(printable(f"Forwarding {url} -> {workload.ref} pod {forward.pod} port {forward.container_port} in "
                        f"{workload.cluster}/{workload.namespace} (through the API server; it follows a rollout "
                        "to the new pod); Ctrl-C stops."), file=sys.stderr, flush=True)
        forward.on_change = lambda sentence: print(printable(sentence), file=sys.stderr, flush=True)
        await forward.hold()
        return 0
    finally:
        if forward is not None:
            forward.close()
        await source.close()


def _fail(message: str, code: int) -> int:
    print(f"tpu-console: {printable(message)}", file=sys.stderr)
    return code
