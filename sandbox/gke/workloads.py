"""The deployment and replica-set controllers of kube-controller-manager, cut to what a vLLM Deployment
needs.

Deployment -> ReplicaSet: the template's hash (``pod-template-hash`` label, 10 characters of Kubernetes'
safe alphabet) names the new ReplicaSet ``DEPLOY-HASH``; ``deployment.kubernetes.io/revision`` counts up
(a rollback to an older template re-uses its ReplicaSet with a new revision). ``Recreate`` scales the old
ReplicaSets to 0 and creates the new one only once their pods are gone; ``RollingUpdate`` surges by
``maxSurge`` (default 25%, rounded up) and removes old pods only while ``maxUnavailable`` (default 25%,
rounded down) allows: with one replica on a full TPU node, the new pod waits forever, as on GKE.
Status: ``observedGeneration``, ``replicas``, ``updatedReplicas``, ``readyReplicas``, ``availableReplicas``,
``unavailableReplicas`` and the ``Available`` / ``Progressing`` conditions ``kubectl rollout status`` reads.

ReplicaSet -> Pods: ``RS-xxxxx`` pods with the template, an owner reference and GKE's toleration of the
``google.com/tpu`` taint (added to pods that request TPUs, as GKE's admission does); surplus pods are
marked for deletion (unscheduled and unready first).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import secrets
from typing import Any

from sandbox.gke.events import record_event
from sandbox.gke.scheduler import pod_requests
from sandbox.gke.store import JsonDict, ObjectStore, parse_rfc3339, rfc3339

_SAFE = "bcdfghjklmnpqrstvwxz2456789"
HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"


def _semantic(value: Any) -> Any:
    """``value`` without nulls and empty maps or lists: what a Go struct round trip cannot tell apart
    (``kubectl rollout undo`` sends the template back with ``creationTimestamp: null``)."""
    if isinstance(value, dict):
        kept = {k: _semantic(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_semantic(v) for v in value]
    return value


def template_hash(template: Any) -> str:
    """A stable 10-character hash of a pod template (compared as the API's types see it), in Kubernetes'
    safe alphabet."""
    digest = int(hashlib.sha256(json.dumps(_semantic(template), sort_keys=True).encode()).hexdigest(), 16)
    return "".join(_SAFE[(digest >> (5 * i)) % len(_SAFE)] for i in range(10))


def _owned(obj: JsonDict, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])


def _owner(obj: JsonDict, kind: str, api_version: str) -> list[JsonDict]:
    meta = obj["metadata"]
    return [{"apiVersion": api_version, "kind": kind, "name": meta["name"], "uid": meta["uid"],
             "controller": True, "blockOwnerDeletion": True}]


def _bound(value: Any, replicas: int, default: str, round_up: bool) -> int:
    text = str(default if value is None else value)
    if text.endswith("%"):
        exact = replicas * float(text[:-1]) / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return int(text)


def _revision(obj: JsonDict) -> int:
    try:
        return int((obj["metadata"].get("annotations") or {}).get(REVISION, "0"))
    except ValueError:
        return 0


class Workloads:
    """The two controllers over one store (call :meth:`sync` under the store's lock)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def sync(self, now: float) -> None:
        """One pass: every Deployment, then every ReplicaSet, then the garbage collector (replica sets
        and pods whose owner is gone are deleted, in the background as ``propagationPolicy=Background``)."""
        for deployment in list(self.store.items("deployments")):
            self._deployment(deployment, now)
        for rs in list(self.store.items("replicasets")):
            self._replicaset(rs)
        owners = {o["metadata"]["uid"] for res in ("deployments", "replicasets", "leaderworkersets")
                  for o in self.store.items(res)}
        for rs in list(self.store.items("replicasets")):
            if not any(ref.get("uid") in owners for ref in rs["metadata"].get("ownerReferences") or []):
                self.store.delete("replicasets", rs["metadata"]["namespace"], rs["metadata"]["name"])
        for pod in list(self.store.items("pods")):
            refs = pod["metadata"].get("ownerReferences") or []
            if refs and not pod["metadata"].get("deletionTimestamp") and not any(r.get("uid") in owners for r in refs):
                mark_deleted(self.store, pod)

    # --- deployments ---------------------------------------------------------------------------

    def _deployment(self, deployment: JsonDict, now: float) -> None:
        meta, spec = deployment["metadata"], deployment["spec"]
        namespace, uid = meta["namespace"], meta["uid"]
        replicas = int(spec.get("replicas", 1))
        wanted = template_hash(spec["template"])
        sets = [rs for rs in self.store.items("replicasets", namespace) if _owned(rs, uid)]
        new = next((rs for rs in sets if rs["metadata"]["labels"].get(HASH_LABEL) == wanted), None)
        old = [rs for rs in sets if rs is not new]
        pods = [p for p in self.store.items("pods", namespace) if any(_owned(p, rs["metadata"]["uid"]) for rs in old)]
        top = max([_revision(rs) for rs in sets] or [0])
        strategy = (spec.get("strategy") or {}).get("type", "RollingUpdate")
        if strategy == "Recreate":
            for rs in old:
                self._scale(rs, 0)
            if pods:
                self._status(deployment, sets, new, replicas, now)
                return
            target = replicas
        else:
            rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
            surge = _bound(rolling.get("maxSurge"), replicas, "25%", True)
            unavailable = _bound(rolling.get("maxUnavailable"), replicas, "25%", False)
            if surge == 0 and unavailable == 0:
                unavailable = 1
            old_total = sum(int(rs["spec"].get("replicas", 0)) for rs in old)
            have = int(new["spec"].get("replicas", 0)) if new else 0
            target = replicas if not old_total else min(replicas, max(have, replicas + surge - old_total))
        if new is None:
            new = self._new_replicaset(deployment, wanted, top + 1, target)
            sets.append(new)
        else:
            if _revision(new) < top:
                new["metadata"].setdefault("annotations", {})[REVISION] = str(top + 1)
                self.store.update("replicasets", copy.deepcopy(new))
            self._scale(new, target)
        if strategy != "Recreate":
            self._roll_down(old, new, replicas, unavailable)
        self._status(deployment, sets, new, replicas, now)

    def _roll_down(self, old: list[JsonDict], new: JsonDict, replicas: int, unavailable: int) -> None:
        """Scale old replica sets down as the rolling updater does: unhealthy old pods first, then
        available ones, never leaving fewer than ``replicas - maxUnavailable`` available and never counting
        on new pods that are not available yet."""
        def spec(rs: JsonDict) -> int:
            return int(rs["spec"].get("replicas", 0))

        def ready(rs: JsonDict) -> int:
            return int((rs.get("status") or {}).get("availableReplicas", 0))

        min_available = replicas - unavailable
        ordered = sorted(old, key=lambda r: r["metadata"]["creationTimestamp"])
        room = sum(spec(rs) for rs in [*old, new]) - min_available - max(0, spec(new) - ready(new))
        for rs in ordered:                                   # cleanupUnhealthyReplicas
            drop = min(max(0, room), max(0, spec(rs) - ready(rs)))
            if drop:
                self._scale(rs, spec(rs) - drop)
                room -= drop
        can_drop = sum(ready(rs) for rs in [*old, new]) - min_available
        for rs in ordered:                                   # scaleDownOldReplicaSetsForRollingUpdate
            drop = min(max(0, can_drop), spec(rs))
            if drop:
                self._scale(rs, spec(rs) - drop)
                can_drop -= drop

    def _new_replicaset(self, deployment: JsonDict, wanted: str, revision: int, target: int) -> JsonDict:
        meta = deployment["metadata"]
        template = copy.deepcopy(deployment["spec"]["template"])
        template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = wanted
        selector = copy.deepcopy(deployment["spec"]["selector"])
        selector.setdefault("matchLabels", {})[HASH_LABEL] = wanted
        name = f"{meta['name']}-{wanted}"
        self.store.create("replicasets", {
            "metadata": {"name": name, "namespace": meta["namespace"],
                         "labels": dict(template["metadata"]["labels"]),
                         "annotations": {REVISION: str(revision),
                                         "deployment.kubernetes.io/desired-replicas": str(deployment["spec"].get("replicas", 1)),
                                         "deployment.kubernetes.io/max-replicas": str(deployment["spec"].get("replicas", 1))},
                         "ownerReferences": _owner(deployment, "Deployment", "apps/v1")},
            "spec": {"replicas": target, "selector": selector, "template": template},
            "status": {"replicas": 0, "observedGeneration": 0},
        })
        record_event(self.store, "deployments", deployment, "ScalingReplicaSet",
                     f"Scaled up replica set {name} from 0 to {target}", component="deployment-controller")
        return self.store.objects[("replicasets", meta["namespace"], name)]

    def _scale(self, rs: JsonDict, replicas: int) -> None:
        have = int(rs["spec"].get("replicas", 0))
        if have == replicas:
            return
        updated = copy.deepcopy(rs)
        updated["spec"]["replicas"] = replicas
        self.store.update("replicasets", updated)
        rs["spec"]["replicas"] = replicas        # the caller's view follows
        owner = next(iter(rs["metadata"].get("ownerReferences") or []), None)
        deployment = self.store.objects.get(("deployments", rs["metadata"]["namespace"], owner["name"])) if owner else None
        if deployment is not None:
            verb = "up" if replicas > have else "down"
            record_event(self.store, "deployments", deployment, "ScalingReplicaSet",
                         f"Scaled {verb} replica set {rs['metadata']['name']} from {have} to {replicas}",
                         component="deployment-controller")

    def _status(self, deployment: JsonDict, sets: list[JsonDict], new: JsonDict | None, replicas: int,
                now: float) -> None:
        def total(key: str, among: list[JsonDict]) -> int:
            return sum(int((rs.get("status") or {}).get(key, 0)) for rs in among)

        live = [self.store.objects.get(("replicasets", rs["metadata"]["namespace"], rs["metadata"]["name"]))
                for rs in sets]
        current = [rs for rs in live if rs is not None]
        new_now = next((rs for rs in current if new is not None and rs["metadata"]["uid"] == new["metadata"]["uid"]), None)
        status: JsonDict = {
            "observedGeneration": deployment["metadata"]["generation"],
            "replicas": total("replicas", current),
            "updatedReplicas": total("replicas", [new_now] if new_now else []),
            "readyReplicas": total("readyReplicas", current),
            "availableReplicas": total("availableReplicas", current),
        }
        status["unavailableReplicas"] = max(0, replicas - status["availableReplicas"])
        status = {k: v for k, v in status.items() if v or k == "observedGeneration"}
        done = (status.get("updatedReplicas", 0) == replicas and status.get("replicas", 0) == replicas
                and status.get("availableReplicas", 0) == replicas)
        strategy = (deployment["spec"].get("strategy") or {}).get("type", "RollingUpdate")
        rolling = (deployment["spec"].get("strategy") or {}).get("rollingUpdate") or {}
        max_unavailable = 0 if strategy == "Recreate" else _bound(rolling.get("maxUnavailable"), replicas, "25%", False)
        old_conditions = {c["type"]: c for c in (deployment.get("status") or {}).get("conditions") or []}
        name = new_now["metadata"]["name"] if new_now else deployment["metadata"]["name"]
        available = status.get("availableReplicas", 0) >= replicas - max_unavailable
        progressing = _progress(deployment, done, name, old_conditions.get("Progressing"), now)
        status["conditions"] = [
            _keep_time(old_conditions.get("Available"), {
                "type": "Available", "status": "True" if available else "False",
                "reason": "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                "message": "Deployment has minimum availability." if available
                else "Deployment does not have minimum availability."}),
            progressing,
        ]
        annotations = dict(deployment["metadata"].get("annotations") or {})
        if new_now is not None:                 # the revision kubectl rollout undo / history read
            annotations[REVISION] = str(_revision(new_now))
        if status != deployment.get("status") or annotations != (deployment["metadata"].get("annotations") or {}):
            meta = {**deployment["metadata"], "annotations": annotations}
            self.store.update("deployments", {**deployment, "metadata": meta, "status": status})

    # --- replica sets --------------------------------------------------------------------------

    def _replicaset(self, rs: JsonDict) -> None:
        meta = rs["metadata"]
        pods = [p for p in self.store.items("pods", meta["namespace"]) if _owned(p, meta["uid"])]
        active = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        wanted = int(rs["spec"].get("replicas", 0))
        for _ in range(max(0, wanted - len(active))):
            active.append(self._new_pod(rs))
        if len(active) > wanted:
            def keep_order(pod: JsonDict) -> tuple[int, int, str]:
                status = pod.get("status") or {}
                ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
                return (1 if pod["spec"].get("nodeName") else 0, 1 if ready else 0, pod["metadata"]["creationTimestamp"])

            for pod in sorted(active, key=keep_order)[: len(active) - wanted]:
                self._delete_pod(pod, rs)
                active.remove(pod)
        ready = sum(1 for p in active if any(c["type"] == "Ready" and c["status"] == "True"
                                             for c in (p.get("status") or {}).get("conditions") or []))
        status = {"replicas": len(active), "fullyLabeledReplicas": len(active), "readyReplicas": ready,
                  "availableReplicas": ready, "observedGeneration": meta["generation"]}
        status = {k: v for k, v in status.items() if v or k in ("replicas", "observedGeneration")}
        if status != rs.get("status"):
            self.store.update("replicasets", {**rs, "status": status})

    def _new_pod(self, rs: JsonDict) -> JsonDict:
        template = copy.deepcopy(rs["spec"]["template"])
        name = f"{rs['metadata']['name']}-{''.join(secrets.choice(_SAFE) for _ in range(5))}"
        spec = template["spec"]
        pod = {"metadata": {"name": name, "namespace": rs["metadata"]["namespace"],
                            "labels": dict(template["metadata"].get("labels") or {}),
                            "annotations": dict(template["metadata"].get("annotations") or {}),
                            "generateName": rs["metadata"]["name"] + "-",
                            "ownerReferences": _owner(rs, "ReplicaSet", "apps/v1")},
               "spec": spec, "status": {"phase": "Pending", "qosClass": "BestEffort"}}
        admit_tpu_pod(pod)
        stored = self.store.create("pods", pod)
        record_event(self.store, "replicasets", rs, "SuccessfulCreate", f"Created pod: {name}",
                     component="replicaset-controller")
        return stored

    def _delete_pod(self, pod: JsonDict, rs: JsonDict) -> None:
        mark_deleted(self.store, pod)
        record_event(self.store, "replicasets", rs, "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}",
                     component="replicaset-controller")


def admit_tpu_pod(pod: JsonDict) -> None:
    """What GKE's admission does to a pod that requests ``google.com/tpu``: tolerate the TPU nodes' taint."""
    if pod_requests(pod).get("google.com/tpu"):
        tolerations = pod["spec"].setdefault("tolerations", [])
        if not any(t.get("key") == "google.com/tpu" for t in tolerations):
            tolerations.append({"key": "google.com/tpu", "operator": "Equal", "value": "present",
                                "effect": "NoSchedule"})


def mark_deleted(store: ObjectStore, pod: JsonDict) -> None:
    """Start a pod's graceful deletion (``deletionTimestamp``; the kubelet stops it and removes it)."""
    updated = copy.deepcopy(pod)
    updated["metadata"]["deletionTimestamp"] = rfc3339()
    updated["metadata"]["deletionGracePeriodSeconds"] = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
    store.update("pods", updated)


def _keep_time(old: JsonDict | None, new: JsonDict) -> JsonDict:
    same = old is not None and all(old.get(k) == new[k] for k in ("status", "reason", "message"))
    stamp = old["lastTransitionTime"] if same and old else rfc3339()
    return {**new, "lastUpdateTime": old.get("lastUpdateTime", stamp) if same and old else stamp,
            "lastTransitionTime": stamp}


def _progress(deployment: JsonDict, done: bool, rs_name: str, old: JsonDict | None, now: float) -> JsonDict:
    """The Progressing condition: NewReplicaSetAvailable when done, ReplicaSetUpdated while rolling,
    ProgressDeadlineExceeded once ``progressDeadlineSeconds`` pass without progress."""
    if done:
        return _keep_time(old, {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                                "message": f'ReplicaSet "{rs_name}" has successfully progressed.'})
    deadline = int(deployment["spec"].get("progressDeadlineSeconds", 600))
    rolling = {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
               "message": f'ReplicaSet "{rs_name}" is progressing.'}
    if old is not None and old.get("reason") == "ProgressDeadlineExceeded":
        return old
    if old is not None and old.get("reason") == "ReplicaSetUpdated" and old.get("message") == rolling["message"]:
        if now - parse_rfc3339(old["lastUpdateTime"]) > deadline:
            return {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                    "message": f'ReplicaSet "{rs_name}" has timed out progressing.',
                    "lastUpdateTime": rfc3339(now), "lastTransitionTime": rfc3339(now)}
        return old
    return _keep_time(old, rolling)
