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

import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from console.flows.ssh_login import LoginResolver, SshLogin
from remote.errors import RemoteError
from remote.printable import printable
from remote.ssh import SshFailure, SshTarget, has_known_host, pin_host_keys, target_for
from remote.ssh.connect import HOST_KEY_TYPES

if TYPE_CHECKING:
    from console.config import Config, SshConfig
    from console.services import FleetLister
    from remote.models import Node

def choose_target(node: Node, ssh: SshConfig, worker: int = 0, host_key_suffix: str | None = None, *,
                  login: SshLogin | None = None, route: Route | None = None) -> SshTarget:
    """The :class:`SshTarget` for ``worker`` of ``node``, with gcloud's host-key alias.

    Args:
        node: a :class:`remote.models.Node`.
        ssh: the config's ``[ssh]`` section (see :func:`remote.ssh.target_for`).
        worker: worker index.
        host_key_suffix: the worker's ``ssh-ed25519`` guest attribute, or ``None``.
        login: the user to log in as (:mod:`console.flows.ssh_login`), or ``None`` for ``ssh.user``.
        route: how to reach the worker (:func:`route_for`), or ``None`` for its external IP (else internal).

    Raises:
        SshFailure: the worker does not exist, has no usable address, or the node id is unusable.
    """
    who: dict[str, Any] = {"user": login.user, "os_login": login.verdict.enabled} if login else {}
    if route is not None:
        who.update(internal_ip=route.internal_ip, proxy_command=route.proxy_command, instance=route.instance,
                   route=route.note)
    target = target_for(node, ssh, worker=worker, host_key_suffix=host_key_suffix, **who)
    if host_key_suffix and not has_known_host(target.known_hosts, target.known_hosts_name):
        plain = target_for(node, ssh, worker=worker, **who)
        if has_known_host(plain.known_hosts, plain.known_hosts_name):
            return plain
    return target


async def guest_attributes(fleet: FleetLister | None, node: Node, worker: int = 0) -> dict[str, str]:
    """The worker's guest attributes ``{key: value}`` from ``fleet.get_guest_attributes`` (its host
    keys, its ``hostname``: the GCE instance name); ``{}`` without a fleet or when the call fails
    (gcloud goes on too)."""
    getter = getattr(fleet, "get_guest_attributes", None)
    if getter is None:
        return {}
    try:
        attributes = await getter(node, worker)
    except RemoteError:
        return {}
    return {k: v for k, v in attributes.items() if isinstance(k, str) and isinstance(v, str)}


def host_keys_of(attributes: dict[str, str]) -> dict[str, str]:
    """The published host keys among guest attributes: ``{key type: base64 body}``."""
    return {k: v for k, v in attributes.items() if k in HOST_KEY_TYPES}


async def guest_host_keys(fleet: FleetLister | None, node: Node, worker: int = 0) -> dict[str, str]:
    """The worker's published host keys, ``{key type: base64 body}`` (``ssh-ed25519``, ``ssh-rsa``,
    ``ecdsa-sha2-nistp256``); ``{}`` when unreadable (see :func:`guest_attributes`)."""
    return host_keys_of(await guest_attributes(fleet, node, worker))


@dataclass(frozen=True)
class Route:
    """How one worker is reached.

    Attributes:
        kind: ``"external"``, ``"internal"``, ``"iap"`` (gcloud's IAP tunnel), ``"override"``
            (``[ssh.hosts]``) or ``"proxy"`` (``[ssh] proxy_command``).
        internal_ip: connect to the internal address.
        proxy_command: the proxy command (IAP's), or ``None`` for the config's.
        instance: the worker's GCE instance name (IAP names it), or ``""``.
        note: one sentence for the operator when the node has no external IP, or ``""``.
    """

    kind: str
    internal_ip: bool = False
    proxy_command: str | None = None
    instance: str = ""
    note: str = ""


def iap_proxy_command(ssh: SshConfig) -> str:
    """gcloud's IAP ProxyCommand, as ``gcloud compute tpus tpu-vm ssh --tunnel-through-iap`` builds it:
    ``gcloud compute start-iap-tunnel %i %p --listen-on-stdin --project=%P --zone=%z --verbosity=warning``
    (plus ``--iap-tunnel-url-override=URL`` when ``[ssh] iap_tunnel_url`` names one)."""
    words = [ssh.gcloud or "gcloud", "compute", "start-iap-tunnel", "%i", "%p", "--listen-on-stdin",
             "--project=%P", "--zone=%z", "--verbosity=warning"]
    if getattr(ssh, "iap_tunnel_url", ""):
        words.append(f"--iap-tunnel-url-override={ssh.iap_tunnel_url}")
    return shlex.join(words)


