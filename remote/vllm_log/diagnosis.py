"""Failure diagnosis for vLLM startup logs: which kind, why, and what to try.

The reader (``remote.vllm_log.reader``) finds root-cause text and context; this module
turns them into a :class:`~remote.startup.FailureKind`, a one-sentence
explanation and a hint with concrete flag values when the log states enough.
Texts recognised (source noted per pattern in ``remote.vllm_log.patterns``):
XLA ``RESOURCE_EXHAUSTED`` HBM/VMEM OOMs (jax / libtpu) and any allocation failure that states
what it needed and what was free, the V0/V1 KV-fit ``max seq len`` errors, ``ModelConfig``'s
``max_model_len`` above the model's derived maximum (a plain ValueError, or inside pydantic's
``ValidationError`` block from vLLM 0.10 on), tpu-inference's HBM budget check and multi-host
``MemoryStats`` error, and the OpenAI server's context-length 400. The README's "Failure
catalogue" lists each kind, the text that triggers it and what to try.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from remote.accelerators import generation_facts
from remote.models import chip_generation
from remote.startup import FailureKind as K
from remote.startup import Phase
from remote.vllm_log import patterns as pat

#: Exception types that mean "the flags/config do not fit this model or slice".
CONFIG_ERROR_TYPES = frozenset({
    "ValueError", "ValidationError", "NotImplementedError", "ArgumentError",
    "ArgumentTypeError",
})
#: Exceptions that only restate an earlier root cause.
ENVELOPE_PHRASES = ("Engine core initialization failed", "EngineDeadError", "EngineCore failed")

_FRAME_KV = re.compile(r"kv_cache|kv_caches|determine_available_memory|profile_run")
_FRAME_COMPILE = re.compile(r"compile|warm_?up|capture_model|precompile")
_FRAME_LOAD = re.compile(r"load|get_\w*model|quantiz|create_\w*model")


def frame_context(func: str) -> str | None:
    """Stage of a traceback frame's function: ``kv``, ``compile``, ``load`` or ``None``."""
    if _FRAME_KV.search(func):
        return "kv"
    if _FRAME_COMPILE.search(func):
        return "compile"
    if _FRAME_LOAD.search(func):
        return "load"
    return None


@dataclass(frozen=True)
class Match:
    """A recognised root-cause message.

    Attributes:
        kind: failure kind; for HBM OOMs it is provisional (``HBM_OOM_AFTER_COMPILE``) and
            :func:`resolve_oom` refines it from context.
        fatal: the server cannot come up.
        numbers: figures stated in the message.
        is_hbm_oom: kind still needs :func:`resolve_oom`.
    """

    kind: K
    fatal: bool
    numbers: Mapping[str, float | int]
    is_hbm_oom: bool = False


def match_specific(message: str) -> Match | None:
    """Recognise a specific failure text in ``message`` (one line or joined lines)."""
    if "MemoryStats is only supported for addressable" in message:
        return Match(K.MULTIHOST_MEMORY_STATS_ERROR, True, {})
    if "greater than the derived max_model_len" in message:
        m = pat.DERIVED_MAX_LEN.search(message)
        if m:
            return Match(K.MAX_MODEL_LEN_TOO_LARGE, True,
                         {"requested_max_model_len": pat.to_int(m[1]),
                          "derived_max_model_len": int(float(m[3]))})
    if "maximum context length" in message:
        m = pat.CONTEXT_LENGTH.search(message)
        if m:
            nums: dict[str, float | int] = {"max_context_tokens": pat.to_int(m[1]),
                                            "requested_tokens": pat.to_int(m[2])}
            if m[3]:
                nums["message_tokens"] = pat.to_int(m[3])
                nums["completion_tokens"] = pat.to_int(m[4])
            return Match(K.CONTEXT_LENGTH_EXCEEDED, False, nums)
    if "max seq len" in message:
        m = pat.KF2.search(message)
        if m:
            nums = {"max_seq_len": pat.to_int(m[1]), "kv_cache_needed_gib": float(m[2]),
                    "kv_cache_available_gib": float(m[3])}
            est = pat.KF2_ESTIMATE.search(message)
            if est:
                nums["estimated_max_model_len"] = pat.to_int(est[1])
            return Match(K.MAX_MODEL_LEN_TOO_LARGE, True, nums)
        m = pat.KF1.search(message)
        if m:
            return Match(K.MAX_MODEL_LEN_TOO_LARGE, True,
                         {"max_seq_len": pat.to_int(m[1]),
                          "kv_cache_capacity_tokens": pat.to_int(m[2])})
    if "exceeds total_hbm_limit_cap_gb" in message:
        m = pat.HBM_BUDGET.search(message)
        if m:
            nums = {"total_hbm_used_gb": float(m[1]), "total_hbm_limit_cap_gb": float(m[2]),
                    "exceeded_by_gb": abs(float(m[3]))}
            if m[4]:
                nums["gpu_memory_utilization"] = float(m[4])
            return Match(K.HBM_BUDGET_EXCEEDED, True, nums)
    lowered = message.lower()
    if "error loading program" in lowered and pat.OOM_REQUIRED.search(message):
        # tpu-inference (JAX/libtpu) loading a program it just compiled: "Error loading program
        # 'jit_...': Attempting to allocate 1.76G. That was not possible. There are 1.12G free."
        # under INTERNAL or RESOURCE_EXHAUSTED; it only ever comes after the compile, whatever phase
        return Match(K.HBM_OOM_AFTER_COMPILE, True, {**_oom_numbers(message), "program_load": 1})
    if "resource_exhausted" in lowered or "out of memory" in lowered:
        if "vmem" in lowered or "smem" in lowered:
            return Match(K.VMEM_OOM_COMPILE, True, {})
        if ("hbm" in lowered or "allocat" in lowered or "out of memory" in lowered
                or "error loading program" in lowered):
            return Match(K.HBM_OOM_AFTER_COMPILE, True, _oom_numbers(message), is_hbm_oom=True)
    return None


