"""Server-side printing: the ``meta.k8s.io/v1`` ``Table`` the API server answers when a client asks
``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` (what ``kubectl get`` shows), with the columns
the real server prints for pods, deployments, replica sets, nodes, namespaces and events. Each row's
``object`` is the object (``includeObject=Object``) or its ``PartialObjectMetadata`` (the default).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sandbox.gke.store import JsonDict, parse_rfc3339


def human_age(seconds: float) -> str:
    """Kubernetes' ``HumanDuration``: ``45s``, ``2m30s``, ``10m``, ``3h15m``, ``5d``."""
    s = int(max(0, seconds))
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d"


def _age(obj: JsonDict) -> str:
    stamp = obj.get("metadata", {}).get("creationTimestamp")
    return human_age(time.time() - parse_rfc3339(stamp)) if stamp else "<unknown>"


def pod_status_word(pod: JsonDict) -> str:
    """The STATUS column of ``kubectl get pods``: Terminating, a waiting reason, or the phase."""
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return str(waiting["reason"])
    return str((pod.get("status") or {}).get("phase", "Pending"))


def _pod_row(pod: JsonDict) -> list[Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount", 0)) for s in statuses)
    status = pod.get("status") or {}
    return [pod["metadata"]["name"], f"{ready}/{len(pod['spec'].get('containers') or [])}", pod_status_word(pod),
            restarts, _age(pod), status.get("podIP", "<none>"), pod["spec"].get("nodeName", "<none>"), "<none>",
            "<none>"]


def _deployment_row(d: JsonDict) -> list[Any]:
    status = d.get("status") or {}
    containers = d["spec"]["template"]["spec"].get("containers") or []
    selector = ",".join(f"{k}={v}" for k, v in (d["spec"].get("selector") or {}).get("matchLabels", {}).items())
    return [d["metadata"]["name"], f"{status.get('readyReplicas', 0)}/{d['spec'].get('replicas', 1)}",
            status.get("updatedReplicas", 0), status.get("availableReplicas", 0), _age(d),
            ",".join(c["name"] for c in containers), ",".join(c.get("image", "") for c in containers), selector]


def _replicaset_row(rs: JsonDict) -> list[Any]:
    status = rs.get("status") or {}
    return [rs["metadata"]["name"], rs["spec"].get("replicas", 0), status.get("replicas", 0),
            status.get("readyReplicas", 0), _age(rs)]


def _node_row(node: JsonDict) -> list[Any]:
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])
    return [node["metadata"]["name"], "Ready" if ready else "NotReady", "<none>", _age(node),
            node["status"]["nodeInfo"]["kubeletVersion"]]


def _namespace_row(ns: JsonDict) -> list[Any]:
    return [ns["metadata"]["name"], (ns.get("status") or {}).get("phase", "Active"), _age(ns)]


def _event_row(event: JsonDict) -> list[Any]:
    last = event.get("lastTimestamp")
    seen = human_age(time.time() - parse_rfc3339(last)) if last else "<unknown>"
    involved = event["involvedObject"]
    return [seen, event.get("type", ""), event.get("reason", ""),
            f"{involved['kind'].lower()}/{involved['name']}", event.get("message", "")]


def _columns(*names: tuple[str, str, int]) -> list[JsonDict]:
    return [{"name": n, "type": t, "format": "name" if n == "Name" else "", "description": n, "priority": p}
            for n, t, p in names]


TABLES: dict[str, tuple[list[JsonDict], Callable[[JsonDict], list[Any]]]] = {
    "pods": (_columns(("Name", "string", 0), ("Ready", "string", 0), ("Status", "string", 0),
                      ("Restarts", "string", 0), ("Age", "string", 0), ("IP", "string", 1), ("Node", "string", 1),
                      ("Nominated Node", "string", 1), ("Readiness Gates", "string", 1)), _pod_row),
    "deployments": (_columns(("Name", "string", 0), ("Ready", "string", 0), ("Up-to-date", "integer", 0),
                             ("Available", "string", 0), ("Age", "string", 0), ("Containers", "string", 1),
                             ("Images", "string", 1), ("Selector", "string", 1)), _deployment_row),
    "replicasets": (_columns(("Name", "string", 0), ("Desired", "integer", 0), ("Current", "integer", 0),
                             ("Ready", "integer", 0), ("Age", "string", 0)), _replicaset_row),
    "nodes": (_columns(("Name", "string", 0), ("Status", "string", 0), ("Roles", "string", 0), ("Age", "string", 0),
                       ("Version", "string", 0)), _node_row),
    "namespaces": (_columns(("Name", "string", 0), ("Status", "string", 0), ("Age", "string", 0)), _namespace_row),
    "events": (_columns(("Last Seen", "string", 0), ("Type", "string", 0), ("Reason", "string", 0),
                        ("Object", "string", 0), ("Message", "string", 0)), _event_row),
}


def wants_table(accept: str) -> bool:
    """Whether an ``Accept`` header asks for a ``meta.k8s.io`` Table."""
    return "as=Table" in accept and "g=meta.k8s.io" in accept


def as_table(resource: str, items: list[JsonDict], resource_version: str, include: str) -> JsonDict | None:
    """The Table for ``items`` (typed objects with kind/apiVersion), or ``None`` for resources without one.

    ``include``: ``Object``, ``Metadata`` (default) or ``None`` (the ``includeObject`` parameter).
    """
    table = TABLES.get(resource)
    if table is None:
        return None
    columns, row = table
    rows = []
    for item in items:
        entry: JsonDict = {"cells": row(item)}
        if include == "Object":
            entry["object"] = item
        elif include != "None":
            entry["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                               "metadata": item["metadata"]}
        rows.append(entry)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": columns, "rows": rows}
