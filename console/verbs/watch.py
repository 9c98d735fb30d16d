"""``tpu-console watch NODE``: follow a vLLM startup over SSH until it is ready or fails.

``watch deploy/NAME`` (or ``lws/NAME``) follows a GKE workload's current pod instead
(:mod:`console.verbs.watch_workload`).

Usage: ``tpu-console watch NODE [--project P] [--zone Z] [--worker N] [--user NAME]
[--accept-new-host-key] [--poll-s S] [--json]``.

A multi-host slice (e.g. v5litepod-16, 4 workers) is followed on every worker at once (each
progress line prefixed ``w0| ``..``w3| ``; the summary sums HBM over workers and says how many
there are; a failure on any worker fails the boot and names the worker); ``--worker N``
follows worker N alone (for N > 0, worker 0's log is followed quietly too: only worker 0 says
ready, so the watch ends at ready when worker 0 does and probes /v1/models there).

Finds the node through the TPU API (``NODE`` may also be the node name of a queued resource's
node spec, before the node exists); a node that is not READY yet (CREATING, or its queued
resource WAITING_FOR_RESOURCES / PROVISIONING) is waited for by polling the API, one line per
state change (:mod:`console.flows.node_wait`). The user is ``--user``, else ``[ssh] user``, else
on an OS Login node (``enable-oslogin``) the OS Login POSIX name (the public key imported into the
profile when missing), else the local user (:mod:`console.flows.ssh_login`; said on stderr and
recorded with the launch). It then connects like ``gcloud compute tpus tpu-vm ssh`` (an
unknown host key is asked about on a terminal, refused otherwise; ``--accept-new-host-key``
records it without asking, OpenSSH's accept-new; a changed key is always refused), follows
``docker logs -f --timestamps`` of the configured container (reconnecting and resuming after a
drop), and feeds every line to the startup reader. Progress goes to stderr; the summary goes to
stdout (``--json``: the ``log-summary --json`` object). Once ready, ``/v1/models`` is probed
through an SSH port forward. What the log shows is recorded in the history through the same
:class:`~console.flows.launch_recorder.LaunchRecorder` as the startup view: the launch of the
followed container (the one a ``swap`` recorded, found by container id, or a new observed
one) ends ``ready`` or ``failed`` with its failure kind. A history that cannot be opened is
reported and the watch goes on.

The watch itself is :class:`console.flows.slice_watch.SliceWatch`, the startup view's too: this
verb collects its input (the node, the SSH targets, the host-key answers) and prints its events.
A worker past worker 0 whose host key is refused (unknown without a terminal, or changed) is
refused alone (its ``wN| tpu-console: ...`` line; ``refused_workers`` in ``--json``); the other
workers are still followed.

Exit codes: 0 ready, 1 failed (or the container exited first, or the node is PREEMPTED /
TERMINATED ... or its queued resource FAILED, said once), 2 bad arguments, no such node,
an ambiguous name, or could not connect.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from console.verbs.common import add_node_arguments, config_or_exit
from remote.printable import printable

if TYPE_CHECKING:
    from console.config import Config
    from console.flows.launch_recorder import LaunchRecorder
    from console.flows.slice_watch import HostKeyAsk, SliceEvent, WorkerTarget
    from console.flows.ssh_login import SshLogin
    from console.verbs.common import Subparsers
    from remote.models import Node
    from remote.ssh import SshTarget


def add_parser(subparsers: Subparsers) -> None:
    """Register the ``watch`` verb."""
    parser = subparsers.add_parser(
        "watch", help="follow a node's vLLM startup until ready or failed",
        description="Follow the vLLM container's startup log on a TPU node over SSH until it is ready "
                    "or fails. Exit 0 ready, 1 failed, 2 could not connect or bad input.")
    add_node_arguments(parser, worker_help=None)
    parser.add_argument("--worker", type=int, default=None, metavar="N",
                        help="follow only worker N of a multi-host slice (default: every worker at once)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON (log-summary --json keys)")
    parser.add_argument("--user", metavar="NAME", default=None,
                        help="log in as NAME (overrides [ssh] user and the OS Login POSIX name)")
    parser.add_argument("--accept-new-host-key", action="store_true",
                        help="record an unknown host key without asking (OpenSSH's accept-new); "
                             "a changed key is still refused")
    parser.add_argument("--poll-s", type=float, default=5.0, metavar="SECONDS",
                        help="seconds between TPU API polls while the node is not READY yet (default 5)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the verb; returns the exit code (see the module docstring)."""
    config = config_or_exit(args)
    if config is None:
        return 2
    from console.verbs.common import workload_spec_or_none

    spec = workload_spec_or_none(args)
    if spec is False:
        return 2
    if spec is not None:
        from console.verbs.watch_workload import run_workload_watch

        return run_workload_watch(args, config, spec)  # type: ignore[arg-type]
    if args.worker is not None and args.worker < 0:
        print("tpu-console: --worker must be 0 or more", file=sys.stderr)
        return 2
    from console.flows.ssh_login import USER_NAME

    if args.user is not None and not USER_NAME.fullmatch(args.user):
        print(f"tpu-console: --user {printable(args.user)!r} is not a user name (letters, digits, _ . -; "
              f"at most 32)", file=sys.stderr)
        return 2
    if not args.poll_s > 0:
        print("tpu-console: --poll-s must be more than 0", file=sys.stderr)
        return 2
    return asyncio.run(_run(args, config))


