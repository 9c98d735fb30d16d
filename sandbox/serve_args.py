"""``vllm serve`` flags for the sandbox's simulated engine (vLLM 0.29.x, tpu-inference).

:func:`parse_serve_args` reads the words after ``vllm serve`` into :class:`ServeArgs` the way
vLLM's FlexibleArgumentParser does, with vLLM's own argparse and pydantic error wording.

Defaults when a flag is unset: gpu_memory_utilization 0.92 (the ratio tpu-inference 0.26-0.29
prints when the flag is unset: corpus files 10 and 33), max_num_batched_tokens 2048,
max_num_seqs 256.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from remote.vllm_flags import is_vllm_serve_flag

DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
DEFAULT_MAX_NUM_SEQS = 256
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_ds_mla", "fp8_e4m3", "fp8_e5m2", "fp8_inc")


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
            return int(text[:-1]) * int(1024 ** ("KMGT".index(suffix) + 1))
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
            ``argument --gpu-memory-utilization: invalid float value: 'x'``, or
            ``unrecognized arguments: --max-modle-len 8192`` for a flag vLLM does not have
            (:func:`remote.vllm_flags.is_vllm_serve_flag`; vLLM's ``FlexibleArgumentParser.error``
            hands it to argparse, which prints ``vllm serve: error: ...`` and exits 2).
    """
    words = list(argv)
    if words[:2] == ["vllm", "serve"]:  # tolerate the whole container command
        words = words[2:]
    values, extra, unknown, positional = _place_words(words)
    model = positional[0] if positional else values.get("--model", "")
    if not model:
        raise ValueError("the following arguments are required: model_tag")
    if len(positional) > 1 or unknown:       # argparse's parse_args: every word it could not place
        raise ValueError(f"unrecognized arguments: {' '.join(unknown + positional[1:])}")
    max_model_len = _human_int("--max-model-len", values["--max-model-len"]) \
        if "--max-model-len" in values else None
    util = _number(values, "--gpu-memory-utilization", float)
    tp = _number(values, "--tensor-parallel-size", int)
    mnbt = _number(values, "--max-num-batched-tokens", int)
    seqs = _number(values, "--max-num-seqs", int)
    port = _number(values, "--port", int)
    kv_dtype = values.get("--kv-cache-dtype", "auto")
    if kv_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"argument --kv-cache-dtype: invalid choice: '{kv_dtype}' "
                         f"(choose from {', '.join(KV_CACHE_DTYPES)})")
    _check_ranges(util, max_model_len, tp, mnbt, seqs)
    return ServeArgs(
        model=model, served_model_name=values.get("--served-model-name"),
        max_model_len=max_model_len,
        gpu_memory_utilization=DEFAULT_GPU_MEMORY_UTILIZATION if util is None else float(util),
        tensor_parallel_size=1 if tp is None else int(tp),
        max_num_batched_tokens=None if mnbt is None else int(mnbt),
        max_num_seqs=None if seqs is None else int(seqs), kv_cache_dtype=kv_dtype,
        extra=tuple(extra), host=values.get("--host", "0.0.0.0"),
        port=8000 if port is None else int(port))


def _place_words(words: list[str]) -> tuple[dict[str, str], list[str], list[str], list[str]]:
    """Place each word of ``vllm serve``'s arguments as argparse would.

    Returns:
        ``(values, extra, unknown, positional)``: the value of each flag in ``_VALUED`` (the last
        one given wins; ``-tp`` as ``--tensor-parallel-size``), the other flags vLLM has with the
        value each took (verbatim, in order), the flags vLLM does not have (with their values),
        and the positional words.

    Raises:
        ValueError: ``argument --flag: expected one argument`` for a valued flag given none.
    """
    values: dict[str, str] = {}
    extra: list[str] = []
    unknown: list[str] = []
    positional: list[str] = []
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
        taken = [word]
        if not eq and name not in _BOOL_FLAGS and i < len(words) and not words[i].startswith("-"):
            taken.append(words[i])
            i += 1
        (extra if is_vllm_serve_flag(word) else unknown).extend(taken)
    return values, extra, unknown, positional


def _number(values: dict[str, str], flag: str, kind: type[float] | type[int]) -> float | int | None:
    """``flag``'s value in ``values`` read as ``kind``, or ``None`` when unset.

    Raises:
        ValueError: argparse's ``argument --flag: invalid float value: 'x'``.
    """
    if flag not in values:
        return None
    try:
        value: float | int = kind(values[flag])
    except ValueError:
        raise ValueError(f"argument {flag}: invalid {kind.__name__} value: '{values[flag]}'") from None
    return value


def _check_ranges(util: float | int | None, max_model_len: int | None, tp: float | int | None,
                  mnbt: float | int | None, seqs: float | int | None) -> None:
    """vLLM's pydantic checks of the figures given (``None``: unset), in its order.

    Raises:
        ValueError: pydantic's wording, e.g. ``1 validation error for CacheConfig
            gpu_memory_utilization: Input should be greater than 0 [...]``.
    """
    if util is not None:
        _positive("CacheConfig", "gpu_memory_utilization", util)
        if util > 1:
            raise ValueError("1 validation error for CacheConfig gpu_memory_utilization: Input should "
                             f"be less than or equal to 1 [type=less_than_equal, input_value={util}, "
                             "input_type=float]")
    for config, name, figure in (("ModelConfig", "max_model_len", max_model_len),
                                 ("ParallelConfig", "tensor_parallel_size", tp),
                                 ("SchedulerConfig", "max_num_batched_tokens", mnbt),
                                 ("SchedulerConfig", "max_num_seqs", seqs)):
        if figure is not None:
            _positive(config, name, figure)
