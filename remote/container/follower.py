"""Our ``docker logs -f`` on the node: the command that names its own PID, and stopping exactly it.

A follower on a pseudo-terminal dies when sshd closes its tty, but a blackholed connection
(the peer vanished without a FIN or RST reaching the node) keeps the sshd session, and with it
the follower, alive until sshd's own keepalives give up, which on a default sshd is never. So
the follower's first line is its PID (``tpu-console follower pid 4242``: the shell's ``$$``,
kept by ``exec``), and after a reconnect :func:`stop_follower` ends that process, but only
when ``/proc/<pid>/cmdline`` still shows ``docker logs -f`` of the same container: an
operator's own ``docker logs -f`` (another PID) and a recycled PID are never touched.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

import asyncssh

from remote.container.docker import docker_command
from remote.ssh import SshUnreachable, run_command

#: The line the follower prints before docker's output.
_PID_LINE = re.compile(r"^tpu-console follower pid (\d{1,10})$")


def follower_command(docker_args: Sequence[str], *, sudo: bool = True) -> str:
    """``echo 'tpu-console follower pid' $$; exec sudo -n docker <args> 2>&1`` (arguments quoted).

    The shell prints its PID, then ``exec`` turns it into the follower, so that PID is the
    follower's (``sudo``'s, which relays ``SIGTERM`` to docker; docker's without sudo).
    """
    return f"echo {shlex.quote('tpu-console follower pid')} $$; exec {docker_command(docker_args, sudo=sudo)} 2>&1"


def follower_pid(line: str) -> int | None:
    """The PID when ``line`` is the follower's first line (``tpu-console follower pid N``), else ``None``."""
    match = _PID_LINE.match(line)
    return int(match.group(1)) if match else None


def is_our_follower(cmdline: bytes, container_id: str) -> bool:
    """``True`` when a ``/proc/<pid>/cmdline`` (NUL-separated argv) is ``docker logs -f ... <container_id>``."""
    argv = cmdline.rstrip(b"\0").split(b"\0")
    if b"logs" not in argv:
        return False
    rest = argv[argv.index(b"logs") + 1:]
    return b"-f" in rest and bool(rest) and rest[-1] == container_id.encode()


async def stop_follower(conn: asyncssh.SSHClientConnection, pid: int, container_id: str, *, sudo: bool = True,
                        label: str = "the node") -> bool:
    """End our earlier follower ``pid`` of ``container_id`` if it still runs; returns whether it was signalled.

    Reads ``/proc/<pid>/cmdline`` first and sends ``SIGTERM`` (with ``sudo -n`` when the
    follower ran under sudo) only when that is our ``docker logs -f`` of this container.

    Raises:
        SshUnreachable, SshTimeout: the connection dropped or hung.
        SudoPasswordRequired: ``sudo`` and sudo needs a password.
    """
    argv = ["cat", f"/proc/{int(pid)}/cmdline"]
    try:
        done = await conn.run(shlex.join(argv), check=False, timeout=15.0, encoding=None)
    except asyncssh.TimeoutError:
        return False
    except (asyncssh.DisconnectError, asyncssh.ChannelOpenError, OSError) as exc:
        raise SshUnreachable(f"The connection to {label} dropped while looking for the old follower "
                             f"({getattr(exc, 'reason', None) or type(exc).__name__}).") from None
    stdout = done.stdout if isinstance(done.stdout, bytes) else b""
    if done.exit_status != 0 or not is_our_follower(stdout, container_id):
        return False                         # gone already (the usual case), or not ours
    result = await run_command(conn, ["kill", "-TERM", str(int(pid))], sudo=sudo, timeout_s=15.0, label=label)
    return result.ok