def route_for(node: Node, ssh: SshConfig, worker: int, attributes: dict[str, str], *, internal_ip: bool = False,
              tunnel_through_iap: bool = False) -> Route:
    """How to reach ``worker`` of ``node``: ``[ssh.hosts]`` first, then IAP (``tunnel_through_iap``,
    ``[ssh] iap = "always"``, or ``"auto"`` for a node without an external IP and no proxy command
    of its own), else the internal IP (``internal_ip``, or no external one: said) or the external one.

    Raises:
        SshFailure: IAP is asked for but the worker's guest attributes give no instance name
            (gcloud: "Currently unable to connect to this TPU using IAP tunneling").
    """
    hosts = getattr(ssh, "hosts", None) or {}
    if f"{node.name}/{worker}" in hosts or node.name in hosts:
        return Route("override")
    endpoint = node.workers[worker] if 0 <= worker < len(node.workers) else None
    private = endpoint is not None and bool(endpoint.internal_ip) and not endpoint.external_ip
    mode = getattr(ssh, "iap", "auto")
    own_proxy = bool((getattr(ssh, "proxy_command", "") or "").strip())
    network = ((node.raw or {}).get("networkConfig") or {}) if hasattr(node, "raw") else {}
    where = ", ".join(f"{k} {printable(str(network[k]).rsplit('/', 1)[-1])}" for k in ("network", "subnetwork")
                      if network.get(k))
    lacks = f"Node {node.name} has no external IP" + (f" ({where})" if where else "")
    if tunnel_through_iap or mode == "always" or (mode == "auto" and private and not internal_ip and not own_proxy):
        instance = attributes.get("hostname", "")
        if not instance:
            raise SshFailure(f"Currently unable to connect to worker {worker} of node {node.name} through an IAP "
                             f"tunnel: its guest attributes give no instance name (hostname); check that the "
                             f"node is READY and HEALTHY.", title="IAP unavailable")
        note = (f"{lacks}: connecting through an IAP tunnel (gcloud compute start-iap-tunnel {instance}); it needs "
                f"roles/iap.tunnelResourceAccessor and a firewall rule letting 35.235.240.0/20 reach port 22."
                if private else "")
        return Route("iap", proxy_command=iap_proxy_command(ssh), instance=instance, note=note)
    if own_proxy:
        return Route("proxy", internal_ip=internal_ip, instance=attributes.get("hostname", ""))
    if internal_ip or private:
        note = (f"{lacks}: its internal IP is reachable only from inside its VPC network (a VM there, a VPN); "
                f"[ssh] iap = \"auto\" or --tunnel-through-iap goes through IAP instead." if private else "")
        return Route("internal", internal_ip=True, note=note)
    return Route("external")


async def host_key_suffix(fleet: FleetLister | None, node: Node, worker: int = 0) -> str | None:
    """The worker's ``ssh-ed25519`` guest attribute (see :func:`guest_host_keys`), or ``None``."""
    return (await guest_host_keys(fleet, node, worker)).get("ssh-ed25519")


def pinned_target(node: Node, ssh: SshConfig, worker: int, attributes: dict[str, str], *,
                  login: SshLogin | None = None, pin: bool = True, internal_ip: bool = False,
                  tunnel_through_iap: bool = False) -> SshTarget:
    """:func:`choose_target` with the worker's guest ``attributes`` (their ``ssh-ed25519`` suffixes
    the alias; the route is :func:`route_for`'s), and the published host keys pinned under its alias
    (``pin``; nothing is written when the alias already has an entry).

    Raises:
        SshFailure: as :func:`choose_target` and :func:`route_for`, or the known-hosts file cannot be read.
    """
    host_keys = host_keys_of(attributes)
    route = route_for(node, ssh, worker, attributes, internal_ip=internal_ip, tunnel_through_iap=tunnel_through_iap)
    target = choose_target(node, ssh, worker, host_keys.get("ssh-ed25519"), login=login, route=route)
    if pin and host_keys:
        pin_host_keys(target.known_hosts, target.known_hosts_name, host_keys)
    return target


async def login_target(node: Node, config: Config, worker: int = 0, fleet: FleetLister | None = None, *,
                       user: str | None = None, pin: bool = True,
                       logins: LoginResolver | None = None) -> tuple[SshTarget, SshLogin]:
    """``(target, login)``: the user worked out (:class:`console.flows.ssh_login.LoginResolver`:
    ``--user``, ``[ssh] user``, OS Login, local user) and :func:`pinned_target` with the host keys
    read through ``fleet`` (:func:`guest_host_keys`), pinned unless ``pin`` is false (a dry run).

    Args:
        node: a :class:`remote.models.Node`.
        config: the console's config (``ssh``, ``os_login``).
        worker: worker index.
        fleet: the fleet source (guest attributes), or ``None``.
        user: ``--user``, or ``None``.
        logins: the resolver whose caches to share (the console's ``Services.logins``, a verb's own),
            or ``None``: one for this call, closed after it.

    Raises:
        SshFailure: as :func:`choose_target`. OsLoginError: an OS Login node whose user cannot be
            worked out (see :meth:`console.flows.ssh_login.LoginResolver.login`).
    """
    own = logins is None
    resolver = LoginResolver(config) if logins is None else logins
    try:
        login = await resolver.login(node, user=user, import_key=pin)
    finally:
        if own:
            resolver.close()
    attributes = await guest_attributes(fleet, node, worker)
    return pinned_target(node, config.ssh, worker, attributes, login=login, pin=pin), login


async def resolve_target(node: Node, config: Config, worker: int = 0, fleet: FleetLister | None = None, *,
                         logins: LoginResolver | None = None) -> SshTarget:
    """The target of :func:`login_target` (for callers that show only the target).

    Raises:
        SshFailure, OsLoginError: as :func:`login_target`.
    """
    return (await login_target(node, config, worker, fleet, logins=logins))[0]


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
