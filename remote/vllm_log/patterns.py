"""Line formats of vLLM / tpu-inference startup logs: precompiled regexes and small parsers.

Every pattern names the vLLM era that prints it (see the corpus ``INDEX.md``
ids: E* envelopes, H* HBM, K* KV cache, C* compilation). The reader never runs
these on every line: it dispatches on the first four characters of a line's
message (``HEAD_*``) and only then matches.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

#: Longest line kept, bytes (UTF-8); the rest of a longer line is dropped.
MAX_LINE_CHARS = 65536
#: Longest text kept from a line in the state (evidence, shapes), characters.
MAX_KEPT_CHARS = 500

DIGITS = "0123456789"
BANNER_GLYPHS = "█▄▀"

#: ANSI escape sequences (CSI and OSC), e.g. uvicorn's coloured ``INFO``; never spans lines.
ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)|[@-Z\\-_])")
ANSI_BYTES = re.compile(ANSI.pattern.encode())




def overlay_cr(text: str) -> str:
    """A line as a terminal shows it: trailing CRs (CRLF, CR CR LF) dropped, and each inner CR
    returning to column 0 so the text after it overwrites what was there (tqdm's redraws:
    ``"  0%\r 50%\r100%"`` shows ``"100%"``; a shorter redraw leaves the old tail visible).

    >>> overlay_cr("(EngineCore pid=1) \rLoading shards: 100%")
    'Loading shards: 100%'
    """
    text = text.rstrip("\r")
    if "\r" not in text:
        return text
    first, *redraws = text.split("\r")
    shown = first
    for redraw in redraws:
        shown = redraw + shown[len(redraw):]
    return shown


def overlay_cr_bytes(line: bytes) -> bytes:
    """:func:`overlay_cr` on raw bytes, by characters (a redraw never splits a UTF-8 sequence)."""
    line = line.rstrip(b"\r")
    if b"\r" not in line:
        return line
    return overlay_cr(line.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")

#: ``docker logs --timestamps`` prefix: RFC 3339 with nanoseconds, then one space.
DOCKER_TS = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:[.,](\d+))?(Z|[+-]\d\d:?\d\d)? ")

#: E1/E2 time: ``LEVEL MM-DD HH:MM:SS`` (no year; vLLM logs the container's local time, UTC).
VLLM_TS = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")

#: E4 process prefix ``(EngineCore_DP0 pid=12) `` / ``(RayWorkerWrapper pid=3, ip=10.0.0.2) ``.
PROC_PREFIX = re.compile(r"\(([^()]{1,60}?) pid=\d+(?:, ip=[\d.:a-f]+)?\) ?")

# ---- HBM (tpu-inference) -------------------------------------------------------------
#: One ``(used, limit)`` tuple of an ``hbm=[...]`` list (H1-H4, H6).
HBM_TUPLE = re.compile(r"\(\s*([\d.]+)\s*,\s*([\d.]+)\s*\)")
#: ``Memory statistics | total_hbm_limit_gb=30.75GiB | ...`` fields (H5).
MEMSTAT_FIELD = re.compile(r"(\w+)=(-?[\d.]+)\s*GiB")
#: H4a ``Init kv-cache | shape=32 * (3168, 256, 16, 128)`` (tpu_commons 2025-07).
KV_SHAPE = re.compile(r"shape=(\d+ \* \([\d, ]+\))")
#: ``TPU info: node_name=... | tpu_type=v6e-1 | worker_id=0 | num_chips=1 | ...``.
TPU_INFO_TYPE = re.compile(r"tpu_type=([\w-]+)")
TPU_INFO_CHIPS = re.compile(r"num_chips=(\d+)")

# ---- KV cache ------------------------------------------------------------------------
#: K2/K4/K5 ``GPU KV cache size: 1,151,744 tokens`` (label is the platform on 0.29+).
KV_SIZE = re.compile(r"^(\w+) KV cache size: ([\d,]+) tokens")
#: K3 ``Maximum concurrency for 32,768 tokens per request: 35.15x``.
CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d,.]+)\s*x")
#: K1 ``# GPU blocks: 1478, # CPU blocks: 2048`` (V0/early V1; V0 TPU says ``TPU``).
BLOCKS = re.compile(r"^# (\w+) blocks: (\d+)(?:, # CPU blocks: (\d+))?")
#: K6 ``Overriding num_gpu_blocks=38 with num_gpu_blocks_override=64`` (0.29).
BLOCKS_OVERRIDE = re.compile(r"num_gpu_blocks=(\d+) with num_gpu_blocks_override=(\d+)")

# ---- compilation ---------------------------------------------------------------------
#: C1/C2/C4 group header ``Compiling <what> with different input shapes``.
COMPILING_GROUP = re.compile(r"^Compiling (?:the )?(.+?) with different input shapes")
#: Finish line: C4 ``Compilation of <name> --> {..} finished in N [secs].``; C3 anonymous
#: ``Compilation finished in N [secs].``; C2 total ``Compilation finished in in N [secs].``
FINISHED_IN = re.compile(r" finished in (in )?([\d.]+) \[secs\]")
#: C2 torch_xla V1 ``-- num_tokens: 16`` / ``-- num_tokens: 16, num_seqs: 8``; C1 V0
#: ``batch_size: 8, seq_len: 16``.
XLA_STEP = re.compile(r"^(?:-- )?((?:num_tokens|batch_size): .*)$")
#: C1 V0 ``Compilation for prefill done in 12.3 s.``
XLA_GROUP_DONE = re.compile(r"^Compilation for \w+ done in ([\d.]+) s")
#: C4 ``Warm-up call pass finished in 194.87 [secs] over 9 tasks.``
WARMUP_PASS = re.compile(r"finished in ([\d.]+) \[secs\]")
#: C6 GPU ``torch.compile takes 54.73 s in total``.
TORCH_COMPILE_TOTAL = re.compile(r"^torch\.compile takes ([\d.]+) s in total")
#: C5 (V0) ``... took 46.05 seconds``; C5' (V1 0.26+) ``... took 457.25 s (compilation: 402.27 s)``.
INIT_ENGINE = re.compile(
    r"^init engine \(.*?\) took ([\d.]+) (?:s|secs|seconds)\b(?:\s*\(compilation: ([\d.]+) s\))?")

# ---- readiness, identity -------------------------------------------------------------
#: ``Starting vLLM API server on http://H:P`` (V0) / ``Starting vLLM server on ...`` (0.26).
SERVER_URL = re.compile(r"(?:server|running) on (https?://[^\s,)]+)")
READY_UVICORN = re.compile(r"^INFO:\s+Application startup complete\.\s*$")
RUNNING_UVICORN = re.compile(r"^INFO:\s+Uvicorn running on (https?://\S+)")
VERSION = re.compile(r"\bversion (v?\d+\.\d+[\w.+-]*)")
ENGINE_VERSION = re.compile(r"LLM engine \(v(\d+\.\d+[\w.+-]*)\)")
ENGINE_MODEL = re.compile(r"\bmodel='([^']+)'")
BANNER_MODEL = re.compile(r"\bmodel\s+(\S+)\s*$")
PLATFORM = re.compile(r"^Automatically detected platform (\w+)")
GPU_UTIL = re.compile(r"gpu[_-]memory[_-]utilization['\"]?\s*[:=]?\s*(0?\.\d+|1(?:\.0+)?)\b")
MAX_MODEL_LEN_ARG = re.compile(r"max[_-]model[_-]len['\"]?\s*[:=]?\s*(\d+)")
USING_MAX_MODEL_LEN = re.compile(r"^Using max model len (\d+)")
WEIGHTS_GB = re.compile(r"^Loading model weights took ([\d.]+) GB")
GRAPH_CAPTURE = re.compile(r"^Graph capturing finished in ([\d.]+) secs?, took ([\d.]+) GiB")
#: ``docker ps`` row ``vllm-gemma4-qwix\tExited (1) 8 seconds ago``.
CONTAINER_EXIT = re.compile(r"^(?:(\S+)\s+)?(Exited \((-?\d+)\))")

# ---- failures ------------------------------------------------------------------------
#: A Python exception line: ``jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: ...``.
EXCEPTION_LINE = re.compile(
    r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt))(?::\s?(.*))?$")
#: An exception line whose type does not end in Error/Exception (read only inside a traceback):
#: ``triton.runtime.errors.OutOfResources: out of resource: ...``, ``torch._dynamo.exc.Unsupported: ...``.
EXCEPTION_LINE_TB = re.compile(
    r"^((?:[A-Za-z_]\w*\.)+[A-Z]\w*|[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+):\s(.+)$")
#: pydantic's header of a config ``ValidationError`` (vLLM 0.10+ builds ``ModelConfig`` and the other
#: configs as pydantic dataclasses): ``pydantic_core._pydantic_core.ValidationError: 1 validation
#: error for ModelConfig``; the reason follows on the next lines (``  Value error, ...``).
PYDANTIC_HEADER = re.compile(r"\b\d+ validation errors? for \w+")
#: vLLM ``ModelConfig`` (``_get_and_verify_max_len``, v0.4 - v0.29; inside the pydantic block from
#: 0.10): ``User-specified max_model_len (200000) is greater than the derived max_model_len
#: (max_position_embeddings=131072 or model_max_length=None in model's config.json).`` The key
#: may be ``None=4096`` (old) and the value a float (``32768.0``).
DERIVED_MAX_LEN = re.compile(
    r"User-specified max_model_len \(([\d,]+)\) is greater than the derived max_model_len \(\s*"
    r"(?:(\w+)=)?([\d.]+)")
FRAME_FUNC = re.compile(r'^File ".*", line \d+, in (\S+)')
#: KF2 (V1): ``... max seq len (131072), (16.00 GiB KV cache is needed, ... available KV
#: cache memory (0.71 GiB). ... the estimated maximum model length is 5632.``
KF2 = re.compile(
    r"max seq len \(([\d,]+)\).*?\(([\d.]+) GiB KV cache is needed.*?"
    r"available KV cache memory \(([\d.]+) GiB\)")
KF2_ESTIMATE = re.compile(r"estimated maximum model length is ([\d,]+)")
#: KF1 (V0): ``The model's max seq len (29000) is larger than the maximum number of tokens
#: that can be stored in KV cache (23648).``
KF1 = re.compile(r"max seq len \(([\d,]+)\) is larger than the maximum number of tokens "
                 r"that can be stored in KV cache \(([\d,]+)\)")
#: Request-time (HTTP 400): ``This model's maximum context length is 8192 tokens. However,
#: you requested 8203 tokens (7691 in the messages, 512 in the completion).``
CONTEXT_LENGTH = re.compile(
    r"maximum context length is ([\d,]+) tokens.*?(?:you requested|your request has) ([\d,]+)"
    r"(?: input)? tokens(?: \(([\d,]+) in the messages, ([\d,]+) in the completion\))?")
#: tpu-inference ``determine_available_memory``: ``total_hbm_used_gb=X GiB exceeds
#: total_hbm_limit_cap_gb=Y GiB by Z GiB. ... --gpu-memory-utilization from U to ...``
HBM_BUDGET = re.compile(
    r"total_hbm_used_gb=([\d.]+)GiB exceeds total_hbm_limit_cap_gb=([\d.]+)GiB by "
    r"(-?[\d.]+)GiB(?:.*?from ([\d.]+) to)?")
#: Allocation failure figures, what was needed and what was free: XLA ``HLO temporaries
#: (16.23G) exceeds available HBM (15.75G)`` (corpus 12), ``Used 49.34G of 32.00G hbm``, libtpu
#: ``Attempting to allocate 128.00M ... There are 69.02M free`` (E0100, corpus 33; E0101 says
#: ``reserve``), PyTorch ``Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 23.65 GiB of
#: which 3.06 MiB is free`` (torch 2.1+).
OOM_REQUIRED = re.compile(
    r"(?:required for HLO temporaries|Used|Attempting to (?:allocate|reserve)|Tried to allocate) "
    r"\(?([\d.]+) ?([KMGT])")
OOM_AVAILABLE = re.compile(
    r"(?:available HBM \(|of |There are |of which )([\d.]+) ?([KMGT])(?:\)| hbm| free|i?B is free)")

#: What ``grep -E`` would need to find the same lines (used by the benchmark).
GREP_PATTERNS = (
    r"hbm=\[", "Memory statistics", "KV cache", "Maximum concurrency", "# [A-Z]+ blocks",
    "num_gpu_blocks_override", "Compil", "Precompile", "-- num_tokens", "batch_size: ",
    "AOT lower skipped", "Warm-up call pass", "torch.compile takes", "init engine",
    "Application startup complete", "Uvicorn running on", "Starting vLLM", "TPU info",
    "detected platform", "version ", "max model len", "non-default args", "Loading ",
    "Traceback", 'File "', "Error", "Exception", "EngineCore failed", "Exited \\(",
    "max seq len", "context length", "Graph capturing",
)

_UNIT_GIB = {"K": 1 / 1024 ** 2, "M": 1 / 1024, "G": 1.0, "T": 1024.0}


def to_int(text: str) -> int:
    """``"1,151,744"`` -> ``1151744``."""
    return int(text.replace(",", ""))


def to_float(text: str) -> float:
    """``"2,048.5"`` -> ``2048.5``."""
    return float(text.replace(",", ""))


def xla_size_gib(number: str, unit: str) -> float:
    """An XLA size (``16.23`` + ``G``; XLA's ``G`` is GiB) in GiB, rounded to 0.1 MiB."""
    return round(float(number) * _UNIT_GIB[unit], 4)


def docker_time(match: re.Match[str]) -> datetime | None:
    """The UTC time of a :data:`DOCKER_TS` match (nanoseconds cut to microseconds)."""
    year, month, day, hour, minute, second, frac, zone = match.groups()
    try:
        value = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                         int((frac or "0")[:6].ljust(6, "0")), tzinfo=UTC)
    except ValueError:
        return None
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        value -= sign * timedelta(minutes=int(digits[:2]) * 60 + int(digits[2:]))
    return value