def _oom_numbers(message: str) -> dict[str, float | int]:
    nums: dict[str, float | int] = {}
    req = pat.OOM_REQUIRED.search(message)
    if req:
        nums["required_gib"] = pat.xla_size_gib(req[1], req[2])
    avail = pat.OOM_AVAILABLE.search(message)
    if avail:
        nums["available_gib"] = pat.xla_size_gib(avail[1], avail[2])
    return nums


def pydantic_detail(text: str) -> str:
    """The reason of a joined pydantic ``ValidationError`` block, without its header and link.

    ``"pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig Value error,
    User-specified ... [type=value_error, input_value=...] For further information visit https://..."``
    -> ``"Value error, User-specified ..."``; ``text`` itself when it has no reason after the header.
    """
    m = pat.PYDANTIC_HEADER.search(text)
    detail = text[m.end():] if m else text
    for cut in (" [type=", " For further information visit"):
        i = detail.find(cut)
        if i >= 0:
            detail = detail[:i]
    detail = detail.strip()
    return detail or text


def resolve_oom(tb_context: str | None, phase: Phase) -> K:
    """HBM OOM kind from the innermost recognised traceback frame, else from the phase."""
    if tb_context == "kv":
        return K.HBM_OOM_KV_ALLOC
    if tb_context == "load":
        return K.HBM_OOM_LOAD
    if tb_context == "compile":
        return K.HBM_OOM_AFTER_COMPILE
    if phase in (Phase.STARTING, Phase.LOADING_WEIGHTS):
        return K.HBM_OOM_LOAD
    if phase is Phase.ALLOCATING_KV_CACHE:
        return K.HBM_OOM_KV_ALLOC
    return K.HBM_OOM_AFTER_COMPILE


def classify_exception(exc_type: str, phase: Phase, tb_context: str | None,
                       compiling: bool) -> K:
    """Kind of an exception with no specific text: precompile crash, config error or other."""
    if compiling or tb_context == "compile":
        return K.ENGINE_CRASH_DURING_PRECOMPILE
    if exc_type.rsplit(".", 1)[-1] in CONFIG_ERROR_TYPES:
        return K.CONFIG_ERROR
    return K.ENGINE_CORE_EXCEPTION


@dataclass(frozen=True)
class Facts:
    """What the log says about the setup, for hints (all optional)."""

    gpu_memory_utilization: float | None = None
    tpu_type: str | None = None
    hbm_limit_gib: float | None = None
    max_model_len: int | None = None
    num_gpu_blocks_computed: int | None = None
    num_gpu_blocks_override: int | None = None
    in_flight: str | None = None
    container: str | None = None


def _lower_util(facts: Facts) -> str:
    util = facts.gpu_memory_utilization
    gen = chip_generation(facts.tpu_type)
    where = f" on this {gen}" if gen else ""
    known = generation_facts(facts.tpu_type)
    ceiling = known.max_hbm_utilization if known else None
    if util is not None and util > 0.5:
        target = util - 0.03
        if ceiling is not None and util > ceiling:
            target = ceiling
        return (f"--gpu-memory-utilization {target:.2f} instead of {util:.2f}{where}")
    return "a lower --gpu-memory-utilization (for example 0.92 instead of 0.95 on a v5e)"


def _chip_hbm_gib(facts: Facts) -> float | None:
    """HBM per chip: the log's limit, else the generation table's usable figure."""
    if facts.hbm_limit_gib:
        return facts.hbm_limit_gib
    known = generation_facts(facts.tpu_type)
    return known.hbm_usable_gib if known else None


