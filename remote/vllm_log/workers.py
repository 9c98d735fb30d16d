"""One boot seen from every worker of a multi-host slice: HBM summed over workers, any worker's failure.

A multi-host vLLM engine on TPU (e.g. v5litepod-16: 4 hosts x 4 chips) runs one worker per host;
each host's container log is read by its own :class:`~remote.vllm_log.reader.StartupReader`.
Worker 0 prints the engine's lines (KV cache size, compilation, readiness, the API server); every
worker prints its own ``Init worker | rank=N | ... hbm=[...]``, ``Init model | hbm=[...]`` and
``Init kv-cache | ... hbm=[...]`` lines for its local chips (tpu-inference, vLLM 0.17-0.29).
Per-chip figures stay per chip (each worker's own snapshots); the slice totals sum them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from remote.startup import Phase, PhaseMark, StartupState, summary_json

#: The HBM stages summed over workers, in boot order.
SLICE_STAGES = ("worker_init", "model_loaded", "kv_cache")


@dataclass(frozen=True)
class SliceHbm:
    """HBM of one boot stage summed over the workers that printed it.

    Attributes:
        stage: ``worker_init``, ``model_loaded`` or ``kv_cache``.
        used_gib / limit_gib: sums over every chip of the reporting workers, GiB.
        chips: chips summed.
        workers: workers that printed this stage (of the slice's ``total_workers``).
        total_workers: the slice's worker count.
    """

    stage: str
    used_gib: float
    limit_gib: float
    chips: int
    workers: int
    total_workers: int


def slice_hbm(states: Sequence[StartupState]) -> list[SliceHbm]:
    """For each stage any worker printed, the sum of every worker's latest snapshot of that stage."""
    out = []
    for stage in SLICE_STAGES:
        snaps = [snap for snap in (state.last_snapshot(stage) for state in states) if snap is not None]
        if snaps:
            out.append(SliceHbm(stage, round(sum(sum(s.used_gib) for s in snaps), 2),
                                round(sum(sum(s.limit_gib) for s in snaps), 2),
                                sum(s.num_chips for s in snaps), len(snaps), len(states)))
    return out


def failing_worker(states: Sequence[StartupState]) -> int | None:
    """The worker whose fatal failure fails the boot: the earliest failure (by its time, then index), or ``None``."""
    failed = [index for index, state in enumerate(states) if state.failure is not None and state.failure.fatal]
    if not failed:
        return None

    def order(index: int) -> tuple[bool, float, int]:
        failure = states[index].failure
        at = failure.at if failure is not None else None
        return (at is None, at.timestamp() if at is not None else 0.0, index)

    return min(failed, key=order)


def slice_summary(states: Sequence[StartupState]) -> dict[str, Any]:
    """The ``log-summary --json`` object of a slice's boot (``states[w]`` = worker ``w``'s reader state).

    Worker 0's summary, plus ``workers`` (count), ``failure_worker`` (index or ``None``),
    ``worker_lines_read`` (per worker), ``worker_hbm_used_gib`` (each worker's latest per-chip
    list, GiB) and ``slice_hbm`` (:func:`slice_hbm`: per stage ``used_gib``/``limit_gib`` summed
    over chips and workers, ``chips``, ``workers`` reporting). A fatal failure on any worker fails
    the boot: its ``failure*`` fields replace worker 0's, prefixed ``worker N:``, and ``ready`` is
    false.

    Raises:
        ValueError: ``states`` is empty.
    """
    if not states:
        raise ValueError("a slice has at least one worker")
    summary = summary_json(states[0])
    worker = failing_worker(states)
    if worker is not None and worker != 0:
        theirs = summary_json(states[worker])
        for key, value in theirs.items():
            if key.startswith("failure"):
                summary[key] = value
        summary["phase"] = theirs["phase"]
    if worker is not None:
        summary["ready"] = False
        for key in ("failure_detail", "failure_explanation"):
            if isinstance(summary.get(key), str):
                summary[key] = f"worker {worker}: {summary[key]}"
    summary["workers"] = len(states)
    summary["failure_worker"] = worker
    summary["worker_lines_read"] = [state.lines_read for state in states]
    summary["worker_hbm_used_gib"] = [list(snap.used_gib) if (snap := _latest(state)) else None for state in states]
    summary["slice_hbm"] = [{"stage": h.stage, "used_gib": h.used_gib, "limit_gib": h.limit_gib, "chips": h.chips,
                             "workers": h.workers} for h in slice_hbm(states)]
    return summary


def _latest(state: StartupState) -> Any:
    return state.hbm_snapshots[-1] if state.hbm_snapshots else None


def ready_from_worker_0(state: StartupState, worker_0: StartupState) -> StartupState:
    """Worker N's ``state`` (N > 0) as ready once worker 0's log said ready.

    Only worker 0 prints uvicorn's ``Application startup complete.``; a worker N followed alone
    therefore never reads ready itself. Returns ``state`` unchanged while worker 0 is not ready,
    when either worker failed fatally, or when ``state`` is ready already; else a copy with
    ``ready`` set, phase READY and a READY mark at worker 0's ready time (``line_no`` = the
    lines worker N had read by then).
    """
    if state.ready or not worker_0.ready or state.phase is Phase.FAILED \
            or (worker_0.failure is not None and worker_0.failure.fatal):
        return state
    mark = next((m for m in reversed(worker_0.timeline) if m.phase is Phase.READY), None)
    timeline = state.timeline + ((PhaseMark(Phase.READY, mark.started_at, state.lines_read),) if mark else ())
    return dataclasses.replace(state, ready=True, phase=Phase.READY, timeline=timeline)
