"""Loopback stand-in for the GKE API (``container.googleapis.com`` v1 REST), stdlib only.

Serves ``GET /v1/projects/P/locations/L/clusters`` (``L`` a region, a zone or ``-``; ``{"clusters": [...]}``,
``{}`` when there are none, as proto3 JSON omits empty lists), ``.../clusters/C``, ``.../clusters/C/nodePools``
and ``.../nodePools/NP``; the older ``/v1/projects/P/zones/Z/clusters...`` paths too. Errors use Google's
envelope ``{"error": {"code", "message", "status"}}``: 403 PERMISSION_DENIED for a project the caller may
not see, 404 NOT_FOUND for an unknown cluster or node pool. Anything but GET is refused (403): the sandbox
neither creates nor deletes clusters. Requests are recorded in ``requests`` (``(method, path)``).
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from sandbox.gke.store import JsonDict
from sandbox.loopback_http import LoopbackHttp

_PATH = re.compile(r"^/v1/projects/(?P<project>[^/]+)/(?:locations|zones)/(?P<location>[^/]+)/clusters"
                   r"(?:/(?P<cluster>[^/:]+)(?:/nodePools(?:/(?P<pool>[^/:]+))?)?)?$")
_STATUS = {403: "PERMISSION_DENIED", 404: "NOT_FOUND", 400: "INVALID_ARGUMENT"}


def _error(code: int, message: str) -> tuple[int, JsonDict]:
    return code, {"error": {"code": code, "message": message, "status": _STATUS.get(code, "UNKNOWN")}}


class SandboxGkeApi:
    """The GKE API server on ``127.0.0.1`` (random port).

    Args:
        clusters: ``project -> () -> [Cluster JSON]`` (called per request, so endpoints set after start show).
        denied_projects: projects answered with 403.
    """

    def __init__(self, clusters: dict[str, Callable[[], list[JsonDict]]], *, denied_projects: tuple[str, ...] = ()) -> None:
        self.clusters = clusters
        self.denied_projects = denied_projects
        self.requests: deque[tuple[str, str]] = deque(maxlen=10_000)     # the latest (a demo runs for hours)
        self._lock = threading.Lock()
        self._http = LoopbackHttp("sandbox-gke-api")

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT`` (after :meth:`start`)."""
        return self._http.endpoint

    def start(self) -> str:
        """Start serving; returns the endpoint."""
        api = self

        class Handler(_Handler):
            gke = api

        return self._http.start(Handler)

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        self._http.stop()

    def answer(self, method: str, raw_path: str) -> tuple[int, JsonDict]:
        """The status and JSON body for one request."""
        with self._lock:
            self.requests.append((method, raw_path))
        path = urlsplit(raw_path).path
        if method != "GET":
            return _error(403, "sandbox refuses destructive calls")
        found = _PATH.match(path)
        if found is None:
            return _error(404, f"Method not found: {path}")
        project, location = found.group("project"), found.group("location")
        if project in self.denied_projects or project not in self.clusters:
            return _error(403, f"Permission 'container.clusters.list' denied on resource "
                               f"'projects/{project}/locations/{location}' (or it may not exist).")
        clusters = [c for c in self.clusters[project]()
                    if location == "-" or location == c["location"] or location in c.get("locations", [])]
        if found.group("cluster") is None:
            return 200, ({"clusters": clusters} if clusters else {})
        cluster = next((c for c in clusters if c["name"] == found.group("cluster")), None)
        name = f"projects/{project}/locations/{location}/clusters/{found.group('cluster')}"
        if cluster is None:
            return _error(404, f'Not found: "{name}".')
        if path.endswith("/nodePools"):
            return 200, {"nodePools": cluster.get("nodePools", [])}
        if found.group("pool") is None:
            return 200, cluster
        pool = next((p for p in cluster.get("nodePools", []) if p["name"] == found.group("pool")), None)
        if pool is None:
            return _error(404, f'Not found: "{name}/nodePools/{found.group("pool")}".')
        return 200, pool


class _Handler(BaseHTTPRequestHandler):
    gke: SandboxGkeApi
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(min(length, 1 << 20))
        code, body = self.gke.answer(method, self.path)
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send("GET")

    def do_POST(self) -> None:
        self._send("POST")

    def do_PUT(self) -> None:
        self._send("PUT")

    def do_DELETE(self) -> None:
        self._send("DELETE")
