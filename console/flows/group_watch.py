"""The startup watch of a LeaderWorkerSet's group: EVERY pod of group 0 followed, judged as one slice.

The use case behind ``tpu-console watch lws/NAME`` (and the startup view on an LWS). A multi-host vLLM group
is one engine over several hosts: the leader (``NAME-0``, worker index 0) runs the API server and says
ready; each worker (``NAME-0-W``) runs its host's part and prints its own chips' HBM. :class:`GroupWatch`
holds one :class:`PodFollower` per pod (a :class:`~console.flows.workload_watch.WorkloadWatch` pinned to
that pod name and to the LWS's current template) and judges them with the multi-host slice's rules
(:mod:`remote.vllm_log.workers`, as :class:`~console.flows.slice_watch.SliceWatch` does for VMs):

- ready only when every pod's log is: the leader's says ready and every worker's has shown its KV-cache
  HBM line (waited for at most :data:`~console.flows.slice_watch.WORKER_GRACE_S` after the leader);
- one pod's fatal failure fails the group with that pod's reason (``pod NAME-0-2: ...``), the earliest
  failure first;
- a group made anew (LWS's ``RecreateGroupOnPodRestart``: one pod restarting or going takes every pod of
  the group with it) is marked once per recreation (``recreated`` event, ``recreated`` in the summary),
  and every pod's boot starts over;
- the LWS is read again every poll: a changed template (someone's patch during the watch) is a rollout:
  said once (``rollout``), the pods of the new template followed, the group's pods made anew for it not
  counted as a recreation;
- HBM is summed over the pods (``slice_hbm``), each pod's own chips;
- ``--json`` gives per-pod results (``pods``: name, worker, node, what Kubernetes says, Ready, whether the
  pod's log is ready, restarts, its failure).

Presenters get :class:`GroupEvent` s (one sentence each, ``wN| `` before a pod's own sentence) and each
pod's lines. ``max_wait_s`` bounds the whole watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from console.flows.slice_watch import WORKER_GRACE_S, SliceOutcome, failed_on_any_worker
from console.flows.workload_watch import WatchEventKind, WorkloadEvent, WorkloadWatch
from remote.errors import KubeApiError
from remote.gke.kube import KubeClient
from remote.gke.models import PodStatus, Workload
from remote.gke.parse import pod_status
from remote.startup import StartupState, summary_json
from remote.vllm_log.workers import failing_worker, slice_summary

LWS_LABEL = "leaderworkerset.sigs.k8s.io/"
GroupEventKind = WatchEventKind | Literal["group"]
#: ``(worker, batch)`` of one pod's log lines ``(time, text)`` (secrets masked).
GroupLines = Callable[[int, list[tuple[datetime | None, str]]], None]


@dataclass(frozen=True)
class GroupEvent:
    """Something the group watch saw: ``worker`` the pod's index in the group, ``None`` for the group."""

    kind: GroupEventKind
    text: str
    worker: int | None = None

    def line(self) -> str:
        """:attr:`text`, ``wN| `` before it when it is one pod's."""
        return f"w{self.worker}| {self.text}" if self.worker is not None else self.text


def pod_name(lws: str, group: int, worker: int) -> str:
    """The name LWS gives a pod: ``NAME-G`` (the leader), ``NAME-G-W`` (worker W)."""
    return f"{lws}-{group}" + (f"-{worker}" if worker else "")


def template_for(lws_raw: Mapping[str, Any], worker: int) -> Mapping[str, Any]:
    """The pod template a pod of index ``worker`` is made from: the leader template for 0 (when the LWS has
    one), else the worker template; ``{}`` when the object has neither."""
    lwt = ((lws_raw.get("spec") or {}).get("leaderWorkerTemplate") or {})
    chosen = (lwt.get("leaderTemplate") if worker == 0 else None) or lwt.get("workerTemplate") or {}
    return chosen if isinstance(chosen, Mapping) else {}


