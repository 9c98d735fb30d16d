"""The LeaderWorkerSet controller (kubernetes-sigs/lws, ``leaderworkerset.x-k8s.io/v1``), cut to what a
vLLM group needs: for each of ``spec.replicas`` groups a leader pod ``NAME-G`` (``leaderTemplate``, else
``workerTemplate``) and ``size - 1`` worker pods ``NAME-G-W``, labelled as LWS labels them
(``leaderworkerset.sigs.k8s.io/name``, ``group-index``, ``worker-index``, ``template-revision-hash``) and
given ``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE`` and ``LWS_WORKER_INDEX``. A template change replaces one
group at a time (``maxUnavailable`` 1), the whole group at once. With ``restartPolicy:
RecreateGroupOnPodRestart`` (the default) a pod whose container restarted, or that is being deleted, takes its
whole group with it: every pod of the group is deleted and the group made anew (event
``RecreateGroupOnPodRestart``).
Status: ``replicas``, ``readyReplicas`` and ``updatedReplicas`` count groups; condition ``Available``.

Simplified: the real controller makes a leader StatefulSet and one worker StatefulSet per group; here the
pods are owned by the LeaderWorkerSet itself (same names, labels and env).
"""

from __future__ import annotations

import copy
from typing import Any

from sandbox.gke.events import record_event
from sandbox.gke.store import JsonDict, ObjectStore, rfc3339
from sandbox.gke.workloads import admit_tpu_pod, mark_deleted, template_hash

LABEL = "leaderworkerset.sigs.k8s.io/"


def _ready(pod: JsonDict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [])


