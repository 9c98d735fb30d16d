"""The GKE side of the fleet: clusters, TPU node pools, vLLM workloads. Frozen dataclasses, stdlib only.

Shapes follow the GKE API (``container.googleapis.com`` v1: ``Cluster``, ``NodePool``) and the
Kubernetes API (``apps/v1`` Deployment, ``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet); parsing lives
in :mod:`remote.gke.parse`. The JSON forms are the ``"node_pools"`` and ``"workloads"`` objects of
``tpu-console nodes --json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Workload kinds, as the grammar names them (``deploy/NAME``, ``lws/NAME``) -> Kubernetes kind.
WORKLOAD_KINDS = {"deploy": "Deployment", "lws": "LeaderWorkerSet"}


@dataclass(frozen=True)
class ClusterRef:
    """Where one GKE cluster is: ``(project, location, name)``; ``location`` is a region or zone.

    ``project`` and ``location`` are ``""`` for a cluster known only from a kubeconfig context.
    """

    project: str
    location: str
    name: str

    @property
    def context_name(self) -> str:
        """The kubeconfig context ``gcloud container clusters get-credentials`` writes:
        ``gke_PROJECT_LOCATION_CLUSTER``."""
        return f"gke_{self.project}_{self.location}_{self.name}"


@dataclass(frozen=True)
class GkeCluster:
    """A cluster as the GKE API lists it.

    Attributes:
        ref: project, location, name.
        endpoint: the control plane's address (``34.1.2.3`` or ``host:port``; ``https://`` is implied).
        ca_pem: the cluster CA (``masterAuth.clusterCaCertificate`` decoded), PEM text, or ``""``.
        status: ``RUNNING``, ``PROVISIONING``, ``RECONCILING``...
        version: ``currentMasterVersion``.
        node_pools: the TPU node pools (other pools are left out).
    """

    ref: ClusterRef
    endpoint: str
    ca_pem: str = ""
    status: str = ""
    version: str = ""
    node_pools: tuple[NodePool, ...] = ()

    @property
    def server(self) -> str:
        """The API server URL: ``https://ENDPOINT``."""
        return self.endpoint if "://" in self.endpoint else f"https://{self.endpoint}"


@dataclass(frozen=True)
class NodePool:
    """A TPU node pool of a GKE cluster.

    Attributes:
        cluster: the cluster's name; ``project`` and ``location`` are the cluster's.
        name: the pool's name (the nodes' ``cloud.google.com/gke-nodepool`` label).
        machine_type: ``ct6e-standard-4t``, ``ct5lp-hightpu-4t``...
        accelerator: the nodes' ``cloud.google.com/gke-tpu-accelerator`` label (``tpu-v6e-slice``), or ``""``.
        topology: ``placementPolicy.tpuTopology`` (``2x4``), or ``""`` for a single-host default.
        provisioning_model: ``on-demand``, ``spot``, ``preemptible``, ``flex-start`` or ``reserved``.
        queued: flex-start through queued provisioning (``queuedProvisioning.enabled``: nodes come with
            each admitted ``ProvisioningRequest``).
        reservation: the reservation's name when one is consumed, else ``""``.
        node_count: nodes now (from the Kubernetes API when it answered, else the pool's initial count).
        chips_per_node: chips of one node, from the machine type's ``-Nt`` suffix, or ``None``.
        chips_in_use: ``google.com/tpu`` requested by running or scheduled pods on the pool's nodes, or
            ``None`` when the cluster's Kubernetes API did not answer.
        status: ``RUNNING``, ``PROVISIONING``, ``ERROR``...
    """

    project: str
    location: str
    cluster: str
    name: str
    machine_type: str
    accelerator: str = ""
    topology: str = ""
    provisioning_model: str = "on-demand"
    queued: bool = False
    reservation: str = ""
    node_count: int = 0
    chips_per_node: int | None = None
    chips_in_use: int | None = None
    status: str = ""

    @property
    def chips(self) -> int | None:
        """Chips of the whole pool now (``node_count`` x ``chips_per_node``), or ``None``."""
        return None if self.chips_per_node is None else self.node_count * self.chips_per_node

    def to_json(self) -> dict[str, Any]:
        """The ``node_pools`` object of ``nodes --json``."""
        return {
            "project": self.project, "location": self.location, "cluster": self.cluster, "name": self.name,
            "machine_type": self.machine_type, "accelerator": self.accelerator or None,
            "topology": self.topology or None, "provisioning_model": self.provisioning_model,
            "queued_provisioning": self.queued, "reservation": self.reservation or None, "node_count": self.node_count,
            "chips": self.chips, "chips_in_use": self.chips_in_use, "status": self.status or None,
        }


