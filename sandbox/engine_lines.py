"""The sandbox engine's startup log writer (vLLM 0.29.x, tpu-inference on TPU).

:class:`StartupBuilder` writes one startup, API server config through engine load, KV cache,
compilation and serving, into a :class:`~sandbox.engine_log._Log`, raising
:class:`~sandbox.engine_log._Failure` where the boot fails (see
``sandbox.engine`` for the failures and the timing).
"""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass

from sandbox.engine_log import (
    API_FRAMES,
    API_MODULE,
    VLLM_VERSION,
    LogWriter,
    PlannedFailure,
    api_traceback,
    engine_failure,
    hbm_text,
    hlo_oom_lines,
    mmss,
    padding_buckets,
)
from sandbox.models_table import GIB, PROGRAM_RESERVE_GIB, EngineFigures
from sandbox.serve_args import DEFAULT_GPU_MEMORY_UTILIZATION, ServeArgs


@dataclass(frozen=True)
class BootTiming:
    """How a builder stretches its compile steps to print a measured boot's durations.

    Attributes:
        compile_factor: every compile step and warm-up pass lasts this many times its estimate.
        step_overhead_s: log seconds between steps that are not compilation (default 0.01).
        compile_s / engine_init_s: the figures the ``init engine ... took`` line must print
            (None: whatever the steps add up to).
    """

    compile_factor: float = 1.0
    step_overhead_s: float = 0.01
    compile_s: float | None = None
    engine_init_s: float | None = None


def measured_timing(args: ServeArgs, accelerator_type: str, fig: EngineFigures) -> BootTiming | None:
    """The timing that makes a boot print its model's measured durations on this generation.

    Runs the boot once with the engine's own estimates, then scales every compile step so the
    steps add up to the measured compilation less one second (the last warm-up pass takes the
    rest, so the sum is exact to the printed 0.01 s), and spreads the measured non-compile
    time of ``init engine`` over the steps. None when the model has no measured boot there.
    """
    measured = fig.spec.measured_boot(fig.generation)
    if measured is None:
        return None
    probe = StartupBuilder(args, accelerator_type, fig, fail=False)
    probe.run()
    if not probe.steps or probe.compile_s <= 0:
        return None
    other_s = probe.engine_init_raw_s - probe.compile_s - 0.01 * probe.steps
    overhead = (measured.engine_init_s - measured.compile_s - other_s - 0.05) / probe.steps
    return BootTiming(compile_factor=(measured.compile_s - 1.0) / probe.compile_s,
                      step_overhead_s=max(overhead, 0.01), compile_s=measured.compile_s,
                      engine_init_s=measured.engine_init_s)


