"""Line formats and their drift (ids from the corpus INDEX.md), one behaviour per test.

Inputs are lines in the documented formats (wording as vLLM / tpu-inference print them);
every assertion checks values the reader had to parse out of them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from console.cli import main
from remote.startup import FailureKind, Phase
from remote.vllm_log.patterns import overlay_cr, overlay_cr_bytes
from remote.vllm_log.reader import StartupReader, read_log, summary_json

E = "(EngineCore pid=7) INFO 03-04 05:06:07 [tpu_runner.py:1264] "
A = "(APIServer pid=1) INFO 03-04 05:06:09 [api_utils.py:345] "
ERR = "(EngineCore pid=7) ERROR 03-04 05:07:00 [core.py:1434] "


def read(*lines: str, year: int = 2026) -> StartupReader:
    reader = StartupReader(year=year)
    reader.feed("\n".join(lines) + "\n")
    reader.close()
    return reader


def test_docker_timestamps_are_stripped_and_used_as_line_times() -> None:
    r = read("2026-11-30T01:02:03.123456789Z " + E + "Loading model with MODEL_IMPL_TYPE=auto",
             "2026-11-30T01:09:00.5Z " + E + "Init model | hbm=[(8.97, 31.24)]GiB",
             "2026-11-30T01:10:00Z (APIServer pid=1) INFO:     Application startup complete.",
             year=1999)
    s = r.state
    assert [m.phase for m in s.timeline] == [Phase.STARTING, Phase.LOADING_WEIGHTS, Phase.READY]
    assert s.timeline[1].started_at == datetime(2026, 11, 30, 1, 2, 3, 123456, UTC)
    assert s.hbm_snapshots[0].at == datetime(2026, 11, 30, 1, 9, 0, 500000, UTC)
    assert s.ready and s.last_line_at == datetime(2026, 11, 30, 1, 10, tzinfo=UTC)


def test_vllm_prefix_time_uses_the_given_year_and_rolls_over_new_year() -> None:
    s = read("INFO 12-31 23:59:58 [loader.py:1] Loading weights took 2.84 seconds",
             "INFO 01-01 00:00:05 [kv_cache_utils.py:2] GPU KV cache size: 4,096 tokens",
             year=2025).state
    assert s.timeline[1].started_at == datetime(2025, 12, 31, 23, 59, 58, tzinfo=UTC)
    assert s.timeline[2].started_at == datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)


def test_hbm_suffix_drift_gb_and_gib_are_both_gib_per_chip() -> None:
    s = read(E + "Init model | hbm=[(3.74, 31.25), (3.5, 31.25)]Gb",
             E.replace("tpu_runner.py:1264", "kv_cache_manager.py:991")
             + "Init kv-cache | num_total_layers=2 | num_blocks=[9, 9] | hbm=[(28.49, 31.25), "
             "(28.5, 31.25)]Gb", E + "Init model | hbm=[(1.11, 30.75)]GiB").state
    assert [(x.stage, x.unit_suffix) for x in s.hbm_snapshots] == [
        ("model_loaded", "Gb"), ("kv_cache", "Gb"), ("model_loaded", "GiB")]
    assert s.hbm_model_loaded.used_gib == (1.11,)  # the last Init model line wins
    assert s.hbm_after_kv.used_gib == (28.49, 28.5) and s.num_chips == 2


def test_memory_statistics_are_totals_with_any_extra_fields() -> None:
    s = read(E + "Memory statistics | total_hbm_limit_gb=63.0GiB | total_hbm_limit_cap_gb=57.96GiB"
             " | total_hbm_used_gb=20.5GiB | total_hbm_avail_gb=37.46GiB | "
             "kv_cache_headroom_gb=1.5GiB").state
    assert dict(s.memory_statistics) == {
        "total_hbm_limit_gb": 63.0, "total_hbm_limit_cap_gb": 57.96, "total_hbm_used_gb": 20.5,
        "total_hbm_avail_gb": 37.46, "kv_cache_headroom_gb": 1.5}
    assert s.gpu_memory_utilization == 0.92 and s.phase is Phase.ALLOCATING_KV_CACHE


def test_kv_cache_on_two_lines_with_and_without_separators() -> None:
    s = read("INFO 02-20 00:01:02 kv_cache_utils.py:522] # GPU blocks: 127626",
             "INFO 02-20 00:01:02 kv_cache_utils.py:525] Maximum concurrency for 2048 tokens per "
             "request: 997.08x").state
    assert (s.device_blocks, s.kv_cache_tokens, s.max_concurrency,
            s.max_concurrency_tokens_per_request) == (127626, None, 997.08, 2048)
    s = read(E + "GPU KV cache size: 1,151,744 tokens",
             E + "Maximum concurrency for 32,768 tokens per request: 35.15x").state
    assert (s.kv_cache_label, s.kv_cache_tokens, s.max_concurrency_tokens_per_request) == (
        "GPU", 1151744, 32768)


def test_kv_cache_and_concurrency_on_one_line_with_platform_label() -> None:
    s = read(E + "Overriding num_gpu_blocks=38 with num_gpu_blocks_override=64",
             E + "TPU KV cache size: 16,384 tokens, Maximum concurrency for 8,192 tokens per "
             "request: 2.00x").state
    assert (s.kv_cache_label, s.kv_cache_tokens, s.max_concurrency,
            s.max_concurrency_tokens_per_request) == ("TPU", 16384, 2.0, 8192)
    assert (s.num_gpu_blocks_computed, s.num_gpu_blocks_override) == (38, 64)


def test_v0_tpu_blocks_use_their_own_json_key() -> None:
    got = summary_json(read("INFO 11-01 10:00:00 ray_tpu_executor.py:280] # TPU blocks: 9123, "
                            "# CPU blocks: 4000").state)
    assert (got["num_tpu_blocks"], got["cpu_blocks"], got["kv_cache_tokens"]) == (9123, 4000, None)


def test_ansi_coloured_uvicorn_ready_line_counts() -> None:
    s = read(A + "Starting vLLM server on http://0.0.0.0:8000",
             "(APIServer pid=1) \x1b[32mINFO\x1b[0m:     Application startup complete.").state
    assert s.ready and s.phase is Phase.READY and s.server_url == "http://0.0.0.0:8000"


def test_ready_phrase_in_scripts_and_foreign_hbm_lines_are_decoys() -> None:
    s = read("+ grep -q 'INFO:     Application startup complete.' /tmp/vllm.log",
             "echo 'INFO:     Application startup complete.'",
             "until docker logs vllm 2>&1 | grep -q 'Application startup complete'; do sleep 5; done",
             "INFO:absl:Using 475.3 MiB / 30.7 GiB (0.0150971112916562) on TPU_0(process=0,(0,0,0,0))",
             "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)").state
    assert not s.ready and s.hbm_snapshots == () and s.server_url == "http://0.0.0.0:8000"


def test_a_cr_redrawn_line_is_one_line_showing_its_last_state() -> None:
    """``docker run -t`` / tqdm captures: inner CRs are redraws, CRLF ends a line; 7 lines of which
    one has 3 redraws read as 7 lines, and the redrawn one as the terminal shows it."""
    capture = ("INFO 02-20 00:01:00 [core.py:1] Loading weights\r\n"
               "(EngineCore pid=7) \rLoading safetensors checkpoint shards:   0% Completed | 0/2\r"
               "Loading safetensors checkpoint shards:  50% Completed | 1/2\r"
               "Loading safetensors checkpoint shards: 100% Completed | 2/2\r\n"
               "INFO 02-20 00:01:01 [core.py:2] one\r\n"
               "INFO 02-20 00:01:01 [core.py:3] two\n"
               "INFO 02-20 00:01:01 [core.py:4] three\r\n"
               "INFO 02-20 00:01:01 [core.py:5] four\n"
               "INFO 02-20 00:01:02 kv_cache_utils.py:522] # GPU blocks: 1381\r\n")
    for chunk in (len(capture), 7, 1):                  # whole, and with CRLFs split across chunks
        reader = StartupReader(year=2026)
        data = capture.encode()
        for i in range(0, len(data), chunk):
            reader.feed(data[i:i + chunk])
        reader.close()
        s = reader.state
        assert s.lines_read == 7, chunk
        assert s.phase is Phase.ALLOCATING_KV_CACHE and s.device_blocks == 1381
        assert s.timeline[1].phase is Phase.LOADING_WEIGHTS
    redrawn = capture.split("\n")[1]
    assert overlay_cr(redrawn) == "Loading safetensors checkpoint shards: 100% Completed | 2/2"
    assert overlay_cr("progress 100%\rdone") == "doneress 100%"   # a shorter redraw leaves the old tail
    assert overlay_cr_bytes("0% │\r50% │\r".encode()) == "50% │".encode()


def test_torch_xla_progress_ignores_non_driver_workers_and_reads_the_typo_total() -> None:
    s = read("INFO 03-31 07:47:51 [tpu_model_runner.py:769] Compiling the model with different "
             "input shapes.",
             "(VllmWorker TP0 pid=5) INFO 03-31 07:47:51 [tpu_model_runner.py:773]   -- num_tokens: 16",
             "(VllmWorker TP1 pid=6) INFO 03-31 07:47:51 [tpu_model_runner.py:773]   -- num_tokens: 16",
             "(VllmWorker TP0 pid=5) INFO 03-31 07:48:16 [tpu_model_runner.py:773]   -- num_tokens: 32",
             "INFO 03-31 07:48:36 [tpu_model_runner.py:778] Compilation finished in in 44.09 [secs].",
             "INFO 03-31 07:48:36 [tpu_model_runner.py:780] Compiling sampling with different input "
             "shapes.",
             "INFO 03-31 07:48:36 [tpu_model_runner.py:803]   -- num_tokens: 16, num_seqs: 8",
             "INFO 03-31 07:48:37 [tpu_model_runner.py:808] Compilation finished in 1.50 [secs].").state
    assert s.compile.steps_started == 3 and s.compile.steps_finished == 0
    assert s.compile_seconds == 45.59 and s.compile.in_flight is None


def test_precompile_steps_carry_names_and_warmup_is_not_a_step() -> None:
    c = "(EngineCore pid=7) INFO 10-20 00:03:47 [compilation_manager.py:{}] "
    s = read(c.format(57) + "Precompile sample --> {'num_reqs': 16, 'do_sampling': True}",
             c.format(67) + "Compilation finished in 1.54 [secs].",
             c.format(137) + "Precompile worker0 backbone --> {'num_tokens': 16, 'num_reqs': 256,",
             c.format(137) + "       1, 1, 1, 1], dtype=int32)}",
             c.format(160) + "AOT lower skipped for worker0 backbone (not a jit); will compile in "
             "warmup.",
             c.format(228) + "Warm-up call pass finished in 194.87 [secs] over 9 tasks.",
             c.format(137) + "Precompile worker0 compute_logits --> {'num_reqs': 8}").state
    p = s.compile
    assert (p.steps_started, p.steps_finished, p.last_step_seconds) == (3, 1, 1.54)
    assert (p.deferred_steps, p.warmup_passes, p.warmup_seconds_total) == (1, 1, 194.87)
    assert p.in_flight == "worker0 compute_logits --> {'num_reqs': 8}"
    assert s.compile_seconds is None  # only per-step times


def test_three_line_xla_oom_is_joined_and_classified_by_frames() -> None:
    s = read(ERR + "EngineCore failed to start.", ERR + "Traceback (most recent call last):",
             ERR + '  File "/workspace/tpu_inference/runner/kv_cache.py", line 192, in '
             "create_kv_caches",
             "(EngineCore pid=7) Process EngineCore:",
             ERR + "ValueError: RESOURCE_EXHAUSTED: E0100: RuntimeBufferAllocationFailure:",
             ERR + "Error allocating device buffer: Attempting to allocate 128.00M. That was not "
             "possible. There are 69.02M free.; (0x0x0_HBM0)",
             ERR + "See https://openxla.org/xla/errors/error_0100 for more details.").state
    f = s.failure
    assert f.kind is FailureKind.HBM_OOM_KV_ALLOC and f.fatal and s.phase is Phase.FAILED
    assert f.message.endswith("Attempting to allocate 128.00M. That was not possible. There are "
                              "69.02M free.; (0x0x0_HBM0)")
    assert dict(f.numbers) == {"required_gib": 0.125, "available_gib": 0.0674}
    assert s.engine_core_failed


def test_hand_wrapped_kv_fit_error_gives_the_largest_max_model_len() -> None:
    s = read("ValueError: To serve at least one request with the model's max seq len (262144),",
             "(32.00 GiB KV cache is needed, which is larger than the available KV cache memory",
             "(4.39 GiB). Based on the available memory, the estimated maximum model length is",
             "35920. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when",
             "initializing the engine.").state
    f = s.failure
    assert f.kind is FailureKind.MAX_MODEL_LEN_TOO_LARGE
    assert dict(f.numbers) == {"max_seq_len": 262144, "kv_cache_needed_gib": 32.0,
                               "kv_cache_available_gib": 4.39, "estimated_max_model_len": 35920}
    assert "--max-model-len 35920" in f.hint


def test_hbm_budget_check_of_tpu_inference() -> None:
    s = read(E + "Memory statistics | total_hbm_limit_gb=15.75GiB | total_hbm_limit_cap_gb=14.49GiB"
             " | total_hbm_used_gb=15.1GiB | total_hbm_avail_gb=-0.61GiB",
             ERR + "ValueError: total_hbm_used_gb=15.1GiB exceeds total_hbm_limit_cap_gb=14.49GiB "
             "by 0.61GiB. Please consider increasing --gpu-memory-utilization from 0.92 to a "
             "larger value.").state
    f = s.failure
    assert f.kind is FailureKind.HBM_BUDGET_EXCEEDED and f.fatal
    assert dict(f.numbers) == {"total_hbm_used_gb": 15.1, "total_hbm_limit_cap_gb": 14.49,
                               "exceeded_by_gb": 0.61, "gpu_memory_utilization": 0.92}
    # (15.1 + 1) / 15.75 = 1.02 > 0.98: no utilisation can fit it, so no number is offered
    assert "Raise --gpu-memory-utilization," in f.hint


def test_compile_oom_on_v5e_suggests_a_lower_utilisation() -> None:
    s = read("INFO 04-04 21:49:56 [__init__.py:59] TPU info: node_name=host-1 | "
             "tpu_type=v5litepod-4 | worker_id=0 | num_chips=4 | num_cores_per_chip=1",
             A + "non-default args: {'model': 'google/gemma-3-27b-it', 'gpu_memory_utilization': "
             "0.95, 'max_model_len': 8192}",
             E + "Precompile all the subgraphs with possible input shapes.",
             E + "Precompile worker0 backbone --> {'num_tokens': 2048, 'num_reqs': 256}",
             ERR + "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent "
             "error. Ran out of memory in memory space hbm. Used 17.34G of 15.75G hbm. "
             "Exceeded hbm capacity by 1.59G.").state
    f = s.failure
    assert f.kind is FailureKind.HBM_OOM_AFTER_COMPILE
    assert "(needed 17.34 GiB, 15.75 GiB available: 1.59 GiB short)" in f.explanation
    # 0.95 x 15.75 - 1.59 = 13.37 GiB of cap = 0.849 of the chip's HBM
    assert "--gpu-memory-utilization 0.84 instead of 0.95 leaves those 1.59 GiB free" in f.hint
    assert (s.tpu_type, s.num_chips, s.max_model_len) == ("v5litepod-4", 4, 8192)


def test_vmem_oom_while_compiling() -> None:
    s = read(E + "Precompile worker0 backbone --> {'num_tokens': 4096}",
             ERR + "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory in memory "
             "space vmem while allocating on stack for %ragged_paged_attention.1").state
    assert s.failure.kind is FailureKind.VMEM_OOM_COMPILE and s.phase is Phase.FAILED


def test_context_length_error_after_ready_does_not_fail_the_server() -> None:
    s = read("(APIServer pid=1) INFO:     Application startup complete.",
             "ERROR 05-08 21:27:27 [serving_chat.py:198] ValueError: This model's maximum context "
             "length is 8192 tokens. However, you requested 8203 tokens (7691 in the messages, "
             "512 in the completion). Please reduce the length of the messages or completion.",
             "ERROR 05-08 21:28:00 [serving_chat.py:198] ValueError: something else").state
    assert s.ready and s.phase is Phase.READY
    assert s.failure.kind is FailureKind.CONTEXT_LENGTH_EXCEEDED and not s.failure.fatal
    assert s.failure.numbers["requested_tokens"] == 8203


def test_harmless_tracebacks_and_import_warnings_are_not_failures() -> None:
    s = read("WARNING 08-10 22:26:05 [interface.py:368] Failed to import from vllm._C: "
             "ModuleNotFoundError(\"No module named 'vllm._C'\")",
             "Traceback (most recent call last):",
             '  File "/usr/lib/python3.12/site-packages/triton/__init__.py", line 8, in <module>',
             "ModuleNotFoundError: No module named 'triton'",
             "ValueError: shapes [1, 2] and [3] differ").state
    assert s.failure is None and s.phase is Phase.STARTING


def test_bare_exception_with_brackets_in_its_message_is_still_read() -> None:
    s = read('  File "/workspace/tpu_inference/models/common/model_loader.py", line 12, in get_model',
             "  ValueError: Resource axis: attn_dp of PartitionSpec('data', None) [1, 2] is not "
             "found in mesh.").state
    assert s.failure.kind is FailureKind.CONFIG_ERROR
    assert s.failure.message.startswith("ValueError: Resource axis")


def test_multihost_memory_stats_error() -> None:
    s = read("jax.errors.JaxRuntimeError: INVALID_ARGUMENT: MemoryStats is only supported for "
             "addressable PjRt devices.").state
    assert s.failure.kind is FailureKind.MULTIHOST_MEMORY_STATS_ERROR and s.failure.fatal


def test_a_second_banner_after_a_failure_starts_a_new_boot() -> None:
    banner = A + " ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.29.1rc1"
    s = read(banner, ERR + "EngineCore failed to start.",
             ERR + "ValueError: Resource axis: attn_dp is not found in mesh: ('data', 'model').",
             "INFO 04-04 21:49:56 [__init__.py:59] TPU info: node_name=host-1 | tpu_type=v6e-8 | "
             "worker_id=0 | num_chips=8 | num_cores_per_chip=1",
             banner, E + "Loading model with MODEL_IMPL_TYPE=auto").state
    assert s.restarts == 1 and s.previous_failure.kind is FailureKind.CONFIG_ERROR
    assert s.failure is None and s.phase is Phase.LOADING_WEIGHTS
    assert s.timeline[0].line_no == 5 and (s.tpu_type, s.num_chips) == ("v6e-8", 8)


def test_feed_line_uses_the_given_time() -> None:
    reader = StartupReader()
    at = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    reader.feed_line(E + "Loading weights took 2.84 seconds\r", ts=at)
    assert reader.state.timeline[1].started_at == at and reader.state.last_line_at == at


def test_version_bumps_per_change_and_snapshots_are_cached() -> None:
    reader = StartupReader()
    v0, s0 = reader.version, reader.state
    reader.feed(b"INFO 01-01 00:00:00 [x.py:1] partial")  # no complete line yet
    assert reader.version == v0 and reader.state is s0
    reader.feed(b" line\n")
    assert reader.version > v0 and reader.state is not s0 and reader.state is reader.state
    assert reader.state.lines_read == 1


def test_cli_json_from_stdin_and_panel(tmp_path, capsys, monkeypatch) -> None:
    log = tmp_path / "boot.log"
    log.write_text(E + "Init model | hbm=[(8.97, 31.24)]GiB\n" + E
                   + "GPU KV cache size: 1,151,744 tokens\n", encoding="utf-8")
    assert main(["log-summary", str(log)]) == 0
    panel = capsys.readouterr().out
    assert "8.97 / 31.24 GiB per chip" in panel and "1,151,744 tokens" in panel
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(log.read_bytes())))
    assert main(["log-summary", "-", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["hbm_used_gib"] == [8.97] and got["kv_cache_tokens"] == 1151744
    assert got == summary_json(read_log(log))


def test_cli_unreadable_file_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    assert main(["log-summary", str(tmp_path / "missing.log")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.log" in err and "Traceback" not in err
    assert main(["log-summary", str(tmp_path), "--json"]) == 2
