"""Kubernetes ``Event`` objects (core/v1) the controller, scheduler and kubelet stand-ins record,
shaped as ``kubectl describe`` and ``kubectl events`` read them."""

from __future__ import annotations

import itertools
import time

from sandbox.gke.store import RESOURCES, JsonDict, ObjectStore, rfc3339

_SEQUENCE = itertools.count()


def record_event(store: ObjectStore, resource: str, obj: JsonDict, reason: str, message: str, *,
                 warning: bool = False, component: str = "kubelet", host: str = "") -> None:
    """Record one Event about ``obj`` (of ``resource``), named ``OBJECT.<hex of the time in ns>`` as
    client-go's recorder names them (so names sort in time order) in its namespace (``default`` for cluster-scoped
    objects): ``involvedObject``, ``reason``, ``message``, ``type`` Normal / Warning, ``source``, first
    and last timestamps, ``count`` 1."""
    meta = obj["metadata"]
    api_version, kind, _ = RESOURCES[resource]
    now = rfc3339()
    store.create("events", {
        "metadata": {"name": f"{meta['name']}.{time.time_ns() + next(_SEQUENCE):x}", "namespace": meta.get("namespace") or "default"},
        "involvedObject": {"kind": kind, "namespace": meta.get("namespace", ""), "name": meta["name"],
                           "uid": meta.get("uid", ""), "apiVersion": api_version,
                           "resourceVersion": meta.get("resourceVersion", "")},
        "reason": reason, "message": message, "type": "Warning" if warning else "Normal",
        "source": {"component": component, **({"host": host} if host else {})},
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        "eventTime": None, "reportingComponent": component, "reportingInstance": host,
    })


def events_about(store: ObjectStore, uid: str) -> list[JsonDict]:
    """The recorded Events whose ``involvedObject.uid`` is ``uid`` (live objects; hold the store's lock)."""
    return [e for e in store.items("events") if e["involvedObject"]["uid"] == uid]
