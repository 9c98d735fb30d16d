"""The kubelet of the sandbox's TPU nodes: runs each bound pod's first container on the simulated vLLM
engine (:func:`sandbox.engine.plan_startup`) and reports it in ``status`` as a kubelet does.

A pod goes ``Pending`` + ``ContainerCreating`` (events Pulling, Pulled) for ``create_s``, then
``Running`` (events Created, Started); ``Ready`` when the engine prints ``Application startup complete.``
if the container has a readinessProbe, at once otherwise (Kubernetes does not know vLLM is compiling).
A container whose engine exits goes ``CrashLoopBackOff`` (``lastState.terminated``) and restarts after
Kubernetes' back-off (10 s doubling, scaled by ``time_scale``). A pod being deleted stops its container and
is removed after ``terminate_s``.

The container's command: ``vllm serve ARGS``, ``python3 -m vllm.entrypoints.openai.api_server ARGS``,
``sh -c "vllm serve ..."`` or no command (the image's ``vllm serve`` entrypoint) with ``args``.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sandbox.gke.events import record_event
from sandbox.gke.store import JsonDict, ObjectStore, rfc3339

#: ``(serve_argv, accelerator_type, image) -> plan`` (an ``EnginePlan``-like object).
PlanFor = Callable[[list[str], str, str], Any]
_API_SERVER = ("vllm.entrypoints.openai.api_server",)


@dataclass(frozen=True)
class StaticPlan:
    """A fixed log for a container that is not a vLLM server (or whose flags vLLM rejects)."""

    lines: tuple[tuple[float, str], ...]
    exit_at_s: float | None = None
    exit_code: int | None = None
    outcome: str = "failed"
    ready_at_s: float | None = None


def serve_argv(container: JsonDict) -> list[str] | None:
    """The words after ``vllm serve`` in a container's command and args, or ``None`` when the container
    does not run vLLM's OpenAI server."""
    command = [str(w) for w in container.get("command") or []]
    args = [str(w) for w in container.get("args") or []]
    words = command + args
    if command[:1] in (["sh"], ["/bin/sh"], ["bash"], ["/bin/bash"]) and "-c" in words:
        script = words[words.index("-c") + 1] if words.index("-c") + 1 < len(words) else ""
        for segment in split_shell(script):                 # `start ray; vllm serve ...`: the server's step
            found = serve_argv({"command": ["exec"], "args": segment})
            if found is not None:
                return found
        return None
    if command[:1] == ["exec"]:
        words = args
    if not command:
        words = ["vllm", "serve", *args]
    if words[:2] == ["vllm", "serve"]:
        return words[2:]
    if len(words) >= 3 and words[0].startswith("python") and words[1] == "-m" and words[2] in _API_SERVER:
        return words[3:]
    return None


def split_shell(script: str) -> list[list[str]]:
    """The simple commands of a ``sh -c`` script (split at ``;``, ``&&``, ``||`` and newlines), each as words
    with ``exec`` dropped; ``[]`` when the script does not parse."""
    try:
        words = shlex.split(script.replace("\n", " ; "), posix=True)
    except ValueError:
        return []
    segments: list[list[str]] = [[]]
    for word in words[:10_000]:
        if word in (";", "&&", "||") or word.endswith(";"):
            if word.endswith(";") and word != ";":
                segments[-1].append(word[:-1])
            segments.append([])
        elif not (word == "exec" and not segments[-1]):
            segments[-1].append(word)
    return [s for s in segments if s]


def ray_worker(container: JsonDict) -> bool:
    """Whether the container joins a Ray cluster (an LWS worker of multi-host vLLM: ``ray start ...``)."""
    words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
    return any(w == "ray" and words[i + 1:i + 2] == ["start"] for i, w in enumerate(words)) or any(
        "ray start" in w for w in words)


def container_plan(container: JsonDict, accelerator_type: str, plan_for: PlanFor) -> Any:
    """The plan of a container's run: the engine's startup, or a static failure (usage error, not vLLM)."""
    argv = serve_argv(container)
    image = str(container.get("image") or "")
    if argv is None and ray_worker(container):
        return StaticPlan(((0.5, "Local node IP: 10.8.0.2"), (0.6, "Ray runtime started."),
                           (0.6, "--------------------")), outcome="worker")
    if argv is None:
        shown = " ".join(map(str, (container.get("command") or []) + (container.get("args") or []))) or "(none)"
        return StaticPlan(((0.1, f"sandbox: this simulated container only runs vLLM's OpenAI server, not {shown}"),),
                          exit_at_s=0.2, exit_code=127)
    try:
        return plan_for(argv, accelerator_type, image)
    except ValueError as exc:
        return StaticPlan(((0.8, "usage: vllm serve [model_tag] [options]"), (0.8, f"vllm serve: error: {exc}")),
                          exit_at_s=0.9, exit_code=2)


