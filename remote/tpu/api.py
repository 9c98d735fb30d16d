"""The fleet from the Cloud TPU API: nodes and queued resources of many projects at once.

Primary path: the google-cloud-tpu **v2** sync REST client (its async client has no working
REST transport, research §2.1 / pitfall 3), run from asyncio on a dedicated thread pool so
every project and every call runs concurrently. Lists use ``locations/-``; where the API
refuses the wildcard (400/404), the zones come from ``list_locations`` and are listed one by
one, concurrently. Every HTTP call carries ``timeout=``.

Supplement: library 1.28 drops the flex-start fields, so :class:`V2alpha1Supplement` (the
only code that touches v2alpha1) lists the same resources as raw v2alpha1 REST JSON with the
same credentials; :func:`remote.tpu.parse.merge_v2alpha1` lays those fields over the v2 data.

Failures never escape :meth:`FleetSource.list_fleet` (except :class:`CredentialsError`): a
project that answers 403/404/429/5xx or times out becomes a :class:`FleetProblem`, and the
other projects still list.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

import google.auth
import google.auth.exceptions
import requests
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.auth.transport.requests import AuthorizedSession, Request
from google.cloud import tpu_v2
from google.protobuf import json_format

from remote.deadline import DaemonThreadPool, bound_session
from remote.errors import CredentialsError, TpuApiError
from remote.models import FleetProblem, FleetSnapshot, Node, QueuedResource, utc_now
from remote.printable import shown_name
from remote.tpu.parse import (
    JsonDict,
    merge_v2alpha1,
    message_to_json,
    node_from_json,
    project_from_json,
    queued_resource_from_json,
)

SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
DEFAULT_BASE_URL = "https://tpu.googleapis.com"
T = TypeVar("T")
#: Pages one listing (one collection of one location) may take; past it the listing stops and
#: says so (a real project's nodes fit in a few pages; a server that pages forever does not).
MAX_PAGES_PER_LISTING = 200
#: The library's message type of each collection, to read a REST record one by one.
_RECORD_TYPES: dict[str, type[tpu_v2.Node] | type[tpu_v2.QueuedResource]] = {
    "nodes": tpu_v2.Node, "queuedResources": tpu_v2.QueuedResource}


@dataclass
class Listing:
    """All pages of one collection of one location.

    Attributes:
        items: the records as REST JSON (for v2: each one read by the library's type).
        unreachable: zones the API listed as unreachable.
        unreadable: one sentence per record that could not be read (the others still list).
        stopped: why paging stopped before the API's last page (a repeated or malformed
            ``nextPageToken``, or :data:`MAX_PAGES_PER_LISTING`), else ``None``.
    """

    items: list[JsonDict] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    stopped: str | None = None


class PageTokens:
    """Follows ``nextPageToken`` for one listing and says when paging must stop.

    Args:
        what: the listing, for messages (``nodes of projects/P/locations/Z``).
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self.pages = 0
        self._seen: set[str] = set()

    def next(self, token: object) -> tuple[str, str | None]:
        """``(token to ask for next, "" when done; why paging stops, or None)`` after one more page.

        Stops on a token that is not a string, one already followed (the API would page forever),
        or after :data:`MAX_PAGES_PER_LISTING` pages.
        """
        self.pages += 1
        if token is None or token == "":
            return "", None
        if not isinstance(token, str):
            return "", (f"listing {self.what} stopped after {self.pages} pages: the API sent a page token "
                        f"that is not a string ({type(token).__name__}); what was read so far is shown")
        if token in self._seen:
            return "", (f"listing {self.what} stopped after {self.pages} pages: the API repeated a page token "
                        "(it would page forever); what was read so far is shown")
        if self.pages >= MAX_PAGES_PER_LISTING:
            return "", (f"listing {self.what} stopped at {MAX_PAGES_PER_LISTING} pages (the most one listing may "
                        "take); what was read so far is shown")
        self._seen.add(token)
        return token, None


