"""Simulated vLLM engine startup (tpu-inference, vLLM 0.29.x) for the sandbox.

Pure and deterministic: :func:`plan_startup` turns the words after ``vllm serve`` and a
node's accelerator type into an :class:`EnginePlan`, the exact log lines a real
``vllm/vllm-tpu`` container would print, each with its offset from container start.

Figures (per chip unless said; GiB = 2**30 bytes):

- HBM limit: v5e (``v5litepod-N``) 15.75, v6e (``v6e-N``) 31.25, v5p (``v5p-N``) 95.
- cap = limit x gpu_memory_utilization (default 0.92, the ratio tpu-inference 0.26-0.29
  prints when the flag is unset: corpus files 10 and 33).
- weights = params x 2 bytes / tensor_parallel_size.
- activation headroom = max_num_batched_tokens x hidden_size x 2 bytes x 4 / tp.
- KV bytes per token = 2 (K and V) x layers x ceil(kv_heads / tp) x head_dim x 2 bytes.
- KV tokens = floor((cap - weights - headroom) / (bytes per token x block)) x block.
- max concurrency = KV tokens / max_model_len.

Known failures, all in the real failure envelopes: max_model_len above the model's
max_position_embeddings (APIServer pydantic error, ``config_error``); a tensor-parallel
size that does not divide the host's chips (mesh ValueError, ``config_error``); weights
above the HBM limit (``hbm_oom_load``); weights above the cap, or no room left for one KV
block (``hbm_budget_exceeded``);
one max-length request not fitting (V1 ValueError, ``max_model_len_too_large``); and
cap + compiled programs (``PROGRAM_RESERVE_GIB``) above the limit, i.e. 0.95 on a v5e,
which fails only after every compile step (``hbm_oom_after_compile``).

Time: the log describes a real-looking boot (timestamps and printed seconds in "log
seconds", about 10 minutes for an 8B model); offsets are log seconds divided by
``EnginePlan.time_scale`` = (log seconds of the full boot) / ``boot_s``, so a ready
boot prints ``Application startup complete.`` at exactly ``boot_s`` (Qwen3-8B on v6e-1 logs
a 480 s boot, so x24 at the default 20 s). A failing boot keeps the scale of its full boot, so it fails
at the same point a real one would.
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from remote.models import chip_generation, chips_of

GIB = 1024**3
VLLM_VERSION = "0.29.1rc1.dev468+g0b7f11a1e"
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
DEFAULT_MAX_NUM_SEQS = 256
#: Per-chip HBM limit in GiB as tpu-inference prints it, by chip generation.
HBM_LIMIT_GIB = {"v5e": 15.75, "v6e": 31.25, "v5p": 95.0}
#: KV cache block (page) size in tokens, by chip generation.
BLOCK_SIZE_TOKENS = {"v5e": 32, "v6e": 64, "v5p": 64}
#: HBM the compiled programs need beyond the cap (0.84 GiB: the ~836 MB seen failing at 0.95 on v5e).
PROGRAM_RESERVE_GIB = 0.84
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_ds_mla", "fp8_e4m3", "fp8_e5m2", "fp8_inc")
_LOG_EPOCH = datetime(2026, 9, 30, 3, 50, 0)
_API = "APIServer pid=1"


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a served model: ``params_b`` in billions, ``max_position`` in tokens."""

    name: str
    params_b: float
    layers: int
    kv_heads: int
    head_dim: int
    max_position: int
    hidden_size: int
    architecture: str