def of_template(pod: Mapping[str, Any], template: Mapping[str, Any]) -> bool:
    """Whether ``pod`` runs ``template``'s containers (same names, images, commands and args; the controller
    adds env, so env is not compared): a pod of the old template during a rollout does not."""
    def shape(containers: Any) -> list[tuple[Any, ...]]:
        return [(c.get("name"), c.get("image"), tuple(c.get("command") or ()), tuple(c.get("args") or ()))
                for c in containers or [] if isinstance(c, Mapping)]

    wanted = shape((template.get("spec") or {}).get("containers"))
    return not wanted or shape((pod.get("spec") or {}).get("containers")) == wanted


class PodFollower(WorkloadWatch):
    """One pod of the group (by name), followed to ready or failed as :class:`WorkloadWatch` follows a
    Deployment's pod; only a pod of the LWS's current template counts. A worker (index > 0) is never
    flagged "Ready while compiling": no Service routes to it.

    Attributes:
        worker: the pod's index in the group. name: its name.
        latest: what Kubernetes said of it at the last poll (a going pod too), or ``None`` (no such pod).
    """

    def __init__(self, workload: Workload, kube: KubeClient, worker: int, *, group: int = 0,
                 on_event: Callable[[WorkloadEvent], None],
                 on_lines: Callable[[list[tuple[datetime | None, str]]], None] | None = None,
                 poll_s: float = 2.0) -> None:
        super().__init__(workload, kube, on_event=on_event, on_lines=on_lines, poll_s=poll_s, max_wait_s=math.inf)
        self.worker = worker
        self.name = pod_name(workload.name, group, worker)
        self.template = template_for(workload.raw, worker)
        #: the group watch's template generation when this pod's template was last set, and the one of the
        #: pod followed (a pod made anew for a newer generation is the rollout, not a recreation)
        self.generation = 0
        self.followed_generation = 0

    async def current_pod(self) -> PodStatus | None:
        """This pod when it exists, is not going and runs the current template, else ``None``."""
        pods = await self.kube.list_all("v1", "pods", namespace=self.workload.namespace,
                                        field_selector=f"metadata.name={self.name}")
        found = [(p, pod_status(p, self.workload.container)) for p in pods]
        self.latest = found[0][1] if found else None
        live = [status for raw, status in found if not status.deleting and of_template(raw, self.template)]
        return live[0] if live else None

    def _check_ready_early(self, line_ns: int) -> None:
        if self.worker == 0:
            super()._check_ready_early(line_ns)

    @property
    def log_ready(self) -> bool:
        """This pod's part is up: the leader's log says ready; a worker's has shown its KV-cache HBM line."""
        state = self.state
        if state.failure is not None and state.failure.fatal:
            return False
        return state.ready if self.worker == 0 else state.last_snapshot("kv_cache") is not None