class ProjectConfig(Protocol):
    """What the lister needs of a project (``console.config.ProjectConfig`` fits; remote never imports console)."""

    @property
    def id(self) -> str:
        """The GCP project id."""
        ...

    @property
    def zones(self) -> tuple[str, ...]:
        """Zones to list; empty means all zones at once (``locations/-``)."""
        ...


def base_url(api_endpoint: str | None) -> str:
    """The URL calls go to: ``https://tpu.googleapis.com``, or the configured ``api_endpoint``
    (``http://127.0.0.1:PORT`` for the sandbox; a bare host gets ``https://``)."""
    if not api_endpoint:
        return DEFAULT_BASE_URL
    return api_endpoint.rstrip("/") if "://" in api_endpoint else f"https://{api_endpoint.rstrip('/')}"


def api_error(exc: BaseException, timeout_s: float) -> TpuApiError:
    """Translate a google-api-core / google-auth / requests / OS exception into :class:`TpuApiError`.

    ``code`` is the HTTP status (403, 404, 429, 5xx), 401 for a failed token refresh, or 0 for
    a timeout or transport failure. ``message`` is the API's own ``error.message`` when it sent one.
    """
    if isinstance(exc, TpuApiError):
        return exc
    if isinstance(exc, gexc.GoogleAPICallError):
        message, status = exc.message, ""
        try:
            body = exc.response.json()["error"]          # the API's words, without "GET url: "
            message, status = body.get("message") or message, body.get("status", "")
        except (AttributeError, ValueError, KeyError, TypeError):
            pass
        code = int(exc.code) if isinstance(exc.code, int) else 0     # HTTPStatus -> plain int
        return TpuApiError(message, code=code, status=status, reason=exc.reason or "")
    if isinstance(exc, gexc.RetryError):
        return TpuApiError(f"gave up retrying: {exc.message}")
    if isinstance(exc, requests.Timeout):
        where = _endpoint_of(exc)
        return TpuApiError(f"no answer within {timeout_s:g} s (timed out)" + (f" from {where}" if where else ""))
    if isinstance(exc, requests.ConnectionError):
        return TpuApiError(connection_failure(exc))
    if isinstance(exc, google.auth.exceptions.RefreshError):
        return TpuApiError(f"credentials could not be refreshed: {exc}", code=401)
    if isinstance(exc, json_format.Error):
        return TpuApiError(f"unreadable answer from the TPU API: {exc}")
    return TpuApiError(f"{type(exc).__name__}: {exc}")


def _endpoint_of(exc: requests.RequestException) -> str:
    """``scheme://host:port`` the failed request went to, or ``""``."""
    url = getattr(getattr(exc, "request", None), "url", None) or ""
    if not url:
        return ""
    parts = urlsplit(str(url))
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else ""


def _chain(exc: BaseException, limit: int = 12) -> list[BaseException]:
    """``exc``, the exceptions it wraps (``args``, urllib3's ``reason``, causes), at most ``limit``."""
    seen: list[BaseException] = []
    todo: list[BaseException] = [exc]
    while todo and len(seen) < limit:
        one = todo.pop(0)
        if any(one is s for s in seen):
            continue
        seen.append(one)
        todo += [e for e in (*one.args, getattr(one, "reason", None), one.__cause__, one.__context__)
                 if isinstance(e, BaseException)]
    return seen


