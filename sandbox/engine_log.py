"""Log-line plumbing of the sandbox engine: timestamps, process prefixes, failure envelopes.

Lines follow the vLLM 0.29.x / tpu-inference container log: ``(APIServer pid=1)`` and
``(EngineCore pid=N)`` prefixes, ``LEVEL MM-DD HH:MM:SS [file.py:line] message``, and the
EngineCore / APIServer traceback envelopes a failing boot prints.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta

VLLM_VERSION = "0.29.1rc1.dev468+g0b7f11a1e"
_RELEASE_TAG = re.compile(r"^v?(\d+\.\d+\.\d+)$")
_LOG_EPOCH = datetime(2026, 9, 30, 3, 50, 0)
API_MODULE = "APIServer pid=1"


def vllm_version_of(image: str | None) -> str:
    """The version a ``vllm/vllm-tpu`` image prints: its release tag (``v0.30.0`` -> ``0.30.0``).

    Images without a release tag (``latest``, ``nightly``, a digest) print :data:`VLLM_VERSION`.
    """
    tag = (image or "").split("@", 1)[0].rpartition("/")[2].partition(":")[2]
    found = _RELEASE_TAG.match(tag)
    return found.group(1) if found else VLLM_VERSION


class LogWriter:
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
        self.log(API_MODULE, src, msg, level)

    def eng(self, src: str, msg: str, level: str = "INFO") -> None:
        self.log(self.engine, src, msg, level)


class PlannedFailure(Exception):
    """Raised inside the builder once a failure's lines are written."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def hbm_text(used: float, limit: float, n: int) -> str:
    return "[" + ", ".join([f"({round(used, 2)!r}, {round(limit, 2)!r})"] * n) + "]"


def padding_buckets(start: int, limit: int) -> list[int]:
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
API_FRAMES = (
    ("/usr/local/bin/vllm", 10, "<module>", "sys.exit(main())"),
    ("/workspace/vllm/vllm/entrypoints/cli/main.py", 73, "main", "args.dispatch_function(args)"),
    ("/workspace/vllm/vllm/entrypoints/cli/serve.py", 111, "cmd", "uvloop.run(run_server(args))"),
)


def api_traceback(log: LogWriter, frames: Sequence[tuple[str, int, str, str]], error: Sequence[str]) -> None:
    log.raw("Traceback (most recent call last):", API_MODULE)
    for path, number, func, code in frames:
        log.raw(f'  File "{path}", line {number}, in {func}', API_MODULE)
        log.raw(f"    {code}", API_MODULE)
    for line in error:
        log.raw(line, API_MODULE)


def engine_failure(log: LogWriter, kind: str, frames: Sequence[tuple[str, int, str, str]],
                    error: Sequence[str]) -> PlannedFailure:
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
    api_traceback(log, (*API_FRAMES, ("/workspace/vllm/vllm/v1/engine/utils.py", 1065,
                                        "wait_for_engine_startup", "raise RuntimeError(")),
                   ["RuntimeError: Engine core initialization failed. See root cause above. "
                    "Failed core proc(s): {}"])
    return PlannedFailure(kind, error[0].split(": ", 1)[-1])


def hlo_oom_lines(required_gib: float, limit_gib: float) -> list[str]:
    return ["jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total "
            f"memory required for HLO temporaries ({required_gib:.2f}G) exceeds available HBM "
            f"({limit_gib:.2f}G).",
            "--------------------",
            "For simplicity, JAX has removed its internal frames from the traceback of the following "
            "exception. Set JAX_TRACEBACK_FILTERING=off to include these."]


def mmss(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60:02d}:{whole % 60:02d}"