class GroupWatch:
    """Follow every pod of one LeaderWorkerSet group to ready or failed (see the module docstring).

    Args:
        workload: the LeaderWorkerSet (from the GKE listing; ``size`` pods a group).
        kube: its cluster's client.
        on_event: told each :class:`GroupEvent`.
        on_lines: ``(worker, batch)`` of each pod's log lines.
        poll_s: seconds between pod status polls. max_wait_s: the whole watch's bound (then code 2).
        group: the group's index (0: the group ``watch`` follows).
    """

    def __init__(self, workload: Workload, kube: KubeClient, *, on_event: Callable[[GroupEvent], None],
                 on_lines: GroupLines | None = None, poll_s: float = 2.0, max_wait_s: float = 3600.0,
                 group: int = 0) -> None:
        self.workload = workload
        self.group = group
        self.max_wait_s = max_wait_s
        self._on_event = on_event
        self._on_lines = on_lines
        #: recreations of the group seen (the most any pod saw)
        self.recreated = 0
        #: template changes seen during the watch (rollouts)
        self.rollouts = 0
        self.kube = kube
        self.poll_s = poll_s
        self._template_json = _templates(workload.raw)
        #: rises with every event and batch (a view redraws when it moved)
        self.version = 0
        self.followers = [self._follower(workload, kube, worker, poll_s) for worker in range(max(1, workload.size))]

    def _follower(self, workload: Workload, kube: KubeClient, worker: int, poll_s: float) -> PodFollower:
        def said(event: WorkloadEvent) -> None:
            self._pod_event(worker, event)

        def lines(batch: list[tuple[datetime | None, str]]) -> None:
            self.version += 1
            if self._on_lines is not None:
                self._on_lines(worker, batch)

        return PodFollower(workload, kube, worker, group=self.group, on_event=said, on_lines=lines, poll_s=poll_s)

    # --- what presenters and the summary read -------------------------------------------------

    @property
    def leader(self) -> PodFollower:
        """The leader's follower (worker 0: its log says ready)."""
        return self.followers[0]

    def states(self) -> list[StartupState]:
        """Each pod's boot, in worker order."""
        return [f.state for f in self.followers]

    @property
    def state(self) -> StartupState:
        """The group's boot: the leader's state, failed with the failing pod's reason when one failed."""
        return group_state(self.states(), [f.name for f in self.followers])

    def ready(self) -> bool:
        """Every pod's log is ready (the leader's says ready; every worker's showed its KV-cache HBM)."""
        return all(f.log_ready for f in self.followers)

    def summary(self) -> dict[str, Any]:
        """The ``log-summary --json`` object of the group (a slice's when it has several pods), with
        ``workload``, ``namespace``, ``cluster``, ``pod`` (the leader), ``container_id`` (``LEADER@UID``: the
        boot's id in the history; a group made anew keeps its names, not its uids), ``group``, ``recreated``,
        ``kubernetes_ready_early`` and ``pods`` (one object per pod)."""
        states, names = self.states(), [f.name for f in self.followers]
        summary = slice_summary(states) if len(states) > 1 else summary_json(states[0])
        worker = failing_worker(states)
        if worker is not None:                       # named by pod, not by slice worker
            theirs = summary_json(states[worker])
            for key in ("failure_detail", "failure_explanation"):
                value = theirs.get(key)
                summary[key] = f"pod {names[worker]}: {value}" if isinstance(value, str) else value
            summary.update(ready=False, failure_pod=names[worker])
        else:
            summary["ready"] = self.ready()
        leader = self.leader.pod
        summary.update(workload=self.workload.ref, namespace=self.workload.namespace, cluster=self.workload.cluster,
                       pod=self.leader.name, container_id=f"{self.leader.name}@{leader.uid}" if leader and leader.uid
                       else self.leader.name, group=self.group, recreated=self.recreated,
                       kubernetes_ready_early=self.leader._flagged, pods=[pod_result(f) for f in self.followers])
        return summary

    # --- events ------------------------------------------------------------------------------

    def _emit(self, kind: GroupEventKind, text: str, worker: int | None = None) -> None:
        self.version += 1
        self._on_event(GroupEvent(kind, text, worker))

    def _pod_event(self, worker: int, event: WorkloadEvent) -> None:
        if event.kind in ("ready", "failed"):
            return                                   # the group's verdict says it, once
        if event.kind == "recreated":
            follower = self.followers[worker]
            if follower.generation > follower.followed_generation:       # made anew for the new template
                follower.followed_generation = follower.generation
                follower.recreated -= 1
                return
            seen = follower.recreated
            if seen > self.recreated:
                self.recreated = seen
                self._emit("group", f"group {self.group} of {self.workload.ref} was recreated (LeaderWorkerSet "
                                    "RecreateGroupOnPodRestart: one pod restarted or went, every pod is made anew): "
                                    "a fresh boot on each")
            return
        self._emit(event.kind, event.text, worker)

    # --- the whole watch ---------------------------------------------------------------------

    async def _track_template(self) -> None:
        """Read the LWS every poll; a changed template is a rollout: each follower follows the new one."""
        w = self.workload
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                raw = await self.kube.get("leaderworkerset.x-k8s.io/v1", "leaderworkersets", w.namespace, w.name)
            except KubeApiError:
                continue                                   # the followers' own polls say what is wrong
            templates = _templates(raw)
            if templates == self._template_json:
                continue
            self._template_json = templates
            self.rollouts += 1
            for follower in self.followers:
                follower.template = template_for(raw, follower.worker)
                follower.generation = self.rollouts
            self._emit("rollout", f"{w.ref}'s template changed (resourceVersion "
                                  f"{(raw.get('metadata') or {}).get('resourceVersion', '?')}): following the pods "
                                  "of the new template, a fresh boot on each")

    async def run(self) -> SliceOutcome:
        """Watch until every pod is ready (code 0), one failed (1), or ``max_wait_s`` / an API failure (2)."""
        tasks = [asyncio.create_task(f.run()) for f in self.followers]
        tracker = asyncio.create_task(self._track_template())
        try:
            async with asyncio.timeout(self.max_wait_s):
                return await self._until_verdict(tasks)
        except TimeoutError:
            self._emit("warning", f"gave up after {self.max_wait_s:g} s without a verdict")
        finally:
            tracker.cancel()
            for task in [*tasks, tracker]:
                task.cancel()
            for task in [*tasks, tracker]:
                with contextlib.suppress(asyncio.CancelledError, KubeApiError):
                    await task
        return SliceOutcome(2, self.summary() if any(s.lines_read for s in self.states()) else None)

    async def _until_verdict(self, tasks: list[asyncio.Task[SliceOutcome]]) -> SliceOutcome:
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                outcome = task.result()
                worker = tasks.index(task)
                if outcome.code == 1:
                    return self._conclude(1)
                if outcome.code == 2:
                    return SliceOutcome(2, self.summary())
                if worker == 0:
                    return await self._leader_ready()
        return SliceOutcome(2, self.summary())

    async def _leader_ready(self) -> SliceOutcome:
        """The leader says ready: wait (at most the grace) for every worker's part, then the verdict."""
        loop = asyncio.get_running_loop()
        end = loop.time() + WORKER_GRACE_S
        while loop.time() < end and not self.ready() and failing_worker(self.states()) is None:
            await asyncio.sleep(0.05)
        if failing_worker(self.states()) is not None:
            return self._conclude(1)
        if not self.ready():
            late = [f.name for f in self.followers if not f.log_ready]
            self._emit("warning", f"the leader says ready but {', '.join(late)} never showed its KV cache in "
                                  f"{WORKER_GRACE_S:g} s: the group is not judged ready")
            return SliceOutcome(2, self.summary())
        return self._conclude(0)

    def _conclude(self, code: int) -> SliceOutcome:
        state = self.state
        if code == 0:
            self._emit("ready", f"ready: {len(self.followers)} pods of group {self.group} ({self.leader.name} "
                                f"serves {state.model or self.workload.model or 'the model'})")
        else:
            failure = state.failure
            self._emit("failed", f"failed: {failure.kind.value}: {failure.explanation} {failure.hint}".strip()
                       if failure is not None else "failed: a pod's log ended without ready")
        return SliceOutcome(code, self.summary())