def connection_failure(exc: requests.ConnectionError) -> str:
    """One sentence for a request that never got an answer: the endpoint and why (refused, timed out,
    DNS, TLS), without urllib3's pool and retry wording."""
    where = _endpoint_of(exc) or "the TPU API endpoint"
    chain = _chain(exc)
    names = {type(e).__name__ for e in chain}
    ssl_error = next((e for e in chain if isinstance(e, ssl.SSLError)), None)
    if ssl_error is not None or isinstance(exc, requests.exceptions.SSLError):
        detail = getattr(ssl_error, "reason", None) or getattr(ssl_error, "verify_message", None) or "TLS"
        return f"cannot reach {where}: the TLS handshake failed ({detail})"
    if "NameResolutionError" in names or any(isinstance(e, socket.gaierror) for e in chain):
        return f"cannot reach {where}: its host name could not be resolved (DNS)"
    if any(isinstance(e, ConnectionRefusedError) for e in chain) or "refused" in str(exc).lower():
        return f"cannot reach {where}: the connection was refused (nothing listens there)"
    if any(isinstance(e, TimeoutError) for e in chain) or "ConnectTimeoutError" in names:
        return f"cannot reach {where}: connecting timed out"
    error = next((e for e in chain if isinstance(e, OSError) and e.strerror), None)
    return f"cannot reach {where}: {error.strerror if error is not None else 'the connection failed'}"


_CAUGHT = (gexc.GoogleAPIError, google.auth.exceptions.GoogleAuthError, requests.RequestException, OSError,
           ValueError, json_format.Error)


class V2alpha1Supplement:
    """Reads the v2alpha1 REST resources for the fields google-cloud-tpu 1.28 drops.

    Only these fields are taken from it (see :func:`remote.tpu.parse.merge_v2alpha1`): queued
    resource ``provisioningModel`` and ``runDuration``, node ``schedulingConfig.provisioningModel``,
    ``terminationTimestamp`` and ``reservationName``. Uses ``AuthorizedSession`` (google-auth)
    with the client's credentials; errors come back as google-api-core exceptions
    (``from_http_response``), like the library's own.

    Args:
        session: an ``AuthorizedSession`` carrying the credentials.
        base_url: e.g. ``https://tpu.googleapis.com`` or ``http://127.0.0.1:PORT``.
        timeout_s: per-HTTP-call timeout.
    """

    def __init__(self, session: AuthorizedSession, base_url: str, timeout_s: float) -> None:
        self.session = session
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def _get_json(self, path: str, params: dict[str, str] | None = None, *, version: str = "v2alpha1") -> JsonDict:
        response = self.session.get(f"{self.base_url}/{version}/{path}", params=params, timeout=self.timeout_s)
        if response.status_code >= 400:
            raise gexc.from_http_response(response)
        body = response.json()
        if not isinstance(body, dict):
            raise ValueError(f"the answer is a JSON {type(body).__name__}, not an object")
        return body

    def list(self, project: str, location: str, collection: str) -> Listing:
        """All ``collection`` (``nodes``/``queuedResources``) items of one location, following pages
        (bounded: see :class:`PageTokens`)."""
        return self.list_raw(project, location, collection, version="v2alpha1")

    def list_raw(self, project: str, location: str, collection: str, *, version: str) -> Listing:
        """All ``collection`` items of one location as REST JSON, page by page; for ``version="v2"``
        each record is read by the library's type on its own (:func:`read_records`), so one
        malformed record is one unreadable line, not a failed page.

        Raises:
            ValueError: a page is not a JSON object. google-api-core / requests errors as the library.
        """
        path = f"projects/{project}/locations/{location}/{collection}"
        out = Listing()
        tokens = PageTokens(f"{collection} of {path.rsplit('/', 1)[0]}")
        token = ""
        while True:
            body = self._get_json(path, {"pageToken": token} if token else None, version=version)
            records, unreachable = body.get(collection) or [], body.get("unreachable") or []
            if not isinstance(records, list) or not isinstance(unreachable, list):
                raise ValueError(f"{collection} or unreachable in the answer is not a list")
            if version == "v2":
                items, unreadable = read_records(collection, records)
                out.items.extend(items)
                out.unreadable.extend(unreadable)
            else:
                out.items.extend(r for r in records if isinstance(r, dict))
            out.unreachable.extend(z for z in unreachable if isinstance(z, str))
            token, out.stopped = tokens.next(body.get("nextPageToken"))
            if not token:
                return out

    def get(self, name: str) -> JsonDict:
        """One resource by full name (``projects/P/locations/Z/nodes/N``)."""
        return self._get_json(name)

    def post(self, path: str, body: JsonDict, params: dict[str, str] | None = None) -> JsonDict:
        """``POST /v2alpha1/{path}`` with a JSON ``body``; the answer as JSON (e.g. an Operation).

        Used only to create a flex-start queued resource (library 1.28 cannot send
        ``provisioningModel`` / ``runDuration``). Raises google-api-core exceptions like the library.
        """
        response = self.session.post(f"{self.base_url}/v2alpha1/{path}", json=body, params=params,
                                     timeout=self.timeout_s)
        if response.status_code >= 400:
            raise gexc.from_http_response(response)
        data: dict[str, Any] = response.json()
        return data


