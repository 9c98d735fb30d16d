"""The startup watch of a GKE workload: the pod of the CURRENT template, followed to ready or failed.

The use case behind ``tpu-console watch deploy/NAME`` (and the startup view on a workload). It:

- picks the pod of the current template: the ``pod-template-hash`` of the Deployment's newest
  ReplicaSet (``kubectl logs -f deploy/x`` during a rollout follows the OLD pod), or pod ``NAME-0``
  (the leader of group 0) of a LeaderWorkerSet;
- says, while the container cannot log yet, what Kubernetes says: Pending / Unschedulable (the
  ``PodScheduled`` condition) with the pod's newest events (``FailedScheduling: 0/2 nodes are
  available: 2 Insufficient google.com/tpu.``), ``ContainerCreating``;
- follows the container's log (``follow``, ``timestamps``; ``sinceTime`` on resume, with the lines
  already read at that second skipped) through the same :class:`~remote.vllm_log.reader.StartupReader`
  the VM path reads ``docker logs`` with, so it ends ready with the KV cache tokens and the
  concurrency, or failed with the diagnosed reason;
- flags "Kubernetes says Ready while the log still compiles" (vllm#15313) once, when a line stamped a
  whole second after the pod's ``Ready`` transition (``lastTransitionTime``) finds the boot not ready yet
  (timestamps, not the moment of reading: a log caught up after the fact is judged the same way);
- starts over on a newer template (a rollout during the watch) or a restarted container (a new boot:
  a fresh reader).

Presenters get :class:`WorkloadEvent` s, one sentence each. Waits are polls every ``poll_s`` seconds;
``max_wait_s`` bounds the whole watch.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from console.flows.slice_watch import SliceOutcome
from remote.container.tail import parse_docker_timestamp
from remote.errors import KubeApiError
from remote.gke.kube import KubeClient
from remote.gke.models import PodStatus, Workload
from remote.gke.parse import newest_template_hash, pod_events, pod_status, selector_of
from remote.secrets import scrub_text
from remote.startup import Phase, StartupState, summary_json
from remote.vllm_log.reader import StartupReader

WatchEventKind = Literal["pod", "status", "event", "following", "phase", "kv_cache", "ready_early", "failed",
                         "ready", "rollout", "restarted", "recreated", "resumed", "warning"]
#: Seconds to keep reading after a fatal failure line (the traceback's remaining lines).
FAILURE_GRACE_S = 2.0


@dataclass(frozen=True)
class WorkloadEvent:
    """Something the watch saw, with the sentence ``tpu-console watch`` prints for it."""

    kind: WatchEventKind
    text: str


class WorkloadWatch:
    """Follow one workload's current pod to ready or failed.

    Args:
        workload: the workload (from the GKE listing).
        kube: its cluster's client.
        on_event: called with each :class:`WorkloadEvent`.
        on_lines: called with each batch of log lines ``(time, text)`` (secrets masked).
        poll_s: seconds between pod status polls.
        max_wait_s: the whole watch's bound, seconds (then it ends with code 2).
    """

    def __init__(self, workload: Workload, kube: KubeClient, *, on_event: Callable[[WorkloadEvent], None],
                 on_lines: Callable[[list[tuple[datetime | None, str]]], None] | None = None,
                 poll_s: float = 2.0, max_wait_s: float = 3600.0) -> None:
        self.workload = workload
        self.kube = kube
        self.reader = StartupReader()
        self.pod: PodStatus | None = None
        self.poll_s = poll_s
        self.max_wait_s = max_wait_s
        self._on_event = on_event
        self._on_lines = on_lines
        self._said: set[str] = set()
        self._last_ns: int | None = None
        self._last_raw = ""
        self._seen_at_last: set[str] = set()
        self._phase: Phase | None = None
        self._flagged = False
        self._events_said: set[str] = set()
        #: times the followed pod was made anew under the same name (a LeaderWorkerSet's group recreated)
        self.recreated = 0
        #: what Kubernetes said of the current pod at the last poll (Pending, Unschedulable...), or ``None``
        self.latest: PodStatus | None = None

    @property
    def state(self) -> StartupState:
        """The reader's state of the current boot."""
        return self.reader.state

    def _emit(self, kind: WatchEventKind, text: str) -> None:
        self._on_event(WorkloadEvent(kind, text))

    # --- which pod ------------------------------------------------------------------------------

    async def current_pod(self) -> PodStatus | None:
        """The newest pod of the current template (``None`` while there is none)."""
        w = self.workload
        if w.kind == "LeaderWorkerSet":
            pods = await self.kube.list_all("v1", "pods", namespace=w.namespace,
                                            field_selector=f"metadata.name={w.name}-0")
            hash_ = ""
        else:
            selector = selector_of(w.raw)
            replica_sets = await self.kube.list_all("apps/v1", "replicasets", namespace=w.namespace,
                                                    label_selector=selector)
            template = (w.raw.get("spec") or {}).get("template")
            hash_ = newest_template_hash(replica_sets, w.name, template if isinstance(template, dict) else None)
            if not hash_:
                return None
            pods = await self.kube.list_all("v1", "pods", namespace=w.namespace,
                                            label_selector=f"{selector},pod-template-hash={hash_}".lstrip(","))
        found = [pod_status(p, w.container) for p in pods]
        found = [p for p in found if not p.deleting and (not hash_ or p.template_hash == hash_)]
        if not found:
            return None
        newest = max(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))
        name = str((newest.get("metadata") or {}).get("name") or "")
        return next((p for p in found if p.name == name), found[-1])

    async def _say_pod(self, pod: PodStatus) -> None:
        """One line per change of what Kubernetes says of the pod, and its new warning events."""
        self.latest = pod
        line = f"pod {pod.name}: {pod.headline}"
        if line not in self._said:
            self._said.add(line)
            self._emit("status", line)
        if pod.running and not (pod.unschedulable or pod.waiting):
            return
        try:
            events = await self.kube.list_all("v1", "events", namespace=self.workload.namespace,
                                              field_selector=f"involvedObject.name={pod.name}")
        except KubeApiError:
            return
        for text in pod_events(events, pod.name):
            if text not in self._events_said and not text.startswith("Normal "):
                self._events_said.add(text)
                self._emit("event", f"pod {pod.name}: {text}")

    async def _wait_for_container(self) -> PodStatus:
        """Poll until the current pod's container runs (or has run: a terminated container has a log)."""
        while True:
            pod = await self.current_pod()
            if pod is None:
                if "no pod" not in self._said:
                    self._said.add("no pod")
                    self._emit("status", f"{self.workload.ref}: no pod of the current template yet")
            else:
                await self._say_pod(pod)
                if pod.running or pod.terminated:
                    return pod
            await asyncio.sleep(self.poll_s)

    # --- the log --------------------------------------------------------------------------------

    def _fresh_boot(self) -> None:
        self.reader.close()
        self.reader = StartupReader()
        self._last_ns, self._last_raw, self._seen_at_last = None, "", set()
        self._phase, self._flagged = None, False

    def _take(self, raw_lines: list[str]) -> None:
        """Feed ``"RFC3339NANO TEXT"`` lines to the reader (a resume's repeats skipped) and say progress."""
        batch: list[tuple[datetime | None, str]] = []
        for raw in raw_lines:
            stamp, _, text = raw.partition(" ")
            ns = parse_docker_timestamp(stamp)
            if ns is None:
                batch.append((None, raw))
                continue
            if self._last_ns is not None and (ns < self._last_ns or (ns == self._last_ns and text in self._seen_at_last)):
                continue
            if ns != self._last_ns:
                self._seen_at_last = set()
            self._last_ns, self._last_raw = ns, stamp
            self._seen_at_last.add(text)
            batch.append((datetime.fromtimestamp(ns / 1e9, UTC), text))
        if not batch:
            return
        self.reader.feed_lines(batch)
        if self._on_lines is not None:
            self._on_lines([(ts, scrub_text(text)) for ts, text in batch])
        self._say_progress(self.reader.state)
        if self._last_ns is not None:
            self._check_ready_early(self._last_ns)

    def _check_ready_early(self, line_ns: int) -> None:
        """Flag once a line stamped a whole second after the pod turned Ready still finds the boot not ready:
        Kubernetes routed traffic to a server that was still compiling (read from the timestamps, so a log
        read after the fact says it too)."""
        pod, state = self.pod, self.reader.state
        if self._flagged or pod is None or not pod.ready or state.phase in (Phase.READY, Phase.FAILED):
            return
        since = parse_docker_timestamp(pod.ready_since) if pod.ready_since else None
        if since is not None and line_ns >= since + 1_000_000_000:
            self._flag(pod, state)

    def _flag(self, pod: PodStatus, state: StartupState) -> None:
        self._flagged = True
        self._emit("ready_early", f"Kubernetes says Ready while the log still compiles (phase {state.phase.value}): "
                                  f"traffic routed to {pod.name} now fails; give it a readinessProbe on /health "
                                  "(vllm#15313)")

    def _say_progress(self, state: StartupState) -> None:
        if state.phase != self._phase:
            self._phase = state.phase
            if state.phase not in (Phase.READY, Phase.FAILED):
                self._emit("phase", f"phase: {state.phase.value}")
        if state.kv_cache_tokens is not None and "kv" not in self._said:
            self._said.add("kv")
            extra = f", max concurrency {state.max_concurrency:g}x" if state.max_concurrency is not None else ""
            self._emit("kv_cache", f"KV cache: {state.kv_cache_tokens:,} tokens{extra}")

    async def _follow(self, pod: PodStatus) -> str:
        """Follow ``pod``'s log until ready, failed, the stream ends or the template changes:
        ``"ready"``, ``"failed"``, ``"ended"`` or ``"rollout"``."""
        resumed = self._last_raw
        if resumed:
            self._emit("resumed", f"resuming {pod.name}'s log from {resumed}")
        else:
            self._emit("following", f"following {pod.name} (container {self.workload.container})")
        watcher = asyncio.create_task(self._watch_pod(pod))
        try:
            lines = self.kube.follow_log(self.workload.namespace, pod.name, self.workload.container,
                                         since_time=resumed[:19] + "Z" if resumed else None)
            failed_at: float | None = None
            loop = asyncio.get_running_loop()
            async for raw in lines:
                self._take([raw])
                state = self.reader.state
                if state.phase == Phase.READY:
                    return "ready"
                if state.phase == Phase.FAILED:
                    failed_at = failed_at or loop.time()
                    if loop.time() - failed_at > FAILURE_GRACE_S:
                        return "failed"
                if watcher.done():
                    return watcher.result()
            return "failed" if self.reader.state.phase == Phase.FAILED else "ended"
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, KubeApiError):
                await watcher

    async def _watch_pod(self, followed: PodStatus) -> str:
        """Beside the log: keep the pod's status (its Ready transition) current; return ``"rollout"`` when a newer template's pod
        appears, ``"ended"`` when the followed pod goes or its container restarts."""
        while True:
            await asyncio.sleep(self.poll_s)
            pod = await self.current_pod()
            if pod is None or pod.name != followed.name:
                return "rollout"
            if pod.restarts > followed.restarts or pod.deleting or pod.uid != followed.uid:
                return "ended"
            self.pod = self.latest = pod
            if self._last_ns is not None:                 # the pod's Ready against the newest line read
                self._check_ready_early(self._last_ns)

    # --- the whole watch --------------------------------------------------------------------------

    async def run(self) -> SliceOutcome:
        """Watch until ready (code 0), failed (1), or ``max_wait_s`` / an API failure (2)."""
        try:
            async with asyncio.timeout(self.max_wait_s):
                return await self._run()
        except TimeoutError:
            self._emit("warning", f"gave up after {self.max_wait_s:g} s without a verdict")
        except KubeApiError as exc:
            self._emit("warning", str(exc))
        return SliceOutcome(2, summary_json(self.reader.state) if self.reader.state.lines_read else None)

    async def _run(self) -> SliceOutcome:
        followed: PodStatus | None = None
        while True:
            pod = await self._wait_for_container()
            if followed is not None and pod.name == followed.name and pod.uid != followed.uid:
                self.recreated += 1
                self._emit("recreated", f"{pod.name} was made anew (a new pod under the same name): a fresh boot")
                self._fresh_boot()
            elif followed is not None and (pod.name != followed.name or pod.restarts > followed.restarts):
                self._emit("rollout" if pod.name != followed.name else "restarted",
                           f"now {pod.name} (restarts {pod.restarts}): a fresh boot")
                self._fresh_boot()
            followed, self.pod = pod, pod
            try:
                ended = await self._follow(pod)
            except KubeApiError as exc:
                if exc.code not in (400, 404):        # 400: waiting to start again; 404: the pod went
                    raise
                ended = "ended"
            if ended in ("ready", "failed"):
                return self._conclude(ended)
            await asyncio.sleep(self.poll_s)

    def _conclude(self, ended: str) -> SliceOutcome:
        state = self.reader.state
        summary = summary_json(state)
        summary.update(workload=self.workload.ref, namespace=self.workload.namespace, cluster=self.workload.cluster,
                       pod=self.pod.name if self.pod else None, kubernetes_ready_early=self._flagged)
        if ended == "ready":
            self._emit("ready", f"ready: {self.pod.name if self.pod else ''} serves "
                                f"{state.model or self.workload.model or 'the model'}")
            return SliceOutcome(0, summary)
        failure = state.failure
        self._emit("failed", f"failed: {failure.kind.value}: {failure.explanation} {failure.hint}".strip()
                   if failure is not None else "failed: the log ended without ready (see the pod's log)")
        return SliceOutcome(1, summary)
