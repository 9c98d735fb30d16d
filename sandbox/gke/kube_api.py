"""The Kubernetes API stand-in: HTTPS on ``127.0.0.1`` with the cluster's certificate, bearer-token auth,
the routes of core/v1 (namespaces, nodes, pods with ``log``, events) and apps/v1 (deployments, replica sets)
that kubectl and Python clients use, with the API server's wire shapes:

- ``GET`` one object or a list (``kind: XList``, ``metadata.resourceVersion``, items without kind), with
  ``labelSelector`` and ``fieldSelector``; ``Accept: ...;as=Table;g=meta.k8s.io`` answers a Table
  (:mod:`.tables`); ``watch=true`` streams chunked JSON lines ``{"type": ADDED|MODIFIED|DELETED|ERROR,
  "object": ...}`` from ``resourceVersion`` (410 ``Expired`` when it is older than the event log), for
  ``timeoutSeconds`` (default 1800).
- ``PATCH`` (JSON, merge, strategic merge), ``POST`` / ``PUT`` / ``DELETE`` of Deployments and ``DELETE`` of
  pods: :mod:`.writes`.
- ``pods/log``: :mod:`.pod_logs`; ``pods/portforward``: :mod:`.portforward`.
- Errors are ``Status`` objects; no or an unknown bearer token is 401 ``Unauthorized``.
"""

from __future__ import annotations

import copy
import json
import re
import select
import ssl
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sandbox.gke import discovery
from sandbox.gke.store import (
    RESOURCES,
    ApiError,
    JsonDict,
    ObjectStore,
    Selector,
    WatchEvent,
    selected,
)
from sandbox.gke.tables import TABLES, as_table, wants_table
from sandbox.gke.writes import scale, typed, write

_NAMESPACED = re.compile(r"^/(?P<gv>api/v1|apis/apps/v1|apis/leaderworkerset\.x-k8s\.io/v1)/"
                         r"(?:namespaces/(?P<ns>[^/]+)/)?(?P<res>pods|events|services|leaderworkersets|"
                         r"deployments|replicasets)(?:/(?P<name>[^/]+)(?:/(?P<sub>log|portforward|status|scale))?)?$")
_CLUSTER = re.compile(r"^/api/v1/(?P<res>namespaces|nodes)(?:/(?P<name>[^/]+)(?:/(?P<sub>status))?)?$")
#: Largest request body read (bytes).
MAX_BODY_BYTES = 3 * 1024 * 1024
#: Longest watch (seconds) when the client sends no timeoutSeconds.
DEFAULT_WATCH_S = 1800.0
_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json",
                "application/strategic-merge-patch+json")


def watch_type(event: WatchEvent, match: Callable[[JsonDict], bool]) -> tuple[str, JsonDict] | None:
    """The watch event a client with selector ``match`` sees for ``event`` (an update that leaves the
    selection is DELETED, one that enters it ADDED), or ``None``."""
    old_in = event.old is not None and match(event.old)
    new_in = event.new is not None and match(event.new)
    if event.new is None:
        return ("DELETED", event.old) if old_in and event.old is not None else None
    if event.old is None or not old_in:
        return ("ADDED", event.new) if new_in else None
    return ("MODIFIED", event.new) if new_in else ("DELETED", event.new)


