"""Remote commands, the local port forward and the ``/v1/models`` probe over an open connection.

Part of :mod:`remote.ssh`; import from there.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import asyncssh

from remote.errors import VllmHttpError
from remote.ssh.errors import SshFailure, SshTimeout, SshUnreachable, SudoPasswordRequired


@dataclass(frozen=True)
class CommandResult:
    """What one remote command did.

    Attributes:
        exit_status: the exit code (-1 when killed by a signal or the channel closed).
        stdout: standard output (UTF-8, undecodable bytes replaced).
        stderr: standard error.
        command: the exact shell command line that ran (arguments quoted with ``shlex``).
    """

    exit_status: int
    stdout: str
    stderr: str
    command: str

    @property
    def ok(self) -> bool:
        """``True`` when the command exited 0."""
        return self.exit_status == 0


def command_line(argv: Sequence[str], *, sudo: bool = False) -> str:
    """The shell command for ``argv``: each argument quoted with ``shlex``; ``sudo -n`` prefix if asked.

    Nothing in ``argv`` can inject a shell command: ``["echo", "; rm -rf /"]`` becomes
    ``echo '; rm -rf /'``.
    """
    return shlex.join(["sudo", "-n", *argv] if sudo else list(argv))


def sudo_failure(result: CommandResult, label: str = "the node") -> SudoPasswordRequired | None:
    """The error to raise when ``sudo -n`` refused for lack of a password, else ``None``."""
    if result.exit_status != 0 and "a password is required" in result.stderr:
        return SudoPasswordRequired(
            f"sudo on {label} needs a password for this user (`{result.command}` said "
            f"\"{result.stderr.strip().splitlines()[-1]}\"); allow passwordless sudo for docker "
            f"(the default on TPU VMs) or add the user to the docker group. On an OS Login node, sudo "
            f"comes with roles/compute.osAdminLogin (roles/compute.osLogin alone gives none).")
    return None


async def run_command(
    conn: asyncssh.SSHClientConnection,
    argv: Sequence[str],
    *,
    sudo: bool = False,
    timeout_s: float | None = 60.0,
    label: str = "the node",
) -> CommandResult:
    """Run ``argv`` on the node (quoted with ``shlex``), wait for it, and return its result.

    A non-zero exit is returned, not raised, so callers can show the command's stderr.

    Raises:
        SudoPasswordRequired: ``sudo=True`` and sudo asked for a password.
        SshTimeout: the command did not finish within ``timeout_s`` seconds.
        SshUnreachable: the connection dropped.
    """
    command = command_line(argv, sudo=sudo)
    try:
        done = await conn.run(command, check=False, timeout=timeout_s, encoding="utf-8", errors="replace")
    except asyncssh.TimeoutError:
        raise SshTimeout(f"`{command}` on {label} did not finish within {timeout_s:g} s.") from None
    except (asyncssh.DisconnectError, asyncssh.ChannelOpenError, OSError) as exc:
        raise SshUnreachable(f"The connection to {label} dropped while running `{command}` "
                             f"({getattr(exc, 'reason', None) or exc or type(exc).__name__}).") from None
    status = done.exit_status if done.exit_status is not None else -1
    result = CommandResult(status, str(done.stdout or ""), str(done.stderr or ""), command)
    failure = sudo_failure(result, label) if sudo else None
    if failure is not None:
        raise failure
    return result


# --- port forward and the /v1/models probe ---------------------------------------------


async def forward_port(
    conn: asyncssh.SSHClientConnection, remote_port: int, local_port: int = 0,
    *, remote_host: str = "127.0.0.1", accept_handler: Callable[[str, int], bool] | None = None,
) -> tuple[asyncssh.SSHListener, int]:
    """Forward ``127.0.0.1:<local_port>`` here to ``<remote_host>:<remote_port>`` on the node.

    Args:
        conn: an open connection.
        remote_port: the port on the node (vLLM's, 8000 by default).
        local_port: the local port, 0 for any free one.
        remote_host: the address as seen from the node.
        accept_handler: called with each local client's ``(host, port)``; ``False`` refuses it.

    Returns:
        ``(listener, local_port)``; ``listener.close()`` ends the forward.

    Raises:
        SshFailure: the local port is taken or the node refused forwarding.
    """
    try:
        listener = await conn.forward_local_port("127.0.0.1", local_port, remote_host, remote_port,
                                                 accept_handler=accept_handler)
    except OSError as exc:
        raise SshFailure(f"Cannot listen on local port {local_port}: {exc.strerror or exc}.",
                         title="Port forward failed") from None
    except asyncssh.Error as exc:
        raise SshFailure(f"The node refused to forward to {remote_host}:{remote_port}: {exc.reason}.",
                         title="Port forward failed") from None
    return listener, listener.get_port()


async def probe_models(local_url: str, *, timeout_s: float = 5.0) -> list[str]:
    """GET ``<local_url>/v1/models`` and return the served model ids.

    Args:
        local_url: e.g. ``http://127.0.0.1:8005`` (the local end of :func:`forward_port`).
        timeout_s: seconds for the whole request.

    Raises:
        VllmHttpError: no answer, an HTTP error status, or a body that is not a model list.
    """
    import httpx

    url = local_url.rstrip("/") + "/v1/models"
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            response = await client.get(url)
    except httpx.HTTPError as exc:
        raise VllmHttpError(f"No answer from {url}: {exc or type(exc).__name__}.") from None
    if response.status_code != 200:
        raise VllmHttpError(f"{url} answered HTTP {response.status_code}: {response.text[:200]}")
    try:
        return [str(item["id"]) for item in response.json()["data"]]
    except (ValueError, KeyError, TypeError):
        raise VllmHttpError(f"{url} did not answer an OpenAI model list: {response.text[:200]}") from None
