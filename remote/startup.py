"""What a vLLM server's startup log says: frozen snapshots, no I/O, no styling.

``remote.vllm_log.reader.StartupReader`` builds a :class:`StartupState` from log lines;
the startup view and ``tpu-console log-summary`` only read it. Sizes are GiB
(``_gib``) as vLLM prints them (tpu-inference prints GiB even where the suffix
says ``Gb``); durations are seconds (``_s``/``_seconds``); times are
timezone-aware UTC ``datetime`` objects. A field the log did not state is
``None`` (or an empty tuple), never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from remote.secrets import scrub_value


class Phase(StrEnum):
    """Startup phase of one vLLM server boot, in the order a healthy boot visits them.

    tpu-inference revisits phases (it sizes the KV cache, precompiles the sampler,
    allocates the KV cache, then precompiles the model), so a timeline can hold
    the same phase twice.
    """

    STARTING = "starting"
    LOADING_WEIGHTS = "loading_weights"
    COMPILING = "compiling"
    ALLOCATING_KV_CACHE = "allocating_kv_cache"
    WARMING_UP = "warming_up"
    READY = "ready"
    FAILED = "failed"


class FailureKind(StrEnum):
    """Fixed vocabulary of startup (and request-time) failures the reader recognises.

    Only ``CONTEXT_LENGTH_EXCEEDED`` is a request-time error: it never marks the
    server as failed.
    """

    HBM_OOM_AFTER_COMPILE = "hbm_oom_after_compile"
    HBM_OOM_LOAD = "hbm_oom_load"
    HBM_OOM_KV_ALLOC = "hbm_oom_kv_alloc"
    HBM_BUDGET_EXCEEDED = "hbm_budget_exceeded"
    VMEM_OOM_COMPILE = "vmem_oom_compile"
    MAX_MODEL_LEN_TOO_LARGE = "max_model_len_too_large"
    CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
    MULTIHOST_MEMORY_STATS_ERROR = "multihost_memory_stats_error"
    CONFIG_ERROR = "config_error"
    ENGINE_CORE_EXCEPTION = "engine_core_exception"
    ENGINE_CRASH_DURING_PRECOMPILE = "engine_crash_during_precompile"


def frozen_map(values: Mapping[str, float | int] | None = None) -> Mapping[str, float | int]:
    """A read-only copy of ``values`` (empty when ``None``)."""
    return MappingProxyType(dict(values or {}))


@dataclass(frozen=True)
class PhaseMark:
    """One entry of the phase timeline.

    Attributes:
        phase: the phase entered.
        started_at: time of the line that started it, or ``None`` when that line
            had no time stamp (neither ``docker logs --timestamps`` nor vLLM's
            ``MM-DD HH:MM:SS`` prefix).
        line_no: 1-based number of that line in the stream (counts every line).
    """

    phase: Phase
    started_at: datetime | None
    line_no: int


@dataclass(frozen=True)
class HbmSnapshot:
    """Per-chip HBM as one tpu-inference ``hbm=[(used, limit), ...]`` line printed it.

    Attributes:
        stage: ``worker_init``, ``model_loaded``, ``kv_cache``,
            ``before_quantization`` or ``other``.
        label: the line's own label (``Init model``, ``Init kv-cache``, ``qwix Memory
            usage before applying quantization of params`` ...).
        used_gib: used HBM per local chip, GiB.
        limit_gib: HBM limit per local chip, GiB.
        unit_suffix: suffix as printed (``GiB`` or ``Gb``; the values are GiB either way).
        at: time of the line, if stamped.
    """

    stage: str
    label: str
    used_gib: tuple[float, ...]
    limit_gib: tuple[float, ...]
    unit_suffix: str
    at: datetime | None = None

    @property
    def num_chips(self) -> int:
        """Number of local chips in the list."""
        return len(self.used_gib)


@dataclass(frozen=True)
class CompileProgress:
    """XLA / torch.compile progress of the current boot.

    Attributes:
        steps_finished: lines reporting one finished precompile step
            (``Compilation of <name> --> {...} finished in N [secs]`` or the older
            anonymous ``Compilation finished in N [secs]``). Warm-up passes are not steps.
        steps_started: steps announced (``Precompile <name> --> {...}``, torch_xla
            ``-- num_tokens: N``, V0 ``batch_size: B, seq_len: S``).
        in_flight_name: name of the step announced but not finished, e.g. ``worker0 sample``.
        in_flight_shape: its shape/key as printed (``{'num_reqs': 64, ...}``), cut to 200 chars.
        last_step_seconds: duration of the last finished step, s.
        step_seconds_total: sum of the finished steps' durations, s.
        started_at: time of the first compile line of this boot.
        deferred_steps: steps whose AOT lowering was skipped ("will compile in warmup").
        warmup_passes: ``Warm-up call pass finished`` lines.
        warmup_seconds_total: sum of those passes, s (they include deferred compiles).
        deferred_done: deferred steps a later ``Warm-up call pass finished ... over N tasks`` line
            compiled (tpu-inference compiles them in that pass), all of them once the server is ready.
    """

    steps_finished: int = 0
    steps_started: int = 0
    in_flight_name: str | None = None
    in_flight_shape: str | None = None
    last_step_seconds: float | None = None
    step_seconds_total: float = 0.0
    started_at: datetime | None = None
    deferred_steps: int = 0
    warmup_passes: int = 0
    warmup_seconds_total: float = 0.0
    deferred_done: int = 0

    @property
    def steps_done(self) -> int:
        """Steps compiled: the finished ones and the deferred ones a warm-up pass compiled."""
        return self.steps_finished + self.deferred_done

    @property
    def deferred_pending(self) -> int:
        """Deferred steps no warm-up pass has compiled yet."""
        return self.deferred_steps - self.deferred_done

    @property
    def in_flight(self) -> str | None:
        """``"<name> --> <shape>"`` of the step in flight (as printed), or ``None``."""
        if self.in_flight_name is None:
            return None
        if self.in_flight_shape:
            return f"{self.in_flight_name} --> {self.in_flight_shape}"
        return self.in_flight_name


@dataclass(frozen=True)
class Failure:
    """A diagnosed failure.

    Attributes:
        kind: one of :class:`FailureKind`.
        fatal: ``True`` when the server cannot come up (phase ``failed``);
            ``False`` for request-time errors and for errors a later ready line disproved.
        message: the root-cause text (exception line, continuation lines joined), or
            the failure envelope when the root cause is not in the log.
        evidence_line: the log line that carried it, as printed (cut to 500 chars).
        explanation: one sentence saying what happened.
        hint: what to try, with the flag and value when the log states enough to give one.
        at: time of the evidence line, if stamped.
        numbers: figures the message states (``max_seq_len``, ``kv_cache_needed_gib`` ...).
    """

    kind: FailureKind
    fatal: bool
    message: str
    evidence_line: str
    explanation: str
    hint: str
    at: datetime | None = None
    numbers: Mapping[str, float | int] = field(default_factory=frozen_map)


@dataclass(frozen=True)
class StartupState:
    """Everything the reader knows about the current boot, as of the last line read.

    When the log shows the server starting again (a second vLLM banner), the
    state describes the newest boot; ``restarts`` counts the earlier ones and
    ``previous_failure`` keeps the last one's failure.

    Attributes:
        phase: current phase.
        timeline: phases entered, oldest first.
        ready: uvicorn printed ``Application startup complete.``.
        server_url: from ``Starting vLLM (API) server on`` or ``Uvicorn running on``.
        failure: diagnosed failure, or ``None``.
        hbm_snapshots: every ``hbm=[...]`` list of this boot, in order.
        memory_statistics: tpu-inference ``Memory statistics`` fields (``total_hbm_limit_gb``
            ...), GiB summed over the local chips, not per chip; ``None`` if not printed.
        kv_cache_tokens: ``<GPU|TPU> KV cache size: N tokens`` (or the V0 error text).
        kv_cache_label: the platform label printed before ``KV cache size``.
        kv_cache_shape: old tpu-inference ``Init kv-cache | shape=...`` text.
        max_concurrency: ``Maximum concurrency for M tokens per request: X x``, the X.
        max_concurrency_tokens_per_request: the M.
        kv_cache_note: a sentence when a one-line ``KV cache size: N tokens, Maximum concurrency for M
            tokens per request: X`` states an N that X x M does not match, else ``None``.
        device_blocks: ``# GPU blocks: N`` / ``# TPU blocks: N`` count (block size unknown).
        device_blocks_label: ``GPU`` or ``TPU``.
        cpu_blocks: ``# CPU blocks: N`` (V0).
        num_gpu_blocks_computed / num_gpu_blocks_override: from ``Overriding num_gpu_blocks=A
            with num_gpu_blocks_override=B``.
        compile: compile progress.
        compile_seconds: total compile time, s (``(compilation: Y s)``, torch_xla group
            totals, or ``torch.compile takes X s in total``); ``None`` if only per-step times.
        engine_init_seconds: ``init engine (profile, create kv cache, warmup model) took X``.
        num_chips: local chips (``TPU info: ... num_chips=N`` or the hbm list length).
        tpu_type: accelerator type from ``TPU info`` (``v6e-1``).
        platform: ``Automatically detected platform X.``
        vllm_version: from the banner, ``vLLM API server version`` or the engine line.
        model: served model from the banner or the engine config line.
        gpu_memory_utilization: from the args, or the ``Memory statistics`` cap/limit ratio.
        max_model_len: from ``Using max model len N`` or the args.
        container_status: ``Exited (N)`` from a ``docker ps`` row in the stream.
        container_name: the container name on that row.
        engine_core_failed: ``EngineCore failed to start.`` was printed.
        model_weights_gb: ``Loading model weights took X GB`` (GPU).
        cuda_graph_capture_seconds / cuda_graph_memory_gib: ``Graph capturing finished in
            N secs, took X GiB`` (GPU V0).
        restarts: boots seen before the current one.
        previous_failure: failure of the previous boot, if it had one.
        lines_read: lines read so far (all boots).
        last_line_at: time of the newest line that carried a time stamp.
    """

    phase: Phase = Phase.STARTING
    timeline: tuple[PhaseMark, ...] = ()
    ready: bool = False
    server_url: str | None = None
    failure: Failure | None = None
    hbm_snapshots: tuple[HbmSnapshot, ...] = ()
    memory_statistics: Mapping[str, float] | None = None
    kv_cache_tokens: int | None = None
    kv_cache_label: str | None = None
    kv_cache_shape: str | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens_per_request: int | None = None
    kv_cache_note: str | None = None
    device_blocks: int | None = None
    device_blocks_label: str | None = None
    cpu_blocks: int | None = None
    num_gpu_blocks_computed: int | None = None
    num_gpu_blocks_override: int | None = None
    compile: CompileProgress = field(default_factory=CompileProgress)
    compile_seconds: float | None = None
    engine_init_seconds: float | None = None
    num_chips: int | None = None
    tpu_type: str | None = None
    platform: str | None = None
    vllm_version: str | None = None
    model: str | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    container_status: str | None = None
    container_name: str | None = None
    engine_core_failed: bool = False
    model_weights_gb: float | None = None
    cuda_graph_capture_seconds: float | None = None
    cuda_graph_memory_gib: float | None = None
    restarts: int = 0
    previous_failure: Failure | None = None
    lines_read: int = 0
    last_line_at: datetime | None = None

    def last_snapshot(self, stage: str) -> HbmSnapshot | None:
        """The newest HBM snapshot of ``stage`` (``model_loaded`` ...), or ``None``."""
        for snap in reversed(self.hbm_snapshots):
            if snap.stage == stage:
                return snap
        return None

    @property
    def hbm_model_loaded(self) -> HbmSnapshot | None:
        """Per-chip HBM after the weights are loaded (last ``Init model`` line)."""
        return self.last_snapshot("model_loaded")

    @property
    def hbm_after_kv(self) -> HbmSnapshot | None:
        """Per-chip HBM after the KV cache is allocated (``Init kv-cache`` line)."""
        return self.last_snapshot("kv_cache")

    @property
    def phase_started_at(self) -> datetime | None:
        """When the current phase began, if stamped."""
        return self.timeline[-1].started_at if self.timeline else None


#: Failure kinds whose ``failure_detail`` is the figures, not the text (as in the sidecars).
_NUMERIC_DETAIL = frozenset({FailureKind.MAX_MODEL_LEN_TOO_LARGE,
                             FailureKind.CONTEXT_LENGTH_EXCEEDED,
                             FailureKind.HBM_BUDGET_EXCEEDED})


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def summary_json(state: StartupState) -> dict[str, Any]:
    """The ``tpu-console log-summary --json`` object.

    Keys follow the corpus sidecars' ``expected`` keys (``hbm_used_gib``, ``kv_cache_tokens``,
    ``failure``, ``failure_detail`` ...) plus the phase timeline and extras; anything the
    log did not state is ``None``. Sizes GiB, durations s, times ISO 8601 UTC. Every value is
    scrubbed of secrets (:func:`remote.secrets.scrub_value`): a failure line that echoes a
    token or ``--api-key`` does not carry it into the JSON or the panel.
    """
    summary: dict[str, Any] = scrub_value({
        "phase": state.phase.value,
        "phase_timeline": [{"phase": m.phase.value, "started_at": _iso(m.started_at),
                            "line": m.line_no} for m in state.timeline],
        "ready": state.ready,
        "server_url": state.server_url,
        **_failure_fields(state),
        **_memory_fields(state),
        **_compile_fields(state),
        "num_chips": state.num_chips,
        "tpu_type": state.tpu_type,
        "platform": state.platform,
        "vllm_version_in_log": state.vllm_version,
        "model": state.model,
        "gpu_memory_utilization": state.gpu_memory_utilization,
        "max_model_len": state.max_model_len,
        "container_status": state.container_status,
        "engine_core_failed": state.engine_core_failed,
        "model_weights_gb": state.model_weights_gb,
        "cuda_graph_capture_seconds": state.cuda_graph_capture_seconds,
        "cuda_graph_memory_gib": state.cuda_graph_memory_gib,
        "restarts": state.restarts,
        "previous_failure": state.previous_failure.kind.value if state.previous_failure else None,
        "lines_read": state.lines_read,
        "last_line_at": _iso(state.last_line_at),
    })
    return summary


def _failure_fields(state: StartupState) -> dict[str, object]:
    """:func:`summary_json`'s ``failure*`` keys (unscrubbed): the kind, its detail (the figures for
    :data:`_NUMERIC_DETAIL` kinds, else the message with the container's exit status when fatal),
    fatal, evidence line, explanation, hint and time; all ``None`` without a failure."""
    failure = state.failure
    detail: Mapping[str, float | int] | str | None = None
    if failure is not None:
        if failure.kind in _NUMERIC_DETAIL and failure.numbers:
            detail = dict(failure.numbers)
        else:
            detail = failure.message
            if failure.fatal and state.container_status and state.container_status != "Exited (0)":
                name = f"{state.container_name} " if state.container_name else ""
                detail = f"{detail}; container {name}{state.container_status}"
    return {
        "failure": failure.kind.value if failure else None,
        "failure_detail": detail,
        "failure_fatal": failure.fatal if failure else None,
        "failure_evidence": failure.evidence_line if failure else None,
        "failure_explanation": failure.explanation if failure else None,
        "failure_hint": failure.hint if failure else None,
        "failure_at": _iso(failure.at) if failure else None,
    }


def _memory_fields(state: StartupState) -> dict[str, object]:
    """:func:`summary_json`'s HBM, memory statistics, KV cache and block keys (unscrubbed):
    per-chip GiB after the weights and after the KV cache, every snapshot, the KV cache figures,
    and the device blocks as ``num_tpu_blocks`` (a TPU log) or ``gpu_blocks``."""
    model = state.hbm_model_loaded
    after_kv = state.hbm_after_kv
    blocks_key = "num_tpu_blocks" if state.device_blocks_label == "TPU" else "gpu_blocks"
    return {
        "hbm_used_gib": list(model.used_gib) if model else None,
        "hbm_limit_gib": list(model.limit_gib) if model else None,
        "hbm_after_kv_used_gib": list(after_kv.used_gib) if after_kv else None,
        "hbm_snapshots": [{"label": s.label, "stage": s.stage, "used": list(s.used_gib),
                           "limit": list(s.limit_gib), "unit_suffix": s.unit_suffix,
                           "at": _iso(s.at)} for s in state.hbm_snapshots],
        "memory_statistics": (dict(state.memory_statistics)
                              if state.memory_statistics is not None else None),
        "kv_cache_tokens": state.kv_cache_tokens,
        "kv_cache_label": state.kv_cache_label,
        "kv_cache_shape": state.kv_cache_shape,
        "max_concurrency": state.max_concurrency,
        "max_concurrency_tokens_per_request": state.max_concurrency_tokens_per_request,
        "kv_cache_note": state.kv_cache_note,
        blocks_key: state.device_blocks,
        "cpu_blocks": state.cpu_blocks,
        "num_gpu_blocks_computed": state.num_gpu_blocks_computed,
        "num_gpu_blocks_override": state.num_gpu_blocks_override,
    }


def _compile_fields(state: StartupState) -> dict[str, object]:
    """:func:`summary_json`'s compile and warm-up keys: seconds, steps started, finished and done
    (deferred to warm-up included), the step in flight, step seconds, start time, warm-up passes."""
    comp = state.compile
    return {
        "compile_seconds": state.compile_seconds,
        "engine_init_seconds": state.engine_init_seconds,
        "compile_steps_finished": comp.steps_finished,
        "compile_steps_started": comp.steps_started,
        "compile_steps_done": comp.steps_done,
        "compile_deferred_done": comp.deferred_done,
        "compile_in_progress": comp.in_flight,
        "compile_last_step_seconds": comp.last_step_seconds,
        "compile_step_seconds_total": comp.step_seconds_total,
        "compile_started_at": _iso(comp.started_at),
        "compile_deferred_steps": comp.deferred_steps,
        "warmup_passes": comp.warmup_passes,
        "warmup_seconds_total": comp.warmup_seconds_total,
    }
