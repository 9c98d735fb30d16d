"""GKE clusters and their TPU node pools across projects, and the credentials to reach each cluster.

The GKE API through google-cloud-container's sync REST client (``ClusterManagerClient``), one
``projects.locations.clusters.list`` per project at ``locations/-`` (every region and zone at once; the
answer carries every node pool), run on a daemon thread pool with a whole-call deadline
(:class:`remote.deadline.DeadlineAdapter` on the transport's session), as :mod:`remote.tpu.api` runs the
TPU client. ``http://`` loopback endpoints (the sandbox) use anonymous credentials.

Credentials to a cluster, as ``gcloud container clusters get-credentials`` writes them: the endpoint and
CA from the GKE API, a bearer token from Application Default Credentials (the same ``cloud-platform``
scope ``gke-gcloud-auth-plugin`` asks for); or the user of the kubeconfig context
``gke_PROJECT_LOCATION_CLUSTER`` when a kubeconfig has it (the sandbox's kubeconfig does).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.auth.credentials import AnonymousCredentials
from google.auth.transport.requests import Request
from google.cloud import container_v1

from remote.deadline import DaemonThreadPool, bound_session
from remote.errors import CredentialsError, TpuApiError
from remote.gke.models import GkeCluster, GkeProblem
from remote.gke.parse import cluster_from_json
from remote.tpu.api import _CAUGHT, ProjectConfig, api_error, credentials_for


@dataclass(frozen=True)
class ClusterAccess:
    """How to reach one cluster's Kubernetes API.

    Attributes:
        server: ``https://HOST[:PORT]``.
        ca_pem: the CA to verify it with (PEM), or ``""`` for the system's.
        token: the bearer token, or ``""`` (kept in memory only; never logged or stored).
        kubeconfig: a kubeconfig path to read the context from instead (then ``server`` may be ``""``).
        context: the context of ``kubeconfig`` to use.
        token_source: gives a fresh ``token`` (ADC tokens live an hour: a long watch asks again), or ``None``.
    """

    server: str = ""
    ca_pem: str = ""
    token: str = ""
    kubeconfig: str = ""
    context: str = ""
    token_source: Callable[[], Awaitable[str]] | None = field(default=None, compare=False)

    def __repr__(self) -> str:          # the token never reaches a log line or a traceback
        return f"ClusterAccess(server={self.server!r}, kubeconfig={self.kubeconfig!r}, context={self.context!r})"


class GkeDiscovery:
    """Lists GKE clusters (TPU node pools inside) of many projects, concurrently.

    Args:
        projects: projects to list (their ``zones`` are not used: clusters list at ``locations/-``).
        api_endpoint: GKE API override; ``http://`` (the sandbox) uses anonymous credentials.
        timeout_s: the deadline of each whole call, seconds.
        credentials: google-auth credentials instead of ADC.
    """

    def __init__(self, projects: Sequence[ProjectConfig], *, api_endpoint: str | None = None,
                 timeout_s: float = 20.0, credentials: Any = None) -> None:
        self.projects = tuple(projects)
        self.api_endpoint = api_endpoint
        self.timeout_s = timeout_s
        self._credentials = credentials
        self._pool = DaemonThreadPool(max(4, min(32, len(self.projects) + 2)), "gke-api")
        self._lock = threading.Lock()
        self._client: container_v1.ClusterManagerClient | None = None

    @property
    def anonymous(self) -> bool:
        """Whether the GKE API is a loopback stand-in reached without credentials."""
        return bool(self.api_endpoint and self.api_endpoint.startswith("http://"))

    def _setup(self) -> container_v1.ClusterManagerClient:
        with self._lock:
            if self._client is None:
                creds = self._credentials = credentials_for(self.api_endpoint, self._credentials)
                options = {"api_endpoint": self.api_endpoint} if self.api_endpoint else None
                client = container_v1.ClusterManagerClient(transport="rest", credentials=creds,
                                                           client_options=options)
                bound_session(getattr(client.transport, "_session", None), 8)
                self._client = client
            return self._client

    async def _run(self, fn: Any, *args: Any) -> Any:
        def call() -> Any:
            try:
                return fn(*args)
            except _CAUGHT as exc:
                raise api_error(exc, self.timeout_s) from exc
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def _list_one(self, project: str) -> tuple[list[GkeCluster], list[GkeProblem]]:
        client = self._setup()
        response = client.list_clusters(parent=f"projects/{project}/locations/-", timeout=self.timeout_s)
        clusters = [cluster_from_json(container_v1.Cluster.to_dict(
            c, preserving_proto_field_name=False, use_integers_for_enums=False), project)
            for c in list(response.clusters)[:1000]]
        problems = [GkeProblem(project, zone, None, 0, f"zone {zone} did not answer the GKE API (missingZones)")
                    for zone in list(response.missing_zones)[:100]]
        return clusters, problems

    async def list_clusters(self) -> tuple[list[GkeCluster], list[GkeProblem]]:
        """Every cluster of every project: ``(clusters sorted by project/location/name, problems)``.

        A project that answers 403/404/5xx or does not answer in time is one :class:`GkeProblem`; the
        others still list.

        Raises:
            CredentialsError: no usable Google credentials (only when the API is not a loopback stand-in).
        """
        async def one(project: str) -> tuple[list[GkeCluster], list[GkeProblem]]:
            try:
                return await asyncio.wait_for(self._run(self._list_one, project), self.timeout_s + 5)
            except TimeoutError:
                return [], [GkeProblem(project, None, None, 0, f"the GKE API did not answer in {self.timeout_s:g} s")]
            except TpuApiError as exc:
                return [], [GkeProblem(project, None, None, exc.code, f"GKE API: {exc.message}")]

        found = await asyncio.gather(*(one(p.id) for p in self.projects))
        clusters = sorted((c for cs, _ in found for c in cs), key=lambda c: (c.ref.project, c.ref.location, c.ref.name))
        return clusters, [p for _, ps in found for p in ps]

    async def token(self) -> str:
        """A bearer token for the clusters' Kubernetes APIs: the ADC access token (refreshed when
        stale), or ``""`` with anonymous credentials (the sandbox).

        Raises:
            CredentialsError: the credentials cannot give a token.
        """
        if self.anonymous and self._credentials is None:
            return ""
        await asyncio.get_running_loop().run_in_executor(self._pool, self._setup)
        creds = self._credentials
        if isinstance(creds, AnonymousCredentials):
            return ""

        def refresh() -> str:
            if not getattr(creds, "valid", False):
                try:
                    creds.refresh(Request())
                except _CAUGHT as exc:
                    raise CredentialsError(f"Google credentials could not give a token: {exc}") from None
            return str(getattr(creds, "token", "") or "")
        return await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(self._pool, refresh),
                                      self.timeout_s)

    def access(self, cluster: GkeCluster, token: str) -> ClusterAccess:
        """The :class:`ClusterAccess` of ``cluster`` with ``token`` (renewed by :meth:`token` when it ages)."""
        return ClusterAccess(server=cluster.server, ca_pem=cluster.ca_pem, token=token,
                             token_source=self.token if token else None)

    def close(self) -> None:
        """Stop the threads and close the HTTP session (idempotent)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._client is not None:
            self._client.transport.close()
