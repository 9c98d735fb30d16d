"""WorkloadWatch's log side without a server: a resume (``sinceTime``, whole seconds) repeats the lines of
that second, which are read once; the reader is the VM path's (the same phases from the same lines)."""

from __future__ import annotations

from typing import Any

from console.flows.workload_watch import WorkloadEvent, WorkloadWatch
from remote.gke.models import PodStatus, Workload

LOG = [
    "2026-12-02T10:00:00.100000000Z INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.11.1",
    "2026-12-02T10:00:01.200000000Z (EngineCore pid=7) INFO 12-02 10:00:01 [tpu_worker.py:1] Loading model weights",
    "2026-12-02T10:00:01.300000000Z (EngineCore pid=7) INFO 12-02 10:00:01 [kv_cache.py:1] TPU KV cache size: 819,520 tokens",
]


class FakeKube:
    """Serves LOG from ``since_time`` (whole seconds, as the API server reads it) and records each ask."""

    def __init__(self) -> None:
        self.asked: list[str | None] = []

    async def follow_log(self, namespace: str, pod: str, container: str, *, since_time: str | None = None) -> Any:
        self.asked.append(since_time)
        for line in LOG:
            if since_time is None or line[:19] >= since_time[:19]:
                yield line

    async def list_all(self, *args: Any, **kwargs: Any) -> list[Any]:
        return []


async def test_a_resume_asks_since_the_last_second_and_reads_each_line_once() -> None:
    said: list[WorkloadEvent] = []
    kube = FakeKube()
    watch = WorkloadWatch(Workload("p", "l", "c", "default", "Deployment", "vllm", container="vllm"), kube,  # type: ignore[arg-type]
                          on_event=said.append, poll_s=30.0)
    pod = PodStatus("vllm-abc-1", phase="Running", running=True)
    assert await watch._follow(pod) == "ended"
    first = watch.state.lines_read
    assert await watch._follow(pod) == "ended"                  # the stream ended: the watch resumes
    assert kube.asked == [None, "2026-12-02T10:00:01Z"]
    assert watch.state.lines_read == first == 3                 # the second's repeats skipped
    assert watch.state.kv_cache_tokens == 819520
    kinds = [e.kind for e in said]
    assert kinds[0] == "following" and kinds.count("kv_cache") == 1
    [resumed] = [e.text for e in said if e.kind == "resumed"]
    assert resumed == "resuming vllm-abc-1's log from 2026-12-02T10:00:01.300000000Z"


def _watch(said: list[WorkloadEvent]) -> WorkloadWatch:
    return WorkloadWatch(Workload("p", "l", "c", "default", "Deployment", "vllm", container="vllm"), FakeKube(),  # type: ignore[arg-type]
                         on_event=said.append)


def test_ready_early_is_judged_by_the_lines_timestamps() -> None:
    said: list[WorkloadEvent] = []
    watch = _watch(said)
    watch.pod = PodStatus("vllm-abc-1", running=True, ready=True, ready_since="2026-12-02T10:00:00Z")
    watch._take(LOG[:1])                                         # 0.1 s after Ready: within the second
    assert not any(e.kind == "ready_early" for e in said)
    watch._take(LOG[1:2])                                        # 1.2 s after, still loading: flagged
    [flag] = [e.text for e in said if e.kind == "ready_early"]
    assert flag.startswith("Kubernetes says Ready while the log still compiles (phase loading_weights)")

    said.clear()
    late = _watch(said)                                          # Ready long after the lines: a probe did its job
    late.pod = PodStatus("vllm-abc-1", running=True, ready=True, ready_since="2026-12-02T11:00:00Z")
    late._take(LOG)
    assert not any(e.kind == "ready_early" for e in said)
