"""A stand-in for Google's IAP TCP-forwarding relay (``wss://tunnel.cloudproxy.app/v4/connect``).

gcloud's own ``compute start-iap-tunnel`` is the client (its hidden ``--iap-tunnel-url-override``
points it here), so the private-node path runs with the real gcloud. The relay speaks the
websocket subprotocol ``relay.tunnel.cloudproxy.app`` as the SDK's ``iap_tunnel_websocket_utils``
(SDK 528) reads it: every frame starts with a 2-byte big-endian tag;

- ``CONNECT_SUCCESS_SID`` (0x0001): a 4-byte length and the session id, sent once the backend is reached;
- ``DATA`` (0x0004): a 4-byte length and at most 16,384 bytes, both ways;
- ``ACK`` (0x0007): an 8-byte count of the bytes received so far, both ways.

``GET /v4/connect?project=P&zone=Z&instance=I&interface=nic0&port=22&newWebsocket=...`` opens a TCP
connection to that instance's port (the caller's ``resolve``); an unknown instance is closed with
close code 4047 ("instance not found"), a backend that does not answer with 4003 (as the real relay
closes them). Reconnects (``/v4/reconnect``) are refused (4003): a new tunnel is opened instead.
Runs on the caller's asyncio loop (the sandbox's), on ``127.0.0.1``, over TLS (``wss://``, as the
real relay; gcloud's websocket client reads TLS sockets only) with a self-signed certificate for
127.0.0.1 signed by a CA of its own that the sandbox's gcloud trusts (``core/custom_ca_certs_file``: :attr:`SandboxIapRelay.ca_file`).
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import secrets
import ssl
import struct
from collections.abc import Callable
from pathlib import Path

from aiohttp import WSMsgType, web

SUBPROTOCOL = "relay.tunnel.cloudproxy.app"
TAG_CONNECT_SUCCESS_SID = 0x0001
TAG_DATA = 0x0004
TAG_ACK = 0x0007
MAX_DATA_FRAME = 16384
#: Seconds to reach the backend before closing with 4003.
BACKEND_TIMEOUT_S = 5.0

#: ``(project, zone, instance, port) -> ("127.0.0.1", its SSH port)``, or ``None`` for no such instance.
Resolver = Callable[[str, str, str, int], tuple[str, int] | None]


class SandboxIapRelay:
    """The relay on ``127.0.0.1:<free port>``; :attr:`url` is what ``--iap-tunnel-url-override`` takes.

    Args:
        resolve: finds an instance's backend address (see :data:`Resolver`).
    """

    def __init__(self, resolve: Resolver, tls_dir: Path) -> None:
        self.resolve = resolve
        self.tls_dir = tls_dir
        self.url = ""
        self.ca_file = tls_dir / "iap-relay-ca.pem"
        self.tunnels = 0                          # tunnels opened (a test reads it)
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        """Listen; returns ``wss://127.0.0.1:PORT``."""
        cert_file, key_file = self.tls_dir / "iap-relay-cert.pem", self.tls_dir / "iap-relay-key.pem"
        _self_signed(self.ca_file, cert_file, key_file)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert_file, key_file)
        app = web.Application()
        app.router.add_get("/v4/connect", self._connect)
        app.router.add_get("/v4/reconnect", self._reconnect)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"wss://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        """Close every tunnel and stop listening (idempotent)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _reconnect(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(protocols=(SUBPROTOCOL,))
        await ws.prepare(request)
        await ws.close(code=4003, message=b"reconnect is not supported by the sandbox relay")
        return ws

    async def _connect(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(protocols=(SUBPROTOCOL,), max_msg_size=MAX_DATA_FRAME + 64)
        await ws.prepare(request)
        query = request.query
        try:
            port = int(query.get("port", ""))
        except ValueError:
            await ws.close(code=4000, message=b"bad port")
            return ws
        backend = self.resolve(query.get("project", ""), query.get("zone", ""), query.get("instance", ""), port)
        if backend is None:
            await ws.close(code=4047, message=b"instance not found")
            return ws
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(*backend), BACKEND_TIMEOUT_S)
        except (OSError, TimeoutError):
            await ws.close(code=4003, message=b"failed to connect to backend")
            return ws
        self.tunnels += 1
        sid = secrets.token_hex(8).encode()
        await ws.send_bytes(struct.pack(">HI", TAG_CONNECT_SUCCESS_SID, len(sid)) + sid)
        pump = asyncio.create_task(_backend_to_client(reader, ws))
        try:
            await _client_to_backend(ws, writer)
        finally:
            pump.cancel()
            writer.close()
            if not ws.closed:
                await ws.close()
        return ws


async def _client_to_backend(ws: web.WebSocketResponse, writer: asyncio.StreamWriter) -> None:
    """DATA frames from gcloud to the backend, each acknowledged; ACK frames read and dropped."""
    received = 0
    async for message in ws:
        if message.type != WSMsgType.BINARY or len(message.data) < 2:
            break
        tag = struct.unpack(">H", message.data[:2])[0]
        if tag == TAG_DATA and len(message.data) >= 6:
            length = struct.unpack(">I", message.data[2:6])[0]
            payload = message.data[6:6 + min(length, MAX_DATA_FRAME)]
            writer.write(payload)
            await writer.drain()
            received += len(payload)
            await ws.send_bytes(struct.pack(">HQ", TAG_ACK, received))
        elif tag != TAG_ACK:
            break


async def _backend_to_client(reader: asyncio.StreamReader, ws: web.WebSocketResponse) -> None:
    """The backend's bytes to gcloud in DATA frames; the tunnel closes when the backend does."""
    while data := await reader.read(MAX_DATA_FRAME):
        await ws.send_bytes(struct.pack(">HI", TAG_DATA, len(data)) + data)
    await ws.close()


def _self_signed(ca_file: Path, cert_file: Path, key_file: Path) -> None:
    """A CA of the sandbox's own (``ca_file``) and the relay's certificate for ``127.0.0.1`` signed by it
    (``cert_file``: the certificate then the CA, ``key_file``: its key), written 0600."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tpu-console sandbox CA")])
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])

    def builder(subject: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name).public_key(public_key)
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=30))
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                               critical=False))

    ca = (builder(ca_name, ca_key.public_key())
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (builder(name, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    for path, data in ((key_file, key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption())),
                       (cert_file, cert.public_bytes(pem) + ca.public_bytes(pem)),
                       (ca_file, ca.public_bytes(pem))):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
