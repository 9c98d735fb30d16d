"""Simulated vLLM engine startup (tpu-inference, vLLM 0.29.x) for the sandbox.

Pure and deterministic: :func:`plan_startup` turns the words after ``vllm serve`` and a
node's accelerator type into an :class:`EnginePlan`, the exact log lines a real
``vllm/vllm-tpu`` container would print, each with its offset from container start.

Figures (HBM limit, cap, weights, activation headroom, KV bytes per token, KV tokens, max
concurrency): see :mod:`sandbox.models_table`. Flags: :mod:`sandbox.serve_args`.
Log lines: :mod:`sandbox.engine_lines` and :mod:`sandbox.engine_log`. Every
public name of those modules stays importable from here.

Known failures, all in the real failure envelopes: max_model_len above the model's
max_position_embeddings (APIServer pydantic ``ValidationError`` with vLLM's ``Value error,
User-specified max_model_len (N) is greater than the derived max_model_len ...`` text,
``max_model_len_too_large``); a tensor-parallel
size that does not divide the host's chips (mesh ValueError, ``config_error``); weights
above the HBM limit (``hbm_oom_load``); weights above the cap, or no room left for one KV
block (``hbm_budget_exceeded``);
one max-length request not fitting (V1 ValueError, ``max_model_len_too_large``); and
cap + compiled programs (``PROGRAM_RESERVE_GIB``) above the limit, i.e. 0.95 on a v5e,
which fails only after every compile step (``hbm_oom_after_compile``).

Durations: a model with a measured boot on the node's generation (gemma-4-E2B-it on v5e and v6e,
:class:`sandbox.models_table.MeasuredBoot`) prints exactly those ``init engine`` and
compilation seconds; others print the sum of per-step estimates.

Time: the log describes a real-looking boot (timestamps and printed seconds in "log
seconds", about 10 minutes for an 8B model); offsets are log seconds divided by
``EnginePlan.time_scale`` = (log seconds of the full boot) / ``boot_s``, so a ready
boot prints ``Application startup complete.`` at exactly ``boot_s`` (Qwen3-8B on v6e-1 logs
a 480 s boot, so x24 at the default 20 s). A failing boot keeps the scale of its full boot, so it fails
at the same point a real one would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from remote.models import chips_of
from sandbox.engine_lines import StartupBuilder, measured_timing
from sandbox.engine_log import VLLM_VERSION, vllm_version_of
from sandbox.models_table import (
    BLOCK_SIZE_TOKENS,
    GIB,
    HBM_LIMIT_GIB,
    MODELS,
    PROGRAM_RESERVE_GIB,
    ModelSpec,
    compute_figures,
    model_spec,
)
from sandbox.serve_args import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    KV_CACHE_DTYPES,
    ServeArgs,
    parse_serve_args,
)

__all__ = [
    "BLOCK_SIZE_TOKENS", "DEFAULT_GPU_MEMORY_UTILIZATION", "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "DEFAULT_MAX_NUM_SEQS", "GIB", "HBM_LIMIT_GIB", "KV_CACHE_DTYPES", "MODELS", "PROGRAM_RESERVE_GIB",
    "VLLM_VERSION", "EnginePlan", "ModelSpec", "ServeArgs", "model_spec", "parse_serve_args",
    "plan_startup", "worker_plan",
]


@dataclass(frozen=True)
class EnginePlan:
    """A simulated container's whole startup, computed up front.

    Attributes:
        lines: ``(offset_s, line)`` from container start, offsets non-decreasing, no newlines.
        outcome: ``"ready"`` or ``"failed"``.
        ready_at_s: offset of ``Application startup complete.`` (None when failed).
        exit_at_s / exit_code: failed engines exit with code 1 shortly after the last line.
        kv_cache_tokens / max_concurrency: as printed on the ``TPU KV cache size`` line
            (None when the boot fails before it).
        max_model_len: tokens per request (the flag, else the model's max positions).
        hbm_limit_gib: per chip. chips: chips the engine uses (tensor_parallel_size).
        node_chips: chips on the node; time_scale: log seconds per wall second.
        weights_gib / hbm_after_kv_gib: per-chip used GiB printed by Init model / Init kv-cache.
        compile_steps: ``Compilation of ... finished`` lines; compile_seconds and
            engine_init_seconds: from the ``init engine ... took`` line (None if not printed).
        failure_kind: corpus vocabulary (``config_error``, ``hbm_oom_load``,
            ``hbm_budget_exceeded``, ``max_model_len_too_large``, ``hbm_oom_after_compile``).
        failure_message: the root-cause sentence as printed.
        server_url: from ``Starting vLLM server on`` (None when failed).
        gpu_memory_utilization: the flag (or tpu-inference's 0.92 default) the log's memory
            figures use, for the server's ``/metrics`` (``cache_config_info``).
        kv_block_size: tokens per KV cache block as the log prints it (``Using cache_config.block_size``).
    """

    lines: tuple[tuple[float, str], ...]
    outcome: str
    ready_at_s: float | None
    exit_at_s: float | None
    exit_code: int | None
    kv_cache_tokens: int | None
    max_concurrency: float | None
    max_model_len: int
    hbm_limit_gib: float
    chips: int
    model: str = ""
    served_model_name: str = ""
    node_chips: int = 1
    time_scale: float = 1.0
    weights_gib: float | None = None
    hbm_after_kv_gib: float | None = None
    compile_steps: int = 0
    compile_seconds: float | None = None
    engine_init_seconds: float | None = None
    failure_kind: str | None = None
    failure_message: str | None = None
    server_url: str | None = None
    gpu_memory_utilization: float | None = None
    kv_block_size: int | None = None

    def text(self) -> str:
        """All lines joined with ``\\n`` (and a final newline), as ``docker logs`` prints them."""
        return "".join(line + "\n" for _, line in self.lines)


def plan_startup(serve_argv: Sequence[str], accelerator_type: str, *, boot_s: float = 20.0,
                 image: str | None = None) -> EnginePlan:
    """Plan the startup log of ``vllm serve <serve_argv>`` on a node of ``accelerator_type``.

    Args:
        serve_argv: the words after ``vllm serve`` (model first, or ``--model``).
        accelerator_type: ``v5litepod-N``, ``v5e-N``, ``v6e-N`` or ``v5p-N``.
        boot_s: wall seconds from container start to ``Application startup complete.`` for a
            boot that succeeds; a failing boot fails where its full boot would have.
        image: the container's image; a release tag (``vllm/vllm-tpu:v0.30.0``) sets the
            version the banner and engine config print (default :data:`VLLM_VERSION`).

    Returns:
        The plan; deterministic for the same arguments.

    Raises:
        ValueError: bad flags (vLLM's own wording, see :func:`parse_serve_args`), an unknown
            accelerator type, or a non-positive ``boot_s``. A real container would print the
            flag error and exit 2; callers that simulate that can show ``str(error)``.
    """
    if boot_s <= 0:
        raise ValueError(f"boot_s must be positive, got {boot_s}")
    args = parse_serve_args(serve_argv)
    fig = compute_figures(args, accelerator_type)
    timing = measured_timing(args, accelerator_type, fig)
    version = vllm_version_of(image)
    full = StartupBuilder(args, accelerator_type, fig, fail=False, timing=timing, vllm_version=version)
    full.run()
    scale = full.ready_t / boot_s
    builder = StartupBuilder(args, accelerator_type, fig, fail=True, timing=timing, vllm_version=version)
    failure = builder.run()
    lines = tuple((round(t / scale, 6), text) for t, text in builder.log.lines)
    printed = builder.printed
    common: dict[str, Any] = dict(
        lines=lines, max_model_len=fig.max_model_len, hbm_limit_gib=fig.limit_gib, chips=fig.tp,
        model=args.model, served_model_name=args.served_model_name or args.model,
        node_chips=chips_of(accelerator_type) or 1, time_scale=scale,
        kv_cache_tokens=printed.get("kv_cache_tokens"), max_concurrency=printed.get("max_concurrency"),
        weights_gib=printed.get("weights_gib"), hbm_after_kv_gib=printed.get("hbm_after_kv_gib"),
        compile_steps=builder.steps, compile_seconds=printed.get("compile_seconds"),
        engine_init_seconds=printed.get("engine_init_seconds"),
        gpu_memory_utilization=args.gpu_memory_utilization, kv_block_size=fig.block)
    if failure is None:
        return EnginePlan(outcome="ready", ready_at_s=round(builder.ready_t / scale, 6), exit_at_s=None,
                          exit_code=None, server_url=str(printed["server_url"]), **common)
    return EnginePlan(outcome="failed", ready_at_s=None, exit_at_s=round((builder.log.t + 2.0) / scale, 6),
                      exit_code=1, failure_kind=failure.kind, failure_message=failure.message, **common)


def worker_plan(plan: EnginePlan, worker: int) -> EnginePlan:
    """What worker ``worker`` (> 0) of a multi-host slice prints while worker 0 runs ``plan``.

    Each host of a multi-host tpu-inference engine runs its own worker process: it prints its own
    ``TPU info`` and ``Init worker | rank=N | ... hbm=[...]`` lines (``is_first_rank=False``,
    ``is_driver_worker=False``, its devices' ``process_index=N``), then its ``Init model`` and
    ``Init kv-cache`` HBM lines at the same moments as worker 0; the API server, the KV-cache
    size, compilation and readiness are worker 0's alone. A failing ``plan`` fails on this worker
    too: its engine's error lines from the first ``ERROR`` on are kept (not the API server's) and
    the container exits as ``plan`` says; a worker of a ready plan never exits on its own.
    """
    if worker <= 0:
        return plan
    lines = []
    failing = False
    for offset, text in plan.lines:
        failing = failing or (plan.outcome == "failed" and " ERROR " in text and "(APIServer" not in text)
        if failing:
            if "(APIServer" not in text:
                lines.append((offset, text))
            continue
        if "Init worker | rank=0" in text:
            text = (text.replace("rank=0", f"rank={worker}").replace("is_first_rank=True", "is_first_rank=False")
                    .replace("topology_order_id=0", f"topology_order_id={worker}")
                    .replace("is_driver_worker=True", "is_driver_worker=False")
                    .replace("process_index=0", f"process_index={worker}"))
        elif "TPU info" in text and "worker_id=0" in text:
            text = text.replace("worker_id=0", f"worker_id={worker}").replace("-w-0 ", f"-w-{worker} ")
        elif not ("Init model | hbm=" in text or ("Init kv-cache |" in text and "hbm=" in text)):
            continue
        lines.append((offset, text))
    if plan.outcome == "failed":
        return dataclasses.replace(plan, lines=tuple(lines), kv_cache_tokens=None, max_concurrency=None,
                                   compile_steps=0, server_url=None)
    return dataclasses.replace(plan, lines=tuple(lines), outcome="worker", ready_at_s=None, exit_at_s=None,
                               exit_code=None, server_url=None, failure_kind=None, failure_message=None,
                               kv_cache_tokens=None, max_concurrency=None, compile_steps=0)
