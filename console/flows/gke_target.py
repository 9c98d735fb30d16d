"""The one grammar for a GKE workload wherever a NODE is taken, and finding the workload it names.

``deploy/NAME`` (a Deployment) or ``lws/NAME`` (a LeaderWorkerSet; ``deployment/`` and
``leaderworkerset/`` as kubectl spells them too), with ``--cluster C`` (optional when one listed cluster
has the workload) and ``--namespace N`` (default ``default``). Names are checked against Kubernetes'
rules (a workload: a DNS-1123 subdomain; a namespace: a DNS-1123 label; a cluster: GKE's rule) before
anything reaches an API path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from remote.gke.models import WORKLOAD_KINDS, Workload
from remote.gke.parse import generation_of_accelerator
from remote.models import Node
from remote.printable import shown_name

if TYPE_CHECKING:
    from remote.gke.fleet import GkeSource
    from remote.gke.kube import KubeClient
    from remote.gke.models import GkeFleet

#: kubectl's words for the kinds -> the grammar's.
_ALIASES = {"deploy": "deploy", "deployment": "deploy", "deployments": "deploy", "lws": "lws",
            "leaderworkerset": "lws", "leaderworkersets": "lws"}
_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?")
_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
_CLUSTER = re.compile(r"[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?")
_CONTEXT = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.@:]{0,252}")


class WorkloadSpecError(ValueError):
    """A workload spec, namespace or cluster that breaks the grammar or a naming rule (one sentence)."""


@dataclass(frozen=True)
class WorkloadSpec:
    """A workload named on the command line.

    Attributes:
        kind: ``Deployment`` or ``LeaderWorkerSet``.
        name: the object's name.
        namespace: its namespace (``default`` unless ``--namespace``).
        cluster: ``--cluster``, or ``None`` (any listed cluster that has it, when only one does).
    """

    kind: str
    name: str
    namespace: str = "default"
    cluster: str | None = None

    @property
    def ref(self) -> str:
        """``deploy/NAME`` or ``lws/NAME``."""
        return f"{next(k for k, v in WORKLOAD_KINDS.items() if v == self.kind)}/{self.name}"


def is_workload_spec(text: str | None) -> bool:
    """Whether a NODE argument names a workload (``deploy/...``, ``lws/...``) rather than a TPU node."""
    return bool(text) and "/" in str(text) and str(text).split("/", 1)[0].lower() in _ALIASES


def parse_workload_spec(text: str, *, namespace: str | None = None, cluster: str | None = None) -> WorkloadSpec:
    """``deploy/NAME`` / ``lws/NAME`` with ``--namespace`` and ``--cluster`` as a :class:`WorkloadSpec`.

    Raises:
        WorkloadSpecError: not KIND/NAME, an unknown kind, or a name that breaks its rule.
    """
    word, _, name = text.partition("/")
    kind = _ALIASES.get(word.lower())
    if kind is None or not name or "/" in name:
        raise WorkloadSpecError(f"{shown_name(text)} is not deploy/NAME or lws/NAME")
    if not _SUBDOMAIN.fullmatch(name):
        raise WorkloadSpecError(f"{shown_name(name)} is not a Kubernetes object name (lowercase letters, digits, "
                                "'-' and '.', starting and ending with a letter or digit, at most 253 characters)")
    ns = namespace or "default"
    if not _LABEL.fullmatch(ns):
        raise WorkloadSpecError(f"--namespace {shown_name(ns)} is not a namespace name (lowercase letters, digits "
                                "and '-', starting and ending with a letter or digit, at most 63 characters)")
    if cluster is not None and not (_CLUSTER.fullmatch(cluster) or _CONTEXT.fullmatch(cluster)):
        raise WorkloadSpecError(f"--cluster {shown_name(cluster)} is not a GKE cluster name or kubeconfig context")
    return WorkloadSpec(WORKLOAD_KINDS[kind], name, ns, cluster)


def pick_workload(fleet: GkeFleet, spec: WorkloadSpec) -> Workload:
    """The one listed workload ``spec`` names.

    Raises:
        WorkloadSpecError: none (saying which clusters were searched and which did not answer), or
            several clusters have it and ``--cluster`` was not given (naming them).
    """
    matches = [w for w in fleet.workloads if w.kind == spec.kind and w.name == spec.name
               and w.namespace == spec.namespace and (spec.cluster is None or w.cluster == spec.cluster)]
    if len(matches) == 1:
        return matches[0]
    where = f"namespace {spec.namespace}" + (f" of cluster {spec.cluster}" if spec.cluster else "")
    if matches:
        clusters = ", ".join(sorted(f"{w.project}/{w.location}/{w.cluster}" for w in matches))
        raise WorkloadSpecError(f"{spec.ref} is in {len(matches)} clusters ({clusters}): say which with --cluster C")
    searched = ", ".join(sorted({c.ref.name for c in fleet.clusters})) or "none"
    silent = "; ".join(f"{p.where}: {p.message}" for p in fleet.problems[:3])
    raise WorkloadSpecError(f"no {spec.ref} in {where} (clusters searched: {searched})"
                            + (f"; did not answer: {silent}" if silent else ""))


async def find_workload(source: GkeSource, spec: WorkloadSpec) -> tuple[Workload, KubeClient]:
    """List the GKE fleet once and return the workload ``spec`` names with its cluster's client.

    Raises:
        WorkloadSpecError: see :func:`pick_workload`.
        CredentialsError: no Google credentials for the GKE API.
    """
    fleet = await source.list_fleet()
    workload = pick_workload(fleet, spec)
    ref = next(c.ref for c in fleet.clusters if c.ref.name == workload.cluster
               and c.ref.project == workload.project and c.ref.location == workload.location)
    return workload, source.client(ref)


#: Accelerator type name of a pod's chips per generation (the TPU API's names, what the lints know).
_TYPE_NAMES = {"v5e": "v5litepod-{chips}", "v6e": "v6e-{chips}", "v5p": "v5p-{cores}", "v4": "v4-{cores}"}


def accelerator_type_of(workload: Workload) -> str:
    """The TPU API accelerator type the workload's pod (or LWS group) holds: ``v6e-4``, ``v5litepod-16``; or ``""``."""
    generation = generation_of_accelerator(workload.accelerator)
    chips = (workload.chips or 0) * max(1, workload.size)
    pattern = _TYPE_NAMES.get(generation)
    return pattern.format(chips=chips, cores=2 * chips) if pattern and chips else ""


def lint_node(workload: Workload) -> Node:
    """The workload as the node the VM lints and history queries read (name ``CLUSTER/NAMESPACE/deploy/NAME``)."""
    return Node(project=workload.project or "-", zone=workload.location or "-",
                name=f"{workload.cluster}/{workload.namespace}/{workload.ref}", state="READY",
                accelerator_type=accelerator_type_of(workload), provisioning_model=workload.provisioning_model or "on-demand")