def allocation_advice(numbers: Mapping[str, float | int], facts: Facts) -> tuple[str, str]:
    """What an allocation failure needed and had available, and the utilization that frees the difference.

    Lowering ``--gpu-memory-utilization`` by ``short / HBM per chip`` shrinks the KV cache by the
    missing GiB, so compiled programs or buffers allocated after it fit; it is never offered
    above the generation's known ceiling (``remote.accelerators``).

    Args:
        numbers: ``required_gib`` and ``available_gib`` (GiB, per chip) from the message.
        facts: ``gpu_memory_utilization`` and the per-chip HBM limit (``hbm_limit_gib`` or
            ``tpu_type`` through ``remote.accelerators``).

    Returns:
        ``(figures, advice)``: ``" (needed 0.13 GiB, 0.07 GiB available: 0.06 GiB short)"`` and
        ``"--gpu-memory-utilization 0.91 instead of 0.92 leaves those 0.06 GiB free"``; ``""``
        for what the message or the log did not state.
    """
    need, free = numbers.get("required_gib"), numbers.get("available_gib")
    if need is None or free is None:
        return "", ""
    short = max(0.0, float(need) - float(free))
    figures = f" (needed {_gib(need)}, {_gib(free)} available: {_gib(short)} short)"
    limit, util = _chip_hbm_gib(facts), facts.gpu_memory_utilization
    if not limit or util is None or short <= 0:
        return figures, ""
    util = float(util)
    target = math.floor((util * limit - short) / limit * 100) / 100
    known = generation_facts(facts.tpu_type)
    ceiling = known.max_hbm_utilization if known else None
    if ceiling is not None and target > ceiling:
        target = ceiling
    if target >= util:
        target = round(util - 0.01, 2)
    if target < 0.5:
        return figures, ""
    return figures, (f"--gpu-memory-utilization {target:.2f} instead of {util:.2f} leaves those "
                     f"{_gib(short)} free")


def _on(facts: Facts) -> str:
    """`` on this v5e (15.75 GiB per chip, at --gpu-memory-utilization 0.95)`` from what is known."""
    gen = chip_generation(facts.tpu_type)
    limit = _chip_hbm_gib(facts)
    util = facts.gpu_memory_utilization
    parts = [f"{limit:.2f} GiB per chip"] if limit else []
    if util is not None:
        parts.append(f"at --gpu-memory-utilization {float(util):.2f}")
    if not gen and not parts:
        return ""
    return f" on {'this ' + gen if gen else 'these chips'}" + (f" ({', '.join(parts)})" if parts else "")


def _gib(value: float | int | None) -> str:
    return f"{value:.2f} GiB" if value is not None else "?"


def explain(kind: K, numbers: Mapping[str, float | int], facts: Facts) -> tuple[str, str]:
    """One-sentence explanation and a hint for ``kind``.

    Args:
        kind: the diagnosed kind.
        numbers: figures from the failure message (see :func:`match_specific`).
        facts: setup facts the log stated elsewhere.

    Returns:
        ``(explanation, hint)``, both plain sentences.
    """
    figures, advice = allocation_advice(numbers, facts)
    hbm = _explain_hbm(kind, numbers, facts, figures, advice)
    return hbm if hbm is not None else _explain_other(kind, numbers, facts)


