"""Where every SSH connection to a node goes, and under which known-hosts name: one resolution.

The startup view, ``watch``, ``swap`` (verb and screen, and the rollback screen), ``bench``
(verb and screen) all resolve their :class:`~remote.ssh.SshTarget` here, so they all look up
the same known-hosts entry and reach the same verdict (known, unknown, changed) for a node.

gcloud records a TPU worker's host key under ``tpu.<id>-<worker>-<suffix>`` when the guest
attributes give the worker's ``ssh-ed25519`` key (the suffix is its last 6 characters), else
under ``tpu.<id>-<worker>``. The suffixed alias is used unless the known-hosts file only
records the plain one (older gcloud, the sandbox).

Host keys are pinned as gcloud pins them: a worker's ``hostkeys`` guest attributes (its real
host keys, which TPU VMs publish) are written into the known-hosts file under the alias before
the first connection (:func:`remote.ssh.pin_host_keys`, only when nothing is recorded under
that alias yet), so the first connection is verified, not trusted on first use.

An unknown host key (a VM that published none) is asked about (:func:`remote.ssh.connect`'s ``accept_new_host_key``);
:func:`accept_new_host_key` is OpenSSH's ``StrictHostKeyChecking=accept-new`` for
non-interactive first use: an unknown key is recorded without asking, a changed one is still
refused (``connect`` raises ``HostKeyChanged`` before any callback is asked).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from console.flows.ssh_login import SshLogin, resolver_for
from remote.errors import RemoteError
from remote.ssh import SshTarget, has_known_host, pin_host_keys, target_for
from remote.ssh.connect import HOST_KEY_TYPES

if TYPE_CHECKING:
    from console.config import Config, SshConfig
    from console.services import FleetLister
    from remote.models import Node


def choose_target(node: Node, ssh: SshConfig, worker: int = 0, host_key_suffix: str | None = None, *,
                  login: SshLogin | None = None) -> SshTarget:
    """The :class:`SshTarget` for ``worker`` of ``node``, with gcloud's host-key alias.

    Args:
        node: a :class:`remote.models.Node`.
        ssh: the config's ``[ssh]`` section (see :func:`remote.ssh.target_for`).
        worker: worker index.
        host_key_suffix: the worker's ``ssh-ed25519`` guest attribute, or ``None``.
        login: the user to log in as (:mod:`console.flows.ssh_login`), or ``None`` for ``ssh.user``.

    Raises:
        SshFailure: the worker does not exist, has no usable address, or the node id is unusable.
    """
    who: dict[str, Any] = {"user": login.user, "os_login": login.verdict.enabled} if login else {}
    target = target_for(node, ssh, worker=worker, host_key_suffix=host_key_suffix, **who)
    if host_key_suffix and not has_known_host(target.known_hosts, target.known_hosts_name):
        plain = target_for(node, ssh, worker=worker, **who)
        if has_known_host(plain.known_hosts, plain.known_hosts_name):
            return plain
    return target


async def guest_host_keys(fleet: FleetLister | None, node: Node, worker: int = 0) -> dict[str, str]:
    """The worker's published host keys, ``{key type: base64 body}`` (``ssh-ed25519``, ``ssh-rsa``,
    ``ecdsa-sha2-nistp256``), from ``fleet.get_guest_attributes``.

    A fleet source without guest attributes, or a failed call, gives ``{}`` (gcloud goes on too).
    """
    getter = getattr(fleet, "get_guest_attributes", None)
    if getter is None:
        return {}
    try:
        attributes = await getter(node, worker)
    except RemoteError:
        return {}
    return {k: v for k, v in attributes.items() if k in HOST_KEY_TYPES and isinstance(v, str)}


async def host_key_suffix(fleet: FleetLister | None, node: Node, worker: int = 0) -> str | None:
    """The worker's ``ssh-ed25519`` guest attribute (see :func:`guest_host_keys`), or ``None``."""
    return (await guest_host_keys(fleet, node, worker)).get("ssh-ed25519")