MODELS: dict[str, ModelSpec] = {m.name.lower(): m for m in (
    ModelSpec("Qwen/Qwen3-0.6B", 0.6, 28, 8, 128, 40960, 1024, "Qwen3ForCausalLM"),
    ModelSpec("Qwen/Qwen3-8B", 8.2, 36, 8, 128, 40960, 4096, "Qwen3ForCausalLM"),
    ModelSpec("Qwen/Qwen3-32B", 32.8, 64, 8, 128, 40960, 5120, "Qwen3ForCausalLM"),
    ModelSpec("meta-llama/Llama-3.1-8B-Instruct", 8.03, 32, 8, 128, 131072, 4096, "LlamaForCausalLM"),
    ModelSpec("meta-llama/Llama-3.1-70B-Instruct", 70.6, 80, 8, 128, 131072, 8192, "LlamaForCausalLM"),
    ModelSpec("google/gemma-3-4b-it", 4.3, 34, 4, 256, 131072, 2560, "Gemma3ForConditionalGeneration"),
    ModelSpec("google/gemma-3-27b-it", 27.4, 62, 16, 128, 131072, 5376, "Gemma3ForConditionalGeneration"),
)}


def model_spec(model: str) -> ModelSpec:
    """The table entry for ``model`` (HF id, case-insensitive, or a path ending in its name).

    Unknown models get an 8B Llama-like default (32 layers, 8 KV heads of 128, 32,768 positions).
    """
    key = model.lower().rstrip("/")
    if key in MODELS:
        return MODELS[key]
    base = key.rsplit("/", 1)[-1]
    for spec in MODELS.values():
        if spec.name.lower().rsplit("/", 1)[-1] == base:
            return spec
    return ModelSpec(model, 8.0, 32, 8, 128, 32768, 4096, "LlamaForCausalLM")


# --------------------------------------------------------------------------- serve args
@dataclass(frozen=True)
class ServeArgs:
    """The flags of ``vllm serve MODEL ...`` that shape a startup.

    Attributes:
        model: HF id or path (the positional ``model_tag`` or ``--model``).
        served_model_name: first ``--served-model-name``, or None.
        max_model_len: tokens, None when unset (the model's max positions then apply).
        gpu_memory_utilization: fraction of HBM for weights + KV (default 0.92, see module doc).
        tensor_parallel_size: chips per engine.
        max_num_batched_tokens / max_num_seqs: None when unset (2048 / 256 apply).
        kv_cache_dtype: one of ``KV_CACHE_DTYPES``.
        extra: every other word, verbatim and in order (e.g. ``--enable-auto-tool-choice``).
        host / port: the API server's bind address.
    """

    model: str
    served_model_name: str | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    tensor_parallel_size: int = 1
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    kv_cache_dtype: str = "auto"
    extra: tuple[str, ...] = ()
    host: str = "0.0.0.0"
    port: int = 8000


_VALUED = {"--model", "--served-model-name", "--max-model-len", "--gpu-memory-utilization",
           "--tensor-parallel-size", "-tp", "--max-num-batched-tokens", "--max-num-seqs",
           "--kv-cache-dtype", "--host", "--port"}
#: Extra flags known to take no value (others take the next word unless it starts with ``-``).
_BOOL_FLAGS = {"--enable-auto-tool-choice", "--enable-prefix-caching", "--no-enable-prefix-caching",
               "--trust-remote-code", "--enforce-eager", "--disable-log-requests",
               "--enable-log-requests", "--disable-log-stats", "--enable-chunked-prefill",
               "--no-enable-chunked-prefill", "--async-scheduling", "--disable-chunked-mm-input",
               "--skip-tokenizer-init", "--disable-frontend-multiprocessing", "--enable-reasoning"}


def _human_int(flag: str, text: str) -> int:
    """vLLM's ``human_readable_int``: ``32768``, ``32k`` (x1000) or ``32K`` (x1024)."""
    suffix = text[-1:]
    try:
        if suffix and suffix in "kmgt":
            return int(float(text[:-1]) * 1000 ** ("kmgt".index(suffix) + 1))
        if suffix and suffix in "KMGT":
            return int(text[:-1]) * 1024 ** ("KMGT".index(suffix) + 1)
        return int(text)
    except ValueError:
        raise ValueError(f"argument {flag}: invalid human_readable_int value: '{text}'") from None


def _positive(config: str, name: str, value: float) -> None:
    if value <= 0:
        raise ValueError(f"1 validation error for {config} {name}: Input should be greater than 0 "
                         f"[type=greater_than, input_value={value}, input_type={type(value).__name__}]")


