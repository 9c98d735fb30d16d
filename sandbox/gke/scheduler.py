"""The default-scheduler stand-in: binds each pending pod to the first node that matches its
``nodeSelector``, tolerates the node's taints and has the pod's ``google.com/tpu`` free (allocatable minus
what the pods bound there, terminating ones included, request), as kube-scheduler's NodeResourcesFit,
NodeAffinity and TaintToleration plugins do.

A pod that fits nowhere gets ``PodScheduled=False`` (reason ``Unschedulable``) and one ``FailedScheduling``
Warning per distinct message, worded as kube-scheduler words it::

    0/2 nodes are available: 1 Insufficient google.com/tpu, 1 node(s) didn't match Pod's node
    affinity/selector. preemption: 0/2 nodes are available: 1 No preemption victims found for incoming
    pod, 1 Preemption is not helpful for scheduling.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from sandbox.gke.events import record_event
from sandbox.gke.store import JsonDict, ObjectStore, rfc3339
from sandbox.gke.validation import quantity_value

_INSUFFICIENT = "Insufficient "


def pod_requests(pod: JsonDict) -> dict[str, float]:
    """The pod's resource requests summed over its containers (an extended resource's request is its limit)."""
    total: dict[str, float] = {}
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, raw in asked.items():
            try:
                total[name] = total.get(name, 0.0) + quantity_value(raw)
            except ValueError:
                continue
    return total


def _tolerates(pod: JsonDict, taint: JsonDict) -> bool:
    for toleration in pod["spec"].get("tolerations") or []:
        if toleration.get("effect") not in (None, "", taint.get("effect")):
            continue
        if toleration.get("operator") == "Exists" and toleration.get("key") in (None, "", taint["key"]):
            return True
        if toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


@dataclass
class Scheduler:
    """Binds pending pods (call :meth:`sync` under the store's lock)."""

    store: ObjectStore
    #: pod uid -> the last FailedScheduling message recorded for it
    reported: dict[str, str] = field(default_factory=dict)

    def _used(self) -> dict[str, dict[str, float]]:
        used: dict[str, dict[str, float]] = {}
        for pod in self.store.items("pods"):
            node = pod["spec"].get("nodeName")
            if node:
                for name, amount in pod_requests(pod).items():
                    used.setdefault(node, {})[name] = used.get(node, {}).get(name, 0.0) + amount
        return used

    def _misfit(self, pod: JsonDict, node: JsonDict, used: dict[str, float]) -> str | None:
        labels = node["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in (pod["spec"].get("nodeSelector") or {}).items()):
            return "node(s) didn't match Pod's node affinity/selector"
        for taint in node["spec"].get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(pod, taint):
                return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
        allocatable = node["status"].get("allocatable") or {}
        for name, amount in sorted(pod_requests(pod).items()):
            if name in ("cpu", "memory", "ephemeral-storage"):
                continue
            try:
                have = quantity_value(allocatable.get(name, "0"))
            except ValueError:
                have = 0.0
            if used.get(name, 0.0) + amount > have:
                return _INSUFFICIENT + name
        return None

    def sync(self) -> None:
        """Try every unbound, undeleted pod once."""
        nodes = list(self.store.items("nodes"))
        for pod in list(self.store.items("pods")):
            if pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            used = self._used()
            reasons: Counter[str] = Counter()
            chosen = None
            for node in nodes:
                why = self._misfit(pod, node, used.get(node["metadata"]["name"], {}))
                if why is None:
                    chosen = node
                    break
                reasons[why] += 1
            if chosen is not None:
                self._bind(pod, chosen)
            else:
                self._unschedulable(pod, len(nodes), reasons)

    def _bind(self, pod: JsonDict, node: JsonDict) -> None:
        name = node["metadata"]["name"]
        ip = next((a["address"] for a in node["status"].get("addresses", []) if a["type"] == "InternalIP"), "")
        updated = {**pod, "spec": {**pod["spec"], "nodeName": name},
                   "status": {**pod.get("status", {}), "phase": "Pending", "hostIP": ip, "hostIPs": [{"ip": ip}],
                              "conditions": [{"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                                              "lastTransitionTime": rfc3339()}]}}
        stored = self.store.update("pods", updated)
        self.reported.pop(pod["metadata"]["uid"], None)
        record_event(self.store, "pods", stored, "Scheduled",
                     f"Successfully assigned {pod['metadata']['namespace']}/{pod['metadata']['name']} to {name}",
                     component="default-scheduler")

    def _unschedulable(self, pod: JsonDict, node_count: int, reasons: Counter[str]) -> None:
        message = unschedulable_message(node_count, reasons)
        uid = pod["metadata"]["uid"]
        if self.reported.get(uid) == message:
            return
        self.reported[uid] = message
        updated = {**pod, "status": {**pod.get("status", {}), "phase": "Pending",
                                     "conditions": [{"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                                                     "lastTransitionTime": rfc3339(), "reason": "Unschedulable",
                                                     "message": message}]}}
        stored = self.store.update("pods", updated)
        record_event(self.store, "pods", stored, "FailedScheduling", message, warning=True,
                     component="default-scheduler")


def unschedulable_message(node_count: int, reasons: Counter[str]) -> str:
    """kube-scheduler's FitError text for ``reasons`` (reason -> node count), reasons sorted."""
    parts = ", ".join(f"{count} {why}" for why, count in sorted(reasons.items()))
    victims: Counter[str] = Counter()
    for why, count in reasons.items():
        victims["No preemption victims found for incoming pod" if why.startswith(_INSUFFICIENT)
                else "Preemption is not helpful for scheduling"] += count
    preempt = ", ".join(f"{count} {why}" for why, count in sorted(victims.items()))
    return f"0/{node_count} nodes are available: {parts}. preemption: 0/{node_count} nodes are available: {preempt}."
