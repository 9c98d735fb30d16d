"""One stdlib HTTP server on ``127.0.0.1`` in a daemon thread: the lifecycle the sandbox's REST
stand-ins (the TPU API, the Compute + OS Login APIs) share, by composition."""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackServer(ThreadingHTTPServer):
    """A threading HTTP server whose listen backlog takes a burst of clients (the stdlib's 5 drops
    SYNs when 30+ clients connect at once); its request threads never block the process's exit."""

    daemon_threads = True
    request_queue_size = 256


class LoopbackHttp:
    """Serves a handler class on ``127.0.0.1:<free port>`` until :meth:`stop`.

    Args:
        name: the serving thread's name (seen in thread dumps).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._server: LoopbackServer | None = None
        self._thread: threading.Thread | None = None
        self._scheme = "http"

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT`` (``https://`` when served with TLS; only valid after :meth:`start`)."""
        assert self._server is not None, "server not started"
        return f"{self._scheme}://127.0.0.1:{self._server.server_address[1]}"

    def start(self, handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None) -> str:
        """Start serving ``handler`` (over TLS with the server context ``tls``: the handshake then runs in
        each request's thread, the handler's ``setup`` does it); returns the endpoint."""
        self._server = LoopbackServer(("127.0.0.1", 0), handler)
        self._scheme = "http"
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True,
                                                  do_handshake_on_connect=False)
            self._scheme = "https"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=self.name, daemon=True)
        self._thread.start()
        return self.endpoint

    def stop(self) -> None:
        """Stop serving and free the port (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