@dataclass
class _Collected:
    """One collection of one project: items, unreachable zones, per-zone problems or a project error."""

    items: list[JsonDict] = field(default_factory=list)
    unreachable: set[str] = field(default_factory=set)
    zone_problems: list[FleetProblem] = field(default_factory=list)
    error: TpuApiError | None = None
    unreadable: list[str] = field(default_factory=list)

    def add(self, listing: Listing, project: str, zone: str | None) -> None:
        """Take one location's listing; paging stopped early is that zone's problem (the
        project's, for ``locations/-``)."""
        self.items.extend(listing.items)
        self.unreachable.update(listing.unreachable)
        self.unreadable.extend(listing.unreadable)
        if listing.stopped:
            self.zone_problems.append(FleetProblem(project, zone, 0, listing.stopped))


class FleetSource:
    """Lists TPU nodes and queued resources for configured projects, all concurrently.

    Args:
        projects: projects to list; a project with ``zones`` lists only those zones.
        api_endpoint: TPU API endpoint override. ``http://...`` (sandbox) uses anonymous
            credentials; otherwise Application Default Credentials.
        timeout_s: timeout of every HTTP call, seconds.
        credentials: google-auth credentials to use instead of the defaults.
    """

    def __init__(self, projects: Sequence[ProjectConfig], *, api_endpoint: str | None = None,
                 timeout_s: float = 20.0, credentials: Any = None) -> None:
        self.projects = tuple(projects)
        self.api_endpoint = api_endpoint
        self.timeout_s = timeout_s
        self._credentials = credentials
        workers = max(8, min(64, 4 * len(self.projects) + 4))
        self._pool = DaemonThreadPool(workers, "tpu-api")
        self._pool_size = workers
        self._setup_lock = threading.Lock()
        self._client: tpu_v2.TpuClient | None = None
        self._alpha: V2alpha1Supplement | None = None
        self._zones: dict[str, list[str]] = {}
        self._zone_tasks: dict[str, asyncio.Future[list[str]]] = {}

    # --- setup --------------------------------------------------------------------------------

    def _setup(self) -> None:
        """Build credentials, the v2 client and the supplement once (runs in a worker thread)."""
        with self._setup_lock:
            if self._client is not None:
                return
            endpoint = self.api_endpoint
            creds = credentials_for(endpoint, self._credentials)
            options = {"api_endpoint": endpoint} if endpoint else None
            client = tpu_v2.TpuClient(transport="rest", credentials=creds, client_options=options)
            base = base_url(endpoint)
            session = AuthorizedSession(creds)
            for s in (session, getattr(client.transport, "_session", None)):
                bound_session(s, self._pool_size)   # a pooled connection per worker thread; each call whole in time
            self._alpha = V2alpha1Supplement(session, base, self.timeout_s)
            self._client = client

    async def clients(self) -> tuple[tpu_v2.TpuClient, V2alpha1Supplement]:
        """The v2 library client and the v2alpha1 supplement, built on first use (same credentials).

        Raises:
            CredentialsError: no usable Google credentials.
        """
        await asyncio.get_running_loop().run_in_executor(self._pool, self._setup)
        assert self._client is not None and self._alpha is not None
        return self._client, self._alpha

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run the blocking ``fn(*args)`` on the source's thread pool.

        Raises:
            TpuApiError: for any google-api-core / google-auth / transport / OS error of ``fn``.
        """
        return await self._run(fn, *args)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the pool; library errors come out as :class:`TpuApiError`."""
        def call() -> T:
            try:
                return fn(*args)
            except _CAUGHT as exc:
                raise api_error(exc, self.timeout_s) from exc
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    # --- one collection -----------------------------------------------------------------------

    def _v2_list(self, project: str, location: str, collection: str) -> Listing:
        """One collection of one location through the library's page iterator (bounded by
        :class:`PageTokens`); when a page does not parse (one malformed record fails the whole
        page's protobuf parse), the listing is read again as REST JSON record by record."""
        assert self._client is not None and self._alpha is not None
        parent = f"projects/{project}/locations/{location}"
        lister = self._client.list_nodes if collection == "nodes" else self._client.list_queued_resources
        out = Listing()
        tokens = PageTokens(f"{collection} of {parent}")
        try:
            for page in lister(parent=parent, timeout=self.timeout_s).pages:
                records = page.nodes if collection == "nodes" else page.queued_resources
                out.items.extend(message_to_json(m) for m in records)
                out.unreachable.extend(page.unreachable)
                token, out.stopped = tokens.next(page.next_page_token)
                if not token:
                    break
        except json_format.Error:
            return self._alpha.list_raw(project, location, collection, version="v2")
        return out

    def _list_zones(self, project: str) -> list[str]:
        assert self._client is not None
        zones: list[str] = []
        tokens = PageTokens(f"locations of projects/{project}")
        token = ""
        while True:
            response = self._client.list_locations(
                request={"name": f"projects/{project}", "page_token": token}, timeout=self.timeout_s)
            zones.extend(loc.location_id or loc.name.rsplit("/", 1)[-1] for loc in response.locations)
            token, stopped = tokens.next(response.next_page_token)
            if stopped:
                raise TpuApiError(stopped)
            if not token:
                return zones

    async def _zones_of(self, project: str) -> list[str]:
        """The project's zones (``list_locations``), fetched once per source and shared by callers."""
        if project in self._zones:
            return self._zones[project]
        task = self._zone_tasks.get(project)
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            task = self._zone_tasks[project] = asyncio.ensure_future(self._run(self._list_zones, project))
        try:
            self._zones[project] = await task
        finally:
            self._zone_tasks.pop(project, None)
        return self._zones[project]

    async def _collect(self, project: ProjectConfig, lister: Callable[[str, str, str], Listing],
                       collection: str) -> _Collected:
        """List one collection: ``locations/-``, or configured zones, or zone by zone after a refusal."""
        out = _Collected()
        zones = list(project.zones)
        if not zones:
            try:
                listing = await self._run(lister, project.id, "-", collection)
                out.add(listing, project.id, None)
                return out
            except TpuApiError as exc:
                if exc.code not in (400, 404):
                    out.error = exc
                    return out
            try:                      # the wildcard was refused: list zone by zone
                zones = await self._zones_of(project.id)
            except TpuApiError as exc:
                out.error = exc
                return out
        results = await asyncio.gather(*(self._run(lister, project.id, z, collection) for z in zones),
                                       return_exceptions=True)
        for zone, result in zip(zones, results):
            if isinstance(result, TpuApiError):
                out.zone_problems.append(FleetProblem(project.id, zone, result.code, result.message))
            elif isinstance(result, BaseException):
                raise result
            else:
                out.add(result, project.id, zone)
        return out

    # --- one project --------------------------------------------------------------------------

    async def _list_project(self, project: ProjectConfig) -> tuple[list[Node], list[QueuedResource],
                                                                   list[FleetProblem]]:
        """Nodes, queued resources and problems of one project (v2 and v2alpha1 concurrently)."""
        assert self._alpha is not None
        v2_nodes, v2_qrs, a_nodes, a_qrs = await asyncio.gather(
            self._collect(project, self._v2_list, "nodes"),
            self._collect(project, self._v2_list, "queuedResources"),
            self._collect(project, self._alpha.list, "nodes"),
            self._collect(project, self._alpha.list, "queuedResources"))
        pid = project.id
        problems: list[FleetProblem] = []
        for result in (v2_nodes, v2_qrs):
            if result.error is not None:
                problems.append(FleetProblem(pid, None, result.error.code, result.error.message))
            problems.extend(result.zone_problems)
        for zone in sorted(v2_nodes.unreachable | v2_qrs.unreachable):
            problems.append(FleetProblem(pid, zone, 503, "zone unreachable"))
        for v2, alpha, what in ((v2_nodes, a_nodes, "nodes"), (v2_qrs, a_qrs, "queuedResources")):
            v2_failed_zones = {p.zone for p in v2.zone_problems}
            failed = alpha.error or next((p for p in alpha.zone_problems if p.zone not in v2_failed_zones), None)
            if v2.error is None and failed is not None:
                problems.append(FleetProblem(pid, None, failed.code, "flex-start fields unavailable "
                                             f"(v2alpha1 {what} list failed): {failed.message}"))

        # on the pool, not the caller's loop: a project of thousands of nodes parses for seconds
        nodes, qrs, unreadable = await asyncio.get_running_loop().run_in_executor(
            self._pool, project_from_json, v2_nodes.items, a_nodes.items, v2_qrs.items, a_qrs.items)
        unreadable = v2_qrs.unreadable + v2_nodes.unreadable + unreadable
        problems.extend(FleetProblem(pid, None, 0, message) for message in unreadable)
        return nodes, qrs, _dedupe(problems)

    # --- public API ---------------------------------------------------------------------------

    async def list_fleet(self) -> FleetSnapshot:
        """Every node and queued resource of every project, all projects concurrently.

        Returns:
            A :class:`FleetSnapshot`, rows sorted by ``(project, zone, name)``; projects or zones
            that did not answer are in ``problems`` (code: HTTP status, 503 for an unreachable
            zone, 0 for a timeout).

        Raises:
            CredentialsError: there are no usable Google credentials (nothing else raises).
        """
        started = time.monotonic()
        try:
            await asyncio.get_running_loop().run_in_executor(self._pool, self._setup)
        except CredentialsError:
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. a client option the library rejects: one line per project
            setup_problems = tuple(FleetProblem(p.id, None, 0, f"cannot create the TPU API client: {exc}")
                                   for p in self.projects)
            return FleetSnapshot(problems=setup_problems, fetched_at=utc_now(), elapsed_s=time.monotonic() - started)
        results = await asyncio.gather(*(self._list_project(p) for p in self.projects), return_exceptions=True)
        nodes: list[Node] = []
        qrs: list[QueuedResource] = []
        problems: list[FleetProblem] = []
        for project, result in zip(self.projects, results):
            if isinstance(result, BaseException):      # a bug, not an API answer: still no traceback
                problems.append(FleetProblem(project.id, None, 0, f"listing failed: {result!r}"))
                continue
            nodes.extend(result[0])
            qrs.extend(result[1])
            problems.extend(result[2])
        return FleetSnapshot(
            nodes=tuple(sorted(nodes, key=lambda n: n.key)),
            queued_resources=tuple(sorted(qrs, key=lambda q: q.key)),
            problems=tuple(problems),
            fetched_at=utc_now(),
            elapsed_s=time.monotonic() - started,
        )

    async def _get_merged(self, v2_getter: Callable[..., Any], name: str) -> JsonDict:
        """One resource via v2 (raises :class:`TpuApiError`) merged with v2alpha1 (best effort)."""
        assert self._alpha is not None
        v2, alpha = await asyncio.gather(
            self._run(lambda: message_to_json(v2_getter(name=name, timeout=self.timeout_s))),
            self._run(self._alpha.get, name), return_exceptions=True)
        if isinstance(v2, BaseException):
            raise v2
        return merge_v2alpha1(v2, None if isinstance(alpha, BaseException) else alpha)

    async def get_node(self, project: str, zone: str, name: str) -> Node:
        """One node, fresh, with its flex-start fields (v2 + v2alpha1 node and owning queued resource).

        Raises:
            TpuApiError: the v2 call failed (404 when there is no such node).
            CredentialsError: no usable credentials.
        """
        await asyncio.get_running_loop().run_in_executor(self._pool, self._setup)
        assert self._client is not None
        merged = await self._get_merged(self._client.get_node, f"projects/{project}/locations/{zone}/nodes/{name}")
        owner = None
        if merged.get("queuedResource"):
            short = merged["queuedResource"].rsplit("/", 1)[-1]
            try:
                owner = queued_resource_from_json(await self._get_merged(
                    self._client.get_queued_resource, f"projects/{project}/locations/{zone}/queuedResources/{short}"))
            except (TpuApiError, ValueError, KeyError, TypeError, AttributeError):
                pass            # the node still shows; only the owner-derived fields are missing
        try:
            return node_from_json(merged, owner)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise TpuApiError(f"unreadable node {shown_name(name)} in the API's answer: {exc}") from None

    async def get_queued_resource(self, project: str, zone: str, name: str) -> QueuedResource:
        """One queued resource, fresh, with its flex-start fields (v2 + v2alpha1).

        Raises:
            TpuApiError: the v2 call failed (404 when there is no such queued resource).
            CredentialsError: no usable credentials.
        """
        client, _ = await self.clients()
        merged = await self._get_merged(client.get_queued_resource,
                                        f"projects/{project}/locations/{zone}/queuedResources/{name}")
        try:
            return queued_resource_from_json(merged)
        except (ValueError, KeyError, TypeError) as exc:
            raise TpuApiError(f"unreadable queued resource {shown_name(name)} in the API's answer: {exc}") from None

    async def zones_of(self, project: str) -> list[str]:
        """The project's zones (``locations.list``), fetched once per source.

        Raises:
            TpuApiError: the call failed. CredentialsError: no usable credentials.
        """
        await self.clients()
        return list(await self._zones_of(project))

    async def accelerator_types(self, project: str, zone: str) -> list[str]:
        """The accelerator types ``zone`` offers (``acceleratorTypes.list``), e.g. ``["v6e-1", "v6e-4"]``.

        Raises:
            TpuApiError: the call failed. CredentialsError: no usable credentials.
        """
        client, _ = await self.clients()
        parent = f"projects/{project}/locations/{zone}"

        def listing() -> list[str]:
            pager = client.list_accelerator_types(parent=parent, timeout=self.timeout_s)
            return [t.type_ or t.name.rsplit("/", 1)[-1] for t in pager]
        return await self._run(listing)

    async def offered_types(self, project: str) -> dict[str, tuple[str, ...]]:
        """Zone -> the accelerator types it offers, over every zone of ``project``, concurrently.

        Zones whose list fails are left out (the advice built on this is a hint, not a verdict).

        Raises:
            TpuApiError: the project's zones could not be listed. CredentialsError: no credentials.
        """
        zones = await self.zones_of(project)

        async def one(zone: str) -> tuple[str, tuple[str, ...]] | None:
            try:
                return zone, tuple(await self.accelerator_types(project, zone))
            except TpuApiError:
                return None
        found = await asyncio.gather(*(one(z) for z in zones))
        return {zone: types for zone, types in (f for f in found if f is not None)}

    async def get_guest_attributes(self, node: Node, worker: int = 0) -> dict[str, str]:
        """Guest attributes of one worker VM of ``node`` as ``{key: value}``.

        Keys include ``ssh-ed25519`` (host key, base64 body) and ``hostname`` (GCE instance name).

        Raises:
            TpuApiError: the call failed. CredentialsError: no usable credentials.
        """
        await asyncio.get_running_loop().run_in_executor(self._pool, self._setup)
        client = self._client
        assert client is not None
        request = tpu_v2.GetGuestAttributesRequest(
            name=f"projects/{node.project}/locations/{node.zone}/nodes/{node.name}", worker_ids=[str(worker)])
        response = await self._run(lambda: client.get_guest_attributes(request=request, timeout=self.timeout_s))
        items: dict[str, str] = {}
        for attributes in response.guest_attributes:
            for item in attributes.query_value.items:
                items[item.key] = item.value
        return items

    def close(self) -> None:
        """Stop the worker threads and close HTTP sessions (idempotent)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._alpha is not None:
            self._alpha.session.close()
        if self._client is not None:
            self._client.transport.close()


def _dedupe(problems: list[FleetProblem]) -> list[FleetProblem]:
    """Drop repeats of the same ``(project, zone, code)`` (nodes and queued resources often fail
    alike); code-0 lines that are not timeouts (unreadable records, paging stopped) each say
    something of their own and are all kept, once each."""
    seen: set[tuple[str, str | None, int, str]] = set()
    out = []
    for problem in problems:
        own = problem.code == 0 and problem.message.startswith(("unreadable ", "listing "))
        key = (problem.project, problem.zone, problem.code, problem.message if own else "")
        if key not in seen:
            seen.add(key)
            out.append(problem)
    return out


def read_records(collection: str, records: Iterable[object]) -> tuple[list[JsonDict], list[str]]:
    """REST records of ``collection`` read one by one by the library's type (``tpu_v2.Node`` or
    ``tpu_v2.QueuedResource``, unknown fields ignored): ``(records as REST JSON, one sentence per
    record that is not one)``."""
    kind = "node" if collection == "nodes" else "queued resource"
    items: list[JsonDict] = []
    unreadable: list[str] = []
    for record in records:
        name = record.get("name") if isinstance(record, dict) else None
        try:
            message = _RECORD_TYPES[collection].from_json(json.dumps(record), ignore_unknown_fields=True)
            if not isinstance(record, dict):
                raise ValueError(f"a JSON {type(record).__name__}, not an object")
        except (json_format.Error, ValueError, TypeError) as exc:
            unreadable.append(f"unreadable {kind} {shown_name(name)}: {exc}")
            continue
        items.append(message_to_json(message))
    return items, unreadable


def credentials_for(endpoint: str | None, given: Any = None) -> Any:
    """The credentials a Google API client uses: ``given`` if any; none (anonymous) for an ``http://``
    endpoint, i.e. a loopback stand-in; else :func:`default_credentials`.

    Raises:
        CredentialsError: ADC are needed and there are none usable.
    """
    if given is not None:
        return given
    if endpoint and endpoint.startswith("http://"):
        return AnonymousCredentials()
    return default_credentials()


def default_credentials() -> Any:
    """Application Default Credentials, refreshed once (so concurrent calls don't all refresh).

    Raises:
        CredentialsError: none found, or they cannot be refreshed (expired login).
    """
    hint = "run `gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS)"
    try:
        creds, _ = google.auth.default(scopes=SCOPES)
    except google.auth.exceptions.DefaultCredentialsError as exc:
        raise CredentialsError(f"no Application Default Credentials found; {hint}. ({exc})") from None
    try:
        creds.refresh(Request())
    except google.auth.exceptions.RefreshError as exc:
        raise CredentialsError(f"Google credentials could not be refreshed; {hint}. ({exc})") from None
    except (google.auth.exceptions.TransportError, OSError):
        pass    # offline right now: each call will fail (and report) on its own
    return creds