def envelope_end(line: str) -> int:
    """Index where an E1/E2 envelope's message starts (after ``file.py:123] ``), or -1.

    Cheap: one ``find`` for ``"] "`` in the first 200 characters, then checks that a
    ``:<digits>`` precedes it, so ``[Gloo] Rank 0`` and ``[1, 2] x`` are not envelopes.
    """
    p = line.find("] ", 0, 200)
    if p < 2 or line[p - 1] not in DIGITS:
        return -1
    colon = line.rfind(":", max(0, p - 8), p)
    if colon < 0 or not line[colon + 1:p].isdigit():
        return -1
    return p + 2


def envelope_file(line: str, msg_start: int) -> str:
    """The ``file.py`` of an E1/E2 envelope ending at ``msg_start`` (``""`` if unknown)."""
    end = line.rfind(":", 0, msg_start)
    begin = max(line.rfind("[", 0, end), line.rfind(" ", 0, end)) + 1
    return line[begin:end]


def strip_proc_prefix(text: str) -> str:
    """Drop a leading E4 process prefix (and up to 3 stray bytes before it)."""
    if "(" in text[:4] and " pid=" in text[:80]:
        m = PROC_PREFIX.search(text, 0, 90)
        if m is not None and m.start() <= 3:
            return text[m.end():]
    return text


def kept(text: str) -> str:
    """``text`` cut to :data:`MAX_KEPT_CHARS` (state never keeps whole long lines)."""
    return text if len(text) <= MAX_KEPT_CHARS else text[:MAX_KEPT_CHARS - 1] + "…"
