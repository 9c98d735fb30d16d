"""The GKE part of a fleet listing: clusters of the configured projects (and kubeconfig contexts), their
TPU node pools with the chips in use, and the vLLM workloads on them.

One :meth:`GkeSource.list_fleet` lists every project's clusters (:class:`~remote.gke.discovery.GkeDiscovery`),
then every cluster's nodes, pods, Deployments and LeaderWorkerSets at once (:class:`~remote.gke.kube.KubeClient`).
A project that answers 403, or a cluster whose API does not answer, is one :class:`GkeProblem`; the rest
still list (a cluster that did not answer keeps its node pools, with ``chips_in_use`` unknown).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from remote.errors import CredentialsError, KubeApiError
from remote.gke.discovery import ClusterAccess, GkeDiscovery
from remote.gke.kube import KubeClient
from remote.gke.models import ClusterRef, GkeCluster, GkeFleet, GkeProblem, NodePool, Workload
from remote.gke.parse import (
    chips_in_use,
    node_pool_counts,
    node_pool_of_nodes,
    pools_from_nodes,
    workload_from_json,
)
from remote.tpu.api import ProjectConfig

#: LeaderWorkerSet's API (kubernetes-sigs/lws); a cluster without the CRD answers 404.
LWS_VERSION = "leaderworkerset.x-k8s.io/v1"


def kubeconfig_contexts(path: str) -> dict[str, str]:
    """The contexts of a kubeconfig file: name -> its cluster's ``server`` (``{}`` when unreadable)."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).expanduser().read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    if not isinstance(data, dict):
        return {}

    def named(key: str) -> dict[str, dict[str, Any]]:
        items = data.get(key)
        return {i["name"]: i.get(key[:-1]) or {} for i in (items[:1000] if isinstance(items, list) else [])
                if isinstance(i, dict) and isinstance(i.get("name"), str)}
    clusters = named("clusters")
    return {name: str((clusters.get(str(ctx.get("cluster"))) or {}).get("server") or "")
            for name, ctx in named("contexts").items() if isinstance(ctx, dict)}


