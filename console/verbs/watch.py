"""``tpu-console watch NODE``: follow a vLLM startup over SSH until it is ready or fails.

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

Exit codes: 0 ready, 1 failed (or the container exited first, or the node is PREEMPTED /
TERMINATED ... or its queued resource FAILED, said once), 2 bad arguments, no such node,
an ambiguous name, or could not connect.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from console.verbs.common import add_node_arguments, config_or_exit
from remote.printable import printable
from remote.secrets import scrub_text

if TYPE_CHECKING:
    from console.config import Config
    from console.verbs.common import Subparsers
    from remote.models import Node
    from remote.ssh import SshTarget


#: Seconds to keep reading after a fatal failure line (the traceback's remaining lines).
FAILURE_GRACE_S = 3.0
#: Longest wait, once worker 0 is ready, for the other workers' logs to show their KV-cache HBM line.
WORKER_GRACE_S = 10.0


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
    from console.flows.ssh_login import LoginResolver
    from console.flows.ssh_target import pinned_target
    from console.flows.startup_watch import no_container_hint
    from remote.errors import RemoteError

    try:
        found = await find_node(config, args.node, project=args.project, zone=args.zone, worker=args.worker,
                                poll_s=args.poll_s)
    except NodeWontBeReady as exc:
        print(f"tpu-console: {printable(exc)}", file=sys.stderr)
        return 1
    if isinstance(found, str):
        print(f"tpu-console: {printable(found)}", file=sys.stderr)
        return 2
    node, host_keys, config = found
    pairs: dict[int, tuple[Any, Any]] = {}
    try:
        logins = LoginResolver(config)          # this run's one resolver (no process-wide registry)
        try:
            login = await logins.login(node, user=args.user)
        finally:
            logins.close()
        for worker, keys in sorted(host_keys.items()):
            target = pinned_target(node, config.ssh, worker, keys, login=login)
            if args.accept_new_host_key:
                from console.flows.ssh_target import accept_new_host_key

                accept = accept_new_host_key(target, lambda sentence: print(printable(sentence), file=sys.stderr))
            else:
                accept = terminal_host_key_prompt(target)
            pairs[worker] = (target, accept)
    except RemoteError as exc:
        print(f"tpu-console: {printable(exc)}", file=sys.stderr)
        return 2
    print(printable(login.describe()), file=sys.stderr)
    ready_from = None
    if args.worker:
        (target, accept), rest = pairs[args.worker], []
        ready_from = pairs[0]
        print(f"tpu-console: following worker {args.worker} alone; only worker 0's log says ready, so worker 0 "
              f"is followed quietly for that (omit --worker to follow every worker)", file=sys.stderr)
    else:
        (target, accept), rest = pairs[min(pairs)], [pairs[w] for w in sorted(pairs)[1:]]
    from console.flows.launch_log import log_opener

    def logs_of(worker: int) -> Any:
        return log_opener(config.logs.folder, node.name, worker, max_mib=config.logs.max_mib, keep=config.logs.keep)

    recorder = _recorder(config, args, node)
    recorder.ssh_user = login.user
    try:
        code, summary = await watch_target(target, container=config.container.name,
                                           container_port=config.container.port,
                                           accept_new_host_key=accept,
                                           progress=sys.stderr, recorder=recorder, workers=rest,
                                           waiting_hint=no_container_hint(
                                               node, config.container.name, image=config.container.image,
                                               model=config.container.model),
                                           log_for=logs_of(args.worker or 0), worker_log_for=logs_of,
                                           ready_from=ready_from)
    finally:
        if recorder.store is not None:
            recorder.store.close()
    if recorder.error is not None:
        print(f"tpu-console: {recorder.error}", file=sys.stderr)
    if summary is not None:
        if args.json:
            print(json.dumps(summary, indent=2))
        else:
            from console.verbs.log_summary import print_summary_panel

            print_summary_panel(f"watch {node.project}/{node.zone}/{node.name}", summary)
    return code


def _recorder(config: Config, args: argparse.Namespace, node: Node) -> Any:
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
                    progress: TextIO | None = None) -> tuple[Any, dict[int, dict[str, str]], Any] | str:
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
                             stderr: TextIO | None = None) -> Callable[[str], Awaitable[bool]]:
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
                       accept_new_host_key: Callable[[str], Awaitable[bool]] | None = None,
                       progress: TextIO | None = None, probe: bool = True,
                       recorder: Any = None, waiting_hint: str | None = None,
                       workers: Sequence[tuple[Any, Callable[[str], Awaitable[bool]] | None]] = (),
                       log_for: Callable[[str], Any] | None = None,
                       worker_log_for: Callable[[int], Callable[[str], Any]] | None = None,
                       ready_from: tuple[Any, Callable[[str], Awaitable[bool]] | None] | None = None,
                       ) -> tuple[int, dict[str, Any] | None]:
    """Follow ``container`` on ``target`` until ready or failed.

    Args:
        waiting_hint: said once when the node has no such container yet (what the watch waits
            for and how to start one: :func:`~console.flows.startup_watch.no_container_hint`).
        recorder: a :class:`~console.flows.launch_recorder.LaunchRecorder`: each container the
            tail follows is observed (:func:`~console.flows.startup_watch.observe_followed`) and
            the state recorded as lines arrive and at the end; ``None`` records nothing (worker
            0's container only, on a slice).
        workers: ``(target, host-key callback)`` of workers 1..N of a multi-host slice, followed
            at once beside ``target`` (worker 0): every progress line is prefixed ``wN| ``, a
            fatal failure or an exited container on any worker fails the boot, and the summary
            is :func:`remote.vllm_log.workers.slice_summary` (HBM summed over workers).
        log_for: ``container_id -> LaunchLog``: the full log of each container followed is kept
            on disk (:func:`console.flows.launch_log.log_opener`); ``None`` keeps none.
        worker_log_for: ``worker -> log_for`` for workers 1..N of a slice (each worker's own file).
        ready_from: ``(worker 0's target, host-key callback)`` when ``target`` is worker N > 0 of
            a slice followed alone: worker 0 is followed quietly (nothing printed, recorded or kept
            on disk but ``worker 0 says ready`` and a fatal failure), the watch ends at ready when
            worker 0's log says so (after ``target``'s own KV-cache line, at most
            :data:`WORKER_GRACE_S`) and /v1/models is probed on worker 0.

    Returns:
        ``(exit code, summary_json or None)``: 0 ready, 1 failed or exited, 2 could not connect.
    """
    from console.flows.startup_watch import StartupWatch, observe_followed
    from remote.container.tail import TailStatus
    from remote.errors import RemoteError
    from remote.ssh.errors import HostKeyChanged, HostKeyUnknown
    from remote.vllm_log.reader import summary_json
    from remote.vllm_log.workers import ready_from_worker_0, slice_summary

    out = progress or sys.stderr
    multi = bool(workers)

    def say(text: str, worker: int | None = 0) -> None:
        prefix = f"w{worker}| " if multi and worker is not None else ""
        out.write(f"{prefix}{printable(text)}\n")        # log lines, docker and server text: one clean line
        out.flush()

    done = asyncio.Event()
    last: dict[str, Any] = {"phase": None, "kv": None, "steps": 0, "status": None, "failed_at": None}

    def on_lines(batch: list[tuple[Any, str]]) -> None:
        state = watch.state
        if recorder is not None:
            recorder.record(state, watch.reader_container_id)
        if state.phase != last["phase"]:
            last["phase"] = state.phase
            say(f"phase: {state.phase.value}")
        if state.compile.steps_finished >= last["steps"] + 10:
            last["steps"] = state.compile.steps_finished
            say(f"compiled {state.compile.steps_finished} steps")
        if state.kv_cache_tokens is not None and state.kv_cache_tokens != last["kv"]:
            last["kv"] = state.kv_cache_tokens
            say(f"KV cache: {state.kv_cache_tokens:,} tokens, max concurrency {state.max_concurrency}")
        if state.ready:
            done.set()
        elif state.failure is not None and state.failure.fatal and last["failed_at"] is None:
            last["failed_at"] = asyncio.get_running_loop().time()
            say(f"failed: {state.failure.kind.value}: {scrub_text(state.failure.message)}")
            asyncio.get_running_loop().call_later(FAILURE_GRACE_S, done.set)

    observing: dict[str, asyncio.Task[Any]] = {}

    async def observe(container_id: str) -> None:
        found = await observe_followed(watch, recorder, container_id)
        if found.problem is not None:
            say(f"warning: {found.problem}")
        recorder.record(watch.state, watch.reader_container_id)

    restarts_said: set[int] = set()

    def on_status(status: TailStatus) -> None:
        last["status"] = status
        restart = watch.restarts[-1] if watch.restarts else None
        if restart is not None and restart.restart_count == status.restart_count \
                and restart.restart_count not in restarts_said:
            restarts_said.add(restart.restart_count)        # a fresh boot: its own reader and messages
            say(restart.marker())
            if recorder is not None:
                recorder.record_restart(restart.old_state, restart.restart_count)
            last.update(phase=None, kv=None, steps=0, failed_at=None)
        if watch.replaced and watch.replaced[-1].new_id == status.container_id and status.container_id not in observing:
            gone = watch.replaced[-1]                 # a new container: its own reader, launch and messages
            say(gone.marker())
            if recorder is not None:
                recorder.record_replaced(gone.old_state, gone.marker(), gone.old_id)
            last.update(phase=None, kv=None, steps=0, failed_at=None)
        if recorder is not None and status.container_id and status.container_id not in observing:
            observing[status.container_id] = asyncio.create_task(observe(status.container_id))
        if status.kind in ("reconnecting", "waiting", "exited", "error") or status.message.startswith("resumed"):
            say(status.message)
        if status.kind == "waiting" and waiting_hint and not observing and not last.get("hinted"):
            last["hinted"] = True
            say(waiting_hint)
        if status.kind in ("exited", "error"):
            done.set()

    others: list[StartupWatch] = []
    worker_status: dict[int, TailStatus] = {}
    worker_failed: set[int] = set()

    def worker_lines(worker: int) -> Callable[[list[tuple[Any, str]]], None]:
        def on(batch: list[tuple[Any, str]]) -> None:
            state = others[worker - 1].state
            if state.failure is not None and state.failure.fatal and worker not in worker_failed:
                worker_failed.add(worker)
                say(f"failed: {state.failure.kind.value}: {scrub_text(state.failure.message)}", worker)
                asyncio.get_running_loop().call_later(FAILURE_GRACE_S, done.set)
        return on

    def worker_on_status(worker: int) -> Callable[[TailStatus], None]:
        said: set[int] = set()

        def on(status: TailStatus) -> None:
            worker_status[worker] = status
            other = others[worker - 1]
            restart = other.restarts[-1] if other.restarts else None
            if restart is not None and restart.restart_count == status.restart_count \
                    and restart.restart_count not in said:
                said.add(restart.restart_count)         # a fresh boot on this worker: its own reader
                say(restart.marker(), worker)
                worker_failed.discard(worker)
            if status.kind in ("reconnecting", "waiting", "exited", "error") or status.message.startswith("resumed"):
                say(status.message, worker)
            if status.kind in ("exited", "error"):
                done.set()
        return on

    watch = StartupWatch(target, container=container, container_port=container_port,
                         accept_new_host_key=accept_new_host_key, on_lines=on_lines, on_status=on_status,
                         log_for=log_for)
    quiet: StartupWatch | None = None
    if ready_from is not None:
        def quiet_lines(batch: list[tuple[Any, str]]) -> None:
            state = quiet.reader.state if quiet is not None else None
            if state is None or last.get("quiet_said"):
                return
            if state.ready:
                last["quiet_said"] = True
                say("worker 0 says ready (the server runs on worker 0)", None)
                done.set()
            elif state.failure is not None and state.failure.fatal:
                last["quiet_said"] = True
                say(f"worker 0 failed: {state.failure.kind.value}: {scrub_text(state.failure.message)}", None)
                asyncio.get_running_loop().call_later(FAILURE_GRACE_S, done.set)

        quiet = StartupWatch(ready_from[0], container=container, container_port=container_port,
                             accept_new_host_key=ready_from[1], on_lines=quiet_lines, on_status=lambda _: None)
    for index, (worker_target, worker_accept) in enumerate(workers, start=1):
        others.append(StartupWatch(worker_target, container=container, container_port=container_port,
                                   accept_new_host_key=worker_accept, on_lines=worker_lines(index),
                                   on_status=worker_on_status(index),
                                   log_for=worker_log_for(index) if worker_log_for is not None else None))
    every = [watch, *others]
    refused: list[int] = []                  # workers whose host key was refused: not followed
    for index, each in enumerate([*every, quiet] if quiet is not None else every):
        try:
            await each.connect()
        except (HostKeyChanged, HostKeyUnknown) as exc:
            if each is quiet or index == 0:       # the worker whose log says ready: nothing to follow
                say(f"tpu-console: {exc}", index if each is not quiet else None)
                for opened in every if quiet is None else [*every, quiet]:
                    await opened.close()
                return 2, None
            say(f"tpu-console: {exc} Worker {index} is not followed; the others are.", index)
            refused.append(index)
            continue
        except RemoteError as exc:
            say(f"tpu-console: {exc}", index if each is not quiet else None)
            for opened in every if quiet is None else [*every, quiet]:
                await opened.close()
            return 2, None
        if each is quiet:
            say(f"connected to {each.target.label} (worker 0) for its readiness only", None)
        else:
            say(f"connected to {each.target.label}; following container {container}", index)
    followed = [other for index, other in enumerate(others, start=1) if index not in refused]
    if multi:
        say(f"following {len(followed) + 1} workers of {target.node_name or target.label}"
            + (f" (not worker {', '.join(map(str, refused))}: host key refused)" if refused else ""), None)
    try:
        task = asyncio.create_task(watch.follow())
        followers = [asyncio.create_task(other.follow()) for other in followed]
        if quiet is not None:
            followers.append(asyncio.create_task(quiet.follow()))
        waiter = asyncio.create_task(done.wait())
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        if followed and watch.state.ready:
            await _workers_caught_up(followed)
        if quiet is not None and quiet.reader.state.ready:
            await _workers_caught_up([watch])
        for each in every if quiet is None else [*every, quiet]:
            each.stop()
        waiter.cancel()
        await asyncio.gather(task, *followers, return_exceptions=True)
        for each in every:
            each.reader.close()
        state = watch.reader.state
        status = last["status"]
        slice_ready = False
        if quiet is not None:
            state = ready_from_worker_0(state, quiet.reader.state)
            slice_ready = state.ready and not watch.reader.state.ready
        failed_worker = min(worker_failed) if worker_failed else None
        exited_worker = next((w for w, st in sorted(worker_status.items()) if st.kind == "exited"), None)

        def summary() -> dict[str, Any]:
            if not multi:
                return summary_json(state)
            out = slice_summary([each.reader.state for each in every])    # a refused worker: no lines
            if refused:
                out["refused_workers"] = list(refused)
            return out

        for index, each in enumerate(every):
            if each.log is not None:
                say(f"full log of the launch: {each.log.path}", index)
            if each.log_problem is not None:
                say(f"warning: {each.log_problem}", index)
        if recorder is not None:
            await asyncio.gather(*observing.values())
            if status is not None and status.kind == "exited" and not state.ready:
                recorder.record_exit(state, status.exit_code)
            else:
                recorder.record(state, watch.reader_container_id)
        if state.ready and failed_worker is None and exited_worker is None:
            if probe:
                await _probe(quiet if slice_ready and quiet is not None else watch, container_port, say)
            result = summary()
            if slice_ready:
                result["ready_on_worker"] = 0        # this worker's log never says it: worker 0's did
            return 0, result
    finally:
        for each in every if quiet is None else [*every, quiet]:
            await each.close()
    quiet_failed = quiet is not None and quiet.reader.state.failure is not None and quiet.reader.state.failure.fatal
    if (state.failure is not None and state.failure.fatal) or failed_worker is not None or quiet_failed:
        return 1, summary()
    if status is not None and status.kind == "exited":
        say(f"container {container} exited with code {status.exit_code} before the log said it was ready")
        return 1, summary()
    if exited_worker is not None:
        code = worker_status[exited_worker].exit_code
        say(f"container {container} exited with code {code} before the log said it was ready", exited_worker)
        return 1, summary()
    return 2, (summary() if watch.lines_received else None)


async def _workers_caught_up(others: Sequence[Any], deadline_s: float = WORKER_GRACE_S) -> None:
    """Wait (at most ``deadline_s``) until every other worker's log has shown its KV-cache HBM line,
    so a slice's summary sums every worker (worker 0 may be ready before their lines arrived)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while loop.time() < end:
        if all(other.state.last_snapshot("kv_cache") is not None
               or (other.state.failure is not None and other.state.failure.fatal) for other in others):
            return
        await asyncio.sleep(0.05)


async def _probe(watch: Any, port: int, say: Callable[[str], None]) -> None:
    from remote.errors import RemoteError

    try:
        await watch.open_tunnel()
        models = await watch.probe()
        say(f"confirmed: /v1/models on port {port} serves {', '.join(models) or 'no models'}")
    except RemoteError as exc:
        say(f"warning: the log says ready but /v1/models did not answer through the tunnel: {exc}")
