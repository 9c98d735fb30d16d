"""SSH to TPU VM workers the way ``gcloud compute tpus tpu-vm ssh`` does, with asyncssh.

Conventions copied from gcloud (see ``research/gcp-tpu-api.md`` §4): the private key
``~/.ssh/google_compute_engine``, the known-hosts file ``~/.ssh/google_compute_known_hosts``,
the host-key alias ``tpu.<node_id>-<worker>[-<last 6 chars of the ed25519 host key>]``,
the external IP (internal when there is none), no agent (``IdentitiesOnly=yes``), keepalives.

Host keys are always verified. An unknown key is offered to a caller-supplied callback
(trust on first use, like OpenSSH's ``StrictHostKeyChecking=ask``) before anything is
authenticated; a changed key refuses to connect.

Every failure is an :class:`SshFailure` (an :class:`~remote.errors.SshError`) whose message is
one sentence an operator can act on; ``retryable`` says whether trying again may help.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import asyncssh

from remote.models import Node
from remote.ssh.errors import (
    HostKeyChanged,
    HostKeyUnknown,
    SshAuthRefused,
    SshFailure,
    SshTimeout,
    SshUnreachable,
)

_T = TypeVar("_T")

#: Seconds between keepalive requests, and how many may go unanswered (45 s to notice a dead peer).
KEEPALIVE_INTERVAL_S = 15.0
KEEPALIVE_COUNT_MAX = 3


@dataclass(frozen=True)
class SshTarget:
    """Everything needed to open one SSH connection (plain values, no config objects).

    Attributes:
        host: address to connect to (IP or name).
        port: TCP port (22 on real nodes).
        user: remote user name.
        private_key: private key file, or ``None`` when ``client_keys`` is used.
        known_hosts: known-hosts file (read, and appended to when a new key is accepted).
        host_key_alias: name the host key is recorded under (gcloud's ``tpu.<id>-<w>``), or
            ``None`` to use ``host`` (``[host]:port`` when the port is not 22).
        proxy_command: command whose stdin/stdout carry the connection (IAP), or ``None``.
        connect_timeout_s: seconds before a connect attempt gives up.
        client_keys: in-memory private keys (tests, sandbox); used instead of ``private_key``.
        node_name: node name for messages, or ``None``.
        os_login: the node accepts only OS Login users (``enable-oslogin``): a refused key is
            explained with OS Login's roles, not the ``ssh-keys`` metadata.
        worker, zone, project: where the worker is (the proxy command's ``%w``, ``%z``, ``%P``).
        instance: the worker's GCE instance name (its ``hostname`` guest attribute: what IAP's
            ``start-iap-tunnel`` names), or ``""`` (the proxy command's ``%i``).
        route: how the worker is reached, said when it cannot be (``the node has no external IP;
            its internal IP is reachable only from its VPC network ...``), or ``""``.
    """

    host: str
    port: int
    user: str
    private_key: Path | None
    known_hosts: Path
    host_key_alias: str | None
    proxy_command: str | None = None
    connect_timeout_s: float = 15.0
    client_keys: tuple[Any, ...] = field(default=(), compare=False)
    node_name: str | None = None
    os_login: bool = False
    worker: int = 0
    zone: str = ""
    project: str = ""
    instance: str = ""
    route: str = ""

    @property
    def known_hosts_name(self) -> str:
        """The name this target's host key is recorded under in the known-hosts file."""
        if self.host_key_alias:
            return self.host_key_alias
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    @property
    def label(self) -> str:
        """Short description for messages: ``node vllm-a (10.0.0.2:22)``."""
        where = f"{self.host}:{self.port}"
        return f"node {self.node_name} ({where})" if self.node_name else where


#: What the TPU API may give as a node id (digits on real nodes): no spaces, no known-hosts patterns.
_NODE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
#: The tail of a base64 public key body (the ``ssh-ed25519`` guest attribute).
_KEY_SUFFIX = re.compile(r"[A-Za-z0-9+/]{6}")
#: One DNS label (RFC 1123): what a host name from the API may be made of.
_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def host_key_alias(node_id: str | None, worker: int, host_key_suffix: str | None = None) -> str | None:
    """gcloud's host-key alias ``tpu.<node_id>-<worker>[-<suffix>]``, or ``None`` without an id.

    ``host_key_suffix`` is the last 6 characters of the worker's ``ssh-ed25519`` guest
    attribute (gcloud adds it when the guest attributes are readable); a value that is not
    base64 (it comes from the API) is ignored, so the plain alias is used.

    Raises:
        SshFailure: ``node_id`` is not a plain id (it would be a pattern or several names in
            the known-hosts file).
    """
    if not node_id:
        return None
    if not _NODE_ID.fullmatch(node_id):
        raise SshFailure(f"The TPU API gave the node id {node_id!r}, which is not a plain id; "
                         f"refusing to use it as a host-key alias.", title="Bad node id")
    alias = f"tpu.{node_id}-{worker}"
    suffix = (host_key_suffix or "").strip().rstrip("=")[-6:]
    return f"{alias}-{suffix}" if _KEY_SUFFIX.fullmatch(suffix) else alias


def is_host_address(host: str) -> bool:
    """True when ``host`` is an IPv4/IPv6 address or an RFC 1123 host name (nothing else).

    Used on addresses from the TPU API before they reach ``asyncssh`` or ``%h`` in a proxy command.
    """
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    labels = host.removesuffix(".").split(".")
    return 0 < len(host) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in labels)


def target_for(node: Node, ssh: Any, worker: int = 0, host_key_suffix: str | None = None, *,
               user: str | None = None, os_login: bool = False, internal_ip: bool = False,
               proxy_command: str | None = None, instance: str = "", route: str = "") -> SshTarget:
    """Build the :class:`SshTarget` for ``worker`` of ``node``.

    Args:
        node: the node (its ``workers`` give the addresses, ``node_id`` the alias).
        ssh: an object with the attributes of ``console.config.SshConfig`` (``user``,
            ``private_key``, ``known_hosts``, ``proxy_command``, ``port``,
            ``connect_timeout_s``, ``hosts``).
        worker: worker index (0 for single-host nodes).
        host_key_suffix: see :func:`host_key_alias`.
        user: the remote user name (the OS Login POSIX name, ``--user``), or ``None`` for ``ssh.user``.
        os_login: see :attr:`SshTarget.os_login`.
        internal_ip: the worker's internal (VPC) address even when it has an external one
            (gcloud's ``--internal-ip``).
        proxy_command: the proxy command to use instead of ``ssh.proxy_command`` (an IAP tunnel).
        instance, route: see :attr:`SshTarget.instance`, :attr:`SshTarget.route`.

    Raises:
        SshFailure: the worker does not exist, has no address yet, or the API's address or
            node id is not one (see :func:`is_host_address`, :func:`host_key_alias`).
    """
    hosts = getattr(ssh, "hosts", None) or {}
    # ``NODE/W`` names one worker's host:port; ``NODE`` is worker 0's, and every worker's when no
    # worker has its own (one bastion in front of the slice)
    override = hosts.get(f"{node.name}/{worker}") or (
        hosts.get(node.name) if worker == 0 or not any(k.startswith(f"{node.name}/") for k in hosts) else None)
    port = int(getattr(ssh, "port", 22))
    if worker < 0 or worker >= len(node.workers):     # the API's workers, with or without a host override
        count = len(node.workers)
        raise SshFailure(
            f"Node {node.name} has {count} worker(s)"
            + (f" (0..{count - 1})" if count else " listed (it may still be creating)")
            + f"; worker {worker} does not exist.", title="No such worker")
    if override:
        host, _, port_text = override.rpartition(":")
        port = int(port_text)
    else:
        endpoint = node.workers[worker]
        host = (endpoint.internal_ip if internal_ip else endpoint.external_ip or endpoint.internal_ip) or ""
        if not host:
            raise SshFailure(f"Worker {worker} of node {node.name} has no IP address yet "
                             f"(state {node.state}).", title="No address")
        if not is_host_address(host):
            raise SshFailure(f"The TPU API gave worker {worker} of node {node.name} the address {host!r}, "
                             f"which is not an IP address or host name; refusing to connect.",
                             title="Bad address")
    proxy = (proxy_command if proxy_command is not None else getattr(ssh, "proxy_command", "") or "").strip() or None
    private_key = getattr(ssh, "private_key", None)
    return SshTarget(
        host=host, port=port, user=user or ssh.user,
        private_key=Path(private_key).expanduser() if private_key else None,
        known_hosts=Path(ssh.known_hosts).expanduser(),
        host_key_alias=host_key_alias(node.node_id, worker, host_key_suffix),
        proxy_command=proxy, connect_timeout_s=float(getattr(ssh, "connect_timeout_s", 15.0)),
        node_name=node.name, os_login=os_login, worker=worker, zone=node.zone, project=node.project,
        instance=instance, route=route,
    )


# --- known hosts ------------------------------------------------------------------------


def known_host_entries(path: Path, name: str) -> list[tuple[int, list[asyncssh.SSHKey]]]:
    """``(line number, host keys)`` for each line of ``path`` that matches ``name``.

    Raises:
        SshFailure: the file exists but cannot be read.

    Unparseable lines are ignored (OpenSSH skips them too); a missing file has no entries.
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SshFailure(f"Cannot read the known-hosts file {path}: {exc.strerror}.",
                         title="Known hosts unreadable") from None
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            matched = asyncssh.import_known_hosts(stripped + "\n").match(name, "", None)
        except (ValueError, asyncssh.KeyImportError):
            continue
        if matched[0]:
            entries.append((number, list(matched[0])))
    return entries


def has_known_host(path: Path, name: str) -> bool:
    """True when the known-hosts file has a key recorded for ``name`` (alias or host)."""
    return bool(known_host_entries(path, name))


def append_known_host(path: Path, name: str, key: asyncssh.SSHKey) -> str:
    """Append ``<name> <key>`` to the known-hosts file (created 0600, parent 0700); returns the line."""
    line = f"{name} {' '.join(key.export_public_key('openssh').decode().split()[:2])}"
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    prefix = ""
    if path.exists() and path.stat().st_size:
        with path.open("rb") as handle:
            handle.seek(-1, os.SEEK_END)
            prefix = "" if handle.read(1) == b"\n" else "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        handle.write(f"{prefix}{line}\n")
    return line


#: Host key types gcloud reads from a VM's ``hostkeys/`` guest attributes (its ``SUPPORTED_HOSTKEY_TYPES``).
HOST_KEY_TYPES = ("ssh-rsa", "ssh-ed25519", "ecdsa-sha2-nistp256")
#: Host keys read from one worker's guest attributes at most (a bound on outside data).
MAX_HOST_KEYS = 8


def pin_host_keys(path: Path, name: str, host_keys: Mapping[str, str]) -> list[str]:
    """Record a worker's published host keys under ``name``, as gcloud's ``WriteHostKeysToKnownHosts`` does.

    Only when ``path`` has no entry for ``name`` yet (an entry, even a different key, is kept:
    the connection then refuses a changed key as before). Each value is cut at its first
    whitespace and must be a public key of the type it is published as; others are skipped.

    Args:
        path: the known-hosts file (created 0600).
        name: the host-key alias (``tpu.<id>-<worker>-<suffix>``).
        host_keys: key type (``ssh-ed25519``...) -> base64 body, from the ``hostkeys`` guest attributes.

    Returns:
        The lines written, sorted by key type (empty when an entry existed or no key was usable).

    Raises:
        SshFailure: the known-hosts file exists but cannot be read.
    """
    if known_host_entries(path, name):
        return []
    keys = []
    for key_type, value in sorted(host_keys.items())[:MAX_HOST_KEYS]:
        words = str(value).split()
        if key_type not in HOST_KEY_TYPES or not words:
            continue
        try:
            key = asyncssh.import_public_key(f"{key_type} {words[0]}")
        except (ValueError, asyncssh.KeyImportError):
            continue
        if key.get_algorithm() == key_type:
            keys.append(key)
    return [append_known_host(path, name, key) for key in keys]


def changed_key_message(target: SshTarget, entries: Sequence[tuple[int, Sequence[asyncssh.SSHKey]]],
                        presented: asyncssh.SSHKey) -> str:
    """The refusal of a changed host key: the file, the line, both fingerprints and the fix.

    ``entries`` are ``(line number, recorded keys)`` for the target's alias (see
    :func:`known_host_entries`); ``presented`` is the key the server offered. The fix is the
    exact ``ssh-keygen -f FILE -R ALIAS`` (shell-quoted) to run once the node is known to have
    been recreated.
    """
    recorded = ", ".join(f"{k.get_algorithm()} {k.get_fingerprint('sha256')}" for _, keys in entries for k in keys)
    lines = ", ".join(str(n) for n, _ in entries)
    plural = "s" if len(entries) > 1 else ""
    fix = f"ssh-keygen -f {shlex.quote(str(target.known_hosts))} -R {shlex.quote(target.known_hosts_name)}"
    return (f"{target.label} presented the host key {presented.get_algorithm()} "
            f"{presented.get_fingerprint('sha256')}, which differs from the one recorded for "
            f"{target.known_hosts_name} at line{plural} {lines} of {target.known_hosts} ({recorded}): either "
            f"someone is intercepting the connection or the node was recreated. The connection was "
            f"refused. If you know the node was recreated, run `{fix}` and connect again.")


class _Untrusted(Exception):
    """Internal: the server presented ``key``, which is not trusted for the alias."""

    def __init__(self, key: asyncssh.SSHKey) -> None:
        super().__init__("untrusted host key")
        self.key = key


class _HostKeyRecorder(asyncssh.SSHClient):
    """Remembers the host key the server presented when it was not already trusted."""

    def __init__(self) -> None:
        self.presented: asyncssh.SSHKey | None = None

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        self.presented = key
        return False


# --- connect ----------------------------------------------------------------------------


#: GCP's rules for the names the proxy command may carry: a zone (``us-east5-a``), a project id
#: (6-30 characters, optionally ``domain:`` first), a node or instance name (RFC 1035 label).
_ZONE = re.compile(r"[a-z]+-[a-z]+[0-9]+-[a-z]")
_PROJECT = re.compile(r"(?:[a-z][a-z0-9.-]{0,62}:)?[a-z][a-z0-9-]{4,28}[a-z0-9]")
_RESOURCE = re.compile(r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?")
#: The proxy command's placeholders: ``%h`` host, ``%p`` port, ``%n`` node, ``%w`` worker, ``%z`` zone,
#: ``%P`` project, ``%i`` the worker's GCE instance (IAP's name for it), ``%%`` a percent sign.
PROXY_PLACEHOLDERS = "hpnwzPi%"


def proxy_values(target: SshTarget, used: str = PROXY_PLACEHOLDERS) -> dict[str, str]:
    """The placeholder values of ``target`` (see :data:`PROXY_PLACEHOLDERS`); those in ``used`` are checked.

    Raises:
        SshFailure: a used value is not what GCP allows (the host an IP address or host name; the
            zone, project, node and instance names by GCP's rules): it would reach a command line.
    """
    checks: dict[str, tuple[str, str, Callable[[str], object], str]] = {
        "h": ("host", target.host, is_host_address, "an IP address or host name"),
        "z": ("zone", target.zone, _ZONE.fullmatch, "a zone name"),
        "P": ("project", target.project, _PROJECT.fullmatch, "a project id"),
        "n": ("node", target.node_name or "", _RESOURCE.fullmatch, "a node name"),
        "i": ("instance", target.instance, _RESOURCE.fullmatch, "an instance name")}
    for token, (what, value, rule, kind) in checks.items():
        if token in used and not rule(value):
            raise SshFailure(f"Refusing to put the {what} {value!r} into the proxy command: it is not {kind}.",
                             title="Bad name")
    return {"h": target.host, "p": str(target.port), "n": target.node_name or "", "w": str(target.worker),
            "z": target.zone, "P": target.project, "i": target.instance, "%": "%"}


def expand_proxy_words(words: Sequence[str], values: Mapping[str, str], *, keep: str = "") -> list[str]:
    """``words`` with each ``%X`` of :data:`PROXY_PLACEHOLDERS` replaced inside the word (values are
    data: they cannot add words); placeholders in ``keep`` are left for OpenSSH to expand (``hp%``)."""
    def one(match: re.Match[str]) -> str:
        token = match.group(1)
        return match.group(0) if token in keep else values[token]

    return [re.sub(rf"%([{PROXY_PLACEHOLDERS}])", one, word) for word in words]


def proxy_argv(target: SshTarget) -> list[str] | None:
    """The proxy command's argv, every placeholder (:data:`PROXY_PLACEHOLDERS`) substituted inside
    each word after splitting.

    Raises:
        SshFailure: a value is not an address or GCP name (:func:`proxy_values`), or the command
            cannot be split (an unclosed quote).
    """
    if not target.proxy_command:
        return None
    try:
        words = shlex.split(target.proxy_command)
    except ValueError as exc:
        raise SshFailure(f"Cannot read the proxy command {target.proxy_command!r}: {exc}.",
                         title="Bad proxy command") from None
    used = "".join(re.findall(rf"%([{PROXY_PLACEHOLDERS}])", target.proxy_command))
    return expand_proxy_words(words, proxy_values(target, used))


async def _open(target: SshTarget, trusted: list[asyncssh.SSHKey]) -> asyncssh.SSHClientConnection:
    """One connection attempt trusting only ``trusted``; translates every failure.

    Raises ``_Untrusted`` with the presented key when it is not in ``trusted``, including when
    the server has none of the recorded key types (ECDSA recorded, only ed25519 offered): then a
    second handshake that trusts nothing learns the key it offers, and nothing is authenticated.
    """
    recorder = _HostKeyRecorder()
    try:
        return await _attempt(target, trusted, recorder)
    except asyncssh.HostKeyNotVerifiable:
        if recorder.presented is not None:
            raise _Untrusted(recorder.presented) from None
        raise HostKeyChanged(f"{target.label} did not present a host key matching "
                             f"{target.known_hosts_name} in {target.known_hosts}.") from None
    except (asyncssh.KeyExchangeFailed, asyncssh.ConnectionLost, ConnectionResetError, BrokenPipeError) as exc:
        # KeyExchangeFailed (asyncssh servers) or a dropped handshake (OpenSSH's "no matching host
        # key type", which reaches the client as a lost connection or, by timing, a TCP reset):
        # when keys are recorded, the server may offer none of their types.
        if not trusted:
            raise
        failure = exc
    # Learn the key the server does offer, trusting nothing (nothing is authenticated).
    recorder = _HostKeyRecorder()
    try:
        conn = await _attempt(target, [], recorder)
    except asyncssh.HostKeyNotVerifiable:
        presented = recorder.presented
        if presented is None or any(_same_key(presented, key) for key in trusted):
            raise failure from None          # the recorded key after all: not a host-key problem
        raise _Untrusted(presented) from None
    conn.close()
    raise HostKeyChanged(f"{target.label} accepted a connection without verifying its host key; "
                         f"refusing to go on.")


def _same_key(a: asyncssh.SSHKey, b: asyncssh.SSHKey) -> bool:
    return bool(a.public_data == b.public_data)


#: OpenSSH's default ciphers, AES-GCM first: the console decrypts every byte of a followed log on its
#: UI loop, and with AES-NI (every TPU host and laptop) an AES-GCM packet costs a third of a
#: ChaCha20-Poly1305 one in ``cryptography`` (16.7 vs 50.8 us per 32 KiB packet here: one AEAD call,
#: not three cipher contexts and a MAC). A server that offers none of them falls back to the rest.
ENCRYPTION_ALGS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
                   "aes128-ctr", "aes192-ctr", "aes256-ctr")


async def _attempt(target: SshTarget, trusted: list[asyncssh.SSHKey],
                   recorder: _HostKeyRecorder) -> asyncssh.SSHClientConnection:
    keys: Sequence[Any] = target.client_keys or ([str(target.private_key)] if target.private_key else [])
    conn: asyncssh.SSHClientConnection = await asyncssh.connect(
        target.host, target.port, username=target.user, client_keys=list(keys),
        known_hosts=(trusted, [], []), host_key_alias=target.known_hosts_name,
        agent_path=None, client_factory=lambda: recorder, proxy_command=proxy_argv(target),
        keepalive_interval=KEEPALIVE_INTERVAL_S, keepalive_count_max=KEEPALIVE_COUNT_MAX,
        connect_timeout=target.connect_timeout_s, config=[], preferred_auth="publickey",
        encryption_algs=ENCRYPTION_ALGS,
    )
    return conn


async def connect(
    target: SshTarget,
    *,
    accept_new_host_key: Callable[[str], Awaitable[bool]] | None = None,
) -> asyncssh.SSHClientConnection:
    """Open a verified SSH connection to ``target``.

    Args:
        target: where and how to connect.
        accept_new_host_key: called with the fingerprint (``SHA256:...``) of a host key that
            the known-hosts file does not know yet; returning ``True`` records the key under
            the target's alias and connects. ``None`` refuses unknown keys.

    Returns:
        An open ``asyncssh.SSHClientConnection`` (close it, or use ``async with``).

    Raises:
        HostKeyUnknown: the key is unknown and was not accepted.
        HostKeyChanged: the key differs from the recorded one (possible MITM or node recreated).
        SshAuthRefused: the node refused the key.
        SshUnreachable: no route, connection refused, or dropped during the handshake.
        SshTimeout: no answer within ``target.connect_timeout_s``.
        SshFailure: anything else asyncssh reports, or an unusable private key.
    """
    if not target.client_keys and target.private_key and not target.private_key.exists():
        raise SshFailure(
            f"No private key at {target.private_key}: run `gcloud compute tpus tpu-vm ssh` once "
            f"(it creates ~/.ssh/google_compute_engine) or point [ssh] private_key at your key.",
            title="No SSH key")
    name = target.known_hosts_name
    entries = known_host_entries(target.known_hosts, name)
    trusted = [key for _, keys in entries for key in keys]
    try:
        return await _translate(target, _open(target, trusted))
    except _Untrusted as untrusted:
        presented = untrusted.key
    fingerprint = presented.get_fingerprint("sha256")
    if entries:
        raise HostKeyChanged(changed_key_message(target, entries, presented))
    if accept_new_host_key is None or not await accept_new_host_key(fingerprint):
        raise HostKeyUnknown(
            f"{target.label} presented the unknown host key {fingerprint} ({presented.get_algorithm()}) "
            f"for {name}; it was not accepted, so the connection was refused.", fingerprint=fingerprint)
    append_known_host(target.known_hosts, name, presented)
    try:
        conn = await _translate(target, _open(target, [presented]))
    except _Untrusted as untrusted:
        raise HostKeyChanged(
            f"{target.label} presented {untrusted.key.get_fingerprint('sha256')} right after "
            f"presenting {fingerprint}; refusing to connect.") from None
    return conn



def os_login_refusal(target: SshTarget, key: str) -> str:
    """Why an OS Login node refused ``key`` for ``target.user``, and what to grant (one paragraph)."""
    return (f"{target.label} uses OS Login and refused the SSH key {key} for user '{target.user}'. "
            f"Your Google account needs roles/compute.osLogin on the node's project (roles/compute."
            f"osAdminLogin for sudo, which docker needs), the key must be in your OS Login profile "
            f"(the console imports it; `gcloud compute os-login ssh-keys add --key-file KEY.pub` does too), "
            f"and the user must be your OS Login POSIX name (e.g. alice_example_com; an [ssh] user or "
            f"--user overrides it). The node's ssh-keys metadata does not count under OS Login.")


def public_key_line(private_key: Path) -> str:
    """The OpenSSH public key line (``ssh-ed25519 AAAA... comment``) of a private key file: the
    ``.pub`` beside it when there is one (gcloud writes it), else derived from the key.

    Raises:
        SshFailure: no such file, or not a usable (unencrypted) private key.
    """
    pub = Path(f"{private_key}.pub")
    try:
        text = pub.read_text(encoding="utf-8").strip()
        if text:
            return text
    except (OSError, UnicodeDecodeError):
        pass
    try:
        return asyncssh.read_private_key(str(private_key)).export_public_key().decode().strip()
    except FileNotFoundError:
        raise SshFailure(f"No private key at {private_key}: run `gcloud compute tpus tpu-vm ssh` once "
                         f"or point [ssh] private_key at your key.", title="No SSH key") from None
    except (OSError, asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as exc:
        raise SshFailure(f"Cannot read the public half of {private_key}: {exc}.", title="Unusable SSH key") from None


async def _translate(target: SshTarget, opening: Awaitable[_T]) -> _T:
    """Await ``opening``, turning library exceptions into one-sentence :class:`SshFailure` s."""
    try:
        return await opening
    except asyncssh.PermissionDenied:
        key = target.private_key or "the in-memory key"
        if target.os_login:
            raise SshAuthRefused(os_login_refusal(target, str(key))) from None
        raise SshAuthRefused(
            f"{target.label} refused the SSH key {key} for user '{target.user}': the key is not "
            f"authorized there; add its .pub to the node's ssh-keys metadata (running `gcloud compute "
            f"tpus tpu-vm ssh {target.node_name or 'NODE'}` once does this), wait about a minute "
            f"for it to propagate, then retry.") from None
    except asyncssh.KeyExchangeFailed as exc:
        raise SshFailure(f"{target.label} and this client share no key exchange, cipher or host key "
                         f"algorithm ({exc.reason}).", title="SSH negotiation failed") from None
    except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as exc:
        raise SshFailure(f"Cannot use the private key {target.private_key}: {exc}.",
                         title="Unusable SSH key") from None
    except TimeoutError:
        raise SshTimeout(f"{target.label} did not answer within {target.connect_timeout_s:g} s "
                         f"(firewall on port {target.port}, or the node is down).{_route(target)}") from None
    except asyncssh.DisconnectError as exc:
        raise SshUnreachable(f"{target.label} closed the connection during the SSH handshake "
                             f"({exc.reason or type(exc).__name__}).{_route(target)}") from None
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise SshUnreachable(f"Cannot reach {target.label}: {reason}.{_route(target)}") from None


def _route(target: SshTarget) -> str:
    """`` <route sentence>`` for a failure message, or ``""``."""
    return f" {target.route}" if target.route else ""