class GkeSource:
    """Lists GKE clusters, node pools and workloads.

    Args:
        projects: projects whose clusters to list (``discover`` false: none).
        api_endpoint: GKE API override (``http://`` loopback: anonymous, the sandbox).
        timeout_s: deadline of each whole call, seconds.
        kubeconfig: a kubeconfig whose ``gke_PROJECT_LOCATION_CLUSTER`` contexts give the credentials of
            the clusters they name, and whose ``contexts`` are listed too.
        contexts: kubeconfig contexts to list as clusters of their own (no GKE API needed).
        discover: list the projects' clusters through the GKE API.
        credentials: google-auth credentials instead of ADC.
    """

    def __init__(self, projects: Sequence[ProjectConfig], *, api_endpoint: str | None = None,
                 timeout_s: float = 20.0, kubeconfig: str | None = None, contexts: Sequence[str] = (),
                 discover: bool = True, credentials: Any = None) -> None:
        self.discovery = GkeDiscovery(projects if discover else (), api_endpoint=api_endpoint,
                                      timeout_s=timeout_s, credentials=credentials)
        self.timeout_s = timeout_s
        self.kubeconfig = str(Path(kubeconfig).expanduser()) if kubeconfig else ""
        self.contexts = tuple(contexts)
        self._clients: dict[ClusterRef, KubeClient] = {}
        self.clusters: dict[ClusterRef, GkeCluster] = {}

    def _context_of(self, cluster: GkeCluster, known: dict[str, str]) -> str:
        """The kubeconfig context for ``cluster``: ``gke_PROJECT_LOCATION_CLUSTER`` (what gcloud writes), else
        the one context whose server is the cluster's endpoint; ``""`` when none."""
        if cluster.ref.context_name in known:
            return cluster.ref.context_name
        same = [name for name, server in known.items() if server.rstrip("/") == cluster.server.rstrip("/")]
        return same[0] if len(same) == 1 else ""

    def _access(self, cluster: GkeCluster, token: str, known: dict[str, str]) -> ClusterAccess:
        if context := self._context_of(cluster, known):
            return ClusterAccess(kubeconfig=self.kubeconfig, context=context)
        return self.discovery.access(cluster, token)

    def client(self, ref: ClusterRef, access: ClusterAccess | None = None) -> KubeClient:
        """The (cached) Kubernetes client of a listed cluster (``access`` given the first time)."""
        if ref not in self._clients:
            assert access is not None, f"cluster {ref} was not listed"
            self._clients[ref] = KubeClient(access, timeout_s=self.timeout_s)
        return self._clients[ref]

    async def list_fleet(self) -> GkeFleet:
        """Clusters, TPU node pools and workloads of every project and context.

        Raises:
            CredentialsError: no usable Google credentials for the GKE API.
        """
        clusters, problems = await self.discovery.list_clusters()
        known = kubeconfig_contexts(self.kubeconfig) if self.kubeconfig else {}
        token = ""
        if any(not self._context_of(c, known) for c in clusters):
            try:
                token = await self.discovery.token()
            except (CredentialsError, TimeoutError) as exc:
                problems.append(GkeProblem("", None, None, 401, f"no token for the clusters' APIs: {exc}"))
        for cluster in clusters:
            self.client(cluster.ref, self._access(cluster, token, known))
            self.clusters[cluster.ref] = cluster
        for context in self.contexts:
            ref = ClusterRef("", "", context)
            clusters.append(GkeCluster(ref=ref, endpoint=""))
            self.client(ref, ClusterAccess(kubeconfig=self.kubeconfig, context=context))
            self.clusters[ref] = clusters[-1]
        found = await asyncio.gather(*(self._list_cluster(c) for c in clusters))
        pools = sorted((p for ps, _, _ in found for p in ps), key=lambda p: (p.project, p.location, p.cluster, p.name))
        workloads = sorted((w for _, ws, _ in found for w in ws),
                           key=lambda w: (w.project, w.location, w.cluster, w.namespace, w.name))
        problems += [p for _, _, ps in found for p in ps]
        return GkeFleet(clusters=tuple(clusters), node_pools=tuple(pools), workloads=tuple(workloads),
                        problems=tuple(problems))

    async def _list_cluster(self, cluster: GkeCluster) -> tuple[list[NodePool], list[Workload], list[GkeProblem]]:
        """One cluster's pools (with nodes and chips in use) and workloads; a problem when it did not answer."""
        ref, kube = cluster.ref, self.client(cluster.ref)
        problem = GkeProblem(ref.project, ref.location, ref.name, 0, "")
        try:
            nodes, pods, deployments, lws = await asyncio.gather(
                kube.list_all("v1", "nodes"), kube.list_all("v1", "pods"), kube.list_all("apps/v1", "deployments"),
                self._lws(kube))
        except KubeApiError as exc:
            return list(cluster.node_pools), [], [dataclasses.replace(problem, code=exc.code, message=exc.message)]
        pools = list(cluster.node_pools) if cluster.endpoint else pools_from_nodes(ref, nodes)
        counts, used = node_pool_counts(nodes), chips_in_use(pods, node_pool_of_nodes(nodes))
        pools = [dataclasses.replace(p, node_count=counts.get(p.name, p.node_count), chips_in_use=used.get(p.name, 0))
                 for p in pools]
        workloads = [w for obj in deployments + lws
                     if (w := workload_from_json(_with_kind(obj, deployments), ref, pools)) is not None]
        return pools, workloads, []

    async def _lws(self, kube: KubeClient) -> list[dict[str, Any]]:
        try:
            return await kube.list_all(LWS_VERSION, "leaderworkersets")
        except KubeApiError as exc:
            if exc.code == 404:          # the LeaderWorkerSet CRD is not installed
                return []
            raise

    async def close(self) -> None:
        """Close every cluster's session and the GKE client (idempotent)."""
        for kube in self._clients.values():
            await kube.close()
        self.discovery.close()


def _with_kind(obj: dict[str, Any], deployments: list[dict[str, Any]]) -> dict[str, Any]:
    """A list's item with its ``kind`` (list items may leave it out)."""
    if isinstance(obj.get("kind"), str):
        return obj
    return {**obj, "kind": "Deployment" if any(obj is d for d in deployments) else "LeaderWorkerSet"}
