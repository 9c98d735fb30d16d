"""A local port forward that knows whether its target answers.

:func:`forward_port_watched` listens on ``127.0.0.1:<local_port>`` and, for each local client,
opens a ``direct-tcpip`` channel to ``<remote_host>:<remote_port>`` on the node with asyncssh's
:meth:`~asyncssh.SSHClientConnection.open_connection`, then copies bytes both ways. Unlike
asyncssh's own ``forward_local_port`` (which closes a client whose channel the node refused and
tells nobody: the client sees ``Empty reply from server``), every client's outcome is reported:
``on_connection(None)`` when its channel opened, ``on_connection(reason)`` when the node refused it
(``Connection refused`` when nothing listens on the port: the container behind the forward is
gone) or did not answer within ``open_timeout_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import asyncssh

from remote.ssh.errors import SshFailure

#: Bytes read from one side before they are written to the other (and drained).
CHUNK_BYTES = 1 << 16


async def forward_port_watched(
    conn: asyncssh.SSHClientConnection, remote_port: int, local_port: int = 0, *,
    remote_host: str = "127.0.0.1", on_connection: Callable[[str | None], None],
    open_timeout_s: float = 10.0,
) -> tuple[asyncio.Server, int]:
    """Forward ``127.0.0.1:<local_port>`` to ``<remote_host>:<remote_port>`` on the node, reporting each
    client's channel.

    Args:
        conn: an open connection (its closing ends every forwarded connection).
        remote_port: the port on the node (vLLM's, 8000 by default).
        local_port: the local port, 0 for any free one.
        remote_host: the address as seen from the node.
        on_connection: called on the loop once per local client: ``None`` when its channel to the
            node opened, else the reason it did not (one phrase, e.g. ``Connection refused``).
        open_timeout_s: the longest wait for the node to open a channel.

    Returns:
        ``(server, local_port)``; ``server.close()`` stops listening (the port is free at once).

    Raises:
        SshFailure: the local port is taken.
    """
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await carry(reader, writer)
        except asyncio.CancelledError:
            writer.close()      # the loop is closing: asyncio's stream callback must not see a cancelled task

    async def carry(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            remote = await asyncio.wait_for(conn.open_connection(remote_host, remote_port), open_timeout_s)
        except asyncssh.ChannelOpenError as exc:
            _refused(writer, on_connection, exc.reason or "the node refused the channel")
            return
        except TimeoutError:
            _refused(writer, on_connection, f"no channel within {open_timeout_s:g} s")
            return
        except (asyncssh.Error, OSError) as exc:
            _refused(writer, on_connection, f"connection lost ({getattr(exc, 'reason', '') or type(exc).__name__})")
            return
        on_connection(None)
        remote_reader, remote_writer = remote
        try:
            await asyncio.gather(_copy(reader, remote_writer), _copy(remote_reader, writer))
        finally:
            remote_writer.close()
            writer.close()

    try:
        server = await asyncio.start_server(client, "127.0.0.1", local_port)
    except OSError as exc:
        raise SshFailure(f"Cannot listen on local port {local_port}: {exc.strerror or exc}.",
                         title="Port forward failed") from None
    return server, int(server.sockets[0].getsockname()[1])


def _refused(writer: asyncio.StreamWriter, on_connection: Callable[[str | None], None], reason: str) -> None:
    writer.close()
    on_connection(reason)


async def _copy(source: Any, sink: Any) -> None:
    """Copy ``source`` to ``sink`` until end of file (then half-close ``sink``) or a side fails."""
    with contextlib.suppress(asyncssh.Error, OSError, ConnectionError):
        while data := await source.read(CHUNK_BYTES):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
