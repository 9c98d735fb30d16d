"""Which user an SSH connection to a node logs in as: ``--user``, ``[ssh] user``, OS Login, local.

One resolution for every connection (the startup view, ``watch``, ``swap``, ``bench``,
``metrics``, ``forward``), through :func:`console.flows.ssh_target.login_target`:

1. ``--user NAME`` (a verb's flag) wins, then ``[ssh] user`` from the config file;
2. else, when the node needs OS Login (:func:`remote.oslogin.os_login_verdict`: the node's
   ``enable-oslogin`` metadata, then the project's ``commonInstanceMetadata``), the POSIX name of
   the account's OS Login profile (``users/EMAIL/loginProfile``), importing the console's public
   key first when the profile does not list it (``users/EMAIL:importSshPublicKey``), as gcloud does;
3. else the local user name (gcloud's default).

The verdict is worked out in every case, so a refused key on an OS Login node is explained with
OS Login's roles. A project whose metadata cannot be read (403 without ``compute.projects.get``,
or no answer) is not fatal: the node's metadata alone decides, and the login says so in its notes.
Project metadata is cached for :data:`PROJECT_METADATA_TTL_S`, a profile's POSIX name for the
resolver's life. There is no process-wide resolver: the console's ``Services.logins`` holds one for
the TUI's screens, and each verb makes its own once per run (or one per call: ``logins=None``). A config whose TPU ``api_endpoint`` is ``http://`` (a loopback stand-in) and that names no
``[os_login] compute_api_endpoint`` has no Compute API to ask: project metadata counts as unset.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from remote.oslogin import (
    OsLoginApi,
    OsLoginError,
    OsLoginVerdict,
    os_login_verdict,
    posix_username,
    profile_has_key,
)

if TYPE_CHECKING:
    from console.config import Config, SshConfig
    from remote.models import Node

#: What a login name may be (POSIX portable names, as useradd takes them; OS Login's are letters,
#: digits and ``_``): ``--user`` and a profile's POSIX name are checked against it.
USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")

#: Seconds a project's metadata (or the failure to read it) is reused before asking again.
PROJECT_METADATA_TTL_S = 300.0


@dataclass(frozen=True)
class SshLogin:
    """The user a connection logs in as, and why.

    Attributes:
        user: the remote user name (``alice_example_com``, ``operator``).
        source: ``"--user"``, ``"[ssh] user"``, ``"OS Login profile of alice@example.com"`` or
            ``"local user"``.
        verdict: whether the node needs OS Login (:class:`remote.oslogin.OsLoginVerdict`).
        notes: sentences worth showing (the key was imported; the project's metadata could not be read).
    """

    user: str
    source: str
    verdict: OsLoginVerdict
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        """``logging in as alice_example_com (OS Login profile of ...; OS Login on (project metadata))``
        and the notes, one line."""
        text = f"logging in as {self.user} ({self.source}; {self.verdict.describe()})"
        return "; ".join([text, *self.notes])


class LoginResolver:
    """Works out :class:`SshLogin` s for one config (caches project metadata and profiles).

    Args:
        config: the console's :class:`~console.config.Config` (``ssh``, ``os_login``,
            ``request_timeout_s``).
        api: the Compute / OS Login client (default: one built from ``config.os_login``).
        public_key: ``() -> OpenSSH public key line`` of the console's SSH key (default: read
            from ``config.ssh.private_key``; it may raise ``SshFailure``).
        clock: monotonic seconds, for the metadata cache.
    """

    def __init__(self, config: Config, api: OsLoginApi | None = None, *,
                 public_key: Callable[[], str] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.api = api or OsLoginApi(oslogin_endpoint=config.os_login.api_endpoint,
                                     compute_endpoint=config.os_login.compute_api_endpoint,
                                     timeout_s=config.request_timeout_s)
        self._public_key = public_key
        self._clock = clock
        self._projects: dict[str, tuple[float, dict[str, str] | None, str | None]] = {}
        self._users: dict[tuple[str, str], str] = {}

    # --- OS Login on or off ---------------------------------------------------------------

    async def _project_metadata(self, project: str) -> tuple[dict[str, str] | None, str | None]:
        if self.config.os_login.compute_api_endpoint is None and (self.config.api_endpoint or "").startswith("http://"):
            return {}, None    # a loopback TPU stand-in without a Compute one: no project to ask (as unset)
        cached = self._projects.get(project)
        if cached is not None and self._clock() - cached[0] < PROJECT_METADATA_TTL_S:
            return cached[1], cached[2]
        try:
            items: dict[str, str] | None = await self.api.project_metadata(project)
            problem = None
        except OsLoginError as exc:
            items, problem = None, (f"HTTP {exc.code}" if exc.code else "no answer")
        self._projects[project] = (self._clock(), items, problem)
        return items, problem

    async def verdict(self, node: Node) -> OsLoginVerdict:
        """Whether ``node`` (a :class:`remote.models.Node`) needs OS Login; never raises for a
        project that cannot be read (the verdict's note says so)."""
        metadata = (node.raw or {}).get("metadata") or {}
        first = os_login_verdict(metadata, {})
        if first.source == "node metadata":
            return first                     # the node decides: no project lookup needed
        items, problem = await self._project_metadata(node.project)
        verdict = os_login_verdict(metadata, items, project_problem=problem)
        if verdict.note:
            verdict = OsLoginVerdict(verdict.enabled, verdict.source,
                                     verdict.note.replace("the project's", f"project {node.project}'s", 1))
        return verdict

    async def verdicts(self, nodes: Sequence[Any]) -> list[OsLoginVerdict]:
        """:meth:`verdict` of each node; each project's metadata is read once, all concurrently."""
        projects = sorted({n.project for n in nodes
                           if os_login_verdict((n.raw or {}).get("metadata") or {}, {}).source != "node metadata"})
        await asyncio.gather(*(self._project_metadata(p) for p in projects))
        return [await self.verdict(n) for n in nodes]

    # --- the user -------------------------------------------------------------------------

    async def login(self, node: Node, *, user: str | None = None, import_key: bool = True) -> SshLogin:
        """The :class:`SshLogin` for ``node``.

        Args:
            node: a :class:`remote.models.Node` (``raw["metadata"]`` is its metadata).
            user: ``--user`` from the command line, or ``None``.
            import_key: import the console's public key into the OS Login profile when it is
                missing (a connection follows); ``False`` only reads (the fleet's detail pane:
                its notes then say the key would be imported at the first connection).

        Raises:
            OsLoginError: the node needs OS Login and its user cannot be worked out (no account
                known, the OS Login API refused or did not answer, the profile has no POSIX account).
            SshFailure: the console's public key cannot be read (to import it).
        """
        verdict = await self.verdict(node)
        notes = (verdict.note,) if verdict.note else ()
        ssh = self.config.ssh
        if user:
            return SshLogin(user, "--user", verdict, notes)
        if ssh.user_configured:
            return SshLogin(ssh.user, "[ssh] user", verdict, notes)
        if not verdict.enabled:
            return SshLogin(ssh.user, "local user", verdict, notes)
        account = self.config.os_login.account or await self.api.account()
        if not account:
            raise OsLoginError(
                f"Node {node.name} uses OS Login ({verdict.source}), and the console cannot tell your Google "
                f"account: set [os_login] account = \"you@example.com\" in the config (or run `gcloud auth "
                f"login`), or set [ssh] user to your OS Login POSIX name.")
        name, imported = await self._posix_user(node, verdict, account, import_key=import_key)
        if imported and import_key:
            notes = (*notes, f"imported the SSH public key into the OS Login profile of {account}")
        elif imported:
            notes = (*notes, f"the console's SSH public key is not in the OS Login profile of {account} yet: "
                             "it is imported at the first connection")
        return SshLogin(name, f"OS Login profile of {account}", verdict, notes)

    async def _posix_user(self, node: Node, verdict: OsLoginVerdict, account: str, *,
                          import_key: bool = True) -> tuple[str, bool]:
        """(POSIX name, whether the key was missing: imported, or with ``import_key=False`` not yet)."""
        cached = self._users.get((account, node.project))
        if cached is not None:
            return cached, False
        public_key = self._public_key() if self._public_key else _public_key_of(self.config.ssh)
        try:
            profile = await self.api.login_profile(account, node.project)
            imported = False
            if not profile_has_key(profile, public_key):
                if import_key:
                    profile = await self.api.import_public_key(account, public_key, node.project)
                imported = True
        except OsLoginError as exc:
            raise OsLoginError(
                f"Node {node.name} uses OS Login ({verdict.source}), but {exc.message}. Your account needs "
                f"roles/compute.osLogin on project {node.project} (roles/compute.osAdminLogin for sudo, which "
                f"docker needs); or set [ssh] user / --user to your POSIX name.", code=exc.code) from None
        name = posix_username(profile)
        if not name:
            raise OsLoginError(f"Node {node.name} uses OS Login ({verdict.source}), but the OS Login profile of "
                               f"{account} has no POSIX account for project {node.project}.")
        if not USER_NAME.fullmatch(name):               # it comes from the network: a name, nothing else
            raise OsLoginError(f"The OS Login profile of {account} gives the POSIX name {name!r}, which is not "
                               f"a user name; set [ssh] user or --user.")
        if import_key or not imported:     # a name whose key is not imported yet is not cached
            self._users[(account, node.project)] = name
        return name, imported

    def close(self) -> None:
        """Close the API client."""
        self.api.close()


def _public_key_of(ssh: SshConfig) -> str:
    from remote.ssh import public_key_line

    return public_key_line(ssh.private_key)