@dataclass
class PodRun:
    """What the kubelet knows of one pod (by uid): when creation began, the current run's plan and start
    (epoch seconds), restarts, and the previous run's lines for ``previous=true`` logs."""

    created_at: float
    node: str
    container: str
    plan: Any = None
    started_at: float | None = None
    restarts: int = 0
    back_off_until: float | None = None
    previous: tuple[tuple[float, str], ...] = ()
    ready: bool = False
    deleting_since: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    flags: set[str] = field(default_factory=set)

    def line_times(self) -> list[tuple[float, str]]:
        """The current run's lines with their epoch times (empty before the container starts)."""
        if self.plan is None or self.started_at is None:
            return []
        return [(self.started_at + offset, text) for offset, text in self.plan.lines]

    def running(self, now: float) -> bool:
        """Started and not (yet) exited."""
        return self.started_at is not None and self.finished_at is None and not (
            self.plan.exit_at_s is not None and now >= self.started_at + self.plan.exit_at_s)


@dataclass
class Kubelet:
    """Runs every bound pod of the store (call :meth:`sync` under the store's lock).

    Args:
        store: the cluster's objects. accelerator_of: node name -> TPU API accelerator type (``v6e-4``).
        plan_for: builds the engine's plan. create_s / terminate_s: seconds of ContainerCreating and of
        a pod's termination. time_scale: factor on the crash back-off. on_ready / on_stopped: called with
        ``(pod, run)`` when a pod's engine starts serving (``Application startup complete.``) / its
        container stops (the pod's OpenAI server follows them).
        worker_plan: ``(leader_plan, worker_index) -> plan`` for the pods of a multi-host group past its
            leader (label ``leaderworkerset.sigs.k8s.io/worker-index`` > 0) that run vLLM: that host's own
            worker log (its chips' HBM lines; no API server, never ready on its own). ``None``: as the leader.
    """

    store: ObjectStore
    accelerator_of: Callable[[str], str]
    plan_for: PlanFor
    create_s: float = 1.0
    terminate_s: float = 0.5
    time_scale: float = 1.0
    on_ready: Callable[[JsonDict, PodRun], None] = lambda pod, run: None
    on_stopped: Callable[[JsonDict, PodRun], None] = lambda pod, run: None
    worker_plan: Callable[[Any, int], Any] | None = None
    runs: dict[str, PodRun] = field(default_factory=dict)

    def sync(self, now: float) -> None:
        """One pass over the pods bound to a node."""
        for pod in list(self.store.items("pods")):
            if not pod["spec"].get("nodeName"):
                if pod["metadata"].get("deletionTimestamp"):     # never ran: the API server removes it at once
                    self.store.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
                continue
            uid = pod["metadata"]["uid"]
            run = self.runs.get(uid)
            if pod["metadata"].get("deletionTimestamp"):
                self._terminate(pod, run, now)
                continue
            if run is None:
                run = self._begin(pod, now)
            self._advance(pod, run, now)

    def _begin(self, pod: JsonDict, now: float) -> PodRun:
        container = pod["spec"]["containers"][0]
        run = PodRun(created_at=now, node=pod["spec"]["nodeName"], container=container["name"])
        self.runs[pod["metadata"]["uid"]] = run
        record_event(self.store, "pods", pod, "Pulling", f'Pulling image "{container["image"]}"',
                     host=run.node)
        return run

    def _advance(self, pod: JsonDict, run: PodRun, now: float) -> None:
        container = pod["spec"]["containers"][0]
        if run.plan is None and now >= run.created_at + self.create_s:
            self._start(pod, run, container, now, first=True)
        elif run.back_off_until is not None and now >= run.back_off_until:
            run.previous = tuple(run.line_times())
            run.restarts += 1
            run.finished_at = run.exit_code = run.back_off_until = None
            self._start(pod, run, container, now, first=False)
        elif run.plan is not None and run.finished_at is None and not run.running(now):
            run.finished_at = now
            run.exit_code = run.plan.exit_code
            run.back_off_until = now + min(300.0, 10.0 * 2 ** run.restarts) * self.time_scale
            run.ready = False
            run.flags.discard("serving")
            self.on_stopped(pod, run)
            record_event(self.store, "pods", pod, "BackOff", f"Back-off restarting failed container {run.container} "
                         f"in pod {pod['metadata']['name']}_{pod['metadata']['namespace']}"
                         f"({pod['metadata']['uid']})", warning=True, host=run.node)
        if run.plan is not None and run.running(now) and run.started_at is not None:
            at = run.plan.ready_at_s
            serving = at is not None and now >= run.started_at + at
            if serving and "serving" not in run.flags:
                run.flags.add("serving")             # the engine's server listens from now on
                self.on_ready(pod, run)
            if not run.ready and (serving or container.get("readinessProbe") is None):
                run.ready = True                     # no probe: Ready at once, however long vLLM compiles
        self._write_status(pod, run, now)

    def _start(self, pod: JsonDict, run: PodRun, container: JsonDict, now: float, *, first: bool) -> None:
        run.plan = container_plan(container, self.accelerator_of(run.node), self.plan_for)
        worker = worker_index(pod)
        if worker and self.worker_plan is not None and getattr(run.plan, "outcome", "") in ("ready", "failed"):
            run.plan = self.worker_plan(run.plan, worker)
        run.started_at = now
        if first:
            record_event(self.store, "pods", pod, "Pulled", f'Container image "{container["image"]}" already '
                         "present on machine", host=run.node)
        record_event(self.store, "pods", pod, "Created", f"Created container: {run.container}", host=run.node)
        record_event(self.store, "pods", pod, "Started", f"Started container {run.container}", host=run.node)

    def _terminate(self, pod: JsonDict, run: PodRun | None, now: float) -> None:
        if run is not None and run.deleting_since is None:
            run.deleting_since = now
            run.ready = False
            run.flags.discard("serving")
            self.on_stopped(pod, run)
            record_event(self.store, "pods", pod, "Killing", f"Stopping container {run.container}", host=run.node)
        since = run.deleting_since if run is not None and run.deleting_since is not None else now
        if run is None or now >= since + self.terminate_s:
            self.runs.pop(pod["metadata"]["uid"], None)
            self.store.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])

    def _write_status(self, pod: JsonDict, run: PodRun, now: float) -> None:
        status = container_status(pod, run, now)
        if status != pod.get("status"):
            updated = {**pod, "status": status}
            self.store.update("pods", updated)


