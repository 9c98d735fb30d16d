"""The failure catalogue (README "Failure catalogue"): one test per entry, each from a real message.

Sources: the corpus logs (``shared/corpus/vllm-logs``), the sandbox engine (which prints vLLM's own
texts), and verbatim vLLM / PyTorch / Triton messages quoted from public logs, wrapped in the
vLLM 0.29 ``(APIServer pid=1)`` / EngineCore envelopes. Each asserts the kind, the figures, the
quoted line and the advice with its numbers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from remote.startup import FailureKind as K
from remote.vllm_log.reader import StartupReader, read_log
from sandbox.engine import plan_startup

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "vllm-logs"
API = "(APIServer pid=1) "
ERR = "(EngineCore pid=7) ERROR 09-30 04:01:10 [core.py:1434] "
API_TRACEBACK = [API + "Traceback (most recent call last):",
                 API + '  File "/workspace/vllm/vllm/engine/arg_utils.py", line 1469, in create_model_config',
                 API + "    return ModelConfig("]
#: vLLM 0.10+ ModelConfig text, verbatim from a public APIServer log (max_position_embeddings=32768.0).
DERIVED_VALUE_ERROR = (
    "Value error, User-specified max_model_len (65536) is greater than the derived max_model_len "
    "(max_position_embeddings=32768.0 or model_max_length=None in model's config.json). To allow overriding "
    "this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used "
    "with extreme caution. If the model uses relative position encoding (RoPE), positions exceeding "
    "derived_max_model_len lead to nan. If the model uses absolute position encoding, positions exceeding "
    "derived_max_model_len will cause a CUDA array out-of-bounds error. [type=value_error, "
    "input_value=ArgsKwargs((), {'model': ...nderer_num_workers': 1}), input_type=ArgsKwargs]")


def read(lines: list[str]):
    reader = StartupReader(year=2026)
    for line in lines:
        reader.feed_line(line)
    reader.close()
    return reader.state


def corpus(name: str):
    path = next(CORPUS.glob(f"{name}-*.log"), None)
    if path is None:
        pytest.skip(f"corpus file {name} not present")
    return read_log(path)


def sandbox(argv: list[str], accel: str):
    return read([line for _, line in plan_startup(argv, accel, boot_s=0.5).lines])


# ---- max_model_len_too_large: above the model's derived maximum -------------------------------

def test_max_model_len_above_the_derived_limit_in_the_pydantic_block_from_the_sandbox():
    state = sandbox(["google/gemma-3-27b-it", "--max-model-len", "200000", "-tp", "4"], "v6e-4")
    f = state.failure
    assert f is not None and f.kind is K.MAX_MODEL_LEN_TOO_LARGE and f.fatal
    assert dict(f.numbers) == {"requested_max_model_len": 200000, "derived_max_model_len": 131072}
    # the most specific line is quoted, not pydantic's class header
    assert f.message.startswith("Value error, User-specified max_model_len (200000) is greater than")
    assert "validation error for ModelConfig" not in f.message and "[type=" not in f.message
    assert "Value error, User-specified" in f.evidence_line
    assert "131072" in f.explanation and "--max-model-len 131072" in f.hint
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in f.hint


def test_max_model_len_above_the_derived_limit_verbatim_vllm_text_with_a_float_limit():
    f = read([*API_TRACEBACK, API + "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
              API + "  " + DERIVED_VALUE_ERROR,
              API + "    For further information visit https://errors.pydantic.dev/2.12/v/value_error"]).failure
    assert f is not None and f.kind is K.MAX_MODEL_LEN_TOO_LARGE
    assert dict(f.numbers) == {"requested_max_model_len": 65536, "derived_max_model_len": 32768}
    assert "--max-model-len 32768" in f.hint


def test_max_model_len_above_the_derived_limit_as_a_plain_value_error_wrapped_over_two_lines():
    # vLLM 0.6 - 0.9 raised it as a ValueError; the operator's paste wraps it before the figure
    f = read([*API_TRACEBACK,
              "ValueError: User-specified max_model_len (131072) is greater than the derived max_model_len (",
              "max_position_embeddings=32768 or model_max_length=None in model's config.json). This may lead to "
              "incorrect model outputs or CUDA errors."]).failure
    assert f is not None and f.kind is K.MAX_MODEL_LEN_TOO_LARGE
    assert dict(f.numbers) == {"requested_max_model_len": 131072, "derived_max_model_len": 32768}


# ---- max_model_len_too_large: one request does not fit the KV cache (corpus) ------------------

def test_kv_fit_v1_error_gives_the_length_that_fits():
    f = corpus("05").failure
    assert f.kind is K.MAX_MODEL_LEN_TOO_LARGE and f.numbers["estimated_max_model_len"] == 5632
    assert "--max-model-len 5632" in f.hint and "0.71 GiB" in f.explanation


def test_kv_fit_v0_error_gives_the_kv_capacity():
    f = corpus("28").failure
    assert f.kind is K.MAX_MODEL_LEN_TOO_LARGE and f.numbers["kv_cache_capacity_tokens"] == 23648
    assert "--max-model-len 23648" in f.hint


# ---- allocation failures: what was needed, what was available, the utilization -----------------

def test_load_oom_reports_needed_and_available_gib():
    f = corpus("12").failure
    assert f.kind is K.HBM_OOM_LOAD
    assert "(needed 16.23 GiB, 15.75 GiB available: 0.48 GiB short)" in f.explanation
    assert "--tensor-parallel-size" in f.hint and "utilization" not in f.hint    # no KV cache yet


def test_kv_allocation_oom_reports_both_and_the_utilization_that_frees_the_difference():
    f = corpus("33").failure
    assert f.kind is K.HBM_OOM_KV_ALLOC
    assert "(needed 0.12 GiB, 0.07 GiB available: 0.06 GiB short)" in f.explanation
    # 0.92 x 15.75 = 14.49 GiB cap; 14.49 - 0.0576 = 14.43 GiB = 0.916 of the chip
    assert "--gpu-memory-utilization 0.91 instead of 0.92 leaves those 0.06 GiB free" in f.hint
    assert "Drop --num-gpu-blocks-override" in f.hint


def test_compile_oom_at_095_on_v5e_from_the_sandbox_advises_a_utilization_within_the_known_ceiling():
    state = sandbox(["google/gemma-3-4b-it", "--max-model-len", "32768", "--gpu-memory-utilization", "0.95"],
                    "v5litepod-1")
    f = state.failure
    assert f is not None and f.kind is K.HBM_OOM_AFTER_COMPILE
    need, free = f.numbers["required_gib"], f.numbers["available_gib"]
    assert free == 15.75 and need > free
    assert f"(needed {need:.2f} GiB, 15.75 GiB available: {need - free:.2f} GiB short)" in f.explanation
    assert "--gpu-memory-utilization 0.8" in f.hint or "--gpu-memory-utilization 0.9" in f.hint
    target = float(f.hint.split("--gpu-memory-utilization ")[1].split()[0])
    assert target <= 0.92 and (0.95 * 15.75 - target * 15.75) >= need - free - 0.16


#: tpu-inference on a v5e: the last precompile step, then JAX loading the program it compiled
#: (libtpu's "Error loading program ...: Attempting to allocate N. That was not possible. There are
#: M free." under INTERNAL, without the words RESOURCE_EXHAUSTED or "out of memory").
PROGRAM_LOAD_FAILURE = [
    "(EngineCore pid=163) INFO 09-30 03:40:02 [tpu_platform.py:91] TPU info: node_name=vllm-v5e-a | "
    "tpu_type=v5litepod-1 | worker_id=0 | num_chips=1 | num_cores_per_chip=1",
    "(EngineCore pid=163) INFO 09-30 03:40:05 [utils.py:85] Memory statistics | total_hbm_limit_gb=15.75GiB | "
    "total_hbm_limit_cap_gb=14.96GiB | total_hbm_used_gb=8.97GiB | total_hbm_avail_gb=5.99GiB",
    "(EngineCore pid=163) INFO 09-30 03:41:00 [compilation_manager.py:101] Precompile backbone --> "
    "num_tokens=8192",
    "(EngineCore pid=163) INFO 09-30 03:52:31 [compilation_manager.py:112] Compilation finished in 691.20 "
    "[secs].",
    "(EngineCore pid=163) ERROR 09-30 03:52:40 [core.py:708] EngineCore failed to start.",
    "(EngineCore pid=163) ERROR 09-30 03:52:40 [core.py:708] Traceback (most recent call last):",
    '(EngineCore pid=163) ERROR 09-30 03:52:40 [core.py:708]   File "/workspace/tpu_inference/tpu_inference/'
    'runner/tpu_runner.py", line 412, in _execute_model',
    "(EngineCore pid=163) ERROR 09-30 03:52:40 [core.py:708] jax.errors.JaxRuntimeError: INTERNAL: Error "
    "loading program 'jit_step_fun': Attempting to allocate 1.76G. That was not possible. There are 1.12G "
    "free.; (0x0x0_HBM0)",
]


def test_a_program_load_failure_after_a_long_compile_is_hbm_oom_after_compile_with_both_figures():
    f = read(PROGRAM_LOAD_FAILURE).failure
    assert f is not None and f.fatal and f.kind is K.HBM_OOM_AFTER_COMPILE        # was engine_core_exception
    assert (f.numbers["required_gib"], f.numbers["available_gib"]) == (1.76, 1.12)
    assert "(needed 1.76 GiB, 1.12 GiB available: 0.64 GiB short) on this v5e (15.75 GiB per chip, " \
           "at --gpu-memory-utilization 0.95)" in f.explanation
    # 0.95 x 15.75 = 14.96 GiB; minus the 0.64 GiB short = 14.32 GiB = 0.909 of the chip
    assert f.hint.startswith("Leave more HBM for the compiled programs: --gpu-memory-utilization 0.90 instead "
                             "of 0.95 leaves those 0.64 GiB free")


def test_a_v1_kv_fit_value_error_wrapped_by_hand_over_several_lines_is_read():
    env = "(EngineCore_DP0 pid=240) ERROR 10-02 10:12:01 [core.py:708] "
    f = read([env + "Traceback (most recent call last):",
              env + '  File "/workspace/vllm/vllm/v1/core/kv_cache_utils.py", line 588, in '
                    "check_enough_kv_cache_memory",
              env + "ValueError: To serve at least one request with the models's",       # "max seq len" wrapped
              env + "max seq len (131072), (16.00 GiB KV cache is needed, which is",
              env + "larger than the available KV cache memory (0.71 GiB). Based on",
              env + "the available memory, the estimated maximum model length is",
              env + "5632. Try increasing `gpu_memory_utilization` or decreasing",
              env + "`max_model_len` when initializing the engine."]).failure
    assert f is not None and f.kind is K.MAX_MODEL_LEN_TOO_LARGE                 # was config_error
    assert dict(f.numbers) == {"max_seq_len": 131072, "kv_cache_needed_gib": 16.0,
                               "kv_cache_available_gib": 0.71, "estimated_max_model_len": 5632}
    assert "--max-model-len 5632" in f.hint


def test_vllms_argparse_error_for_an_unknown_flag_is_a_config_error():
    """``vllm serve`` exits 2 before any engine line: argparse's usage line, then its error."""
    f = read(["usage: vllm serve [model_tag] [options]",
              "vllm serve: error: unrecognized arguments: --max-modle-len 8192"]).failure
    assert f is not None and f.fatal and f.kind is K.CONFIG_ERROR
    assert f.message == "vllm serve: error: unrecognized arguments: --max-modle-len 8192"


