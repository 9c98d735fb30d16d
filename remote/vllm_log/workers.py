"""One boot seen from every worker of a multi-host slice: HBM summed over workers, any worker's failure.

A multi-host vLLM engine on TPU (e.g. v5litepod-16: 4 hosts x 4 chips) runs one worker per host;
each host's container log is read by its own :class:`~remote.vllm_log.reader.StartupReader`.
Worker 0 prints the engine's lines (KV cache size, compilation, readiness, the API server); every
worker prints its own ``Init worker | rank=N | ... hbm=[...]``, ``Init model | hbm=[...]`` and
``Init kv-cache | ... hbm=[...]`` lines for its local chips (tpu-inference, vLLM 0.17-0.29).
Per-chip figures stay per chip (each worker's own snapshots); the slice totals sum them.

A slice whose boot hangs in one compile step (every worker's log stops in the same ``Precompile``
line: a cross-host collective that never completes) shows only a growing phase time otherwise:
:func:`compile_watch` gives each worker's in-flight step and its age, and a warning with the likely
cause once a step runs far past what the history or the other workers say a step takes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
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


#: A step is far past its expected time at this many times the typical step ...
STUCK_FACTOR = 10.0
#: ... and never before this many seconds (XLA steps of a big model take minutes).
STUCK_MIN_S = 300.0
#: With nothing to compare with (no step finished, no history), a step this old is stuck.
STUCK_UNKNOWN_S = 1200.0


@dataclass(frozen=True)
class WorkerStep:
    """One worker's compile step in flight.

    Attributes:
        worker: the worker's index (0 prints the engine's lines).
        step: ``<name> --> <shape>`` as printed (``None``: no step in flight).
        age_s: seconds since the worker's last time-stamped line (the step's ``Precompile`` line
            when its log stopped there), to ``now``; ``None`` without a stamp.
        steps_done: steps the worker finished (deferred ones a warm-up pass compiled included).
    """

    worker: int
    step: str | None
    age_s: float | None
    steps_done: int


@dataclass(frozen=True)
class CompileWatch:
    """Each worker's in-flight compile step and, when one runs far past its time, why.

    Attributes:
        steps: one :class:`WorkerStep` per worker, in worker order.
        typical_step_s: the mean finished step over every worker, s (``None``: none finished).
        warning: a sentence naming the stuck workers, their step and age, what it was compared
            with and the likely cause; ``None`` while every step is within its time.
    """

    steps: tuple[WorkerStep, ...]
    typical_step_s: float | None = None
    warning: str | None = None


def compile_watch(states: Sequence[StartupState], now: datetime | None,
                  history_compile_s: float | None = None) -> CompileWatch:
    """The slice's compile steps in flight (``states[w]`` = worker ``w``'s reader state) at ``now``.

    A step is stuck when its age passes :data:`STUCK_FACTOR` times the typical finished step of the
    slice (at least :data:`STUCK_MIN_S`), or the whole compile the history recorded for this setup
    (``history_compile_s``); with neither, at :data:`STUCK_UNKNOWN_S`. The likely cause: every worker stuck in the same step is a cross-host
    hang (a collective waiting for a host whose process died or never joined); some workers past it
    is the behind workers' host. Ready or failed boots have no steps in flight.
    """
    finished = sum(s.compile.steps_finished for s in states)
    total_s = sum(s.compile.step_seconds_total for s in states)
    typical = total_s / finished if finished else None
    steps = []
    for index, state in enumerate(states):
        comp = state.compile
        live = not state.ready and not (state.failure is not None and state.failure.fatal)
        step = comp.in_flight if live else None
        age = (now - state.last_line_at).total_seconds() if step and now and state.last_line_at else None
        steps.append(WorkerStep(index, step, None if age is None else max(0.0, age), comp.steps_done))
    limits = [v for v in (STUCK_FACTOR * typical if typical else None, history_compile_s) if v]
    limit = max(STUCK_MIN_S, min(limits)) if limits else STUCK_UNKNOWN_S
    stuck = [s for s in steps if s.age_s is not None and s.age_s > limit]
    return CompileWatch(tuple(steps), typical, _stuck_warning(stuck, steps, typical, history_compile_s))


def _stuck_warning(stuck: list[WorkerStep], steps: list[WorkerStep], typical: float | None,
                   history_s: float | None) -> str | None:
    if not stuck:
        return None
    names = ", ".join(str(s.worker) for s in stuck)
    oldest = max(s.age_s or 0.0 for s in stuck)
    compared = [f"a step typically takes {typical:.1f} s"] if typical else []
    if history_s:
        compared.append(f"the whole compile took {history_s:.0f} s before")
    if not compared:
        compared.append("no step finished and no history to compare with")
    head = (f"worker{'s' if len(stuck) > 1 else ''} {names} stuck in one compile step for {oldest / 60:.0f} min "
            f"({'; '.join(compared)})")
    ahead = [s for s in steps if s not in stuck and s.steps_done > min(x.steps_done for x in stuck)]
    same = len({s.step for s in stuck}) == 1
    if len(stuck) == len(steps) and same:
        cause = ("every worker waits in the same step: likely a cross-host hang (a collective waiting for a "
                 "host whose process died or never joined, or hosts out of step); look for an earlier error in "
                 "each worker's log, then restart every worker's container together")
    elif ahead:
        cause = (f"worker{'s' if len(ahead) > 1 else ''} {', '.join(str(s.worker) for s in ahead)} moved past it: "
                 "likely the stuck host itself (its TPU runtime or its process); check that host's docker logs")
    else:
        cause = ("likely an XLA compile of a very large shape or a hang in the TPU runtime; lower "
                 "--max-num-batched-tokens / --max-num-seqs to shrink the programs")
    return f"{head}: {cause}."