def worker_index(pod: JsonDict) -> int:
    """The pod's index in its LeaderWorkerSet group (``leaderworkerset.sigs.k8s.io/worker-index``), 0 for the
    leader and for pods of no group."""
    try:
        return int((pod["metadata"].get("labels") or {}).get("leaderworkerset.sigs.k8s.io/worker-index", "0"))
    except ValueError:
        return 0


def _condition(kind: str, ok: bool, since: str, reason: str = "") -> JsonDict:
    out: JsonDict = {"type": kind, "status": "True" if ok else "False", "lastProbeTime": None,
                     "lastTransitionTime": since}
    if reason and not ok:
        out["reason"] = reason
    return out


def container_status(pod: JsonDict, run: PodRun, now: float) -> JsonDict:
    """The pod's ``status`` for the kubelet's view of ``run`` (phase, conditions, containerStatuses)."""
    container = pod["spec"]["containers"][0]
    old = pod.get("status") or {}
    created = rfc3339(run.created_at)
    cs: JsonDict = {"name": container["name"], "image": container["image"],
                    "imageID": "", "ready": run.ready,
                    "restartCount": run.restarts, "started": run.running(now)}
    if run.plan is None:
        cs["state"] = {"waiting": {"reason": "ContainerCreating"}}
    elif run.finished_at is not None:
        cs["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": f"back-off restarting failed container "
                                   f"{container['name']} in pod {pod['metadata']['name']}"}}
        cs["lastState"] = {"terminated": {"exitCode": run.exit_code, "reason": "Error",
                                          "startedAt": rfc3339(run.started_at), "finishedAt": rfc3339(run.finished_at)}}
    else:
        cs["state"] = {"running": {"startedAt": rfc3339(run.started_at)}}
        cs["containerID"] = f"containerd://{pod['metadata']['uid'].replace('-', '')}{run.restarts:04d}"
    if run.plan is not None:                  # the image's repo digest, once pulled (the sandbox's stays made up)
        digest = hashlib.sha256(str(container["image"]).encode()).hexdigest()
        image = str(container["image"]).split("@", 1)[0]
        repo = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
        cs["imageID"] = f"docker.io/{repo}@sha256:{digest}"
    ready_since = (old.get("conditions") and next((c["lastTransitionTime"] for c in old["conditions"]
                                                   if c["type"] == "Ready" and (c["status"] == "True") == run.ready),
                                                  None)) or rfc3339(now)
    phase = "Running" if run.plan is not None else "Pending"
    return {
        "phase": phase,
        "conditions": [_condition("PodReadyToStartContainers", run.plan is not None, created),
                       _condition("Initialized", True, created),
                       _condition("Ready", run.ready, ready_since, "ContainersNotReady"),
                       _condition("ContainersReady", run.ready, ready_since, "ContainersNotReady"),
                       _condition("PodScheduled", True, created)],
        "hostIP": old.get("hostIP", ""), "hostIPs": old.get("hostIPs", []),
        **({"podIP": pod_ip(pod), "podIPs": [{"ip": pod_ip(pod)}]} if run.plan is not None else {}),
        "startTime": created, "containerStatuses": [cs], "qosClass": old.get("qosClass", "BestEffort"),
    }


def pod_ip(pod: JsonDict) -> str:
    """A stable made-up pod IP in the cluster range (``10.8.x.y``) from the pod's uid."""
    digits = int(pod["metadata"]["uid"].replace("-", "")[:8], 16)
    return f"10.8.{(digits >> 8) % 200}.{2 + digits % 250}"