class KubeHandler(BaseHTTPRequestHandler):
    """One connection to the API server (the class attribute ``api`` is the :class:`KubeApiState`)."""

    protocol_version = "HTTP/1.1"
    timeout = 300
    api: KubeApiState
    server_version = "sandbox-kube-apiserver"

    def setup(self) -> None:
        super().setup()
        try:
            self.request.do_handshake()
        except (OSError, ssl.SSLError):
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        return                                          # quiet: tests and the TUI share the terminal

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    # --- plumbing ---------------------------------------------------------------------------

    def send_json(self, code: int, body: JsonDict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()

    def write_chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    def end_stream(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (OSError, ssl.SSLError):
            self.close_connection = True

    def client_gone(self) -> bool:
        """Whether the client closed the connection (checked between stream writes)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return bool(self.connection.recv(1) == b"")
        except ssl.SSLWantReadError:
            return False
        except (OSError, ValueError):
            return True

    def read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise ApiError(413, "RequestEntityTooLarge", f"the request body is {length} bytes, more than "
                           f"{MAX_BODY_BYTES}")
        return self.rfile.read(length) if length else b""

    def _authorized(self) -> bool:
        word, _, token = (self.headers.get("Authorization") or "").partition(" ")
        return word.lower() == "bearer" and token.strip() in self.api.tokens

    def _serve(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        self.api.requests.append((method, self.path))
        try:
            body = self.read_body()
            if not self._authorized():
                raise ApiError(401, "Unauthorized", "Unauthorized")
            self._route(method, parts.path.rstrip("/") or "/", query, body)
        except ApiError as exc:
            self.send_json(exc.code, exc.status())
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True
        except (ValueError, KeyError, TypeError) as exc:
            self.send_json(400, ApiError(400, "BadRequest", f"bad request: {exc}").status())

    def _route(self, method: str, path: str, query: dict[str, str], body: bytes) -> None:
        fixed = self.api.discovery(path) if method == "GET" else None
        if fixed is not None:
            self.send_json(200, fixed)
            return
        found = _NAMESPACED.match(path) or _CLUSTER.match(path)
        if found is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        resource, name = found.group("res"), found.group("name")
        namespace = found.groupdict().get("ns") or ""
        sub = found.group("sub")
        served_at = "api/v1" if RESOURCES[resource][0] == "v1" else "apis/" + RESOURCES[resource][0]
        if (found.groupdict().get("gv") or "api/v1") != served_at:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if sub == "log" and method == "GET":
            self.api.serve_log(self, namespace, name, query)
        elif sub == "portforward":
            self.api.serve_portforward(self, namespace, name, query)
        elif sub == "scale" and resource == "deployments" and method in ("GET", "PATCH", "PUT"):
            self.send_json(200, scale(self.api.store, method, namespace, name, body, self.headers.get("Content-Type") or ""))
        elif sub is not None:
            raise ApiError(405, "MethodNotAllowed", f"the sandbox does not serve {method} {resource}/{sub}")
        elif method == "GET" and name is None:
            self._list(resource, namespace or None, query)
        elif method == "GET":
            obj = self.api.store.get(resource, namespace, name)
            if obj is None:
                raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
            self._answer_objects(resource, [typed(resource, obj)], obj["metadata"]["resourceVersion"], query, single=True)
        else:
            self.send_json(*self.api.write(method, resource, namespace, name, query, body, self.headers))

    def _answer_objects(self, resource: str, items: list[JsonDict], rv: str, query: dict[str, str], *,
                        single: bool) -> None:
        if wants_table(self.headers.get("Accept") or ""):
            table = as_table(resource, items, rv, query.get("includeObject", "Metadata"))
            if table is not None:
                self.send_json(200, table)
                return
        if single:
            self.send_json(200, items[0])
        else:
            api_version, kind, _ = RESOURCES[resource]
            self.send_json(200, {"kind": f"{kind}List", "apiVersion": api_version,
                                 "metadata": {"resourceVersion": rv},
                                 "items": [{k: v for k, v in i.items() if k not in ("kind", "apiVersion")} for i in items]})

    def _list(self, resource: str, namespace: str | None, query: dict[str, str]) -> None:
        labels = Selector.parse(query.get("labelSelector", ""))
        fields = Selector.parse(query.get("fieldSelector", ""), fields=True)
        if query.get("watch") in ("true", "1"):
            self._watch(resource, namespace, labels, fields, query)
            return
        items, rv = self.api.store.list(resource, namespace, labels, fields)
        self._answer_objects(resource, [typed(resource, i) for i in items], str(rv), query, single=False)

    def _watch(self, resource: str, namespace: str | None, labels: Selector, fields: Selector,
               query: dict[str, str]) -> None:
        store = self.api.store

        def match(obj: JsonDict) -> bool:
            ns = obj["metadata"].get("namespace", "")
            return (namespace is None or ns == namespace) and selected(obj, labels, fields)

        raw_rv = query.get("resourceVersion", "")
        try:
            timeout_s = min(float(query.get("timeoutSeconds") or DEFAULT_WATCH_S), DEFAULT_WATCH_S)
            since = int(raw_rv) if raw_rv not in ("", "0") else None
        except ValueError:
            raise ApiError(400, "BadRequest", f"invalid resourceVersion or timeoutSeconds: {raw_rv!r}") from None
        with store.cond:
            oldest = store.events[0].rv if store.events else store.rv + 1
            if since is None:
                first = [("ADDED", o) for o in (copy.deepcopy(x) for x in store.items(resource, namespace)) if match(o)]
                rv = store.rv
            else:
                first, rv = [], since
        self.start_stream("application/json")
        if since is not None and since < oldest - 1 and since < store.rv:
            gone = ApiError(410, "Expired", f"too old resource version: {since} ({oldest - 1})").status()
            self.write_chunk(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
            self.end_stream()
            return
        table = wants_table(self.headers.get("Accept") or "") and resource in TABLES
        self._stream_events(resource, match, first, rv, time.monotonic() + timeout_s,
                            query.get("includeObject", "Metadata") if table else None)

    def _stream_events(self, resource: str, match: Callable[[JsonDict], bool], first: list[tuple[str, JsonDict]],
                       rv: int, deadline: float, table: str | None) -> None:
        """Stream watch events until ``deadline``; ``table`` (an ``includeObject`` value) sends each object as
        a one-row Table, the column definitions in the first event only, as the API server does."""
        store = self.api.store
        batch = first
        columns_sent = False

        def shown(obj: JsonDict) -> JsonDict:
            nonlocal columns_sent
            if table is None:
                return typed(resource, obj)
            one = as_table(resource, [typed(resource, obj)], obj["metadata"]["resourceVersion"], table) or {}
            if columns_sent:
                one["columnDefinitions"] = []
            columns_sent = True
            return one

        while True:
            if batch:
                self.write_chunk(b"".join(json.dumps({"type": kind, "object": shown(obj)}).encode() + b"\n"
                                          for kind, obj in batch))
            if time.monotonic() >= deadline or store.closed or self.client_gone():
                break
            with store.cond:
                if store.rv <= rv and not store.closed:
                    store.cond.wait(min(1.0, max(0.0, deadline - time.monotonic())))
                fresh = [e for e in store.events if e.rv > rv]
                rv = max(rv, store.rv)
            batch = [seen for e in fresh if e.resource == resource and (seen := watch_type(e, match)) is not None]
        self.end_stream()


class KubeApiState:
    """What the handlers share: the store, accepted tokens, the log and port-forward servers, the
    discovery documents, and a record of requests (``(method, path)``, for tests)."""

    def __init__(self, store: ObjectStore, tokens: set[str], *, server_address: str,
                 serve_log: Callable[[KubeHandler, str, str, dict[str, str]], None],
                 serve_portforward: Callable[[KubeHandler, str, str, dict[str, str]], None]) -> None:
        self.store = store
        self.tokens = tokens
        self.server_address = server_address
        self.serve_log = serve_log
        self.serve_portforward = serve_portforward
        #: the latest requests (bounded: a demo runs for hours)
        self.requests: deque[tuple[str, str]] = deque(maxlen=10_000)

    def discovery(self, path: str) -> JsonDict | None:
        """The discovery document at ``path``, or ``None``."""
        docs: dict[str, Callable[[], JsonDict]] = {
            "/version": discovery.version_json, "/api": lambda: discovery.api_versions(self.server_address),
            "/api/v1": discovery.core_v1, "/apis": discovery.apis, "/apis/apps/v1": discovery.apps_v1,
            "/apis/leaderworkerset.x-k8s.io/v1": discovery.lws_v1}
        maker = docs.get(path)
        return maker() if maker is not None else None
    def write(self, method: str, resource: str, namespace: str, name: str | None, query: dict[str, str],
              body: bytes, headers: Any) -> tuple[int, JsonDict]:
        """POST / PUT / PATCH / DELETE (:func:`sandbox.gke.writes.write`); returns ``(status code, body)``."""
        return write(self.store, method, resource, namespace, name, query, body, headers.get("Content-Type") or "")