class LeaderWorkerSets:
    """The LWS controller over one store (call :meth:`sync` under the store's lock)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def sync(self) -> None:
        """One pass over every LeaderWorkerSet."""
        for lws in list(self.store.items("leaderworkersets")):
            self._one(lws)

    def _one(self, lws: JsonDict) -> None:
        meta, spec = lws["metadata"], lws["spec"]
        lwt = spec["leaderWorkerTemplate"]
        replicas, size = int(spec.get("replicas", 1)), int(lwt.get("size", 1))
        wanted = template_hash(lwt)
        pods = {p["metadata"]["name"]: p for p in self.store.items("pods", meta["namespace"])
                if any(r.get("uid") == meta["uid"] for r in p["metadata"].get("ownerReferences") or [])}
        groups: dict[int, list[JsonDict]] = {}
        for pod in pods.values():
            groups.setdefault(int(pod["metadata"]["labels"][LABEL + "group-index"]), []).append(pod)
        if lwt.get("restartPolicy", "RecreateGroupOnPodRestart") == "RecreateGroupOnPodRestart":
            for group, members in groups.items():
                self._recreate_if_restarted(lws, group, members)
        for group, members in groups.items():
            if group >= replicas:
                for pod in members:
                    if not pod["metadata"].get("deletionTimestamp"):
                        mark_deleted(self.store, pod)
        outdated = sorted((g for g, members in groups.items() if g < replicas and any(
            p["metadata"]["labels"].get(LABEL + "template-revision-hash") != wanted for p in members)), reverse=True)
        unready = [g for g in range(replicas) if g not in outdated and not (
            len(groups.get(g, [])) == size and all(_ready(p) for p in groups.get(g, [])))]
        if outdated and not unready:
            for pod in groups[outdated[0]]:                 # one group at a time, all its pods at once
                if not pod["metadata"].get("deletionTimestamp"):
                    mark_deleted(self.store, pod)
        for group in range(replicas):
            if any(p["metadata"].get("deletionTimestamp") for p in groups.get(group, [])):
                continue                                     # the group is made anew once all of it is gone
            for worker in range(size):
                name = f"{meta['name']}-{group}" + (f"-{worker}" if worker else "")
                if name not in pods:
                    self._new_pod(lws, name, group, worker, size, wanted)
        self._status(lws, groups, replicas, size, wanted)

    def _recreate_if_restarted(self, lws: JsonDict, group: int, members: list[JsonDict]) -> None:
        """Delete every pod of ``group`` when one restarted its container or is going (and others are not)."""
        def restarted(pod: JsonDict) -> bool:
            return any(int(c.get("restartCount") or 0) > 0
                       for c in (pod.get("status") or {}).get("containerStatuses") or [])

        going = [p for p in members if p["metadata"].get("deletionTimestamp")]
        staying = [p for p in members if not p["metadata"].get("deletionTimestamp")]
        cause = next((p for p in staying if restarted(p)), None) or (going[0] if going and staying else None)
        if cause is None:
            return
        for pod in staying:
            mark_deleted(self.store, pod)
        record_event(self.store, "leaderworkersets", lws, "RecreateGroupOnPodRestart",
                     f"Recreating group {group}: pod {cause['metadata']['name']} restarted",
                     component="lws-controller-manager", warning=True)

    def _new_pod(self, lws: JsonDict, name: str, group: int, worker: int, size: int, wanted: str) -> None:
        meta, lwt = lws["metadata"], lws["spec"]["leaderWorkerTemplate"]
        template = copy.deepcopy((lwt.get("leaderTemplate") if worker == 0 else None) or lwt["workerTemplate"])
        labels = {**(template.get("metadata", {}).get("labels") or {}), LABEL + "name": meta["name"],
                  LABEL + "group-index": str(group), LABEL + "worker-index": str(worker),
                  LABEL + "template-revision-hash": wanted}
        spec = template["spec"]
        leader = f"{meta['name']}-{group}.{meta['name']}.{meta['namespace']}"
        for container in spec.get("containers") or []:
            container["env"] = [*(container.get("env") or []), {"name": "LWS_LEADER_ADDRESS", "value": leader},
                                {"name": "LWS_GROUP_SIZE", "value": str(size)},
                                {"name": "LWS_WORKER_INDEX", "value": str(worker)}]
        spec.setdefault("hostname", name)
        spec.setdefault("subdomain", meta["name"])
        pod = {"metadata": {"name": name, "namespace": meta["namespace"], "labels": labels,
                            "annotations": {**(template.get("metadata", {}).get("annotations") or {}),
                                            LABEL + "size": str(size),
                                            **({LABEL + "leader-name": f"{meta['name']}-{group}"} if worker else {})},
                            "ownerReferences": [{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                                                 "name": meta["name"], "uid": meta["uid"], "controller": True,
                                                 "blockOwnerDeletion": True}]},
               "spec": spec, "status": {"phase": "Pending", "qosClass": "BestEffort"}}
        admit_tpu_pod(pod)
        self.store.create("pods", pod)
        record_event(self.store, "leaderworkersets", lws, "CreatingRevision" if worker == 0 else "GroupsProgressing",
                     f"Created pod {name}", component="lws-controller-manager")

    def _status(self, lws: JsonDict, groups: dict[int, list[JsonDict]], replicas: int, size: int, wanted: str) -> None:
        live = [groups.get(g, []) for g in range(replicas)]
        ready = sum(1 for members in live if len(members) == size and all(_ready(p) for p in members))
        updated = sum(1 for members in live if members and all(
            p["metadata"]["labels"].get(LABEL + "template-revision-hash") == wanted for p in members))
        available = ready == replicas
        old = next((c for c in (lws.get("status") or {}).get("conditions") or [] if c["type"] == "Available"), None)
        state = "True" if available else "False"
        condition: dict[str, Any] = {
            "type": "Available", "status": state, "reason": "AllGroupsReady" if available else "GroupsNotReady",
            "message": "All replicas are ready" if available else "Not all replicas are ready",
            "lastTransitionTime": old["lastTransitionTime"] if old and old["status"] == state else rfc3339()}
        status = {"replicas": sum(1 for members in live if members), "readyReplicas": ready,
                  "updatedReplicas": updated, "hpaPodSelector": f"{LABEL}name={lws['metadata']['name']},"
                                                                f"{LABEL}worker-index=0",
                  "conditions": [condition]}
        if status != lws.get("status"):
            self.store.update("leaderworkersets", {**lws, "status": status})