def parse_serve_args(argv: Sequence[str]) -> ServeArgs:
    """Parse the words after ``vllm serve`` like vLLM's FlexibleArgumentParser.

    Accepts ``--flag value``, ``--flag=value``, underscores in flag names, and a leading
    ``vllm serve``.

    Raises:
        ValueError: with vLLM's argparse or pydantic wording, e.g.
            ``argument --gpu-memory-utilization: invalid float value: 'x'``.
    """
    values: dict[str, str] = {}
    extra: list[str] = []
    positional: list[str] = []
    words = list(argv)
    if words[:2] == ["vllm", "serve"]:  # tolerate the whole container command
        words = words[2:]
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word == "-":
            positional.append(word)
            continue
        name, eq, inline = word.partition("=")
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        if name in _VALUED:
            if eq:
                value = inline
            elif i < len(words) and not (words[i].startswith("--") and len(words[i]) > 2):
                value = words[i]
                i += 1
            else:
                raise ValueError(f"argument {name}: expected one argument")
            if name == "--served-model-name":  # nargs="+": keep the first name
                while i < len(words) and not words[i].startswith("-"):
                    i += 1
            values["--tensor-parallel-size" if name == "-tp" else name] = value
            continue
        extra.append(word)
        if not eq and name not in _BOOL_FLAGS and i < len(words) and not words[i].startswith("-"):
            extra.append(words[i])
            i += 1
    model = positional[0] if positional else values.get("--model", "")
    if not model:
        raise ValueError("the following arguments are required: model_tag")
    if len(positional) > 1:
        raise ValueError(f"unrecognized arguments: {' '.join(positional[1:])}")

    def number(flag: str, kind: type) -> float | int | None:
        if flag not in values:
            return None
        try:
            return kind(values[flag])
        except ValueError:
            raise ValueError(f"argument {flag}: invalid {kind.__name__} value: '{values[flag]}'") from None

    max_model_len = _human_int("--max-model-len", values["--max-model-len"]) \
        if "--max-model-len" in values else None
    util = number("--gpu-memory-utilization", float)
    tp = number("--tensor-parallel-size", int)
    mnbt = number("--max-num-batched-tokens", int)
    seqs = number("--max-num-seqs", int)
    port = number("--port", int)
    kv_dtype = values.get("--kv-cache-dtype", "auto")
    if kv_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"argument --kv-cache-dtype: invalid choice: '{kv_dtype}' "
                         f"(choose from {', '.join(KV_CACHE_DTYPES)})")
    if util is not None:
        _positive("CacheConfig", "gpu_memory_utilization", util)
        if util > 1:
            raise ValueError("1 validation error for CacheConfig gpu_memory_utilization: Input should "
                             f"be less than or equal to 1 [type=less_than_equal, input_value={util}, "
                             "input_type=float]")
    for config, name, value in (("ModelConfig", "max_model_len", max_model_len),
                                ("ParallelConfig", "tensor_parallel_size", tp),
                                ("SchedulerConfig", "max_num_batched_tokens", mnbt),
                                ("SchedulerConfig", "max_num_seqs", seqs)):
        if value is not None:
            _positive(config, name, value)
    return ServeArgs(
        model=model, served_model_name=values.get("--served-model-name"),
        max_model_len=max_model_len,
        gpu_memory_utilization=DEFAULT_GPU_MEMORY_UTILIZATION if util is None else float(util),
        tensor_parallel_size=1 if tp is None else int(tp),
        max_num_batched_tokens=None if mnbt is None else int(mnbt),
        max_num_seqs=None if seqs is None else int(seqs), kv_cache_dtype=kv_dtype,
        extra=tuple(extra), host=values.get("--host", "0.0.0.0"),
        port=8000 if port is None else int(port))


# --------------------------------------------------------------------------- plan
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

    def text(self) -> str:
        """All lines joined with ``\\n`` (and a final newline), as ``docker logs`` prints them."""
        return "".join(line + "\n" for _, line in self.lines)


