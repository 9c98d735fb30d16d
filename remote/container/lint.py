"""Lint a container spec before a swap: what is known to fail, waste capacity or lose time on a TPU.

Each :class:`Finding` has a rule id, a severity, one sentence and, when there is one, a fix:
a ``with_changes`` dict the operator applies with one key. An ``error`` finding makes
``swap --dry-run`` exit 1 and ``swap --yes`` refuse unless ``--force``. The rules and their sources:

- ``hbm-utilization``: ``--gpu-memory-utilization`` above the ceiling known to work on the
  node's generation (``remote.accelerators``: 0.92 on v5e/v6e; on a v5e, 0.95 fails with
  ``RESOURCE_EXHAUSTED`` after 691 s of XLA compilation). Generations without a known ceiling
  get an ``info`` above 0.92; an unknown generation gets an ``info`` that HBM was not checked.
- ``fp8-kv-cache``: an fp8 ``--kv-cache-dtype`` on a generation without native fp8 (every one
  before tpu7x): the log says fp8 but bf16 is allocated, so no KV capacity is gained.
- ``floating-tag``: ``nightly``/``latest``/no tag: a restart may pull a different image.
- ``compile-cache``: no persistent XLA compile cache. tpu-inference's compilation manager
  points JAX's cache at ``VLLM_XLA_CACHE_PATH`` (default ``~/.cache/vllm/xla_cache``, i.e.
  ``/root/.cache/vllm/xla_cache`` in the container), which dies with the container unless mounted;
  mounting one cut a v5e restart from 857 s to 497 s.
- ``max-model-len-kv`` / ``max-model-len-model``: a context longer than the KV cache held at the
  last launch on this node (predicted concurrency below 1: vLLM refuses to start) or than the
  model's maximum (``max_position_embeddings`` of its config.json, rope scaling applied, as vLLM
  derives it); vLLM refuses the latter unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` is set.
- ``tp-chips``: ``--tensor-parallel-size`` that does not divide the node's chips.
- ``boot-time``: predicted boot longer than the flex-start time left.
- ``known-failure``: the history saw this accelerator type, model and flags fail.
- ``hbm-failed-here``: a ``--gpu-memory-utilization`` at or above one that failed on this
  accelerator type loading its compiled programs (``hbm_oom_after_compile``, whatever the model);
  the fix is the utilization the failure's own figures leave room at (``remote.vllm_log.diagnosis``).
- ``unknown-flag``: a ``vllm serve`` flag this console does not know (vLLM may refuse it).
- ``quantization``: a ``--quantization`` name outside vLLM's ``QuantizationMethods`` (v0.9 - v0.29).
- ``dropped-setting``: a setting of the running container that a swap would not carry over.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from remote.accelerators import FALLBACK_HBM_UTILIZATION, GenerationFacts, generation_facts
from remote.container.parse import QUANTIZATION_METHODS, parse_serve_args
from remote.container.spec import KNOWN_SERVE_FLAGS, ContainerSpec, split_volume
from remote.models import chips_of, iso_utc
from remote.vllm_flags import OTHER_VLLM_FLAGS

SEVERITIES = ("error", "warning", "info")
#: Where tpu-inference keeps the XLA cache unless ``VLLM_XLA_CACHE_PATH`` says otherwise.
DEFAULT_XLA_CACHE_PATH = "/root/.cache/vllm/xla_cache"
#: Host directory the compile-cache fix mounts (on the boot disk, survives container swaps).
HOST_XLA_CACHE_DIR = "/mnt/disks/persist/xla-cache"
#: Boot time assumed when no past launch of this node type and model is known: a v5e
#: restart without a compile cache took 857 s.
DEFAULT_BOOT_S = 900.0
_FLOATING_TAGS = ("latest", "nightly", "main", "dev")



@dataclass(frozen=True)
class Finding:
    """One lint result.

    Attributes:
        rule_id: e.g. ``hbm-utilization``.
        severity: ``error`` (will fail or cannot work), ``warning`` (risky) or ``info``.
        message: one sentence for the operator.
        fix: ``ContainerSpec.with_changes`` dict applied with one key, or ``None``.
    """

    rule_id: str
    severity: str
    message: str
    fix: dict[str, str | None] | None = None


def lint(spec: ContainerSpec, *, accelerator_type: str | None, time_left_s: float | None = None,
         last_kv_cache_tokens: int | None = None, model_max_len: int | None = None,
         predicted_boot_s: float | None = None, running_image_digest: str | None = None,
         known_failures: Iterable[tuple[Any, str, str]] = (),
         hbm_failures: Iterable[tuple[Any, Sequence[str], str]] = ()) -> list[Finding]:
    """Run every rule on ``spec``.

    Args:
        spec: the spec about to run.
        accelerator_type: the node's type (``v5litepod-8``, ``v6e-8``), or ``None`` if unknown.
        time_left_s: seconds until a flex-start (or spot termination) node ends, or ``None``.
        last_kv_cache_tokens: KV cache size in tokens at the last launch on this node.
        model_max_len: the model's maximum context in tokens (``max_position_embeddings``).
        predicted_boot_s: seconds to ready predicted from past launches; ``None`` uses
            :data:`DEFAULT_BOOT_S`.
        running_image_digest: repo digest of the image now running or pulled
            (``vllm/vllm-tpu@sha256:...`` or ``sha256:...`` of the same repository).
        known_failures: ``(when, failure_kind, detail)`` of past failures with the same
            accelerator type, model and flags.
        hbm_failures: ``(when, serve args, detail)`` of past ``hbm_oom_after_compile`` failures on
            this accelerator type (any model): the detail is the log's failure text with its figures.

    Returns:
        Findings, errors first, in rule order within a severity.
    """
    findings: list[Finding] = []
    facts = generation_facts(accelerator_type)
    if facts is None:
        findings.append(Finding("generation", "info",
                                f"Accelerator type {accelerator_type or '(unknown)'} is not a TPU generation "
                                "this console knows: HBM utilization and KV cache dtype were not checked."))
    else:
        findings += _hbm_utilization(spec, facts)
        findings += _fp8_kv_cache(spec, facts)
    findings += _floating_tag(spec, running_image_digest)
    findings += _compile_cache(spec)
    findings += _max_model_len(spec, last_kv_cache_tokens, model_max_len)
    findings += _tensor_parallel(spec, accelerator_type)
    findings += _boot_time(time_left_s, predicted_boot_s)
    for when, kind, detail in known_failures:
        stamp = iso_utc(when) if isinstance(when, datetime) else str(when)
        findings.append(Finding("known-failure", "warning",
                                f"This accelerator type, model and flags failed before ({stamp}): {kind}"
                                + (f": {detail}" if detail else "") + "."))
    findings += _hbm_failed_here(spec, accelerator_type, hbm_failures)
    findings += _unknown_flags(spec)
    method = spec.serve_flags.get("quantization")
    if method and method not in QUANTIZATION_METHODS:
        findings.append(Finding("quantization", "warning",
                                f"--quantization {method} is not a method vLLM 0.9 - 0.29 knows (fp8, awq, gptq, "
                                "compressed-tensors, tpu_int8 ...); vLLM refuses an unknown one.",
                                {"quantization": None}))
    findings += [Finding("dropped-setting", "warning",
                         f"The running container uses {item}, which this swap does not carry over.")
                 for item in spec.ignored]
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))


def _hbm_utilization(spec: ContainerSpec, facts: GenerationFacts) -> list[Finding]:
    raw = spec.serve_flags.get("gpu-memory-utilization")
    if raw is None:
        return []
    util, gen = float(raw), facts.generation
    ceiling = facts.max_hbm_utilization
    if ceiling is None:
        if util <= FALLBACK_HBM_UTILIZATION:
            return []
        left = (1 - util) * facts.hbm_gib
        return [Finding("hbm-utilization", "info",
                        f"gpu-memory-utilization {raw} on {gen}: no ceiling is known for this generation, so it "
                        f"was not checked; it leaves {left:.2f} GiB per chip for the compiled programs "
                        f"(a v5e needs more than 0.79 GiB). {FALLBACK_HBM_UTILIZATION} is known to work on v5e/v6e.",
                        {"gpu-memory-utilization": str(FALLBACK_HBM_UTILIZATION)})]
    if util <= ceiling:
        return []
    return [Finding("hbm-utilization", "warning",
                    f"gpu-memory-utilization {raw} is above {ceiling}, the highest known to work on {gen} "
                    f"({facts.ceiling_source}).", {"gpu-memory-utilization": str(ceiling)})]


def _fp8_kv_cache(spec: ContainerSpec, facts: GenerationFacts) -> list[Finding]:
    dtype = spec.serve_flags.get("kv-cache-dtype") or ""
    if not dtype.startswith("fp8") or facts.supports_format(dtype):
        return []
    return [Finding("fp8-kv-cache", "warning",
                    f"kv-cache-dtype {dtype} on {facts.generation} gains no KV capacity: the chip has no native "
                    "fp8, so the log says fp8 but bf16 is allocated.", {"kv-cache-dtype": None})]


def _floating_tag(spec: ContainerSpec, running_digest: str | None) -> list[Finding]:
    image = spec.image
    if "@sha256:" in image:
        return []
    last = image.rsplit("/", 1)[-1]
    tag = last.rpartition(":")[2] if ":" in last else ""
    if tag and tag not in _FLOATING_TAGS:
        return []
    repo = image[: len(image) - len(tag) - 1] if tag else image
    pin = None
    digest = running_digest or spec.image_digest
    if digest and "@sha256:" in digest and digest.split("@")[0] == repo:
        pin = digest
    elif running_digest and running_digest.startswith("sha256:"):
        pin = f"{repo}@{running_digest}"
    what = f"the floating tag '{tag}'" if tag else "no tag (latest)"
    offer = f"; pin {pin} to keep exactly this image" if pin else "; pin a version tag or a digest"
    return [Finding("floating-tag", "warning",
                    f"Image {image} uses {what}: a restart may pull a different image{offer}.",
                    {"image": pin} if pin else None)]


def _compile_cache(spec: ContainerSpec) -> list[Finding]:
    if spec.env.get("VLLM_DISABLE_COMPILE_CACHE", "").lower() in ("1", "true"):
        return [Finding("compile-cache", "warning",
                        "VLLM_DISABLE_COMPILE_CACHE is set, so every restart compiles from scratch "
                        "(a cache cut a v5e restart from 857 s to 497 s).",
                        {"env.VLLM_DISABLE_COMPILE_CACHE": None})]
    raw_path = spec.env.get("VLLM_XLA_CACHE_PATH") or DEFAULT_XLA_CACHE_PATH
    if raw_path.startswith("gs://"):      # a bucket outlives any container (normpath would make it gs:/)
        return []
    path = posixpath.normpath(raw_path)
    for volume in spec.volumes:
        target = posixpath.normpath(split_volume(volume)[1])
        if target != "/dev/shm" and (path == target or path.startswith(target.rstrip("/") + "/")):
            return []
    fix: dict[str, str | None] = {"env.VLLM_XLA_CACHE_PATH": path, f"volume:{path}": HOST_XLA_CACHE_DIR}
    return [Finding("compile-cache", "warning",
                    f"The XLA compile cache ({path}) is not on a persistent volume, so every restart "
                    f"compiles again; mounting {HOST_XLA_CACHE_DIR} there cut a v5e restart from 857 s to 497 s.",
                    fix)]


def _max_model_len(spec: ContainerSpec, kv_tokens: int | None, model_max: int | None) -> list[Finding]:
    raw = spec.serve_flags.get("max-model-len")
    if raw is None:
        return []
    length = int(raw)
    out = []
    if model_max and length > model_max:
        allowed = spec.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "").lower() in ("1", "true")
        out.append(Finding("max-model-len-model", "warning" if allowed else "error",
                           f"max-model-len {length} is above the model's maximum of {model_max} tokens"
                           + ("; VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 lets vLLM start, but positions past the "
                              "maximum give wrong output unless rope scaling covers them." if allowed else
                              f": vLLM refuses it (use {model_max}, or set env VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 "
                              "with rope scaling that covers the length)."),
                           {"max-model-len": str(model_max)}))
    if kv_tokens and length > kv_tokens:
        fit = kv_tokens // 1024 * 1024 or kv_tokens
        out.append(Finding("max-model-len-kv", "error",
                           f"max-model-len {length} is above the {kv_tokens} tokens the KV cache held at the "
                           f"last launch on this node (predicted concurrency {kv_tokens / length:.2f}, below 1): "
                           "vLLM will refuse to start.", {"max-model-len": str(fit)}))
    return out


def _tensor_parallel(spec: ContainerSpec, accelerator_type: str | None) -> list[Finding]:
    chips = chips_of(accelerator_type)
    raw = spec.serve_flags.get("tensor-parallel-size")
    if chips is None or raw is None:
        return []
    tp = int(raw)
    if tp > chips or chips % tp:
        return [Finding("tp-chips", "error",
                        f"tensor-parallel-size {tp} does not divide the {chips} chips of {accelerator_type}.",
                        {"tensor-parallel-size": str(chips)})]
    if tp < chips:
        return [Finding("tp-chips", "info",
                        f"tensor-parallel-size {tp} uses {tp} of the {chips} chips of {accelerator_type}; "
                        "the rest stay idle.", {"tensor-parallel-size": str(chips)})]
    return []


def _boot_time(time_left_s: float | None, predicted_boot_s: float | None) -> list[Finding]:
    if time_left_s is None:
        return []
    boot = predicted_boot_s if predicted_boot_s is not None else DEFAULT_BOOT_S
    if boot <= time_left_s:
        return []
    source = "predicted from past launches" if predicted_boot_s is not None else "a default estimate"
    return [Finding("boot-time", "error",
                    f"Boot takes about {boot / 60:.0f} min ({source}) but the node has only "
                    f"{time_left_s / 60:.0f} min left before it is terminated.")]


def _hbm_failed_here(spec: ContainerSpec, accelerator_type: str | None,
                     failures: Iterable[tuple[Any, Sequence[str], str]]) -> list[Finding]:
    """The newest past failure whose utilization this spec reaches again, with the utilization its
    figures advise (needed - free, off that utilization; never above the generation's ceiling)."""
    from remote.vllm_log import diagnosis as dx

    raw = spec.serve_flags.get("gpu-memory-utilization")
    try:
        util = float(raw) if raw is not None else None
    except ValueError:
        return []
    for when, serve_args, detail in failures:
        failed_raw = parse_serve_args(list(serve_args)).flags.get("gpu-memory-utilization")
        try:
            failed = float(failed_raw) if failed_raw is not None else None
        except ValueError:
            continue
        if util is None or failed is None or util < failed:
            continue
        match = dx.match_specific(detail)
        numbers = dict(match.numbers) if match is not None else {}
        figures, advice = dx.allocation_advice(numbers, dx.Facts(gpu_memory_utilization=failed,
                                                                 tpu_type=accelerator_type))
        target = advice.split()[1] if advice else None
        stamp = iso_utc(when) if isinstance(when, datetime) else str(when)
        return [Finding("hbm-failed-here", "warning",
                        f"gpu-memory-utilization {raw}: {failed:g} failed on {accelerator_type} after compiling, "
                        f"loading its programs ({stamp}{figures})"
                        + (f"; {advice}." if advice else "."),
                        {"gpu-memory-utilization": target} if target else None)]
    return []


def _unknown_flags(spec: ContainerSpec) -> list[Finding]:
    flags = parse_serve_args(["-", *spec.extra_args]).extra_flags
    out = []
    for name in flags:
        base = name[3:] if name.startswith("no-") else name
        if name not in OTHER_VLLM_FLAGS and base not in OTHER_VLLM_FLAGS and base not in KNOWN_SERVE_FLAGS:
            out.append(Finding("unknown-flag", "warning",
                               f"--{name} is not a vllm serve flag this console knows; vLLM may refuse to start.",
                               {f"--{name}": None}))
    return out