@dataclass(frozen=True)
class Workload:
    """A vLLM workload on a GKE cluster: a Deployment or a LeaderWorkerSet.

    Attributes:
        project, location, cluster: the cluster's (``""`` project/location for a kubeconfig context).
        namespace, kind, name: the object (``kind`` is ``Deployment`` or ``LeaderWorkerSet``).
        ready: ready replicas (``status.readyReplicas``; for an LWS, ready groups).
        replicas: desired replicas (``spec.replicas``; for an LWS, groups).
        image: the serving container's image.
        args: the serving container's ``command`` tail and ``args`` as given (``--max-model-len=...``).
        model: the ``--model`` / ``serve MODEL`` it serves, or ``""``.
        accelerator: ``nodeSelector`` ``cloud.google.com/gke-tpu-accelerator``, or ``""``.
        topology: ``nodeSelector`` ``cloud.google.com/gke-tpu-topology``, or ``""``.
        chips: ``google.com/tpu`` limit of the serving container (per pod), or ``None``.
        node_pool: the node pool it lands on (its ``gke-nodepool`` selector, else the one pool that
            matches its accelerator and topology), or ``""``.
        provisioning_model: that pool's (or the ``gke-spot`` selector's), or ``""`` when unknown.
        container: the serving container's name.
        revision: ``deployment.kubernetes.io/revision``, or ``""``.
        resource_version: ``metadata.resourceVersion`` (the guard of a patch).
        strategy: ``Recreate`` / ``RollingUpdate`` (Deployment), or ``""``.
        size: pods per group (LeaderWorkerSet), 1 for a Deployment.
        raw: the object's JSON, for the detail view and the lints.
    """

    project: str
    location: str
    cluster: str
    namespace: str
    kind: str
    name: str
    ready: int = 0
    replicas: int = 0
    image: str = ""
    args: tuple[str, ...] = ()
    model: str = ""
    accelerator: str = ""
    topology: str = ""
    chips: int | None = None
    node_pool: str = ""
    provisioning_model: str = ""
    container: str = ""
    revision: str = ""
    resource_version: str = ""
    strategy: str = ""
    size: int = 1
    raw: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def short_kind(self) -> str:
        """``deploy`` or ``lws``: the grammar's word for the kind."""
        return next((k for k, v in WORKLOAD_KINDS.items() if v == self.kind), self.kind.lower())

    @property
    def ref(self) -> str:
        """``deploy/NAME`` or ``lws/NAME``."""
        return f"{self.short_kind}/{self.name}"

    def to_json(self) -> dict[str, Any]:
        """The ``workloads`` object of ``nodes --json``."""
        return {
            "cluster": self.cluster, "location": self.location or None, "project": self.project or None,
            "namespace": self.namespace, "kind": self.kind, "name": self.name, "ready": self.ready,
            "replicas": self.replicas, "image": self.image, "args": list(self.args), "model": self.model or None,
            "accelerator": self.accelerator or None, "topology": self.topology or None, "chips": self.chips,
            "node_pool": self.node_pool or None, "provisioning_model": self.provisioning_model or None,
            "revision": self.revision or None, "strategy": self.strategy or None,
        }