def test_pytorch_cuda_oom_states_both_figures():
    f = read(["(EngineCore pid=7) Traceback (most recent call last):",
              '(EngineCore pid=7)   File "/usr/lib/python3/site-packages/vllm/v1/worker/gpu_model_runner.py", '
              "line 2200, in profile_run",
              "(EngineCore pid=7) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 "
              "has a total capacity of 23.65 GiB of which 3.06 MiB is free. Including non-PyTorch memory, this "
              "process has 23.64 GiB memory in use."]).failure
    assert f is not None and f.kind is K.HBM_OOM_KV_ALLOC
    assert f.numbers["required_gib"] == pytest.approx(20 / 1024, abs=1e-4)
    assert f.numbers["available_gib"] == pytest.approx(3.06 / 1024, abs=1e-4)
    assert "(needed 0.02 GiB, 0.00 GiB available" in f.explanation


def test_hbm_budget_exceeded_from_the_sandbox():
    f = sandbox(["meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-utilization", "0.5"], "v5litepod-1").failure
    assert f is not None and f.kind is K.HBM_BUDGET_EXCEEDED
    assert "Raise --gpu-memory-utilization" in f.hint


# ---- the rest of the catalogue ----------------------------------------------------------------

def test_multihost_memory_stats():
    assert corpus("07").failure.kind is K.MULTIHOST_MEMORY_STATS_ERROR