def _explain_hbm(kind: K, n: Mapping[str, float | int], facts: Facts, figures: str,
                 advice: str) -> tuple[str, str] | None:
    """:func:`explain` for the kinds where HBM ran out or its budget did not hold the weights,
    with :func:`allocation_advice`'s ``figures`` and ``advice``; ``None`` for any other kind."""
    if kind is K.HBM_OOM_LOAD:       # no KV cache yet: a lower utilization frees nothing
        if "required_gib" in n and not figures:
            figures = f" (needs {_gib(n.get('required_gib'))})"
        return (f"HBM ran out while loading the weights{figures}.",
                "Spread the model over more chips (--tensor-parallel-size), use a smaller or "
                "quantized checkpoint, or pick a TPU type with more HBM per chip.")
    if kind is K.HBM_OOM_KV_ALLOC:
        if facts.num_gpu_blocks_override is not None:
            return ("HBM ran out allocating the KV cache: --num-gpu-blocks-override "
                    f"{facts.num_gpu_blocks_override} asks for more blocks than fit{figures}.",
                    f"Drop --num-gpu-blocks-override (the engine computed "
                    f"{facts.num_gpu_blocks_computed} blocks fit), or free HBM with "
                    f"{advice or _lower_util(facts)}.")
        return (f"HBM ran out while allocating the KV cache{figures}.",
                f"Try {advice or _lower_util(facts)}, or a smaller --max-model-len / --max-num-seqs.")
    if kind is K.HBM_OOM_AFTER_COMPILE and n.get("program_load"):
        return (f"A program XLA had just compiled did not fit in HBM when it was loaded{figures}{_on(facts)}: "
                "the weights and KV cache took the rest, so the boot failed after the whole compile.",
                f"Leave more HBM for the compiled programs: {advice or _lower_util(facts)}; or lower "
                "--max-num-batched-tokens / --max-num-seqs (smaller programs).")
    if kind is K.HBM_OOM_AFTER_COMPILE:
        return ("HBM ran out during XLA compilation or warm-up, after the weights and KV cache "
                f"were placed, so the compiled programs do not fit{figures}.",
                f"Leave more HBM for XLA: {advice or _lower_util(facts)}; or lower "
                "--max-num-batched-tokens / --max-num-seqs.")
    if kind is K.HBM_BUDGET_EXCEEDED:
        used, cap = n.get("total_hbm_used_gb"), n.get("total_hbm_limit_cap_gb")
        util = n.get("gpu_memory_utilization") or facts.gpu_memory_utilization
        target = ""
        if used is not None and cap and util:
            wanted = math.ceil((float(used) + 1.0) / (float(cap) / float(util)) * 100) / 100
            if wanted <= 0.98:
                target = f" to {wanted:.2f}"
        return (f"After loading, the weights use {_gib(used)} of HBM, more than the "
                f"{_gib(cap)} budget --gpu-memory-utilization allows, leaving nothing for "
                "the KV cache.",
                f"Raise --gpu-memory-utilization{target}, or use more chips "
                "(--tensor-parallel-size) or a quantized checkpoint.")
    return None


def _explain_other(kind: K, n: Mapping[str, float | int], facts: Facts) -> tuple[str, str]:
    """:func:`explain` for the kinds that are not about HBM (VMEM, lengths, configuration,
    crashes); the engine-core exception's sentence for any kind not named here."""
    if kind is K.VMEM_OOM_COMPILE:
        return ("A TPU kernel ran out of on-chip VMEM/SMEM while compiling.",
                "Lower --max-num-batched-tokens (and --max-num-seqs), or try another "
                "--block-size; if it persists, report it with the kernel name.")
    if kind is K.MAX_MODEL_LEN_TOO_LARGE and "derived_max_model_len" in n:
        derived = n["derived_max_model_len"]
        return (f"max-model-len {n.get('requested_max_model_len')} is above the model's own maximum of "
                f"{derived} tokens (derived from its config.json), so vLLM refused it before loading.",
                f"Use --max-model-len {derived}. Only to go beyond it: set env VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 "
                "with rope scaling that covers the length (--hf-overrides), or the output is wrong.")
    if kind is K.MAX_MODEL_LEN_TOO_LARGE:
        fits = n.get("estimated_max_model_len") or n.get("kv_cache_capacity_tokens")
        seq = n.get("max_seq_len")
        avail = n.get("kv_cache_available_gib")
        room = f" ({_gib(avail)} left for it)" if avail is not None else ""
        return (f"One request of max-model-len {seq} tokens does not fit in the KV cache{room}.",
                (f"Use --max-model-len {fits} (the largest the log says fits), or raise "
                 "--gpu-memory-utilization / add chips." if fits else
                 "Lower --max-model-len or raise --gpu-memory-utilization / add chips."))
    if kind is K.CONTEXT_LENGTH_EXCEEDED:
        limit = n.get("max_context_tokens")
        return (f"A request asked for {n.get('requested_tokens')} tokens but the server's "
                f"context is {limit} tokens (HTTP 400); the server itself is fine.",
                "Send shorter prompts or a smaller max_tokens, or restart with a larger "
                "--max-model-len if the KV cache allows it.")
    if kind is K.MULTIHOST_MEMORY_STATS_ERROR:
        return ("On a multi-host slice tpu-inference asked for memory stats of chips on other "
                "hosts, which JAX refuses.",
                "Use a vllm-tpu image with the multi-host memory-stats fix, or serve from a "
                "single host (a slice whose chips are all local).")
    if kind is K.CONFIG_ERROR:
        return ("The engine rejected its configuration before loading the model.",
                "Check the flags named in the message (parallelism, sharding, model options) "
                "against this model and chip count.")
    if kind is K.ENGINE_CRASH_DURING_PRECOMPILE:
        step = f" ({facts.in_flight})" if facts.in_flight else ""
        return (f"The engine crashed while precompiling{step}, not for lack of memory.",
                "Likely a model/image incompatibility: try another vllm-tpu image tag or "
                "MODEL_IMPL_TYPE, and report the traceback.")
    return ("The engine core raised an exception; its root cause is not in these lines.",
            "Read the full `docker logs` from the first 'Traceback' line to find the cause.")
