"""One cluster's Kubernetes API through kr8s (async): bounded listings, gets, JSON patches, pod logs.

kr8s does the auth (kubeconfig contexts, exec plugins, bearer tokens, the cluster CA) and the HTTP
(httpx); listings go through its ``call_api`` so that paging (``limit`` / ``continue``) is bounded here:
at most :data:`PAGE_ITEMS` objects a page and :data:`MAX_PAGES` pages. kr8s has no strategic merge
patch, so changes are JSON patches (``application/json-patch+json``), guarded by a ``test`` op on
``metadata.resourceVersion`` where the caller wants one.

Every call has a deadline on the whole of it (``asyncio.timeout``); a followed log has a deadline
between lines instead. Failures come out as :class:`remote.errors.KubeApiError` (``code`` the HTTP
status, 0 for a timeout or a connection that failed).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import os
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
import kr8s
import kr8s.asyncio
from kr8s.asyncio.objects import APIObject, Deployment, new_class

from remote.errors import KubeApiError, RemoteError
from remote.gke.discovery import ClusterAccess

#: kr8s's class for the LeaderWorkerSet CRD (``leaderworkerset.x-k8s.io/v1``, plural ``leaderworkersets``).
LeaderWorkerSet = new_class("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", namespaced=True,
                            plural="leaderworkersets")

JsonDict = dict[str, Any]
#: Objects asked for per page, and pages one listing may take (at most 25,000 objects).
PAGE_ITEMS = 500
MAX_PAGES = 50
#: Longest log line kept, characters (a longer one is cut).
MAX_LINE_CHARS = 16_384
#: Seconds a bearer token from a token source is used before a fresh one is asked for (ADC tokens live 3600 s).
TOKEN_MAX_AGE_S = 1800.0


def kubeconfig_of(access: ClusterAccess, name: str = "cluster") -> JsonDict:
    """An in-memory kubeconfig (the dict kr8s reads) for ``access``: its server, CA and token."""
    cluster: JsonDict = {"server": access.server}
    if access.ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(access.ca_pem.encode()).decode()
    user: JsonDict = {"token": access.token} if access.token else {}
    return {"apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": name, "cluster": cluster}], "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}]}


def kube_error(exc: BaseException, what: str, timeout_s: float) -> KubeApiError:
    """``exc`` from kr8s / httpx / ssl / the deadline as a :class:`KubeApiError` naming ``what``."""
    if isinstance(exc, KubeApiError):
        return exc
    if isinstance(exc, kr8s.ServerError):
        code = exc.response.status_code if exc.response is not None else 0
        status: dict[str, Any] = exc.status if isinstance(exc.status, dict) else {}
        message = status.get("message") if isinstance(status.get("message"), str) else str(exc)
        return KubeApiError(f"{what}: {message}", code=code, reason=str(status.get("reason") or ""))
    if isinstance(exc, TimeoutError | kr8s.APITimeoutError | httpx.TimeoutException):
        return KubeApiError(f"{what}: no answer within {timeout_s:g} s (timed out)")
    if isinstance(exc, ssl.SSLError):
        return KubeApiError(f"{what}: the TLS handshake failed ({getattr(exc, 'reason', None) or exc})")
    if isinstance(exc, httpx.ConnectError | ConnectionError):
        return KubeApiError(f"{what}: cannot connect ({exc or type(exc).__name__})")
    return KubeApiError(f"{what}: {type(exc).__name__}: {exc}")


_CAUGHT = (kr8s.ServerError, kr8s.APITimeoutError, httpx.HTTPError, OSError, ValueError, KeyError, TimeoutError)


class KubeClient:
    """The Kubernetes API of one cluster.

    Args:
        access: how to reach it (server + CA + token, or a kubeconfig context).
        timeout_s: deadline of each whole call (a log follow: between two lines), seconds.
    """

    def __init__(self, access: ClusterAccess, *, timeout_s: float = 20.0) -> None:
        self.access = access
        self.timeout_s = timeout_s
        self._api: Any = None
        self._token_at = 0.0

    async def api(self) -> Any:
        """The kr8s API object, built (and its ``/version`` checked) on first use.

        Raises:
            KubeApiError: the server cannot be reached or refuses the credentials.
        """
        loop = asyncio.get_running_loop()
        if self._api is not None and self.access.token_source is not None \
                and loop.time() - self._token_at > TOKEN_MAX_AGE_S:
            await self.close()                       # the token ages: a new Api with a fresh one
        if self._api is None:
            if self.access.token_source is not None and loop.time() - self._token_at > TOKEN_MAX_AGE_S:
                try:
                    self.access = dataclasses.replace(self.access, token=await self.access.token_source())
                except (RemoteError, TimeoutError) as exc:
                    raise KubeApiError(f"Kubernetes API: no fresh token: {exc}", code=401) from None
                self._token_at = loop.time()
            try:
                async with asyncio.timeout(self.timeout_s):
                    # Our own Api, not kr8s.asyncio.api()'s per-loop cache: a cached one is shared by every
                    # client of the same cluster, and one client's close() would cut the others' session.
                    kubeconfig: Any = self.access.kubeconfig or kubeconfig_of(self.access)
                    api = kr8s.asyncio.Api(bypass_factory=True, kubeconfig=kubeconfig,
                                           context=self.access.context or None)
                    api.timeout = self.timeout_s
                    await api
                    _drop_temp_files(api)
            except _CAUGHT as exc:
                where = self.access.server or f"context {self.access.context or '(current)'}"
                raise kube_error(exc, f"the API server at {where}", self.timeout_s) from None
            self._api = api
        return self._api

    async def list_all(self, version: str, plural: str, *, namespace: str | None = None,
                   label_selector: str = "", field_selector: str = "") -> list[JsonDict]:
        """Every object of a collection (``version`` ``v1`` / ``apps/v1`` / ``group/vN``), paged and bounded.

        Raises:
            KubeApiError: an answer other than a list (404 when the kind is not served), or no answer in time.
        """
        api = await self.api()
        items: list[JsonDict] = []
        token, what = "", f"list {plural}"
        params: dict[str, str | int] = {"limit": PAGE_ITEMS}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        try:
            async with asyncio.timeout(self.timeout_s):
                for _ in range(MAX_PAGES):
                    page = dict(params, **({"continue": token} if token else {}))
                    async with api.call_api("GET", version=version, namespace=namespace, url=plural,
                                            params=page) as response:
                        body = response.json()
                    if not isinstance(body, dict) or not isinstance(body.get("items"), list):
                        raise KubeApiError(f"{what}: the answer is not a list")
                    items += [i for i in body["items"][:PAGE_ITEMS] if isinstance(i, dict)]
                    token = (body.get("metadata") or {}).get("continue") or ""
                    if not isinstance(token, str) or not token:
                        break
        except _CAUGHT as exc:
            raise kube_error(exc, what, self.timeout_s) from None
        return items

    async def get(self, version: str, plural: str, namespace: str | None, name: str) -> JsonDict:
        """One object. Raises :class:`KubeApiError` (404 when it does not exist)."""
        api = await self.api()
        what = f"get {plural}/{name}"
        try:
            async with asyncio.timeout(self.timeout_s):
                async with api.call_api("GET", version=version, namespace=namespace,
                                        url=f"{plural}/{name}") as response:
                    body = response.json()
        except _CAUGHT as exc:
            raise kube_error(exc, what, self.timeout_s) from None
        if not isinstance(body, dict):
            raise KubeApiError(f"{what}: the answer is not an object")
        return body

    async def json_patch(self, namespace: str, name: str, ops: list[JsonDict], *, kind: str = "Deployment") -> JsonDict:
        """Apply a JSON patch (RFC 6902) to a Deployment or a LeaderWorkerSet (``kind``) and return the object
        the server answered with.

        Raises:
            KubeApiError: 422 (a ``test`` op failed: the object changed since it was read; or the patched
                object is invalid), 404, 409, or no answer in time.
        """
        kinds: dict[str, type[APIObject]] = {"Deployment": Deployment, "LeaderWorkerSet": LeaderWorkerSet}
        if kind not in kinds:
            raise KubeApiError(f"patch {kind}/{name}: only Deployments and LeaderWorkerSets are patched")
        api = await self.api()
        obj = kinds[kind]({"metadata": {"name": name, "namespace": namespace}}, api=api)
        try:
            async with asyncio.timeout(self.timeout_s):
                await obj.patch(ops, type="json")
        except kr8s.NotFoundError:
            raise KubeApiError(f"patch {kind.lower()}/{name}: not found in namespace {namespace}", code=404) from None
        except _CAUGHT as exc:
            raise kube_error(exc, f"patch {kind.lower()}/{name}", self.timeout_s) from None
        raw = obj.raw
        return dict(raw) if isinstance(raw, dict) else json.loads(json.dumps(raw))

    async def follow_log(self, namespace: str, pod: str, container: str, *, since_time: str | None = None,
                         max_lines: int = 2_000_000, idle_s: float | None = None) -> AsyncIterator[str]:
        """The pod's log lines, followed (``follow=true``, ``timestamps=true``, ``sinceTime`` to resume),
        each ``"RFC3339NANO TEXT"``; ends when the server ends the stream, after ``max_lines``, or after
        ``idle_s`` (default: ``timeout_s`` x 30) without a line.

        Raises:
            KubeApiError: 400 while the container is waiting to start, 404, or no connection.
        """
        api = await self.api()
        params: dict[str, str] = {"follow": "true", "timestamps": "true", "container": container}
        if since_time:
            params["sinceTime"] = since_time
        idle = idle_s if idle_s is not None else self.timeout_s * 30
        try:
            async with contextlib.AsyncExitStack() as stack:
                response = await stack.enter_async_context(api.call_api(
                    "GET", version="v1", namespace=namespace, url=f"pods/{pod}/log", params=params,
                    stream=True, timeout=httpx.Timeout(self.timeout_s, read=idle)))
                lines = response.aiter_lines()
                for _ in range(max_lines):
                    try:
                        async with asyncio.timeout(idle):
                            line = await anext(lines)
                    except StopAsyncIteration:
                        return
                    yield line[:MAX_LINE_CHARS]
        except _CAUGHT as exc:
            raise kube_error(exc, f"log of pod {pod}", self.timeout_s) from None

    async def close(self) -> None:
        """Close the HTTP session (idempotent)."""
        session = getattr(self._api, "_session", None)
        if self._api is not None:
            _drop_temp_files(self._api)
        self._api = None
        if session is not None:
            with contextlib.suppress(RuntimeError, httpx.HTTPError):
                await session.aclose()



def _drop_temp_files(api: Any) -> None:
    """Remove the files kr8s wrote for a kubeconfig's ``*-data`` entries (the CA; a client certificate and
    KEY) once its session holds them in memory: kr8s writes them with ``delete=False`` and never removes
    them, so every client left one (and a client key) in the temp folder."""
    auth = getattr(api, "auth", None)
    cluster, user = getattr(auth, "_cluster", None) or {}, getattr(auth, "_user", None) or {}
    for attr, source, key in (("server_ca_file", cluster, "certificate-authority-data"),
                              ("client_cert_file", user, "client-certificate-data"),
                              ("client_key_file", user, "client-key-data")):
        path = getattr(auth, attr, None)
        if key in source and path:
            with contextlib.suppress(OSError):
                os.unlink(str(path))