def test_context_length_is_a_request_error_not_a_failed_boot():
    state = corpus("32")
    assert state.failure.kind is K.CONTEXT_LENGTH_EXCEEDED and not state.failure.fatal
    assert state.failure.numbers["max_context_tokens"] == 8192


def test_config_error_quotes_the_value_error():
    f = corpus("15").failure
    assert f.kind is K.CONFIG_ERROR and f.message.startswith("ValueError: Resource axis: attn_dp")


def test_an_unknown_pydantic_config_error_quotes_the_value_error_line_not_the_header():
    f = read([*API_TRACEBACK, API + "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
              API + "  Value error, Model architectures ['UrsaForConditionalGeneration'] are not supported for now. "
                    "Supported architectures: dict_keys([...])",
              API + "    For further information visit https://errors.pydantic.dev/2.12/v/value_error"]).failure
    assert f is not None and f.kind is K.CONFIG_ERROR and f.fatal
    assert f.message == ("Value error, Model architectures ['UrsaForConditionalGeneration'] are not supported "
                         "for now. Supported architectures: dict_keys([...])")
    assert "Value error, Model architectures" in f.evidence_line


def test_an_exception_type_not_ending_in_error_is_the_root_cause():
    # triton.runtime.errors.OutOfResources (Triton's own text), raised inside the engine core
    f = read([ERR + "EngineCore failed to start.",
              ERR + "Traceback (most recent call last):",
              ERR + '  File "/usr/lib/python3/site-packages/vllm/v1/engine/core.py", line 80, in __init__',
              ERR + "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 65538, "
                    "Hardware limit: 65536. Reducing block sizes or `num_stages` may help."]).failure
    assert f is not None and f.kind is K.ENGINE_CORE_EXCEPTION
    assert f.message.startswith("triton.runtime.errors.OutOfResources: out of resource: shared memory")


def test_engine_core_exception_without_a_root_cause():
    assert corpus("17").failure.kind is K.ENGINE_CORE_EXCEPTION


def test_crash_during_precompile():
    f = corpus("24").failure
    assert f.kind is K.ENGINE_CRASH_DURING_PRECOMPILE and "'_elem'" in f.message