async def _run(args: argparse.Namespace, config: Config) -> int:
    from console.flows.node_wait import NodeWontBeReady
    from remote.errors import RemoteError

    try:                                       # the first TPU API call before the watch's own imports
        found = await find_node(config, args.node, project=args.project, zone=args.zone, worker=args.worker,
                                poll_s=args.poll_s)
    except NodeWontBeReady as exc:
        print(f"tpu-console: {printable(exc)}", file=sys.stderr)
        return 1
    if isinstance(found, str):
        print(f"tpu-console: {printable(found)}", file=sys.stderr)
        return 2
    node, attributes, config = found
    from console.flows.launch_log import log_opener
    from console.flows.launch_sink import RecorderSink
    from console.flows.slice_watch import SliceWatch
    from console.flows.startup_watch import no_container_hint

    try:
        login, targets = await _worker_targets(args, config, node, attributes)
    except RemoteError as exc:
        print(f"tpu-console: {printable(exc)}", file=sys.stderr)
        return 2
    print(printable(login.describe()), file=sys.stderr)
    followed, ready_from = [targets[w] for w in sorted(targets)], None
    if args.worker:
        followed, ready_from = [targets[args.worker]], targets[0]
        print(f"tpu-console: following worker {args.worker} alone; only worker 0's log says ready, so worker 0 "
              f"is followed quietly for that (omit --worker to follow every worker)", file=sys.stderr)
    recorder = _recorder(config, args, node)
    recorder.ssh_user = login.user
    logs = config.logs
    watch = SliceWatch(
        followed, container=config.container.name, container_port=config.container.port, ready_from=ready_from,
        sink=RecorderSink(recorder), on_event=event_printer(sys.stderr, multi=len(followed) > 1),
        log_for=lambda worker: log_opener(logs.folder, node.name, worker, max_mib=logs.max_mib, keep=logs.keep),
        waiting_hint=no_container_hint(node, config.container.name, image=config.container.image,
                                       model=config.container.model))
    try:
        outcome = await watch.run()
    finally:
        if recorder.store is not None:
            recorder.store.close()
    if recorder.error is not None:
        print(f"tpu-console: {recorder.error}", file=sys.stderr)
    if outcome.summary is not None:
        if args.json:
            print(json.dumps(outcome.summary, indent=2))
        else:
            from console.verbs.log_summary import print_summary_panel

            print_summary_panel(f"watch {node.project}/{node.zone}/{node.name}", outcome.summary)
    return outcome.code


async def _worker_targets(args: argparse.Namespace, config: Config, node: Node,
                          attributes: dict[int, dict[str, str]]) -> tuple[SshLogin, dict[int, WorkerTarget]]:
    """The user (this run's own :class:`~console.flows.ssh_login.LoginResolver`) and each worker's
    target with its host-key answer (``--accept-new-host-key``, else the terminal, else refused).

    Raises:
        RemoteError: the user cannot be worked out, or a worker has no usable address.
    """
    from console.flows.slice_watch import WorkerTarget
    from console.flows.ssh_login import LoginResolver
    from console.flows.ssh_target import accept_new_host_key, pinned_target

    logins = LoginResolver(config)          # this run's one resolver (no process-wide registry)
    try:
        login = await logins.login(node, user=args.user)
    finally:
        logins.close()
    targets = {}
    for worker, published in sorted(attributes.items()):
        target = pinned_target(node, config.ssh, worker, published, login=login)    # host keys pinned as gcloud does
        ask: HostKeyAsk = (accept_new_host_key(target, lambda sentence: print(printable(sentence), file=sys.stderr))
                           if args.accept_new_host_key else terminal_host_key_prompt(target))
        targets[worker] = WorkerTarget(worker, target, ask)
    return login, targets


def event_printer(out: TextIO, *, multi: bool) -> Callable[[SliceEvent], None]:
    """Print each :class:`~console.flows.slice_watch.SliceEvent` that has a sentence on ``out``, one
    clean line (log, docker and server text made printable), ``wN| `` first when ``multi``."""
    def show(event: SliceEvent) -> None:
        if event.text:
            out.write(f"{printable(event.line(multi))}\n")
            out.flush()

    return show