class StartupBuilder:
    """Writes one startup into a :class:`LogWriter`; raises :class:`PlannedFailure` where it fails."""

    def __init__(self, args: ServeArgs, accelerator_type: str, fig: EngineFigures, fail: bool,
                 timing: BootTiming | None = None, vllm_version: str = VLLM_VERSION) -> None:
        seed = zlib.crc32(f"{args!r}|{accelerator_type}".encode())
        self.rng = random.Random(seed)
        self.args, self.accel, self.fig, self.fail = args, accelerator_type, fig, fail
        self.timing = timing or BootTiming()
        self.version = vllm_version
        self.log = LogWriter(engine_pid=100 + seed % 400)
        self.printed: dict[str, float | int | str] = {}
        self.compile_s = 0.0
        self.steps = 0
        self.t_model = 0.0
        self.ready_t = 0.0
        self.engine_init_raw_s = 0.0

    def secs(self, base: float) -> float:
        return round(base * self.rng.uniform(0.92, 1.08), 2)

    def compile_secs(self, base: float) -> float:
        """A compile step's printed seconds: the estimate, jittered, times the timing's factor."""
        return round(base * self.rng.uniform(0.92, 1.08) * self.timing.compile_factor, 2)

    # ---------------------------------------------------------------- API server config
    def api_server(self) -> None:
        log, a, f = self.log, self.args, self.fig
        log.log(None, "__init__.py:76", f"TPU info: node_name=t1v-n-sandbox-w-0 | tpu_type={self.accel} | "
                f"worker_id=0 | num_chips={f.host_chips} | num_cores_per_chip=1")
        log.t += 1.0
        log.log(None, "tpu_platform.py:402", "Pin memory is not supported on TPU.", "WARNING")
        if a.kv_cache_dtype.startswith("fp8") and f.generation == "v6e":
            log.log(None, "tpu_platform.py:177", "Automatically using fp8_e5m2 for FP8 KV cache on TPU v6e.")
        log.t += 5.0
        for art in ("", "       █     █     █▄   ▄█",
                    f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {self.version}",
                    f"  █▄█▀ █     █     █     █  model   {a.model}", "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀", ""):
            log.api("api_utils.py:347", art)
        non_default: dict[str, object] = {"model_tag": a.model, "model": a.model}
        for key, value, default in (
                ("served_model_name", [a.served_model_name] if a.served_model_name else None, None),
                ("max_model_len", a.max_model_len, None),
                ("gpu_memory_utilization", a.gpu_memory_utilization, DEFAULT_GPU_MEMORY_UTILIZATION),
                ("tensor_parallel_size", a.tensor_parallel_size, 1),
                ("max_num_batched_tokens", a.max_num_batched_tokens, None),
                ("max_num_seqs", a.max_num_seqs, None), ("kv_cache_dtype", a.kv_cache_dtype, "auto"),
                ("port", a.port, 8000)):
            if value != default:
                non_default[key] = value
        log.api("api_utils.py:273", f"non-default args: {non_default!r}")
        log.t += 12.0
        log.api("model.py:645", f"Resolved architecture: {f.spec.architecture}")
        if self.fail and f.max_model_len > f.spec.max_position:
            self.max_position_error()
        log.api("model.py:1883", f"Using max model len {f.max_model_len}")
        log.t += 5.0
        log.api("scheduler.py:242", f"Chunked prefill is enabled with max_num_batched_tokens="
                f"{f.max_num_batched_tokens}.")
        log.api("tpu_platform.py:233", f"Initialized sharding configuration: ShardingConfigManager("
                f"total_devices={f.tp}, sharding_strategy=ShardingStrategy(tensor_parallelism={f.tp}, "
                "expert_parallelism=1, sequence_parallelism=1, data_parallelism=1, "
                "attention_data_parallelism=1), device_indexes=None)")
        log.api("tpu_platform.py:318", "Force using UniProcExecutor for JAX on single host without "
                "pipeline parallelism.")

    def max_position_error(self) -> None:
        f = self.fig
        message = (f"User-specified max_model_len ({f.max_model_len}) is greater than the derived "
                   f"max_model_len (max_position_embeddings={f.spec.max_position} or model_max_length="
                   "None in model's config.json). To allow overriding this maximum, set the env var "
                   "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with "
                   "extreme caution. If the model uses relative position encoding (RoPE), positions "
                   "exceeding derived_max_model_len lead to nan. If the model uses absolute position "
                   "encoding, positions exceeding derived_max_model_len will cause a CUDA array "
                   "out-of-bounds error.")
        api_traceback(self.log, (*API_FRAMES, (
            "/workspace/vllm/vllm/engine/arg_utils.py", 1469, "create_model_config", "return ModelConfig(")),
            ["pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
             f"  Value error, {message} [type=value_error, input_value=ArgsKwargs((), "
             f"{{'model': '{self.args.model}', ...}}), input_type=ArgsKwargs]",
             "    For further information visit https://errors.pydantic.dev/2.12/v/value_error"])
        raise PlannedFailure("max_model_len_too_large", message)

    # ---------------------------------------------------------------- engine core: load
    def engine_load(self) -> None:
        log, a, f = self.log, self.args, self.fig
        log.t += 40.0
        log.eng("core.py:121", f"Initializing a V1 LLM engine (v{self.version}) with config: "
                f"model='{a.model}', speculative_config=None, tokenizer='{a.model}', "
                "skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, trust_remote_code=False, "
                f"dtype=torch.bfloat16, max_seq_len={f.max_model_len}, download_dir=None, "
                f"load_format=auto, tensor_parallel_size={f.tp}, pipeline_parallel_size=1, "
                f"data_parallel_size=1, quantization=None, enforce_eager=False, "
                f"kv_cache_dtype={a.kv_cache_dtype}, device_config=None, "
                f"served_model_name={a.served_model_name or a.model}, enable_prefix_caching=True")
        log.t += 6.0
        log.eng("parallel_state.py:1640", "world_size=1 rank=0 local_rank=0 "
                "distributed_init_method=file:///tmp/tmpq1s8andb backend=gloo")
        log.raw("[Gloo] Rank 0 is connected to 0 peer ranks. Expected number of connected peer ranks is : 0")
        if self.fail and (f.tp > f.host_chips or f.host_chips % f.tp):
            raise engine_failure(log, "config_error", (
                ("/workspace/tpu_inference/tpu_inference/runner/tpu_runner.py", 880, "_init_mesh",
                 "self.mesh = jax.make_mesh(mesh_shape, axis_names, devices=devices)"),
                ("/usr/local/lib/python3.12/site-packages/jax/_src/mesh_utils.py", 611,
                 "create_device_mesh", "raise ValueError("),
            ), [f"ValueError: Number of devices {f.host_chips} must be divisible by the product of "
                f"mesh_shape (1, {f.tp}) (tensor_parallel_size={f.tp})."])
        devices = ", ".join(f"TpuDevice(id={i}, process_index=0, coords=({i % 2},{i // 2},0), core_on_chip=0)"
                            for i in range(f.tp))
        log.eng("tpu_runner.py:885", f"Init mesh | mesh=Mesh('data': 1, 'model': {f.tp}, "
                "axis_types=(Auto, Auto))")
        log.eng("utils.py:211", f"Prepared token paddings: {padding_buckets(16, f.max_num_batched_tokens)}")
        log.eng("utils.py:157", f"Prepared request paddings: {padding_buckets(8, f.max_num_seqs)}")
        log.eng("compilation_manager.py:66", "Enabling JAX compile cache.")
        log.eng("tpu_worker.py:472", f"Init worker | rank=0 | is_first_rank=True | is_last_rank=True | "
                f"topology_order_id=0 | is_driver_worker=True | hbm={hbm_text(0.0, f.limit_gib, f.tp)}GiB "
                f"|self.devices=[{devices}] | total devices=[{devices}] | local_devices=[{devices}]")
        log.eng("model_loader.py:625", "Loading model with MODEL_IMPL_TYPE=auto")
        log.eng("model_loader.py:628", "Resolved MODEL_IMPL_TYPE 'auto' to 'flax_nnx'")
        total_gib = f.weights_gib * f.tp
        download = self.secs(total_gib * 0.9)
        log.t += download
        log.eng("weight_utils.py:530", f"Time spent downloading weights for {a.model}: {download:.6f} seconds")
        shards = max(1, math.ceil(f.spec.params_b * 2 / 4))
        per_shard = self.secs(total_gib * 5.5 / shards)
        log.raw(f"Loading safetensors checkpoint shards:   0% Completed | 0/{shards} [00:00<?, ?it/s]",
                log.engine)
        oom_at = math.ceil(shards * f.limit_gib / f.weights_gib) if f.weights_gib > f.limit_gib else None
        for done in range(1, shards + 1):
            log.t += per_shard
            if self.fail and oom_at is not None and done >= min(oom_at, shards):
                raise engine_failure(log, "hbm_oom_load", (
                    ("/workspace/tpu_inference/tpu_inference/runner/tpu_runner.py", 1174, "load_model",
                     "model = get_model("),
                    ("/workspace/tpu_inference/tpu_inference/models/common/model_loader.py", 305,
                     "_get_nnx_model", "jit_model = create_jit_model("),
                ), hlo_oom_lines(f.weights_gib + 0.5, f.limit_gib))
            elapsed, left = per_shard * done, per_shard * (shards - done)
            log.raw(f"Loading safetensors checkpoint shards: {100 * done // shards:3d}% Completed | "
                    f"{done}/{shards} [{mmss(elapsed)}<{mmss(left)}, {per_shard:.2f}s/it]", log.engine)
        log.raw(f"Loading safetensors checkpoint shards: 100% Completed | {shards}/{shards} "
                f"[{mmss(per_shard * shards)}<00:00, {per_shard:.2f}s/it]", log.engine)
        log.raw("", log.engine)
        log.eng("default_loader.py:430", f"Loading weights took {per_shard * shards + 0.03:.2f} seconds")
        log.t += 2.0
        log.eng("tpu_runner.py:1298", "Cleared JIT caches after weight loading")
        weights = round(f.weights_gib, 2)
        self.printed["weights_gib"] = weights
        self.t_model = log.t
        log.eng("tpu_runner.py:1300", f"Init model | hbm={hbm_text(weights, f.limit_gib, f.tp)}GiB")

    # ---------------------------------------------------------------- engine core: KV cache
    def kv_cache(self) -> None:
        log, f = self.log, self.fig
        log.eng("tpu_platform.py:512", f"Using cache_config.block_size: {f.block}")
        used = round(f.weights_gib, 2)
        cap = round(f.cap_gib, 2)
        log.eng("tpu_worker.py:558", f"Memory statistics | total_hbm_limit_gb={f.limit_gib * f.tp:.2f}GiB | "
                f"total_hbm_limit_cap_gb={cap * f.tp:.2f}GiB | total_hbm_used_gb={used * f.tp:.2f}GiB | "
                f"total_hbm_avail_gb={(cap - used) * f.tp:.2f}GiB")
        frames = (("/workspace/vllm/vllm/v1/engine/core.py", 149, "__init__",
                   "kv_cache_config = self._initialize_kv_caches(vllm_config)"),
                  ("/workspace/vllm/vllm/v1/core/kv_cache_utils.py", 1292, "get_kv_cache_configs",
                   "check_enough_kv_cache_memory(vllm_config, kv_cache_spec, available_memory)"),
                  ("/workspace/vllm/vllm/v1/core/kv_cache_utils.py", 688, "check_enough_kv_cache_memory",
                   "raise ValueError("))
        if self.fail and used > cap:  # tpu-inference's own check (tpu_worker.determine_available_memory)
            raise engine_failure(log, "hbm_budget_exceeded", (*frames[:1], (
                "/workspace/tpu_inference/tpu_inference/worker/tpu_worker.py", 561, "determine_available_memory",
                "raise ValueError(")), [f"ValueError: total_hbm_used_gb={used * f.tp:.2f}GiB exceeds "
                                       f"total_hbm_limit_cap_gb={cap * f.tp:.2f}GiB by "
                                       f"{(used - cap) * f.tp:.2f}GiB"])
        if self.fail and f.kv_tokens == 0:
            raise engine_failure(log, "hbm_budget_exceeded", frames, [
                "ValueError: No available memory for the cache blocks. Try increasing "
                "`gpu_memory_utilization` when initializing the engine."])
        if self.fail and f.max_model_len > f.kv_tokens:
            needed = math.ceil(f.max_model_len / f.block) * f.block * f.kv_bytes_per_token / GIB
            raise engine_failure(log, "max_model_len_too_large", frames, [
                "ValueError: To serve at least one request with the models's max seq len "
                f"({f.max_model_len}), ({needed:.2f} GiB KV cache is needed, which is larger than the "
                f"available KV cache memory ({max(f.pool_gib, 0.0):.2f} GiB). Based on the available "
                f"memory, the estimated maximum model length is {f.kv_tokens}. Try increasing "
                "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."])
        tokens = f.kv_tokens
        concurrency = round(tokens / f.max_model_len, 2)
        self.printed.update(kv_cache_tokens=tokens, max_concurrency=concurrency)
        log.eng("kv_cache_utils.py:2404", f"TPU KV cache size: {tokens:,} tokens, Maximum concurrency "
                f"for {f.max_model_len:,} tokens per request: {concurrency:.2f}x")

    def kv_alloc(self) -> None:
        log, f, spec = self.log, self.fig, self.fig.spec
        blocks = f.kv_tokens // f.block
        after = round(f.weights_gib + f.kv_tokens * f.kv_bytes_per_token / GIB + f.headroom_gib, 2)
        self.printed["hbm_after_kv_gib"] = after
        log.eng("kv_cache_manager.py:963", f"Hybrid KV cache layout: num_kv_cache_groups=1, "
                f"num_kv_cache_tensors={spec.kv_layers}, kv_cache_config.num_blocks={blocks}, "
                "duplicate_shared_layers=False")
        log.eng("kv_cache_manager.py:991", f"Init kv-cache | num_total_layers={spec.kv_layers} | num_blocks="
                f"{[blocks] * spec.kv_layers} | regular_attn_layers={spec.kv_layers} | regular_attn_shape="
                f"(num_blocks, ({f.block}, {spec.kv_heads}, 2, {spec.head_dim})) | regular_attn_sharding="
                f"NamedSharding(mesh=Mesh('data': 1, 'model': {f.tp}, axis_types=(Auto, Auto)), "
                "spec=P('data', None, 'model'), memory_kind=device) | regular_attn_dtype=bfloat16 | "
                f"hbm={hbm_text(after, f.limit_gib, f.tp)}Gb")

    # ---------------------------------------------------------------- compilation
    def step(self, name: str, key: dict[str, object], base_s: float) -> None:
        log = self.log
        log.eng("compilation_manager.py:149", f"Precompile {name} --> {key!r}")
        secs = self.compile_secs(base_s)
        log.t += secs + self.timing.step_overhead_s
        self.compile_s += secs
        self.steps += 1
        log.eng("compilation_manager.py:200", f"Compilation of {name} --> {key!r} finished in {secs:.2f} [secs].")

    def warmup(self, secs: float, tasks: int) -> None:
        self.log.t += secs
        self.compile_s += secs
        self.log.eng("compilation_manager.py:240", f"Warm-up call pass finished in {secs:.2f} [secs] over "
                     f"{tasks} tasks.")

    def compile(self) -> None:
        log, f = self.log, self.fig
        tokens, reqs = padding_buckets(16, f.max_num_batched_tokens), padding_buckets(8, f.max_num_seqs)
        log.eng("compilation_manager.py:979", "Compiling sampling with different input shapes.")
        for r in reqs:
            for sampling in (True, False):
                for logprobs in (True, False):
                    self.step("worker0 sample", {"num_reqs": r, "do_sampling": sampling, "logprobs": logprobs,
                                                 "allow_distributed_sampling": True},
                              0.42 + (0.25 + r / 200) * sampling)
        log.eng("compilation_manager.py:1043", "Compiling gather_logprobs with different input shapes.")
        for r in reqs:
            self.step("worker0 gather_logprobs", {"num_reqs": r}, 1.7 + min(r, 32) / 27)
        log.eng("compilation_manager.py:1099", "Compiling compute_and_gather_prompt_logprobs with different "
                "input shapes.")
        for n in tokens:
            if n > 1024:
                log.eng("compilation_manager.py:1108", "Skipping precompilation of compute_and_gather_"
                        f"prompt_logprobs for num_tokens={n}, as it exceeds the MAX_PRECOMPILE_PROMPT_"
                        "TOKENS=1024 limit to avoid redundant host CPU JAX tracing for long sequence lengths.")
            else:
                self.step("worker0 compute_and_gather_prompt_logprobs", {"num_tokens": n}, 1.7 + min(n, 32) / 27)
        self.warmup(0.1, 2 * len(tokens) + len(reqs))
        self.kv_alloc()
        log.eng("compilation_manager.py:236", "Precompile all the subgraphs with possible input shapes.")
        layers = f.spec.layers
        for n in tokens:
            ones = ", ".join(["1"] * 22)
            head = (f"Precompile worker0 backbone --> {{'num_tokens': {n}, 'num_reqs': {f.max_num_seqs}, "
                    "'shared_attention_metadata': SharedAttentionMetadata(input_positions=Array([1, 1, 1, "
                    f"..., 1, 1, 1], dtype=int32), seq_lens=Array([{ones},")
            for text in (head, f"       {ones},", f"       {ones},",
                         "       1, 1, 1, 1], dtype=int32), request_distribution=Array([0, 0, 0], "
                         f"dtype=int32), mamba_state_indices=None, padded_num_reqs={f.max_num_seqs})}}"):
                log.eng("compilation_manager.py:137", text)
            log.eng("compilation_manager.py:160", "AOT lower skipped for worker0 backbone (not a jit); will "
                    "compile in warmup.")
        self.warmup(sum(self.compile_secs(0.55 * layers * (1 + math.log2(n / 16) / 8)) for n in tokens), len(tokens))
        log.eng("compilation_manager.py:862", "Compiling select_from_array with different input shapes.")
        log.eng("compilation_manager.py:829", "Compiling select_from_array for worker0 select all logits.")
        for size in tokens:
            for index in (r for r in reqs if r <= size):
                self.step("select_from_array [worker0 select all logits]",
                          {"array_size": size, "index_size": index}, 0.04 + index / 4000)
        log.eng("compilation_manager.py:909", "Compiling compute_logits with different input shapes.")
        for r in reqs:
            self.step("worker0 compute_logits", {"num_reqs": r}, 0.5 + r / 256)
        log.eng("compilation_manager.py:1885", "Compiling structured_decoding with different input shapes.")
        for r in reqs:
            self.step("structured_decode", {"num_reqs": r}, 0.3 + r / 2560)
        target = self.timing.compile_s
        self.warmup(max(0.0, round(target - self.compile_s, 2)) if target is not None else 0.0, len(reqs))
        if self.fail and f.cap_gib + PROGRAM_RESERVE_GIB > f.limit_gib:
            after = float(self.printed["hbm_after_kv_gib"])
            raise engine_failure(log, "hbm_oom_after_compile", (
                ("/workspace/tpu_inference/tpu_inference/runner/compilation_manager.py", 1890,
                 "_precompile_structured_decoding", "self._run_compilation("),
                ("/workspace/tpu_inference/tpu_inference/runner/compilation_manager.py", 196,
                 "_run_compilation", "lowered.compile()"),
            ), hlo_oom_lines(after + PROGRAM_RESERVE_GIB, f.limit_gib))

    # ---------------------------------------------------------------- ready
    def serve(self) -> None:
        log, a = self.log, self.args
        if self.timing.engine_init_s is not None:  # absorb float drift: print the measured figure
            log.t = max(log.t, self.t_model + self.timing.engine_init_s - 0.4)
        self.engine_init_raw_s = log.t - self.t_model + 0.4
        init_s = round(self.engine_init_raw_s, 2)
        compile_s = round(self.compile_s, 2)
        self.printed.update(compile_seconds=compile_s, engine_init_seconds=init_s)
        log.eng("core.py:348", f"init engine (profile, create kv cache, warmup model) took {init_s:.2f} s "
                f"(compilation: {compile_s:.2f} s)")
        log.t += 20.0
        log.api("api_server.py:678", "Supported tasks: ['generate']")
        log.t += 6.0
        log.api("hf.py:540", "Detected the chat template content format to be 'string'. You can set "
                "`--chat-template-content-format` to override this.")
        url = f"http://{a.host}:{a.port}"
        self.printed["server_url"] = url
        log.api("api_server.py:682", f"Starting vLLM server on {url}")
        log.api("launcher.py:37", "Available routes are:")
        for route, methods in (("/openapi.json", "GET, HEAD"), ("/docs", "GET, HEAD"), ("/health", "GET"),
                               ("/metrics", "GET"), ("/tokenize", "POST"), ("/v1/models", "GET"),
                               ("/version", "GET"), ("/v1/chat/completions", "POST"),
                               ("/v1/completions", "POST"), ("/v1/responses", "POST")):
            log.api("launcher.py:46", f"Route: {route}, Methods: {methods}")
        log.api("launcher.py:99", "API server: waiting for HTTP server to start")
        log.t += 1.0
        log.raw("INFO:     Started server process [1]", API_MODULE)
        log.raw("INFO:     Waiting for application startup.", API_MODULE)
        log.raw("INFO:     Application startup complete.", API_MODULE)
        self.ready_t = log.t
        log.api("launcher.py:105", "API server: HTTP server started")

    def run(self) -> PlannedFailure | None:
        """Write the whole startup; return the failure that stopped it, if any."""
        try:
            self.api_server()
            self.engine_load()
            self.kv_cache()
            self.compile()
            self.serve()
        except PlannedFailure as failure:
            return failure
        return None
