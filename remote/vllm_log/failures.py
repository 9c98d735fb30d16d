"""Failure handlers of the vLLM log reader: tracebacks, root causes, envelopes.

Mixed into ``remote.vllm_log.state.BootState``; they record the best root cause
(specific texts over generic exceptions, fatal over not) and failure envelopes
(``EngineCore failed to start``, a container's ``Exited (N)``), and join multi-line
messages (the 3-line XLA OOM, hand-wrapped KV-fit errors) before diagnosing them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from remote.vllm_log import diagnosis as dx
from remote.vllm_log import patterns as pat
from remote.startup import FailureKind, Phase

_MAX_ACCUM_LINES = 8
_KV_DONE = ("Try ", "initializing the engine")


def _kv_text_done(text: str) -> bool:
    """A (possibly hand-wrapped) KV-fit error message has reached its end."""
    return any(k in text for k in _KV_DONE) or pat.KF2_ESTIMATE.search(text) is not None


@dataclass
class Root:
    """A failure signal: root cause (priority 2 specific, 1 generic) or envelope (0)."""

    priority: int
    kind: FailureKind
    fatal: bool
    message: str
    evidence_line: str
    at: datetime | None
    numbers: dict[str, float | int] = field(default_factory=dict)


class FailureHandlers:
    """Failure-related handlers; state attributes live on ``BootState``."""

    def signal_fatal(self, message: str, line: str) -> None:
        """A failure envelope (engine failed, container exited) without its root cause."""
        if self.fatal is None:
            self.fatal = Root(0, FailureKind.ENGINE_CORE_EXCEPTION, True, pat.kept(message),
                              pat.kept(line.strip()), self.at(line))
        if self.phase is not Phase.FAILED:
            self._mark(Phase.FAILED, line)

    def set_root(self, priority: int, kind: FailureKind, fatal: bool, message: str, line: str,
                 numbers: dict[str, float | int]) -> None:
        """Keep the best root cause: fatal over not, then the first of the highest priority."""
        r = self.root
        if r is None or not r.fatal or (fatal and priority > r.priority):
            self.root = Root(priority, kind, fatal, pat.kept(message), pat.kept(line.strip()),
                             self.at(line), numbers)
        if fatal:
            self.signal_fatal(message, line)

    def take_accum(self, line: str) -> bool:
        """Feed a continuation line to a multi-line message; ``False`` if it is not one."""
        end = pat.envelope_end(line)
        msg = (line[end:] if end >= 0 else pat.strip_proc_prefix(line)).strip()
        kind, text, left, evidence = self.accum
        if (not msg or msg.startswith(("Traceback", 'File "', "During handling"))
                or pat.EXCEPTION_LINE.match(msg)):
            self.finish_accum()
            return False
        text = f"{text} {msg}"
        left -= 1
        self.accum = [kind, text, left, evidence]
        done = (not text.endswith(":")) if kind == "colon" else _kv_text_done(text)
        if done or left <= 0:
            self.finish_accum()
        return True

    def finish_accum(self) -> None:
        """End a multi-line message and diagnose it."""
        _, text, _, evidence = self.accum
        self.accum = None
        m = pat.EXCEPTION_LINE.match(text)
        self.diagnose(m[1] if m else None, text, evidence)

    def on_exception(self, msg: str, line: str) -> None:
        """An ``XxxError: ...`` line, or a line mentioning an error."""
        m = pat.EXCEPTION_LINE.match(msg)
        if m is None:
            if ("RESOURCE_EXHAUSTED" in msg or "max seq len" in msg or "context length" in msg
                    or "MemoryStats" in msg or "out of memory" in msg):
                self.diagnose(None, msg, line)
            return
        if any(p in msg for p in dx.ENVELOPE_PHRASES):
            self.signal_fatal(msg, line)
            return
        if msg.endswith(":"):
            self.accum = ["colon", msg, 3, line]
        elif "max seq len" in msg and not _kv_text_done(msg):
            self.accum = ["kv", msg, _MAX_ACCUM_LINES, line]
        else:
            self.diagnose(m[1], msg, line)

    def on_plain_failure(self, msg: str, line: str) -> None:
        """Prefix-less failure sentences (V0 ``The model's max seq len ...``, ``This model's
        maximum context length ...``)."""
        if "max seq len" in msg and not _kv_text_done(msg):
            self.accum = ["kv", msg, _MAX_ACCUM_LINES, line]
        elif "max seq len" in msg or "context length" in msg:
            self.diagnose(None, msg, line)

    def diagnose(self, exc_type: str | None, message: str, line: str) -> None:
        """Classify a root-cause message (specific texts first, then generic exceptions)."""
        spec = dx.match_specific(message)
        was_in_tb = self.in_tb or self.tb_ctx is not None
        self.in_tb = False
        if spec is not None:
            kind = dx.resolve_oom(self.tb_ctx, self.progress) if spec.is_hbm_oom else spec.kind
            if self.kv_tokens is None and "kv_cache_capacity_tokens" in spec.numbers:
                self.kv_tokens = int(spec.numbers["kv_cache_capacity_tokens"])
            self.set_root(2, kind, spec.fatal, message, line, dict(spec.numbers))
            return
        if exc_type is None:
            return
        if self.fatal is None and (self.ready or not was_in_tb
                                   or exc_type.endswith(("ImportError", "ModuleNotFoundError"))):
            return
        compiling = self.c_name is not None or self.progress is Phase.COMPILING
        kind = dx.classify_exception(exc_type, self.progress, self.tb_ctx, compiling)
        self.set_root(1, kind, True, message, line, {})

    def on_traceback(self, msg: str, line: str) -> None:
        if msg.startswith("Traceback (most recent call last)"):
            self.in_tb = True
            self.tb_ctx = None

    def on_frame(self, msg: str, line: str) -> None:
        m = pat.FRAME_FUNC.match(msg)
        if m:
            self.in_tb = True
            ctx = dx.frame_context(m[1])
            if ctx is not None:
                self.tb_ctx = ctx

    def on_engine(self, msg: str, line: str) -> None:
        if msg.startswith("EngineCore failed to start"):
            self.engine_core_failed = True
            self.signal_fatal(msg, line)
        elif msg.startswith("EngineCore hit an exception"):
            self.in_tb, self.tb_ctx = True, None
            self.signal_fatal(msg.split(": Traceback", 1)[0], line)
        elif "fatal error" in msg or "initialization failed" in msg:
            self.signal_fatal(msg, line)

    def on_container(self, msg: str, line: str) -> None:
        m = pat.CONTAINER_EXIT.search(msg)
        if m is None:
            return
        self.container_name = m[1] if m[1] and "\t" in msg else None
        self.container_status = m[2]
        if int(m[3]) != 0:
            self.signal_fatal(f"container exited with code {m[3]}", line)
