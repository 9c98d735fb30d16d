"""``GET /api/v1/namespaces/N/pods/P/log``: a pod's container log from the kubelet's runs, as the API
server streams it from the kubelet.

Parameters: ``container`` (required when the pod has several), ``follow`` (stream until the container
stops, the pod goes or the client leaves), ``timestamps`` (RFC 3339 with nanoseconds before each line),
``sinceTime`` (RFC 3339) / ``sinceSeconds``, ``tailLines``, ``limitBytes``, ``previous``. Errors are the
API server's 400s: ``container "vllm" in pod "P" is waiting to start: ContainerCreating``,
``previous terminated container "vllm" in pod "P" not found``, ``a container name must be specified...``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from sandbox.gke.kubelet import Kubelet, PodRun
from sandbox.gke.store import ApiError, JsonDict, parse_rfc3339

#: Lines written per chunk while catching up.
LINES_PER_CHUNK = 2000


class LogWriter(Protocol):
    """What a log answer writes through (the HTTP handler)."""

    def start_stream(self, content_type: str) -> None: ...
    def write_chunk(self, data: bytes) -> None: ...
    def end_stream(self) -> None: ...
    def client_gone(self) -> bool: ...


def stamp(epoch_s: float) -> str:
    """RFC 3339 with nanoseconds, as the kubelet prefixes lines with ``timestamps=true``."""
    whole = datetime.fromtimestamp(int(epoch_s), UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{whole}.{round((epoch_s % 1) * 1e9) % 1_000_000_000:09d}Z"


def _check(pod: JsonDict, run: PodRun | None, container: str, previous: bool) -> None:
    name = pod["metadata"]["name"]
    if previous:
        if run is None or not run.previous:
            raise ApiError(400, "BadRequest", f'previous terminated container "{container}" in pod "{name}" not found')
        return
    if run is None or run.plan is None:
        raise ApiError(400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: '
                                          "ContainerCreating")


def _container_name(pod: JsonDict, asked: str) -> str:
    names = [c["name"] for c in pod["spec"].get("containers") or []]
    if not asked:
        if len(names) != 1:
            raise ApiError(400, "BadRequest", f"a container name must be specified for pod {pod['metadata']['name']}, "
                                              f"choose one of: [{' '.join(names)}]")
        return str(names[0])
    if asked not in names:
        raise ApiError(400, "BadRequest", f"container {asked} is not valid for pod {pod['metadata']['name']}")
    return asked


def serve_log(kubelet: Kubelet, out: LogWriter, namespace: str, name: str, query: dict[str, str]) -> None:
    """Answer one log request (see the module doc). Raises ApiError before anything is written."""
    store = kubelet.store
    with store.cond:
        pod = store.get("pods", namespace, name)
        if pod is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found')
        container = _container_name(pod, query.get("container", ""))
        run = kubelet.runs.get(pod["metadata"]["uid"])
        previous = query.get("previous") in ("true", "1")
        _check(pod, run, container, previous)
        assert run is not None
        restarts = run.restarts
    try:
        since = parse_rfc3339(query["sinceTime"]) if query.get("sinceTime") else None
        if query.get("sinceSeconds"):
            since = max(since or 0.0, time.time() - float(query["sinceSeconds"]))
        tail = int(query["tailLines"]) if query.get("tailLines") else None
        limit = int(query["limitBytes"]) if query.get("limitBytes") else None
    except ValueError as exc:
        raise ApiError(400, "BadRequest", f"invalid log options: {exc}") from None
    follow = query.get("follow") in ("true", "1") and not previous
    timestamps = query.get("timestamps") in ("true", "1")
    lines = list(run.previous) if previous else run.line_times()
    if since is not None:
        lines = [(t, text) for t, text in lines if t >= since]
    now = time.time()
    due = [entry for entry in lines if entry[0] <= now]
    start = max(0, len(due) - tail) if tail is not None else 0
    out.start_stream("text/plain")
    _write_lines(out, lines, start, timestamps, limit, follow, lambda: _ended(kubelet, pod, run, restarts))
    out.end_stream()


def _ended(kubelet: Kubelet, pod: JsonDict, run: PodRun, restarts: int) -> bool:
    with kubelet.store.cond:
        live = kubelet.runs.get(pod["metadata"]["uid"])
        return (live is not run or run.restarts != restarts or run.finished_at is not None
                or run.deleting_since is not None or not run.running(time.time()))


def _write_lines(out: LogWriter, lines: list[tuple[float, str]], index: int, timestamps: bool, limit: int | None,
                 follow: bool, ended: Callable[[], bool]) -> int:
    """Write ``lines[index:]`` as they fall due (all due ones at once without ``follow``); returns bytes
    written. A follow ends when the container stops (``ended()``) or the client leaves."""
    written = 0
    while True:
        now = time.time()
        stop = index
        while stop < len(lines) and lines[stop][0] <= now and stop - index < LINES_PER_CHUNK:
            stop += 1
        if stop > index:
            data = "".join(f"{stamp(t)} {text}\n" if timestamps else f"{text}\n" for t, text in lines[index:stop]).encode()
            if limit is not None and written + len(data) > limit:
                out.write_chunk(data[: limit - written])
                return limit
            out.write_chunk(data)
            written += len(data)
            index = stop
            continue
        if not follow or out.client_gone() or ended():
            return written
        wait = (lines[index][0] - now) if index < len(lines) else 0.2
        time.sleep(min(0.2, max(0.005, wait)))
