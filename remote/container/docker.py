"""Docker verbs run on a TPU VM over SSH: ``sudo -n docker ...`` with every argument quoted.

TPU VMs run docker as root and the default user has passwordless sudo, so every command is
prefixed with ``sudo -n`` (never waits for a password; fails with "a password is required").
Arguments are joined with :func:`shlex.join`, so nothing in a model name or flag value can
inject a shell command.

Helpers return :class:`~remote.ssh.CommandResult` for verbs whose failure the operator must
read (``pull``, ``run``, ``rm -f``) and raise :class:`DockerMissing` /
:class:`~remote.ssh.SudoPasswordRequired` when docker cannot run at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import asyncssh

from remote.ssh import CommandResult, SshFailure, command_line, run_command

#: ``docker`` says one of these when a container or object does not exist.
_NOT_FOUND = re.compile(r"No such (container|object|image)", re.IGNORECASE)


class DockerMissing(SshFailure):
    """``docker`` is not installed (or not on the PATH) on the node."""

    title = "docker not found"


class DockerError(SshFailure):
    """A docker command that should not fail did (inspect output unreadable, daemon down)."""

    title = "docker failed"


def docker_argv(args: Sequence[str], *, sudo: bool = True) -> list[str]:
    """``["sudo", "-n", "docker", *args]`` (without the sudo part when ``sudo`` is false)."""
    return ["sudo", "-n", "docker", *args] if sudo else ["docker", *args]


def docker_command(args: Sequence[str], *, sudo: bool = True) -> str:
    """The exact shell command for ``docker <args>``, quoted with ``shlex``.

    >>> docker_command(["rm", "-f", "vllm"])
    'sudo -n docker rm -f vllm'
    """
    return command_line(["docker", *args], sudo=sudo)


def logs_follow_args(container: str, *, since: str | None = None, timestamps: bool = True) -> list[str]:
    """Arguments of ``docker logs -f [--timestamps] [--since TS] <container>``.

    Args:
        container: name or id.
        since: an RFC 3339 timestamp (nanoseconds allowed); docker includes lines at exactly
            that time, so a resuming reader must drop the ones it already has.
        timestamps: prefix each line with its RFC 3339 nano timestamp.
    """
    args = ["logs", "-f"]
    if timestamps:
        args.append("--timestamps")
    if since:
        args += ["--since", since]
    return [*args, container]


def docker_missing(result: CommandResult, label: str = "the node") -> DockerMissing | None:
    """The error to raise when ``result`` shows docker is not installed, else ``None``.

    Recognises bash's exit 127 and sudo's ``sudo: docker: command not found`` (exit 1).
    """
    if result.exit_status == 127 or (result.exit_status != 0 and "command not found" in result.stderr):
        return DockerMissing(
            f"docker is not installed on {label} (`{result.command}` said "
            f"\"{(result.stderr.strip().splitlines() or ['exit 127'])[-1]}\"); use a TPU VM "
            f"runtime image that includes docker, or install it.")
    return None


async def docker(
    conn: asyncssh.SSHClientConnection, args: Sequence[str], *, sudo: bool = True,
    timeout_s: float | None = 60.0, label: str = "the node",
) -> CommandResult:
    """Run ``docker <args>`` and return the result (non-zero exits are returned).

    Raises:
        DockerMissing: docker is not installed.
        SudoPasswordRequired: sudo wanted a password.
        SshTimeout, SshUnreachable: see :func:`remote.ssh.run_command`.
    """
    result = await run_command(conn, ["docker", *args], sudo=sudo, timeout_s=timeout_s, label=label)
    missing = docker_missing(result, label)
    if missing is not None:
        raise missing
    return result


async def docker_inspect(
    conn: asyncssh.SSHClientConnection, container: str, *, sudo: bool = True, label: str = "the node",
) -> dict[str, Any] | None:
    """``docker inspect --type container <container>`` parsed: the first object, or ``None``.

    Returns:
        The inspect JSON object (``Id``, ``State{Status,Running,ExitCode,...}``, ``Config``,
        ``HostConfig``, ``Image``, ``Mounts``...), or ``None`` when no such container exists.

    Raises:
        DockerError: docker failed otherwise, or printed something that is not the JSON array.
        DockerMissing, SudoPasswordRequired, SshTimeout, SshUnreachable.
    """
    return await _inspect(conn, ["inspect", "--type", "container", container], sudo=sudo, label=label)


async def docker_image_inspect(
    conn: asyncssh.SSHClientConnection, image: str, *, sudo: bool = True, label: str = "the node",
) -> dict[str, Any] | None:
    """``docker image inspect <image>`` parsed (``Id``, ``RepoTags``, ``RepoDigests``), or ``None``.

    Raises:
        DockerError, DockerMissing, SudoPasswordRequired, SshTimeout, SshUnreachable: as :func:`docker_inspect`.
    """
    return await _inspect(conn, ["image", "inspect", image], sudo=sudo, label=label)


async def container_image_inspect(
    conn: asyncssh.SSHClientConnection, inspect: dict[str, Any], *, sudo: bool = True, label: str = "the node",
) -> dict[str, Any] | None:
    """``docker image inspect`` of the image a container runs (its ``docker inspect`` JSON), or ``None``.

    Looked up by the container's image id; some daemons only resolve the tag, which is then
    accepted when it still names the same image (a re-tagged image is not the one running).

    Raises:
        DockerError, DockerMissing, SudoPasswordRequired, SshTimeout, SshUnreachable: as :func:`docker_inspect`.
    """
    image_id = str(inspect.get("Image") or "")
    image = await docker_image_inspect(conn, image_id, sudo=sudo, label=label) if image_id else None
    if image is None:
        tag = str((inspect.get("Config") or {}).get("Image") or "")
        by_tag = await docker_image_inspect(conn, tag, sudo=sudo, label=label) if tag else None
        image = by_tag if by_tag and by_tag.get("Id") == image_id else None
    return image


async def _inspect(conn: asyncssh.SSHClientConnection, args: list[str], *, sudo: bool,
                   label: str) -> dict[str, Any] | None:
    """Run a ``docker ... inspect`` and return the first object of its JSON array (``None``: no such object)."""
    result = await docker(conn, args, sudo=sudo, timeout_s=30.0, label=label)
    if result.exit_status != 0:
        if _NOT_FOUND.search(result.stderr):
            return None
        raise DockerError(f"`{result.command}` failed on {label}: {_last_line(result)}")
    try:
        items = json.loads(result.stdout)
    except ValueError:
        raise DockerError(f"`{result.command}` on {label} printed something that is not JSON: "
                          f"{result.stdout[:120]!r}") from None
    return items[0] if isinstance(items, list) and items and isinstance(items[0], dict) else None


async def docker_ps(
    conn: asyncssh.SSHClientConnection, *, all_containers: bool = True, sudo: bool = True,
    label: str = "the node",
) -> list[dict[str, Any]]:
    """``docker ps [-a] --no-trunc --format '{{json .}}'``: one dict per container.

    Keys are docker's: ``ID``, ``Names``, ``Image``, ``Status``, ``State``, ``CreatedAt``...

    Raises:
        DockerError: docker failed or printed a line that is not JSON.
    """
    args = ["ps", *(["-a"] if all_containers else []), "--no-trunc", "--format", "{{json .}}"]
    result = await docker(conn, args, sudo=sudo, timeout_s=30.0, label=label)
    if result.exit_status != 0:
        raise DockerError(f"`{result.command}` failed on {label}: {_last_line(result)}")
    rows = []
    for line in result.stdout.splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError:
                raise DockerError(f"`{result.command}` on {label} printed a non-JSON line: "
                                  f"{line[:120]!r}") from None
    return rows


async def docker_pull(conn: asyncssh.SSHClientConnection, image: str, *, sudo: bool = True,
                      timeout_s: float | None = 1800.0, label: str = "the node") -> CommandResult:
    """``docker pull <image>`` (can take minutes for a vLLM TPU image); the result, never raises on exit 1."""
    return await docker(conn, ["pull", image], sudo=sudo, timeout_s=timeout_s, label=label)


async def docker_rm_f(conn: asyncssh.SSHClientConnection, container: str, *, sudo: bool = True,
                      label: str = "the node") -> CommandResult:
    """``docker rm -f <container>`` (exit 0 also when it did not exist)."""
    return await docker(conn, ["rm", "-f", container], sudo=sudo, timeout_s=120.0, label=label)


async def docker_run(conn: asyncssh.SSHClientConnection, argv: Sequence[str], *, sudo: bool = True,
                     timeout_s: float | None = 600.0, label: str = "the node") -> CommandResult:
    """``docker run <argv>``; ``argv`` is everything after ``run`` (``-d --name vllm ... IMAGE vllm serve ...``).

    With ``-d`` a successful result's ``stdout.strip()`` is the new 64-hex container id.
    """
    return await docker(conn, ["run", *argv], sudo=sudo, timeout_s=timeout_s, label=label)


#: A container id as docker prints it: ``docker run -d`` and ``docker inspect``'s ``Id`` give 64
#: lowercase hex digits, ``docker ps`` the first 12.
_CONTAINER_ID = re.compile(r"[0-9a-f]{12,64}")


def container_id_of(text: object) -> str | None:
    """``text`` (surrounding whitespace stripped) when it is a container id (12-64 lowercase hex
    digits), else ``None``: whatever else a node prints (an ESC byte, a warning, markup) is never
    stored or shown as an id."""
    if not isinstance(text, str):
        return None
    value = text.strip()
    return value if _CONTAINER_ID.fullmatch(value) else None


def _last_line(result: CommandResult) -> str:
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit {result.exit_status}"
