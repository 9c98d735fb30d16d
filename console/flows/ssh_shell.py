"""A shell (or one command) on a node's workers, opened as ``gcloud compute tpus tpu-vm ssh`` opens it.

The use case behind ``tpu-console ssh`` (one typed object, :class:`NodeShell`, that a screen can
drive too). It works out, per worker, the same OpenSSH command line gcloud runs
(``googlecloudsdk/command_lib/compute/tpus/tpu_vm/ssh.py``, SDK 528): the identity file
(``[ssh] private_key``, gcloud's ``~/.ssh/google_compute_engine``), ``HostKeyAlias`` (gcloud's
``tpu.<id>-<worker>[-<suffix>]``), ``UserKnownHostsFile`` (``[ssh] known_hosts``), the user (OS
Login's POSIX name, ``--user``, ``[ssh] user`` or the local user: :mod:`console.flows.ssh_login`), the
host (external IP, or internal with ``--internal-ip`` or when there is none) and, through IAP, gcloud's
own ``start-iap-tunnel`` as the ProxyCommand. Its options are gcloud's (``CheckHostIP=no``,
``HashKnownHosts=no``, ``IdentitiesOnly=yes``); ``StrictHostKeyChecking`` is ``yes`` once the alias
is recorded (the worker's published host keys are pinned first, as every connection of the console
does) and ``accept-new`` otherwise (gcloud says ``no``, which also lets a changed key through).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from console.flows.ssh_login import LoginResolver, SshLogin
from console.flows.ssh_target import guest_attributes, host_keys_of, pinned_target
from remote.models import Node
from remote.ssh import SshFailure, SshTarget, has_known_host
from remote.ssh.connect import expand_proxy_words, proxy_values

if TYPE_CHECKING:
    from console.config import Config
    from console.services import FleetLister


@dataclass(frozen=True)
class ShellOptions:
    """What ``tpu-console ssh`` was asked for.

    Attributes:
        worker: ``"0"``.. or ``"all"`` (gcloud's ``--worker``).
        command: the remote command (``--command``), or ``None`` for an interactive shell.
        internal_ip: connect to the internal IP (``--internal-ip``).
        tunnel_through_iap: connect through an IAP tunnel (``--tunnel-through-iap``).
        user: ``--user``, or ``None``.
    """

    worker: str = "0"
    command: str | None = None
    internal_ip: bool = False
    tunnel_through_iap: bool = False
    user: str | None = None


@dataclass(frozen=True)
class WorkerShell:
    """One worker's connection: its target and the OpenSSH argv that opens it."""

    worker: int
    target: SshTarget
    argv: tuple[str, ...]

    @property
    def command_line(self) -> str:
        """The argv as one shell line (``shlex.join``)."""
        return shlex.join(self.argv)


@dataclass(frozen=True)
class ShellPlan:
    """The connections to open, and what the operator should hear first.

    Attributes:
        node: the node.
        login: who logs in, and why (:class:`console.flows.ssh_login.SshLogin`).
        shells: one per worker, in worker order.
        notes: sentences (no external IP, IAP, OS Login notes), each once.
    """

    node: Node
    login: SshLogin
    shells: tuple[WorkerShell, ...]
    notes: tuple[str, ...]


def workers_of(node: Node, worker: str) -> list[int]:
    """The worker indexes ``--worker`` names (``all`` or one index), in order.

    Raises:
        SshFailure: not a worker of the node.
    """
    count = len(node.workers)
    if worker == "all":
        return list(range(count))
    if worker.isdigit() and int(worker) < count:
        return [int(worker)]
    raise SshFailure(f"Node {node.name} has {count} worker(s) (0..{max(count - 1, 0)}); --worker {worker!r} is "
                     f"not one of them (a number, or all).", title="No such worker")


def openssh_argv(target: SshTarget, *, command: str | None, strict: str, program: str = "ssh") -> list[str]:
    """The OpenSSH command line for ``target``, option for option as gcloud's TPU ssh builds it.

    ``-t`` for a shell, ``-T`` with ``command`` (after ``--``); the ProxyCommand's own placeholders
    are expanded here, ``%h``/``%p``/``%%`` are left to OpenSSH.

    Raises:
        SshFailure: a value that would reach the proxy command is not a valid name.
    """
    argv = [program, "-T" if command else "-t"]
    if target.private_key is not None:
        argv += ["-i", str(target.private_key)]
    argv += ["-o", "CheckHostIP=no", "-o", "HashKnownHosts=no", "-o", f"HostKeyAlias={target.known_hosts_name}",
             "-o", "IdentitiesOnly=yes", "-o", f"StrictHostKeyChecking={strict}",
             "-o", f"UserKnownHostsFile={target.known_hosts}"]
    if target.proxy_command:
        words = shlex.split(target.proxy_command)
        used = "".join(w for w in "nwzPi" if f"%{w}" in target.proxy_command)
        expanded = expand_proxy_words(words, proxy_values(target, used), keep="hp%")
        argv += ["-o", f"ProxyCommand {shlex.join(expanded)}", "-o", "ProxyUseFdpass=no"]
    if target.port != 22:
        argv += ["-p", str(target.port)]
    argv.append(f"{target.user}@{target.host}")
    if command:
        argv += ["--", *shlex.split(command)]
    return argv


class NodeShell:
    """The ``ssh`` use case: plan the connections to a node's workers (and pin their host keys).

    Args:
        config: the console's config (``ssh``, ``os_login``).
        fleet: the fleet source (guest attributes), or ``None``.
        program: the OpenSSH client to name (``ssh``).
        logins: the resolver of the user (the console's ``Services.logins``), or ``None``: one per
            :meth:`plan`, closed after it (the verb's one run).
    """

    def __init__(self, config: Config, fleet: FleetLister | None, *, program: str = "ssh",
                 logins: LoginResolver | None = None) -> None:
        self.config = config
        self.fleet = fleet
        self.program = program
        self.logins = logins

    async def plan(self, node: Node, options: ShellOptions, *, dry_run: bool = False) -> ShellPlan:
        """The connections to ``node``'s workers.

        A dry run writes nothing: no host key pinned, no key imported into an OS Login profile.

        Raises:
            SshFailure: no such worker, several workers without a command, ``--internal-ip`` with
                ``--tunnel-through-iap``, IAP without an instance name, a bad name or address.
            OsLoginError: an OS Login node whose user cannot be worked out.
        """
        chosen = workers_of(node, options.worker)
        if len(chosen) > 1 and not options.command:
            raise SshFailure("Several workers need --command (an interactive shell opens on one worker).",
                             title="Bad arguments")
        if options.internal_ip and options.tunnel_through_iap:
            raise SshFailure("--internal-ip and --tunnel-through-iap exclude each other.", title="Bad arguments")
        resolver = self.logins or LoginResolver(self.config)
        try:
            login = await resolver.login(node, user=options.user, import_key=not dry_run)
        finally:
            if resolver is not self.logins:
                resolver.close()
        shells, notes = [], list(login.notes)
        for worker in chosen:
            attributes = await guest_attributes(self.fleet, node, worker)
            target = pinned_target(node, self.config.ssh, worker, attributes, login=login, pin=not dry_run,
                                   internal_ip=options.internal_ip,
                                   tunnel_through_iap=options.tunnel_through_iap)
            known = has_known_host(target.known_hosts, target.known_hosts_name)
            strict = "yes" if known or host_keys_of(attributes) else "accept-new"
            shells.append(WorkerShell(worker, target, tuple(openssh_argv(target, command=options.command,
                                                                         strict=strict, program=self.program))))
            if target.route and target.route not in notes:
                notes.append(target.route)
        return ShellPlan(node, login, tuple(shells), tuple(notes))
