"""The cluster's control loop: every ``tick_s`` the deployment and replica-set controllers
(:mod:`.workloads`), the LeaderWorkerSet controller (:mod:`.lws`), the scheduler (:mod:`.scheduler`) and the kubelet (:mod:`.kubelet`) each make one
pass over the store, under its lock, in a daemon thread."""

from __future__ import annotations

import sys
import threading
import time
import traceback

from sandbox.gke.kubelet import Kubelet
from sandbox.gke.lws import LeaderWorkerSets
from sandbox.gke.scheduler import Scheduler
from sandbox.gke.store import ObjectStore, parse_rfc3339
from sandbox.gke.workloads import Workloads

#: Seconds an Event lives (kube-apiserver's default ``--event-ttl`` of one hour).
EVENT_TTL_S = 3600.0


class Controller:
    """Runs the controllers, the scheduler and the kubelet until :meth:`stop`.

    Args:
        store: the cluster's objects. kubelet: the nodes' kubelet (its runs are the pods' containers).
        tick_s: seconds between passes.
    """

    def __init__(self, store: ObjectStore, kubelet: Kubelet, *, tick_s: float = 0.1) -> None:
        self.store = store
        self.kubelet = kubelet
        self.workloads = Workloads(store)
        self.leader_worker_sets = LeaderWorkerSets(store)
        self.scheduler = Scheduler(store)
        self.tick_s = tick_s
        self._stop = threading.Event()
        self._next_expiry = 0.0
        self._thread: threading.Thread | None = None

    def sync(self) -> None:
        """One pass of everything (tests call it to step the cluster by hand)."""
        with self.store.cond:
            now = time.time()
            self.workloads.sync(now)
            self.leader_worker_sets.sync()
            self.scheduler.sync()
            self.kubelet.sync(now)
            self.workloads.sync(now)       # status that the kubelet's changes move, in the same pass
            if now >= self._next_expiry:
                self._expire_events(now)
                self._next_expiry = now + 60.0

    def _expire_events(self, now: float) -> None:
        """Drop Events last seen more than :data:`EVENT_TTL_S` ago (the API server's ``--event-ttl``)."""
        for event in list(self.store.items("events")):
            try:
                seen = parse_rfc3339(event.get("lastTimestamp") or "")
            except ValueError:
                seen = 0.0
            if now - seen > EVENT_TTL_S:
                self.store.delete("events", event["metadata"]["namespace"], event["metadata"]["name"])

    def start(self) -> None:
        """Start the loop in a daemon thread."""
        self._thread = threading.Thread(target=self._loop, name="sandbox-k8s-controller", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self.sync()
            except Exception:  # noqa: BLE001 - one bad pass must not end the cluster; say what broke
                print("sandbox kubernetes controller:", traceback.format_exc(), file=sys.stderr)
                self._stop.wait(1.0)

    def stop(self) -> None:
        """Stop the loop (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
