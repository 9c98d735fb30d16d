"""The sandbox's simulated vLLM engine: flags, figures, failures, timing and line formats."""

from __future__ import annotations

import math
import re

import pytest

from sandbox.engine import (
    EnginePlan,
    ServeArgs,
    model_spec,
    parse_serve_args,
    plan_startup,
)

GIB = 2**30

# Formats from ../shared/corpus/vllm-logs/INDEX.md (E2 + E4 prefix, H2, H3b, H4b, H5, K5, C4, C5', E5).
PREFIX = r"^(\((APIServer|EngineCore) pid=\d+\) )?"
E2 = re.compile(PREFIX + r"(DEBUG|INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d \[[\w./]+\.py:\d+\] ")
E5 = re.compile(PREFIX + r"INFO:\s+(Started server process \[\d+\]|Waiting for application startup\.|"
                r"Application startup complete\.)$")
HBM = r"hbm=\[\((\d+\.\d+), (\d+\.\d+)\)(?:, \(\d+\.\d+, \d+\.\d+\))*\]"
H2 = re.compile(r"Init model \| " + HBM + r"GiB$")
H3B = re.compile(r"Init worker \| rank=0 \| is_first_rank=True \| is_last_rank=True \| topology_order_id=0 \| "
                 r"is_driver_worker=True \| " + HBM + r"GiB \|self\.devices=\[TpuDevice\(.*\] \| total devices=\[.*\]"
                 r" \| local_devices=\[.*\]$")
H4B = re.compile(r"Init kv-cache \| num_total_layers=(\d+) \| num_blocks=\[[\d, ]+\] \| regular_attn_layers=\d+ \| "
                 r"regular_attn_shape=\(num_blocks, \(\d+, \d+, 2, \d+\)\) \| regular_attn_sharding=NamedSharding"
                 r"\(.*\) \| regular_attn_dtype=bfloat16 \| " + HBM + r"Gb$")
H5 = re.compile(r"Memory statistics \| total_hbm_limit_gb=([\d.]+)GiB \| total_hbm_limit_cap_gb=([\d.]+)GiB \| "
                r"total_hbm_used_gb=([\d.]+)GiB \| total_hbm_avail_gb=([\d.]+)GiB$")
K5 = re.compile(r"TPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: "
                r"(\d+\.\d\d)x$")
C4_START = re.compile(r"Precompile (.+) --> (\{.*\})$")
C4_DONE = re.compile(r"Compilation of (.+) --> (\{.*\}) finished in (\d+\.\d\d) \[secs\]\.$")
C5 = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s "
                r"\(compilation: ([\d.]+) s\)$")
FAILED = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"


def messages(plan: EnginePlan, pattern: re.Pattern[str]) -> list[re.Match[str]]:
    """Matches of ``pattern`` against the message part of every E2 line."""
    out = []
    for _, line in plan.lines:
        head = E2.match(line)
        if head and (found := pattern.search(line[head.end():])):
            out.append(found)
    return out


def expected_kv(params_b: float, layers: int, kv_heads: int, head_dim: int, hidden: int, *, limit: float,
                util: float, tp: int, batched: int, block: int) -> tuple[float, int]:
    """Per-chip weights GiB and KV tokens by the documented formulas (the pool is cap - weights)."""
    del hidden, batched  # the activation headroom is allocated after the KV cache
    weights = params_b * 1e9 * 2 / tp / GIB
    per_token = 2 * layers * math.ceil(kv_heads / tp) * head_dim * 2
    pool = limit * util - weights
    return weights, math.floor(pool * GIB / (per_token * block)) * block