def _templates(raw: Mapping[str, Any]) -> Any:
    """The LWS's leader and worker templates (what a rollout changes)."""
    lwt = (raw.get("spec") or {}).get("leaderWorkerTemplate") or {}
    return (lwt.get("leaderTemplate"), lwt.get("workerTemplate"))


def group_state(states: list[StartupState], names: list[str]) -> StartupState:
    """The leader's state (``states[0]``), failed with the earliest failing pod's failure, named by pod."""
    return failed_on_any_worker(states, label=lambda worker: f"pod {names[worker]}")


def pod_result(follower: PodFollower) -> dict[str, Any]:
    """One pod's line of ``--json``: ``name``, ``worker``, ``node``, ``kubernetes`` (what Kubernetes says),
    ``kubernetes_ready``, ``log_ready``, ``phase`` (of its log), ``restarts``, ``recreated``, ``failure``
    (its own, or ``None``)."""
    pod, state = follower.latest, follower.state
    failure = state.failure if state.failure is not None and state.failure.fatal else None
    return {"name": follower.name, "worker": follower.worker, "node": pod.node if pod else None,
            "kubernetes": pod.headline if pod else "no such pod", "kubernetes_ready": bool(pod and pod.ready),
            "log_ready": follower.log_ready, "phase": state.phase.value, "restarts": pod.restarts if pod else 0,
            "recreated": follower.recreated, "lines_read": state.lines_read,
            "failure": f"{failure.kind.value}: {failure.message}" if failure is not None else None}
