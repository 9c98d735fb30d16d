"""Discovery documents of the Kubernetes API stand-in: ``/version``, ``/api``, ``/api/v1``, ``/apis`` and
``/apis/apps/v1`` in their unaggregated forms (``APIVersions``, ``APIResourceList``, ``APIGroupList``).
kubectl 1.32 asks for aggregated discovery first and falls back to these when the answer is plain JSON."""

from __future__ import annotations

from sandbox.gke.cluster_data import K8S_VERSION
from sandbox.gke.store import JsonDict

_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def _resource(name: str, singular: str, kind: str, namespaced: bool, verbs: list[str],
              short: list[str] | None = None, group: str = "") -> JsonDict:
    out: JsonDict = {"name": name, "singularName": singular, "namespaced": namespaced, "kind": kind,
                     "verbs": verbs, "storageVersionHash": "sandbox0000="}
    if short:
        out["shortNames"] = short
    if group == "apps" and name in ("deployments", "replicasets"):
        out["categories"] = ["all"]
    if name == "pods":
        out["categories"] = ["all"]
    return out


def version_json() -> JsonDict:
    """``/version``: the cluster's Kubernetes version as GKE reports it."""
    major, minor = K8S_VERSION.split(".")[:2]
    return {"major": major, "minor": minor, "emulationMajor": major, "emulationMinor": minor,
            "minCompatibilityMajor": major, "minCompatibilityMinor": str(int(minor) - 1),
            "gitVersion": f"v{K8S_VERSION}", "gitCommit": "0" * 40, "gitTreeState": "clean",
            "buildDate": "2026-10-01T00:00:00Z", "goVersion": "go1.24.6 X:boringcrypto", "compiler": "gc",
            "platform": "linux/amd64"}


def api_versions(server_address: str) -> JsonDict:
    """``/api``."""
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def core_v1() -> JsonDict:
    """``/api/v1``: namespaces, nodes, pods (with log, portforward, status), events, services."""
    return {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        _resource("events", "event", "Event", True, _WRITE, ["ev"]),
        _resource("namespaces", "namespace", "Namespace", False, ["create", "delete", "get", "list", "patch",
                                                                   "update", "watch"], ["ns"]),
        _resource("nodes", "node", "Node", False, _WRITE, ["no"]),
        _resource("pods", "pod", "Pod", True, _WRITE, ["po"]),
        {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
        {"name": "pods/portforward", "singularName": "", "namespaced": True, "kind": "PodPortForwardOptions",
         "verbs": ["create", "get"]},
        {"name": "pods/status", "singularName": "", "namespaced": True, "kind": "Pod",
         "verbs": ["get", "patch", "update"]},
        _resource("services", "service", "Service", True, _WRITE, ["svc"]),
    ]}


def apis() -> JsonDict:
    """``/apis``: the ``apps`` group and LeaderWorkerSet's (its CRD is installed, as on GKE clusters that
    serve multi-host vLLM)."""
    groups = []
    for name in ("apps", "leaderworkerset.x-k8s.io"):
        version = {"groupVersion": f"{name}/v1", "version": "v1"}
        groups.append({"name": name, "versions": [version], "preferredVersion": version})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def lws_v1() -> JsonDict:
    """``/apis/leaderworkerset.x-k8s.io/v1``: leaderworkersets (short name ``lws``)."""
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "leaderworkerset.x-k8s.io/v1",
            "resources": [_resource("leaderworkersets", "leaderworkerset", "LeaderWorkerSet", True, _WRITE, ["lws"])]}


def apps_v1() -> JsonDict:
    """``/apis/apps/v1``: deployments (with scale and status) and replica sets."""
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1", "resources": [
        _resource("deployments", "deployment", "Deployment", True, _WRITE, ["deploy"], group="apps"),
        {"name": "deployments/scale", "singularName": "", "namespaced": True, "group": "autoscaling",
         "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]},
        {"name": "deployments/status", "singularName": "", "namespaced": True, "kind": "Deployment",
         "verbs": ["get", "patch", "update"]},
        _resource("replicasets", "replicaset", "ReplicaSet", True, _WRITE, ["rs"], group="apps"),
        {"name": "replicasets/status", "singularName": "", "namespaced": True, "kind": "ReplicaSet",
         "verbs": ["get", "patch", "update"]},
    ]}