# ---------------------------------------------------------------- flags
def test_parse_serve_args_reads_known_flags_in_every_spelling() -> None:
    args = parse_serve_args(["Qwen/Qwen3-8B", "--max-model-len=32K", "--gpu_memory_utilization", "0.85",
                             "-tp", "4", "--served-model-name", "qwen", "alias", "--max-num-seqs", "64",
                             "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--port", "8001"])
    assert args == ServeArgs(model="Qwen/Qwen3-8B", served_model_name="qwen", max_model_len=32768,
                             gpu_memory_utilization=0.85, tensor_parallel_size=4, max_num_seqs=64,
                             extra=("--enable-auto-tool-choice", "--tool-call-parser", "hermes"), port=8001)
    assert parse_serve_args(["--model", "m", "--max-model-len", "32k"]).max_model_len == 32000
    assert parse_serve_args(["vllm", "serve", "m", "--port=9000"]) == ServeArgs(model="m", port=9000)
    defaults = parse_serve_args(["m"])
    assert (defaults.gpu_memory_utilization, defaults.tensor_parallel_size, defaults.kv_cache_dtype,
            defaults.max_model_len) == (0.92, 1, "auto", None)


@pytest.mark.parametrize(("argv", "message"), [
    ([], "the following arguments are required: model_tag"),
    (["m", "--gpu-memory-utilization", "high"], "argument --gpu-memory-utilization: invalid float value: 'high'"),
    (["m", "--gpu-memory-utilization", "1.5"], "Input should be less than or equal to 1"),
    (["m", "--gpu-memory-utilization", "0"], "gpu_memory_utilization: Input should be greater than 0"),
    (["m", "--max-model-len", "lots"], "argument --max-model-len: invalid human_readable_int value: 'lots'"),
    (["m", "--max-model-len", "-5"], "max_model_len: Input should be greater than 0"),
    (["m", "--tensor-parallel-size", "2.5"], "argument --tensor-parallel-size: invalid int value: '2.5'"),
    (["m", "--kv-cache-dtype", "int4"], "argument --kv-cache-dtype: invalid choice: 'int4'"),
    (["m", "--max-model-len"], "argument --max-model-len: expected one argument"),
    (["m", "other"], "unrecognized arguments: other"),
    (["m", "--max-modle-len", "8192", "--trust-remote-code"], "unrecognized arguments: --max-modle-len 8192"),
    (["m", "--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_parse_serve_args_refuses_bad_values_with_vllm_wording(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_serve_args(argv)


def test_unknown_accelerator_type_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown accelerator type 'tpu9-1'"):
        plan_startup(["Qwen/Qwen3-8B"], "tpu9-1")


# ---------------------------------------------------------------- figures
def test_qwen3_8b_on_one_v6e_chip_by_hand() -> None:
    # weights 8.2e9 * 2 B = 15.27 GiB; cap 31.25 * 0.92 = 28.75; avail 13.478 GiB;
    # 147,456 B/token, 64-token blocks: floor(13.478 GiB / 9 MiB) = 1533 blocks = 98,112 tokens.
    # After KV: 15.272 + 13.477 + headroom 2048 * 4096 * 8 B = 0.0625 GiB -> 28.81.
    plan = plan_startup(["Qwen/Qwen3-8B"], "v6e-1")
    assert plan.outcome == "ready"
    assert (plan.kv_cache_tokens, plan.max_concurrency, plan.max_model_len) == (98_112, 2.40, 40_960)
    assert plan.hbm_after_kv_gib == 28.81
    assert (plan.weights_gib, plan.hbm_limit_gib, plan.chips) == (15.27, 31.25, 1)
    assert messages(plan, K5)[0].groups() == ("98,112", "40,960", "2.40")
    assert messages(plan, H5)[0].groups() == ("31.25", "28.75", "15.27", "13.48")


@pytest.mark.parametrize(("model", "accel", "flags", "shape", "limit", "util", "tp", "batched", "block"), [
    ("Qwen/Qwen3-8B", "v6e-1", [], (8.2, 36, 8, 128, 4096), 31.25, 0.92, 1, 2048, 64),
    ("Qwen/Qwen3-8B", "v6e-4", ["--tensor-parallel-size", "4", "--max-model-len", "16384",
                                "--max-num-batched-tokens", "4096"], (8.2, 36, 8, 128, 4096), 31.25, 0.92, 4, 4096, 64),
    ("meta-llama/Llama-3.1-8B-Instruct", "v5litepod-4", ["-tp", "4"], (8.03, 32, 8, 128, 4096), 15.75, 0.92, 4,
     2048, 32),
    ("google/gemma-3-4b-it", "v5litepod-1", ["--max-model-len", "8192", "--gpu-memory-utilization", "0.8"],
     (4.3, 34, 4, 256, 2560), 15.75, 0.8, 1, 2048, 32),
    ("google/gemma-3-27b-it", "v6e-8", ["-tp", "8", "--max-model-len", "65536"], (27.4, 62, 16, 128, 5376), 31.25,
     0.92, 8, 2048, 64),
    ("Qwen/Qwen3-32B", "v5p-8", ["-tp", "2", "--max-num-seqs", "64"], (32.8, 64, 8, 128, 5120), 95.0, 0.92, 2,
     2048, 64),
    ("some-org/unknown-model", "v6e-1", ["--max-model-len", "4096"], (8.0, 32, 8, 128, 4096), 31.25, 0.92, 1, 2048,
     64),
])
def test_figures_follow_the_documented_formulas(model: str, accel: str, flags: list[str],
                                                 shape: tuple[float, int, int, int, int], limit: float,
                                                 util: float, tp: int, batched: int, block: int) -> None:
    plan = plan_startup([model, *flags], accel, boot_s=1.0)
    weights, tokens = expected_kv(*shape, limit=limit, util=util, tp=tp, batched=batched, block=block)
    max_model_len = parse_serve_args([model, *flags]).max_model_len or model_spec(model).max_position
    assert plan.outcome == "ready", plan.failure_message
    assert plan.kv_cache_tokens == tokens
    assert plan.max_concurrency == round(tokens / max_model_len, 2)
    assert (plan.chips, plan.hbm_limit_gib, plan.weights_gib) == (tp, limit, round(weights, 2))
    # The printed lines carry the same figures, one HBM tuple per chip.
    assert messages(plan, K5)[0].groups() == (f"{tokens:,}", f"{max_model_len:,}", f"{tokens / max_model_len:.2f}")
    init_model = messages(plan, H2)[0]
    assert init_model.group(0).count("(") == tp
    assert tuple(map(float, init_model.groups())) == (round(weights, 2), limit)
    kv_alloc = messages(plan, H4B)[0]
    per_token = 2 * shape[1] * math.ceil(shape[2] / tp) * shape[3] * 2
    headroom = batched * shape[4] * 2 * 4 / tp / GIB
    assert float(kv_alloc.group(2)) == plan.hbm_after_kv_gib == round(
        weights + tokens * per_token / GIB + headroom, 2)
    stats = messages(plan, H5)[0]
    assert float(stats.group(1)) == pytest.approx(limit * tp) and float(stats.group(2)) == pytest.approx(
        round(limit * util, 2) * tp)


def test_more_max_model_len_means_less_concurrency_and_same_kv() -> None:
    short = plan_startup(["meta-llama/Llama-3.1-8B-Instruct", "-tp", "4", "--max-model-len", "32768"], "v5litepod-4")
    long = plan_startup(["meta-llama/Llama-3.1-8B-Instruct", "-tp", "4", "--max-model-len", "131072"], "v5litepod-4")
    assert short.kv_cache_tokens == long.kv_cache_tokens == 352_256
    assert (short.max_concurrency, long.max_concurrency) == (10.75, 2.69)


# ---------------------------------------------------------------- the article's node
GEMMA4 = "google/gemma-4-E2B-it"
GEMMA4_KV_BYTES = 2 * (12 * 256 + 3 * 512) * 2  # 18,432: 15 KV layers, 12 sliding of 256 + 3 full of 512


def line_with(plan: EnginePlan, text: str) -> str:
    return next(line for _, line in plan.lines if text in line)


def test_gemma4_e2b_on_a_v5e_1_prints_the_articles_startup() -> None:
    plan = plan_startup([GEMMA4, "--max-model-len", "8192"], "v5litepod-1", image="vllm/vllm-tpu:v0.30.0")
    assert plan.outcome == "ready", plan.failure_message
    assert " | hbm=[(0.0, 15.75)]GiB |self.devices=" in line_with(plan, "Init worker")
    assert line_with(plan, "Init model").endswith("Init model | hbm=[(8.97, 15.75)]GiB")
    assert line_with(plan, "Memory statistics").endswith(
        "Memory statistics | total_hbm_limit_gb=15.75GiB | total_hbm_limit_cap_gb=14.49GiB | "
        "total_hbm_used_gb=8.97GiB | total_hbm_avail_gb=5.52GiB")
    assert line_with(plan, "KV cache size").endswith(
        "TPU KV cache size: 321,280 tokens, Maximum concurrency for 8,192 tokens per request: 39.22x")
    kv_alloc = line_with(plan, "Init kv-cache")
    assert "num_total_layers=15 | num_blocks=[10040, " in kv_alloc and kv_alloc.endswith("hbm=[(14.51, 15.75)]Gb")
    assert line_with(plan, "init engine").endswith(
        "init engine (profile, create kv cache, warmup model) took 503.54 s (compilation: 413.41 s)")
    assert "version 0.30.0" in line_with(plan, "version") and "(v0.30.0)" in line_with(plan, "Initializing a V1")
    # Log time is printed; wall time is the sandbox's boot_s.
    assert plan.ready_at_s == pytest.approx(20.0) and plan.time_scale > 25
    warmups = [float(m.group(1)) for m in messages(plan, re.compile(r"Warm-up call pass finished in ([\d.]+)"))]
    steps = [float(m.group(3)) for m in messages(plan, C4_DONE)]
    assert sum(steps) + sum(warmups) == pytest.approx(413.41, abs=0.006)
    offsets = [t for t, _ in plan.lines]
    assert offsets == sorted(offsets)


def test_gemma4_e2b_at_131072_gets_the_same_cache_and_2_45x() -> None:
    plan = plan_startup([GEMMA4, "--max-model-len", "131072"], "v5litepod-1")
    assert (plan.outcome, plan.kv_cache_tokens, plan.max_concurrency) == ("ready", 321_280, 2.45)
    assert line_with(plan, "KV cache size").endswith(
        "TPU KV cache size: 321,280 tokens, Maximum concurrency for 131,072 tokens per request: 2.45x")
    # No release tag: the default version.
    assert "version 0.29.1" in line_with(plan, "version")


@pytest.mark.parametrize(("util", "max_model_len"), [(0.85, 8192), (0.92, 16384), (0.80, 4096)])
def test_gemma4_e2b_figures_follow_the_arithmetic_at_other_settings(util: float, max_model_len: int) -> None:
    plan = plan_startup([GEMMA4, "--max-model-len", str(max_model_len), "--gpu-memory-utilization", str(util)],
                        "v5litepod-1")
    weights = 4.8182e9 * 2 / GIB
    cap = 15.75 * util
    tokens = math.floor((cap - weights) * GIB / (GEMMA4_KV_BYTES * 32)) * 32
    assert (plan.kv_cache_tokens, plan.max_concurrency) == (tokens, round(tokens / max_model_len, 2))
    assert line_with(plan, "Memory statistics").endswith(
        f"total_hbm_limit_cap_gb={round(cap, 2):.2f}GiB | total_hbm_used_gb=8.97GiB | "
        f"total_hbm_avail_gb={round(cap, 2) - 8.97:.2f}GiB")
    assert plan.hbm_after_kv_gib == round(weights + tokens * GEMMA4_KV_BYTES / GIB + 2048 * 1536 * 8 / GIB, 2)
    assert (plan.engine_init_seconds, plan.compile_seconds) == (503.54, 413.41)


def test_gemma4_e2b_on_a_v6e_1_matches_corpus_10_durations_and_close_figures() -> None:
    # Corpus 10 (v6e-1, limit printed 31.24): 1,151,744 tokens, 35.15x at 32,768, after-KV 28.76.
    plan = plan_startup([GEMMA4, "--max-model-len", "32768"], "v6e-1")
    assert (plan.engine_init_seconds, plan.compile_seconds) == (457.25, 402.27)
    assert plan.kv_cache_tokens is not None and abs(plan.kv_cache_tokens - 1_151_744) <= 512
    assert plan.max_concurrency == pytest.approx(35.15, abs=0.02)


# ---------------------------------------------------------------- failures
def failure_lines(plan: EnginePlan) -> list[str]:
    return [line for _, line in plan.lines]


def test_gpu_memory_utilization_095_on_v5e_fails_after_compiling() -> None:
    argv = ["google/gemma-3-4b-it", "--max-model-len", "32768"]
    ok = plan_startup([*argv, "--gpu-memory-utilization", "0.92"], "v5litepod-1")
    bad = plan_startup([*argv, "--gpu-memory-utilization", "0.95"], "v5litepod-1")
    assert ok.outcome == "ready"
    assert (bad.outcome, bad.failure_kind, bad.exit_code, bad.ready_at_s) == (
        "failed", "hbm_oom_after_compile", 1, None)
    assert bad.compile_steps == ok.compile_steps == 87
    assert bad.kv_cache_tokens == 53_600  # the KV line is printed before compiling
    lines = failure_lines(bad)
    oom = next(i for i, line in enumerate(lines) if "RESOURCE_EXHAUSTED" in line)
    assert lines[oom].endswith("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total "
                               "memory required for HLO temporaries (15.84G) exceeds available HBM (15.75G).")
    assert lines[oom + 1].endswith("] --------------------")
    assert "For simplicity, JAX has removed its internal frames" in lines[oom + 2]
    assert all(C4_DONE.search(line) is None for line in lines[oom:])
    assert any(line.endswith("[core.py:1434] EngineCore failed to start.") for line in lines[:oom])
    assert lines[-1] == f"(APIServer pid=1) {FAILED}"
    assert bad.exit_at_s is not None and bad.exit_at_s > bad.lines[-1][0]
    assert bad.exit_at_s > 0.8 * 20.0  # late: compilation ran first
    # The same utilisation fits on a v6e chip.
    assert plan_startup([*argv, "--gpu-memory-utilization", "0.95"], "v6e-1").outcome == "ready"


def test_max_model_len_the_kv_cache_cannot_hold_fails_with_the_v1_value_error() -> None:
    plan = plan_startup(["google/gemma-3-4b-it", "--max-model-len", "65536"], "v5litepod-1")
    _, tokens = expected_kv(4.3, 34, 4, 256, 2560, limit=15.75, util=0.92, tp=1, batched=2048, block=32)
    assert (plan.outcome, plan.failure_kind, plan.kv_cache_tokens) == ("failed", "max_model_len_too_large", None)
    needed = 65536 * 139_264 / GIB
    assert plan.failure_message == (
        "To serve at least one request with the models's max seq len (65536), "
        f"({needed:.2f} GiB KV cache is needed, which is larger than the available KV cache memory (6.48 GiB). "
        f"Based on the available memory, the estimated maximum model length is {tokens}. Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
    assert any(line.endswith("ValueError: " + plan.failure_message) for line in failure_lines(plan))
    assert failure_lines(plan)[-1].endswith(FAILED) and plan.compile_steps == 0
    # The estimate is what fits: asking for exactly that boots.
    fits = plan_startup(["google/gemma-3-4b-it", "--max-model-len", str(tokens)], "v5litepod-1")
    assert (fits.outcome, fits.max_concurrency) == ("ready", 1.0)


def test_max_model_len_above_max_positions_fails_in_the_api_server() -> None:
    plan = plan_startup(["Qwen/Qwen3-8B", "--max-model-len", "131072"], "v6e-1")
    assert (plan.outcome, plan.failure_kind) == ("failed", "max_model_len_too_large")
    assert plan.failure_message is not None and plan.failure_message.startswith(
        "User-specified max_model_len (131072) is greater than the derived max_model_len "
        "(max_position_embeddings=40960")
    lines = failure_lines(plan)
    assert "(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig" in lines
    assert not any("EngineCore" in line for line in lines)


def test_tensor_parallel_size_that_does_not_divide_the_chips_fails_at_the_mesh() -> None:
    plan = plan_startup(["Qwen/Qwen3-8B", "--tensor-parallel-size", "3"], "v6e-4")
    assert (plan.failure_kind, plan.failure_message) == (
        "config_error", "Number of devices 4 must be divisible by the product of mesh_shape (1, 3) "
        "(tensor_parallel_size=3).")
    lines = failure_lines(plan)
    failed_at = next(i for i, line in enumerate(lines) if line.endswith("EngineCore failed to start."))
    assert not any("Init worker" in line for line in lines[:failed_at])
    assert plan_startup(["Qwen/Qwen3-8B", "-tp", "8"], "v6e-4").failure_kind == "config_error"


def test_weights_above_hbm_fail_while_loading_and_no_room_for_kv_fails_before_it() -> None:
    load = plan_startup(["Qwen/Qwen3-32B"], "v5litepod-1")
    assert load.failure_kind == "hbm_oom_load" and load.weights_gib is None
    assert "HLO temporaries (61.59G) exceeds available HBM (15.75G)" in (load.failure_message or "")
    no_kv = plan_startup(["Qwen/Qwen3-8B"], "v5litepod-1")  # 15.27 GiB of weights > the 14.49 GiB cap
    assert (no_kv.failure_kind, no_kv.weights_gib) == ("hbm_budget_exceeded", 15.27)
    assert no_kv.failure_message == "total_hbm_used_gb=15.27GiB exceeds total_hbm_limit_cap_gb=14.49GiB by 0.78GiB"
    # Weights under the cap (15.275 GiB) but no room for one 9 MiB KV block: vLLM's check.
    squeezed = plan_startup(["Qwen/Qwen3-8B", "--gpu-memory-utilization", "0.4888"], "v6e-1")
    assert (squeezed.failure_kind, squeezed.failure_message) == (
        "hbm_budget_exceeded", "No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.")


# ---------------------------------------------------------------- timing and formats
@pytest.mark.parametrize("boot_s", [0.5, 20.0])
def test_boot_is_compressed_to_boot_s_with_compilation_over_most_of_it(boot_s: float) -> None:
    plan = plan_startup(["Qwen/Qwen3-8B"], "v6e-1", boot_s=boot_s)
    offsets = [t for t, _ in plan.lines]
    assert offsets == sorted(offsets) and offsets[0] == 0.0
    assert plan.ready_at_s == pytest.approx(boot_s)
    ready = next(t for t, line in plan.lines if line.endswith("INFO:     Application startup complete."))
    assert ready == pytest.approx(boot_s)
    compiles = [t for t, line in plan.lines if C4_DONE.search(line)]
    assert compiles[-1] - compiles[0] > 0.5 * boot_s
    # Printed seconds are log seconds: offsets x time_scale.
    init_s, compile_s = map(float, messages(plan, C5)[0].groups())
    assert (init_s, compile_s) == (plan.engine_init_seconds, plan.compile_seconds)
    warmups = [float(m.group(1)) for m in messages(plan, re.compile(r"Warm-up call pass finished in ([\d.]+)"))]
    steps = [float(m.group(3)) for m in messages(plan, C4_DONE)]
    assert compile_s == pytest.approx(sum(steps) + sum(warmups), abs=0.01)
    assert 200 < compile_s < init_s < plan.time_scale * boot_s
    assert plan.compile_steps == len(compiles)
    assert plan.server_url == "http://0.0.0.0:8000"


def test_plans_are_deterministic_and_depend_on_the_flags() -> None:
    first = plan_startup(["Qwen/Qwen3-8B", "--max-model-len", "8192"], "v6e-1")
    assert plan_startup(["Qwen/Qwen3-8B", "--max-model-len", "8192"], "v6e-1") == first
    assert plan_startup(["Qwen/Qwen3-8B", "--max-model-len", "8193"], "v6e-1").lines != first.lines


def test_compile_steps_follow_the_padding_flags() -> None:
    small = plan_startup(["Qwen/Qwen3-0.6B", "--max-num-seqs", "16", "--max-num-batched-tokens", "512"], "v6e-1")
    steps = [m.group(1) for m in messages(small, C4_DONE)]
    assert steps.count("worker0 sample") == 2 * 4  # request paddings [8, 16] x do_sampling x logprobs
    assert steps.count("worker0 compute_and_gather_prompt_logprobs") == 6  # token paddings 16..512
    assert len(steps) == small.compile_steps == 8 + 2 + 6 + 12 + 2 + 2


@pytest.mark.parametrize(("argv", "accel"), [
    (["Qwen/Qwen3-8B", "--kv-cache-dtype", "fp8"], "v6e-1"),
    (["google/gemma-3-4b-it", "--max-model-len", "32768", "--gpu-memory-utilization", "0.95"], "v5litepod-1"),
    (["google/gemma-3-4b-it"], "v5litepod-1"),
    (["Qwen/Qwen3-32B"], "v5litepod-1"),
])
def test_every_line_is_in_a_corpus_format(argv: list[str], accel: str) -> None:
    plan = plan_startup(argv, accel)
    raw = re.compile(PREFIX + r"(Loading safetensors checkpoint shards: +\d+% Completed \| \d+/\d+ \[.*\]|"
                     r"Traceback \(most recent call last\):|  File \".*\", line \d+, in .*|    .*|"
                     r"Process EngineCore:|[\w.]+(Error|Exception): .*|-{20}|For simplicity, JAX .*|)$|^\[Gloo\] Rank 0 ")
    for _, line in plan.lines:
        assert "\n" not in line and "\r" not in line
        assert E2.match(line) or E5.match(line) or raw.match(line), line
    for pattern in (H3B, H2, H5):
        assert len(messages(plan, pattern)) <= 1
    if plan.outcome == "ready":
        assert all(len(messages(plan, p)) == 1 for p in (H3B, H2, H5, K5, H4B, C5))
    # Every finished compile step was announced by its Precompile line just before.
    starts = [(m.group(1), m.group(2)) for m in messages(plan, C4_START) if "backbone" not in m.group(1)]
    assert [(m.group(1), m.group(2)) for m in messages(plan, C4_DONE)] == starts


# ---------------------------------------------------------------- through the real log reader
READER_CASES = [
    (["Qwen/Qwen3-8B"], "v6e-1"),
    (["google/gemma-4-E2B-it", "--max-model-len", "8192"], "v5litepod-1"),
    (["google/gemma-4-E2B-it", "--max-model-len", "131072"], "v5litepod-1"),
    (["meta-llama/Llama-3.1-8B-Instruct", "-tp", "4", "--max-model-len", "131072"], "v5litepod-4"),
    (["google/gemma-3-27b-it", "-tp", "8", "--max-num-seqs", "64", "--kv-cache-dtype", "fp8"], "v6e-8"),
    (["google/gemma-3-4b-it", "--max-model-len", "32768", "--gpu-memory-utilization", "0.95"], "v5litepod-1"),
    (["google/gemma-3-4b-it"], "v5litepod-1"),
    (["Qwen/Qwen3-8B"], "v5litepod-1"),
    (["Qwen/Qwen3-32B"], "v5litepod-1"),
    (["Qwen/Qwen3-8B", "--max-model-len", "65536"], "v6e-1"),
    (["Qwen/Qwen3-8B", "-tp", "3"], "v6e-4"),
]


@pytest.mark.parametrize(("argv", "accel"), READER_CASES)
def test_the_log_reader_extracts_exactly_the_planned_figures(argv: list[str], accel: str) -> None:
    vllm_log = pytest.importorskip("remote.vllm_log.reader")
    plan = plan_startup(argv, accel, boot_s=0.5)
    reader = vllm_log.StartupReader(year=2026)
    for _, line in plan.lines:
        reader.feed_line(line)
    reader.close()
    state = reader.state
    summary = vllm_log.summary_json(state)
    assert state.ready == (plan.outcome == "ready")
    assert (state.failure.kind.value if state.failure else None) == plan.failure_kind
    assert (state.kv_cache_tokens, state.max_concurrency) == (plan.kv_cache_tokens, plan.max_concurrency)
    if plan.kv_cache_tokens is not None:
        assert state.max_concurrency_tokens_per_request == plan.max_model_len
    assert (state.compile.steps_finished, state.compile_seconds, state.engine_init_seconds) == (
        plan.compile_steps, plan.compile_seconds, plan.engine_init_seconds)
    assert state.server_url == plan.server_url
    assert (state.tpu_type, state.max_model_len) == (accel, plan.max_model_len)
    chips = plan.chips
    if plan.weights_gib is not None:
        assert summary["hbm_used_gib"] == [plan.weights_gib] * chips
        assert summary["hbm_limit_gib"] == [plan.hbm_limit_gib] * chips
    else:
        assert summary["hbm_used_gib"] is None
    assert summary["hbm_after_kv_used_gib"] == (
        None if plan.hbm_after_kv_gib is None else [plan.hbm_after_kv_gib] * chips)
    if plan.failure_message is not None and "max_position_embeddings" not in plan.failure_message:
        # (The pydantic error's sentence is on the line after its header; the reader keeps the header.)
        assert state.failure is not None and plan.failure_message in state.failure.message


def _sim_docker():
    from sandbox.docker_sim import DEFAULT_IMAGES, SimDocker

    return SimDocker(plan_for=lambda argv, image: plan_startup(argv, "v5litepod-1", boot_s=0.5, image=image),
                     known_images=DEFAULT_IMAGES, on_ready=lambda box: None, on_stopped=lambda box: None)


def test_a_boot_with_a_flag_vllm_does_not_have_exits_2_with_vllms_argparse_error() -> None:
    """vLLM's FlexibleArgumentParser.error hands "unrecognized arguments" to argparse: usage, then
    ``vllm serve: error: ...`` on stderr, exit 2, before any engine line."""
    import asyncio

    async def run():
        box = _sim_docker().start_container(name="vllm", image="vllm/vllm-tpu:v0.30.0",
                                            command=["vllm", "serve", "google/gemma-4-E2B-it", "--max-model-len",
                                                     "8192", "--enable-turbo", "yes"])
        for timer in box.timers:
            timer.cancel()
        return box

    box = asyncio.run(run())
    assert box.texts == ["usage: vllm serve [model_tag] [options]",
                         "vllm serve: error: unrecognized arguments: --enable-turbo yes"]
    assert box.plan.exit_code == 2


def test_a_rollback_to_the_same_image_digest_reports_the_same_vllm_version() -> None:
    import asyncio

    from sandbox.docker_sim import DEFAULT_IMAGES

    argv = ["vllm", "serve", "google/gemma-4-E2B-it", "--max-model-len", "8192"]
    digest = DEFAULT_IMAGES["vllm/vllm-tpu:v0.30.0"]

    async def run():
        docker = _sim_docker()
        boxes = [docker.start_container(name=name, image=image, command=argv)
                 for name, image in (("by-tag", "vllm/vllm-tpu:v0.30.0"), ("by-digest", f"vllm/vllm-tpu@{digest}"))]
        for box in boxes:
            for timer in box.timers:
                timer.cancel()
        return boxes

    by_tag, by_digest = asyncio.run(run())
    banner = [t for t in by_tag.texts if "vLLM API server version" in t or "Initializing a V1 LLM engine" in t]
    assert banner and all("0.30.0" in t for t in banner)
    assert [t for t in by_digest.texts if "vLLM API server version" in t or "Initializing a V1 LLM engine" in t] \
        == banner
