"""``tpu-console ssh``: a shell (or one command) on a node's workers, as ``gcloud compute tpus tpu-vm ssh``.

Usage::

    tpu-console ssh NODE [--project P] [--zone Z] [--worker N|all] [--command CMD] [--internal-ip]
                    [--tunnel-through-iap] [--user NAME] [--dry-run]

NODE (``NAME``, ``ZONE/NAME`` or ``PROJECT/ZONE/NAME``) must be READY. The OpenSSH command line is
gcloud's, field for field (user, identity file, ``HostKeyAlias``, ``UserKnownHostsFile``, host; see
:mod:`console.flows.ssh_shell`); ``--dry-run`` prints it (one line per worker) and changes nothing,
else the worker's published host keys are pinned and ``ssh`` is run: in place of this process for
one worker, at once for ``--worker all`` (which needs ``--command``). A node without an external IP
is said so, and reached through gcloud's IAP tunnel (``[ssh] iap = "auto"``, the default) or its
internal IP (``iap = "never"``, ``--internal-ip``).

Exit codes: ssh's own when it ran (for several workers: the first that failed), 0 for a dry run,
1 the node is not READY, the TPU API did not answer or ssh could not be started, 2 bad input
(unknown or ambiguous NODE, a bad worker, bad config).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING

from console.verbs.common import config_or_exit
from remote.printable import printable

if TYPE_CHECKING:
    from console.config import Config
    from console.flows.ssh_shell import ShellPlan
    from console.verbs.common import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """Register the ``ssh`` verb."""
    from console.verbs.common import add_node_arguments, plain_help

    p = subparsers.add_parser("ssh", help="a shell or a command on a node's workers (gcloud's tpu-vm ssh)",
                              description=plain_help(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    add_node_arguments(p, worker_help=None)
    p.add_argument("--worker", default="0", metavar="N|all", help="worker index, or all (default 0)")
    p.add_argument("--command", metavar="CMD", help="run CMD instead of a shell (needed with --worker all)")
    p.add_argument("--internal-ip", action="store_true", help="connect to the workers' internal IPs")
    p.add_argument("--tunnel-through-iap", action="store_true",
                   help="connect through an IAP tunnel (gcloud compute start-iap-tunnel)")
    p.add_argument("--user", metavar="NAME", help="log in as NAME (default: OS Login's POSIX name, [ssh] user, "
                                                  "the local user)")
    p.add_argument("--dry-run", action="store_true", help="print the ssh command line(s); change nothing")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the verb; returns the exit code (see the module docstring)."""
    config = config_or_exit(args)
    if config is None:
        return 2
    planned = asyncio.run(_plan(args, config))
    if isinstance(planned, int):
        return planned
    for note in planned.notes:
        _say(note)
    if args.dry_run:
        for shell in planned.shells:
            print(printable(shell.command_line), flush=True)
        return 0
    return _run_ssh([list(shell.argv) for shell in planned.shells])


async def _plan(args: argparse.Namespace, config: Config) -> ShellPlan | int:
    """The :class:`~console.flows.ssh_shell.ShellPlan`, or the exit code after saying why not."""
    from console.flows.node_lookup import NodeLookupError, find_node, fleet_source_for, lookup_exit_code
    from console.flows.ssh_shell import NodeShell, ShellOptions
    from remote.errors import RemoteError
    from remote.ssh import SshFailure

    options = ShellOptions(worker=args.worker, command=args.command, internal_ip=args.internal_ip,
                           tunnel_through_iap=args.tunnel_through_iap, user=args.user)
    try:
        with fleet_source_for(config, project=args.project, zone=args.zone) as source:
            node = await find_node(source, args.node, project=args.project, zone=args.zone, require_ready=True)
            return await NodeShell(config, source).plan(node, options, dry_run=args.dry_run)
    except NodeLookupError as exc:
        _say(str(exc))
        return lookup_exit_code(exc)
    except SshFailure as exc:
        _say(str(exc))
        return 2 if exc.title in ("No such worker", "Bad arguments", "Bad name") else 1
    except RemoteError as exc:
        _say(str(exc))
        return 1


def _run_ssh(argvs: list[list[str]]) -> int:
    """Exec ssh for one worker; run it for several at once and return the first failure's code."""
    import subprocess

    try:
        if len(argvs) == 1:
            sys.stdout.flush()
            sys.stderr.flush()
            os.execvp(argvs[0][0], argvs[0])
        children = [subprocess.Popen(argv, stdin=subprocess.DEVNULL) for argv in argvs]
    except OSError as exc:
        _say(f"cannot run {argvs[0][0]}: {exc.strerror or exc}")
        return 1
    codes = [child.wait() for child in children]
    return next((code for code in codes if code != 0), 0)


def _say(sentence: str) -> None:
    print(f"tpu-console: {printable(sentence)}", file=sys.stderr, flush=True)
