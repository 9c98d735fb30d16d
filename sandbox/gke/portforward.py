"""``/api/v1/namespaces/N/pods/P/portforward?ports=8000`` over WebSocket, as the API server answers
clients of the channel protocol (kr8s, the official Python client): the upgrade (RFC 6455, subprotocol
``v4.channel.k8s.io`` / ``v4``-style ``channel.k8s.io`` when offered, none when the client offers none),
then per port channel 0 (data) and channel 1 (errors), the first frame on each carrying the port as 2
bytes little-endian, every frame's first byte its channel. Data goes to the pod's OpenAI-compatible
server (:mod:`sandbox.openai_server`), which listens once the pod's engine is ready; a refused
connection is reported on the error channel in the kubelet's words.
"""

from __future__ import annotations

import base64
import hashlib
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

from sandbox.gke.store import ApiError, JsonDict, ObjectStore

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_PROTOCOLS = ("v4.channel.k8s.io", "channel.k8s.io", "portforward.k8s.io")
#: Largest WebSocket frame read from a client (bytes).
MAX_FRAME_BYTES = 16 * 1024 * 1024


def _frame(payload: bytes, opcode: int = 2) -> bytes:
    head = bytes([0x80 | opcode])
    size = len(payload)
    if size < 126:
        return head + bytes([size]) + payload
    if size < 1 << 16:
        return head + bytes([126]) + struct.pack("!H", size) + payload
    return head + bytes([127]) + struct.pack("!Q", size) + payload


def _exact(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if data is None or len(data) < size:
        raise EOFError("the client closed the WebSocket")
    return bytes(data)


def read_frame(stream: BinaryIO) -> tuple[int, bytes]:
    """One client frame: ``(opcode, unmasked payload)``. Raises EOFError at the end, ValueError when too big."""
    first, second = _exact(stream, 2)
    size = second & 0x7F
    if size == 126:
        size = struct.unpack("!H", _exact(stream, 2))[0]
    elif size == 127:
        size = struct.unpack("!Q", _exact(stream, 8))[0]
    if size > MAX_FRAME_BYTES:
        raise ValueError(f"a WebSocket frame of {size} bytes, more than {MAX_FRAME_BYTES}")
    mask = _exact(stream, 4) if second & 0x80 else b"\0\0\0\0"
    payload = _exact(stream, size)
    return first & 0x0F, bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class PortForwarder:
    """Serves port-forward requests for the pods of ``store``.

    Args:
        store: the cluster's objects. backend: ``(pod uid, container port) -> local TCP port`` of what
            listens in the pod, or ``None`` (the pod runs nothing there yet).
    """

    def __init__(self, store: ObjectStore, backend: Callable[[str, int], int | None]) -> None:
        self.store = store
        self.backend = backend

    def serve(self, handler: Any, namespace: str, name: str, query: dict[str, str]) -> None:
        """Answer one request on ``handler`` (a :class:`sandbox.gke.kube_api.KubeHandler`). Raises ApiError
        before the upgrade."""
        pod = self.store.get("pods", namespace, name)
        if pod is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found')
        if (pod.get("status") or {}).get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
            raise ApiError(400, "BadRequest", f"pod {name} is not running")
        key = handler.headers.get("Sec-WebSocket-Key")
        offered = [p.strip() for p in (handler.headers.get("Sec-WebSocket-Protocol") or "").split(",") if p.strip()]
        chosen = next((p for p in _PROTOCOLS if p in offered), None)
        if (handler.headers.get("Upgrade") or "").lower() != "websocket" or not key or (offered and chosen is None):
            raise ApiError(400, "BadRequest", "the sandbox forwards ports over WebSocket with the channel protocol "
                           f"({', '.join(_PROTOCOLS)}: kr8s, the Python client), not SPDY (kubectl port-forward)")
        try:
            port = int(query.get("ports", ""))
        except ValueError:
            raise ApiError(400, "BadRequest", "the ports parameter must be one port number, e.g. ports=8000") from None
        accept = base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()
        handler.send_response(101, "Switching Protocols")
        handler.send_header("Upgrade", "websocket")
        handler.send_header("Connection", "Upgrade")
        handler.send_header("Sec-WebSocket-Accept", accept)
        if chosen:
            handler.send_header("Sec-WebSocket-Protocol", chosen)
        handler.end_headers()
        handler.close_connection = True
        self._pump(handler, pod, port)

    def _pump(self, handler: Any, pod: JsonDict, port: int) -> None:
        send_lock = threading.Lock()

        def send(payload: bytes, opcode: int = 2) -> None:
            with send_lock:
                handler.wfile.write(_frame(payload, opcode))
                handler.wfile.flush()

        prefix = struct.pack("<H", port)
        send(b"\x00" + prefix)
        send(b"\x01" + prefix)
        target = self.backend(pod["metadata"]["uid"], port)
        try:
            upstream = socket.create_connection(("127.0.0.1", target), timeout=5) if target else None
        except OSError:
            upstream = None
        if upstream is None:
            send(b"\x01" + (f"error forwarding port {port} to pod {pod['metadata']['uid']}, uid : failed to execute "
                            f"portforward in network namespace: failed to connect to localhost:{port} inside "
                            "namespace: connection refused").encode())
            send(struct.pack("!H", 1000), opcode=8)
            return
        upstream.settimeout(None)
        pumping = threading.Thread(target=self._upstream_to_client, args=(upstream, send), daemon=True,
                                   name="sandbox-portforward")
        pumping.start()
        try:
            while True:
                opcode, payload = read_frame(handler.rfile)
                if opcode == 8:
                    break
                if opcode == 9:
                    send(payload, opcode=10)
                elif opcode in (1, 2) and payload[:1] == b"\x00" and len(payload) > 1:
                    upstream.sendall(payload[1:])
        except (EOFError, ValueError, OSError):
            pass
        finally:
            try:
                upstream.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            upstream.close()
            pumping.join(timeout=5)

    @staticmethod
    def _upstream_to_client(upstream: socket.socket, send: Callable[..., None]) -> None:
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                send(b"\x00" + data)
            send(struct.pack("!H", 1000), opcode=8)
        except OSError:
            pass