@dataclass(frozen=True)
class _Figures:
    """Per-chip memory arithmetic of one launch (see the module docstring)."""

    spec: ModelSpec
    generation: str
    host_chips: int
    limit_gib: float
    block: int
    tp: int
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    weights_gib: float
    cap_gib: float
    headroom_gib: float
    kv_bytes_per_token: int

    @property
    def pool_gib(self) -> float:
        return self.cap_gib - self.weights_gib - self.headroom_gib

    @property
    def kv_tokens(self) -> int:
        blocks = math.floor(self.pool_gib * GIB / (self.kv_bytes_per_token * self.block))
        return max(0, blocks) * self.block


def _figures(args: ServeArgs, accelerator_type: str) -> _Figures:
    generation = chip_generation(accelerator_type) or ""
    node_chips = chips_of(accelerator_type)
    if generation not in HBM_LIMIT_GIB or not node_chips:
        raise ValueError(f"unknown accelerator type {accelerator_type!r}: expected v5litepod-N, "
                         "v5e-N, v6e-N or v5p-N")
    host_chips = min(node_chips, 4) if generation == "v5p" or node_chips > 8 else node_chips
    spec = model_spec(args.model)
    tp = args.tensor_parallel_size
    limit = HBM_LIMIT_GIB[generation]
    mnbt = args.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
    return _Figures(
        spec=spec, generation=generation, host_chips=host_chips, limit_gib=limit,
        block=BLOCK_SIZE_TOKENS[generation], tp=tp,
        max_model_len=args.max_model_len or spec.max_position, max_num_batched_tokens=mnbt,
        max_num_seqs=args.max_num_seqs or DEFAULT_MAX_NUM_SEQS,
        weights_gib=spec.params_b * 1e9 * 2 / tp / GIB, cap_gib=limit * args.gpu_memory_utilization,
        headroom_gib=mnbt * spec.hidden_size * 2 * 4 / tp / GIB,
        kv_bytes_per_token=2 * spec.layers * math.ceil(spec.kv_heads / tp) * spec.head_dim * 2)


class _Log:
    """Accumulates timestamped lines in log seconds."""

    def __init__(self, engine_pid: int) -> None:
        self.t = 0.0
        self.lines: list[tuple[float, str]] = []
        self.engine = f"EngineCore pid={engine_pid}"

    def raw(self, text: str, proc: str | None = None) -> None:
        self.lines.append((self.t, f"({proc}) {text}" if proc else text))

    def log(self, proc: str | None, src: str, msg: str, level: str = "INFO") -> None:
        stamp = (_LOG_EPOCH + timedelta(seconds=self.t)).strftime("%m-%d %H:%M:%S")
        self.raw(f"{level} {stamp} [{src}] {msg}", proc)

    def api(self, src: str, msg: str, level: str = "INFO") -> None:
        self.log(_API, src, msg, level)

    def eng(self, src: str, msg: str, level: str = "INFO") -> None:
        self.log(self.engine, src, msg, level)