def pinned_target(node: Node, ssh: SshConfig, worker: int, host_keys: dict[str, str], *,
                  login: SshLogin | None = None, pin: bool = True) -> SshTarget:
    """:func:`choose_target` with the suffix of ``host_keys``, and those keys pinned under its alias
    (``pin``; nothing is written when the alias already has an entry).

    Raises:
        SshFailure: as :func:`choose_target`, or the known-hosts file cannot be read.
    """
    target = choose_target(node, ssh, worker, host_keys.get("ssh-ed25519"), login=login)
    if pin and host_keys:
        pin_host_keys(target.known_hosts, target.known_hosts_name, host_keys)
    return target


async def login_target(node: Node, config: Config, worker: int = 0, fleet: FleetLister | None = None, *,
                       user: str | None = None, pin: bool = True) -> tuple[SshTarget, SshLogin]:
    """``(target, login)``: the user worked out (:func:`console.flows.ssh_login.resolver_for`:
    ``--user``, ``[ssh] user``, OS Login, local user) and :func:`pinned_target` with the host keys
    read through ``fleet`` (:func:`guest_host_keys`), pinned unless ``pin`` is false (a dry run).

    Args:
        node: a :class:`remote.models.Node`.
        config: the console's config (``ssh``, ``os_login``).
        worker: worker index.
        fleet: the fleet source (guest attributes), or ``None``.
        user: ``--user``, or ``None``.

    Raises:
        SshFailure: as :func:`choose_target`. OsLoginError: an OS Login node whose user cannot be
            worked out (see :meth:`console.flows.ssh_login.LoginResolver.login`).
    """
    login = await resolver_for(config).login(node, user=user)
    keys = await guest_host_keys(fleet, node, worker)
    return pinned_target(node, config.ssh, worker, keys, login=login, pin=pin), login


async def resolve_target(node: Node, config: Config, worker: int = 0, fleet: FleetLister | None = None) -> SshTarget:
    """The target of :func:`login_target` (for callers that show only the target).

    Raises:
        SshFailure, OsLoginError: as :func:`login_target`.
    """
    return (await login_target(node, config, worker, fleet))[0]


async def ready_node_target(config: Config, spec: str, *, project: str | None = None, zone: str | None = None,
                            worker: int = 0) -> tuple[Node, SshTarget]:
    """``(node, the worker's SSH target)`` for a NODE argument (``NAME``, ``ZONE/NAME`` or
    ``PROJECT/ZONE/NAME``, narrowed by ``--project``/``--zone``) that must be READY: the lookup of
    ``bench``, ``metrics`` and ``forward``.

    Raises:
        NodeLookupError: unknown, ambiguous or not READY (see
            :func:`console.flows.node_lookup.lookup_exit_code`).
        RemoteError: the TPU API failed.
    """
    from console.flows.node_lookup import find_node, fleet_source_for

    with fleet_source_for(config, project=project, zone=zone) as source:
        node = await find_node(source, spec, project=project, zone=zone, require_ready=True)
        return node, await resolve_target(node, config, worker, source)


def accept_new_host_key(target: SshTarget, on_record: Callable[[str], None] | None = None,
                        ) -> Callable[[str], Awaitable[bool]]:
    """OpenSSH's ``accept-new`` as a host-key callback: accepts every *unknown* key of ``target``.

    ``remote.ssh.connect`` records the accepted key under ``target.known_hosts_name`` in
    ``target.known_hosts``; a key that differs from a recorded one never reaches this callback
    (``HostKeyChanged`` is raised first). ``on_record`` gets one sentence naming the fingerprint,
    the alias and the file.
    """
    async def accept(fingerprint: str) -> bool:
        if on_record is not None:
            on_record(f"recording the new host key {fingerprint} of {target.label} as "
                      f"{target.known_hosts_name} in {target.known_hosts} (accept-new)")
        return True

    return accept