def _recorder(config: Config, args: argparse.Namespace, node: Node) -> LaunchRecorder:
    """A recorder on the history of ``config``/``--db``; one without a store (after saying why) when it cannot open."""
    from console.flows.history_store import open_history
    from console.flows.launch_recorder import LaunchRecorder
    from store import StoreError

    try:
        store = open_history(config, getattr(args, "db", None))
    except StoreError as exc:
        print(f"tpu-console: this watch is not recorded in the history: {exc}", file=sys.stderr)
        store = None
    return LaunchRecorder(store, node)


async def find_node(config: Config, name: str, *, project: str | None, zone: str | None,
                    worker: int | None = 0, poll_s: float = 5.0,
                    progress: TextIO | None = None) -> tuple[Node, dict[int, dict[str, str]], Config] | str:
    """Find ``name`` in the fleet and wait until it is READY: ``(node, {worker: its guest attributes
    (its published host keys, its instance name; empty when unreadable)}, config)``, or why not
    (a sentence). ``worker`` ``None`` means every
    worker of the node (one for a single-host node), else that worker alone (and worker 0 beside
    a worker N > 0: its log says when the server is ready).

    The lookup is :func:`console.flows.node_lookup.find_node_or_request` (``name`` may be ``NAME``,
    ``ZONE/NAME`` or ``PROJECT/ZONE/NAME``, or the node name of a queued resource's node spec). A
    node that is not READY yet, or whose queued resource is not ACTIVE yet, is waited for
    (:func:`console.flows.node_wait.wait_until_ready`, one line on ``progress`` per state
    change, polling every ``poll_s`` seconds); after a wait the config file is read again (its
    ``[ssh.hosts]`` may have changed) and returned.

    Raises:
        NodeWontBeReady: PREEMPTED, TERMINATED ..., or its queued resource FAILED.
    """
    from console.config import ConfigError, load_config
    from console.flows import node_lookup
    from console.flows.node_wait import NodeWontBeReady, needs_wait, wait_target, wait_until_ready
    from console.flows.ssh_target import guest_attributes
    from remote.errors import RemoteError

    out = progress or sys.stderr

    def changed(sentence: str) -> None:
        out.write(f"{printable(sentence)}\n")
        out.flush()

    try:
        with node_lookup.fleet_source_for(config, project=project, zone=zone) as source:
            node, request = await node_lookup.find_node_or_request(source, name, project=project, zone=zone)
            if node is None or needs_wait(node):
                target = wait_target(node, request, node_lookup.split_node_spec(name)[2])
                node = await wait_until_ready(source, target, on_change=changed, poll_s=poll_s)
                changed(f"node {node.name} is READY")
                if config.path is not None:
                    config = load_config(config.path)
            chosen = ([0, worker] if worker else [worker]) if worker is not None \
                else list(range(max(1, len(node.workers))))
            host_keys = {w: await guest_attributes(source, node, w) for w in chosen}
    except NodeWontBeReady:
        raise
    except RemoteError as exc:
        return str(exc)
    except ConfigError as exc:
        return f"config error: {exc}"
    return node, host_keys, config


def terminal_host_key_prompt(target: SshTarget, stdin: TextIO | None = None,
                             stderr: TextIO | None = None) -> HostKeyAsk:
    """A host-key callback: asks on the terminal when stdin is a tty, else refuses."""
    stdin = stdin or sys.stdin
    stderr = stderr or sys.stderr

    async def ask(fingerprint: str) -> bool:
        if not stdin.isatty():
            return False
        stderr.write(printable(f"The authenticity of {target.label} (host key alias {target.known_hosts_name}) "
                               f"can't be established.\nIts host key fingerprint is {fingerprint}.\n"
                               f"Accept it and record it in {target.known_hosts}? [y/N] ", keep_newlines=True))
        stderr.flush()
        answer = await asyncio.to_thread(stdin.readline)
        return answer.strip().lower() in ("y", "yes")

    return ask


async def watch_target(target: SshTarget, *, container: str, container_port: int = 8000,
                       accept_new_host_key: HostKeyAsk | None = None, progress: TextIO | None = None,
                       probe: bool = True) -> tuple[int, dict[str, Any] | None]:
    """Follow ``container`` on one ``target`` (one worker, nothing recorded) until ready or failed,
    printing the watch's sentences on ``progress`` (stderr): :meth:`console.flows.slice_watch.SliceWatch.run`.

    Returns:
        ``(exit code, summary_json or None)``: 0 ready, 1 failed or exited, 2 could not connect.
    """
    from console.flows.slice_watch import SliceWatch, WorkerTarget

    watch = SliceWatch([WorkerTarget(0, target, accept_new_host_key)], container=container,
                       container_port=container_port, on_event=event_printer(progress or sys.stderr, multi=False))
    outcome = await watch.run(probe=probe)
    return outcome.code, outcome.summary