class _Failure(Exception):
    """Raised inside the builder once a failure's lines are written."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def _hbm(used: float, limit: float, n: int) -> str:
    return "[" + ", ".join([f"({round(used, 2)!r}, {round(limit, 2)!r})"] * n) + "]"


def _paddings(start: int, limit: int) -> list[int]:
    """Powers of two from ``start`` up to the first one >= ``limit`` (tpu-inference paddings)."""
    out = [start]
    while out[-1] < limit:
        out.append(out[-1] * 2)
    return out


_ENGINE_FRAMES = (
    ("/workspace/vllm/vllm/v1/engine/core.py", 1396, "run_engine_core",
     "engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)"),
    ("/workspace/vllm/vllm/v1/engine/core.py", 1155, "__init__", "super().__init__("),
)
_API_FRAMES = (
    ("/usr/local/bin/vllm", 10, "<module>", "sys.exit(main())"),
    ("/workspace/vllm/vllm/entrypoints/cli/main.py", 73, "main", "args.dispatch_function(args)"),
    ("/workspace/vllm/vllm/entrypoints/cli/serve.py", 111, "cmd", "uvloop.run(run_server(args))"),
)


def _api_traceback(log: _Log, frames: Sequence[tuple[str, int, str, str]], error: Sequence[str]) -> None:
    log.raw("Traceback (most recent call last):", _API)
    for path, number, func, code in frames:
        log.raw(f'  File "{path}", line {number}, in {func}', _API)
        log.raw(f"    {code}", _API)
    for line in error:
        log.raw(line, _API)


def _engine_failure(log: _Log, kind: str, frames: Sequence[tuple[str, int, str, str]],
                    error: Sequence[str]) -> _Failure:
    """Write the EngineCore failure envelope around ``error`` (the root-cause lines)."""
    src = "core.py:1434"
    log.eng(src, "EngineCore failed to start.", "ERROR")
    log.eng(src, "Traceback (most recent call last):", "ERROR")
    for path, number, func, code in (*_ENGINE_FRAMES, *frames):
        log.eng(src, f'  File "{path}", line {number}, in {func}', "ERROR")
        log.eng(src, f"    {code}", "ERROR")
    for line in error:
        log.eng(src, line, "ERROR")
    log.raw("Process EngineCore:", log.engine)
    log.raw("Traceback (most recent call last):", log.engine)
    path, number, func, code = frames[-1]
    log.raw(f'  File "{path}", line {number}, in {func}', log.engine)
    for line in error:
        log.raw(line, log.engine)
    log.t += 2.0
    _api_traceback(log, (*_API_FRAMES, ("/workspace/vllm/vllm/v1/engine/utils.py", 1065,
                                        "wait_for_engine_startup", "raise RuntimeError(")),
                   ["RuntimeError: Engine core initialization failed. See root cause above. "
                    "Failed core proc(s): {}"])
    return _Failure(kind, error[0].split(": ", 1)[-1])


def _hlo_oom(required_gib: float, limit_gib: float) -> list[str]:
    return ["jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total "
            f"memory required for HLO temporaries ({required_gib:.2f}G) exceeds available HBM "
            f"({limit_gib:.2f}G).",
            "--------------------",
            "For simplicity, JAX has removed its internal frames from the traceback of the following "
            "exception. Set JAX_TRACEBACK_FILTERING=off to include these."]


class _Builder:
    """Writes one startup into a :class:`_Log`; raises :class:`_Failure` where it fails."""

    def __init__(self, args: ServeArgs, accelerator_type: str, fig: _Figures, fail: bool) -> None:
        seed = zlib.crc32(f"{args!r}|{accelerator_type}".encode())
        self.rng = random.Random(seed)
        self.args, self.accel, self.fig, self.fail = args, accelerator_type, fig, fail
        self.log = _Log(engine_pid=100 + seed % 400)
        self.printed: dict[str, float | int | str] = {}
        self.compile_s = 0.0
        self.steps = 0

    def secs(self, base: float) -> float:
        return round(base * self.rng.uniform(0.92, 1.08), 2)

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
                    f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {VLLM_VERSION}",
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
        _api_traceback(self.log, (*_API_FRAMES, (
            "/workspace/vllm/vllm/engine/arg_utils.py", 1469, "create_model_config", "return ModelConfig(")),
            ["pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
             f"  Value error, {message} [type=value_error, input_value=ArgsKwargs((), "
             f"{{'model': '{self.args.model}', ...}}), input_type=ArgsKwargs]",
             "    For further information visit https://errors.pydantic.dev/2.12/v/value_error"])
        raise _Failure("config_error", message)

    # ---------------------------------------------------------------- engine core: load
    def engine_load(self) -> None:
        log, a, f = self.log, self.args, self.fig
        log.t += 40.0
        log.eng("core.py:121", f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: "
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
            raise _engine_failure(log, "config_error", (
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
        log.eng("utils.py:211", f"Prepared token paddings: {_paddings(16, f.max_num_batched_tokens)}")
        log.eng("utils.py:157", f"Prepared request paddings: {_paddings(8, f.max_num_seqs)}")
        log.eng("compilation_manager.py:66", "Enabling JAX compile cache.")
        log.eng("tpu_worker.py:472", f"Init worker | rank=0 | is_first_rank=True | is_last_rank=True | "
                f"topology_order_id=0 | is_driver_worker=True | hbm={_hbm(0.0, f.limit_gib, f.tp)}GiB "
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
                raise _engine_failure(log, "hbm_oom_load", (
                    ("/workspace/tpu_inference/tpu_inference/runner/tpu_runner.py", 1174, "load_model",
                     "model = get_model("),
                    ("/workspace/tpu_inference/tpu_inference/models/common/model_loader.py", 305,
                     "_get_nnx_model", "jit_model = create_jit_model("),
                ), _hlo_oom(f.weights_gib + 0.5, f.limit_gib))
            elapsed, left = per_shard * done, per_shard * (shards - done)
            log.raw(f"Loading safetensors checkpoint shards: {100 * done // shards:3d}% Completed | "
                    f"{done}/{shards} [{_mmss(elapsed)}<{_mmss(left)}, {per_shard:.2f}s/it]", log.engine)
        log.raw(f"Loading safetensors checkpoint shards: 100% Completed | {shards}/{shards} "
                f"[{_mmss(per_shard * shards)}<00:00, {per_shard:.2f}s/it]", log.engine)
        log.raw("", log.engine)
        log.eng("default_loader.py:430", f"Loading weights took {per_shard * shards + 0.03:.2f} seconds")
        log.t += 2.0
        log.eng("tpu_runner.py:1298", "Cleared JIT caches after weight loading")
        weights = round(f.weights_gib, 2)
        self.printed["weights_gib"] = weights
        self.t_model = log.t
        log.eng("tpu_runner.py:1300", f"Init model | hbm={_hbm(weights, f.limit_gib, f.tp)}GiB")

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
            raise _engine_failure(log, "hbm_budget_exceeded", (*frames[:1], (
                "/workspace/tpu_inference/tpu_inference/worker/tpu_worker.py", 561, "determine_available_memory",
                "raise ValueError(")), [f"ValueError: total_hbm_used_gb={used * f.tp:.2f}GiB exceeds "
                                       f"total_hbm_limit_cap_gb={cap * f.tp:.2f}GiB by "
                                       f"{(used - cap) * f.tp:.2f}GiB"])
        if self.fail and f.kv_tokens == 0:
            raise _engine_failure(log, "hbm_budget_exceeded", frames, [
                "ValueError: No available memory for the cache blocks. Try increasing "
                "`gpu_memory_utilization` when initializing the engine."])
        if self.fail and f.max_model_len > f.kv_tokens:
            needed = math.ceil(f.max_model_len / f.block) * f.block * f.kv_bytes_per_token / GIB
            raise _engine_failure(log, "max_model_len_too_large", frames, [
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
        after = round(f.weights_gib + f.kv_tokens * f.kv_bytes_per_token / GIB, 2)
        self.printed["hbm_after_kv_gib"] = after
        log.eng("kv_cache_manager.py:963", f"Hybrid KV cache layout: num_kv_cache_groups=1, "
                f"num_kv_cache_tensors={spec.layers}, kv_cache_config.num_blocks={blocks}, "
                "duplicate_shared_layers=False")
        log.eng("kv_cache_manager.py:991", f"Init kv-cache | num_total_layers={spec.layers} | num_blocks="
                f"{[blocks] * spec.layers} | regular_attn_layers={spec.layers} | regular_attn_shape="
                f"(num_blocks, ({f.block}, {spec.kv_heads}, 2, {spec.head_dim})) | regular_attn_sharding="
                f"NamedSharding(mesh=Mesh('data': 1, 'model': {f.tp}, axis_types=(Auto, Auto)), "
                "spec=P('data', None, 'model'), memory_kind=device) | regular_attn_dtype=bfloat16 | "
                f"hbm={_hbm(after, f.limit_gib, f.tp)}Gb")

    # ---------------------------------------------------------------- compilation
    def step(self, name: str, key: dict[str, object], base_s: float) -> None:
        log = self.log
        log.eng("compilation_manager.py:149", f"Precompile {name} --> {key!r}")
        secs = self.secs(base_s)
        log.t += secs + 0.01
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
        tokens, reqs = _paddings(16, f.max_num_batched_tokens), _paddings(8, f.max_num_seqs)
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
        self.warmup(sum(self.secs(0.55 * layers * (1 + math.log2(n / 16) / 8)) for n in tokens), len(tokens))
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
        self.warmup(0.0, len(reqs))
        if self.fail and f.cap_gib + PROGRAM_RESERVE_GIB > f.limit_gib:
            after = float(self.printed["hbm_after_kv_gib"])
            raise _engine_failure(log, "hbm_oom_after_compile", (
                ("/workspace/tpu_inference/tpu_inference/runner/compilation_manager.py", 1890,
                 "_precompile_structured_decoding", "self._run_compilation("),
                ("/workspace/tpu_inference/tpu_inference/runner/compilation_manager.py", 196,
                 "_run_compilation", "lowered.compile()"),
            ), _hlo_oom(after + PROGRAM_RESERVE_GIB + f.headroom_gib, f.limit_gib))

    # ---------------------------------------------------------------- ready
    def serve(self) -> None:
        log, a = self.log, self.args
        init_s = round(log.t - self.t_model + 0.4, 2)
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
        log.raw("INFO:     Started server process [1]", _API)
        log.raw("INFO:     Waiting for application startup.", _API)
        log.raw("INFO:     Application startup complete.", _API)
        self.ready_t = log.t
        log.api("launcher.py:105", "API server: HTTP server started")

    def run(self) -> _Failure | None:
        """Write the whole startup; return the failure that stopped it, if any."""
        try:
            self.api_server()
            self.engine_load()
            self.kv_cache()
            self.compile()
            self.serve()
        except _Failure as failure:
            return failure
        return None


def _mmss(seconds: float) -> str:
    whole = int(round(seconds))
    return f"{whole // 60:02d}:{whole % 60:02d}"


def plan_startup(serve_argv: Sequence[str], accelerator_type: str, *, boot_s: float = 20.0) -> EnginePlan:
    """Plan the startup log of ``vllm serve <serve_argv>`` on a node of ``accelerator_type``.

    Args:
        serve_argv: the words after ``vllm serve`` (model first, or ``--model``).
        accelerator_type: ``v5litepod-N``, ``v5e-N``, ``v6e-N`` or ``v5p-N``.
        boot_s: wall seconds from container start to ``Application startup complete.`` for a
            boot that succeeds; a failing boot fails where its full boot would have.

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
    fig = _figures(args, accelerator_type)
    full = _Builder(args, accelerator_type, fig, fail=False)
    full.run()
    scale = full.ready_t / boot_s
    builder = _Builder(args, accelerator_type, fig, fail=True)
    failure = builder.run()
    lines = tuple((round(t / scale, 6), text) for t, text in builder.log.lines)
    printed = builder.printed
    common = dict(
        lines=lines, max_model_len=fig.max_model_len, hbm_limit_gib=fig.limit_gib, chips=fig.tp,
        model=args.model, served_model_name=args.served_model_name or args.model,
        node_chips=chips_of(accelerator_type) or 1, time_scale=scale,
        kv_cache_tokens=printed.get("kv_cache_tokens"), max_concurrency=printed.get("max_concurrency"),
        weights_gib=printed.get("weights_gib"), hbm_after_kv_gib=printed.get("hbm_after_kv_gib"),
        compile_steps=builder.steps, compile_seconds=printed.get("compile_seconds"),
        engine_init_seconds=printed.get("engine_init_seconds"))
    if failure is None:
        return EnginePlan(outcome="ready", ready_at_s=round(builder.ready_t / scale, 6), exit_at_s=None,
                          exit_code=None, server_url=str(printed["server_url"]), **common)
    return EnginePlan(outcome="failed", ready_at_s=None, exit_at_s=round((builder.log.t + 2.0) / scale, 6),
                      exit_code=1, failure_kind=failure.kind, failure_message=failure.message, **common)