@dataclass(frozen=True)
class GkeProblem:
    """One project, cluster or listing that did not answer (a 403, a cluster unreachable, a timeout).

    Attributes:
        project: the project id (``""`` for a kubeconfig context).
        location: the cluster's location, or ``None`` when the whole project failed.
        cluster: the cluster's name, or ``None`` when the whole project failed.
        code: HTTP status, or 0 for a timeout / transport failure.
        message: what happened, one line.
    """

    project: str
    location: str | None
    cluster: str | None
    code: int
    message: str

    @property
    def where(self) -> str:
        """``project``, ``project/location/cluster`` or ``context CLUSTER``."""
        if self.cluster is None:
            return f"{self.project} (GKE)"
        if not self.project:
            return f"context {self.cluster}"
        return f"{self.project}/{self.location}/{self.cluster}"

    def to_json(self) -> dict[str, Any]:
        """An ``errors`` object of ``nodes --json`` (the TPU problems' keys, plus ``cluster``)."""
        return {"project": self.project, "zone": self.location, "cluster": self.cluster, "code": self.code,
                "message": self.message}


@dataclass(frozen=True)
class GkeFleet:
    """What one GKE listing saw across the configured projects and contexts.

    Attributes:
        clusters: every cluster listed (TPU node pools inside).
        node_pools: every TPU node pool, sorted by (project, location, cluster, name).
        workloads: every vLLM-looking workload (a TPU limit or a vLLM image), sorted likewise.
        problems: projects or clusters that did not answer (the rest still listed).
    """

    clusters: tuple[GkeCluster, ...] = ()
    node_pools: tuple[NodePool, ...] = ()
    workloads: tuple[Workload, ...] = ()
    problems: tuple[GkeProblem, ...] = ()


@dataclass(frozen=True)
class PodStatus:
    """What a pod's status says of its serving container, in the words an operator watches for.

    Attributes:
        name: the pod's name.
        phase: ``Pending``, ``Running``, ``Succeeded``, ``Failed``, ``Unknown``.
        template_hash: its ``pod-template-hash`` label (which ReplicaSet made it), or ``""``.
        node: the node it is bound to, or ``""`` (not scheduled yet).
        unschedulable: the ``PodScheduled`` condition's message when its reason is ``Unschedulable``
            (``0/2 nodes are available: 2 Insufficient google.com/tpu.``), else ``""``.
        waiting: the container's waiting reason (``ContainerCreating``, ``CrashLoopBackOff``...), or ``""``.
        waiting_message: that state's message, or ``""``.
        running: the container is running (``state.running``).
        terminated: the container's terminated reason (``Error``, ``OOMKilled``, ``Completed``), or ``""``.
        exit_code: the terminated state's exit code, or ``None``.
        ready: the pod's ``Ready`` condition is ``True`` (what a Service routes by).
        ready_since: that condition's ``lastTransitionTime`` (RFC 3339, whole seconds) when ``ready``, else ``""``.
        restarts: the container's ``restartCount``.
        started_at: the running (else terminated) state's ``startedAt`` (RFC 3339), or ``""``.
        deleting: ``metadata.deletionTimestamp`` is set (the pod is going away).
        uid: ``metadata.uid`` (a pod made anew under the same name, as a LeaderWorkerSet remakes its
            group, has a new one), or ``""``.
        labels: the pod's labels.
    """

    name: str
    phase: str = ""
    template_hash: str = ""
    node: str = ""
    unschedulable: str = ""
    waiting: str = ""
    waiting_message: str = ""
    running: bool = False
    terminated: str = ""
    exit_code: int | None = None
    ready: bool = False
    ready_since: str = ""
    restarts: int = 0
    started_at: str = ""
    deleting: bool = False
    uid: str = ""
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def headline(self) -> str:
        """One phrase: ``Pending: Unschedulable: ...``, ``ContainerCreating``, ``Running``, ``Running, Ready``."""
        if self.unschedulable:
            return f"Pending: Unschedulable: {self.unschedulable}"
        if self.waiting:
            return self.waiting + (f": {self.waiting_message}" if self.waiting_message else "")
        if self.terminated:
            return f"Terminated: {self.terminated}" + (f" (exit {self.exit_code})" if self.exit_code is not None else "")
        if self.running:
            return "Running, Ready" if self.ready else "Running"
        return self.phase or "Unknown"
