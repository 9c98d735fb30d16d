"""The vLLM log reader's boot state: one class with the per-format handlers that update it.

``remote.vllm_log.reader.StartupReader`` splits lines, finds each line's message and
calls ``HANDLERS[message[:4]]``; everything here runs only for those lines.
State is scalars and a few short, capped lists: nothing grows with the log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from remote.startup import (
    CompileProgress,
    Failure,
    FailureKind,
    HbmSnapshot,
    Phase,
    PhaseMark,
    StartupState,
    frozen_map,
)
from remote.vllm_log import diagnosis as dx
from remote.vllm_log import patterns as pat

#: ``Phase.COMPILING`` looked up once (an enum member lookup costs ~0.1 us in Python 3.11, and
#: the compile handlers check it on every compile line).
_COMPILING = Phase.COMPILING
_MAX_MARKS = 64
_MAX_SNAPSHOTS = 32
_STAGES = (("Init worker", "worker_init"), ("Init model", "model_loaded"),
           ("Init kv-cache", "kv_cache"), ("before applying quantization", "before_quantization"),
           ("after applying quantization", "after_quantization"))
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


#: How far a one-line ``KV cache size: N tokens, Maximum concurrency for M tokens per request: X``
#: may stray between N and X x M before it is flagged (X is printed with 2 decimals).
KV_LINE_TOLERANCE = 0.05


def kv_line_disagreement(tokens: int | None, concurrency: float | None, per_request: int | None) -> str | None:
    """A sentence when one line's KV cache size ``tokens`` and ``concurrency`` x ``per_request`` differ by
    more than :data:`KV_LINE_TOLERANCE` of the larger (vLLM derives the concurrency from the same
    blocks, so on one line they agree for a full-attention model), else ``None``."""
    if not tokens or not concurrency or not per_request:
        return None
    implied = concurrency * per_request
    if abs(implied - tokens) <= KV_LINE_TOLERANCE * max(implied, tokens):
        return None
    return (f"the log's KV cache size ({tokens:,} tokens) and its maximum concurrency ({concurrency:g}x "
            f"{per_request:,} = {implied:,.0f} tokens) disagree: one of the two figures is wrong")


class BootState:
    """Mutable state of the current boot plus the handlers that update it.

    Each ``on_*`` handler takes ``(msg, line)``: the message after the envelope and the
    whole line (for its time stamp); ``HANDLERS`` maps message heads to them.
    """

    def __init__(self, year: int) -> None:
        self.year = year
        self.last_month: int | None = None
        self.explicit_ts: datetime | None = None
        self.last_at: datetime | str | None = None
        self.lines_read = 0
        self.restarts = 0
        self.previous_failure: Failure | None = None
        self.tpu_type: str | None = None
        self.num_chips_info: int | None = None
        self.platform: str | None = None
        self.reset_boot(None, 1)

    def reset_boot(self, at: datetime | None, line_no: int) -> None:
        """Forget the current boot (a new one starts at ``line_no``)."""
        self.phase = self.progress = Phase.STARTING
        self.timeline: list[PhaseMark] = [PhaseMark(Phase.STARTING, at, line_no)]
        self.ready = False
        self.server_url: str | None = None
        self.snapshots: list[HbmSnapshot] = []
        self.memstats: dict[str, float] | None = None
        self.kv_tokens: int | None = None
        self.kv_label: str | None = None
        self.kv_shape: str | None = None
        self.conc: float | None = None
        self.conc_tokens: int | None = None
        self.kv_note: str | None = None
        self.blocks: int | None = None
        self.blocks_label: str | None = None
        self.cpu_blocks: int | None = None
        self.blocks_computed: int | None = None
        self.blocks_override: int | None = None
        self.c_finished = self.c_started = self.c_deferred = self.c_warm = self.c_deferred_done = 0
        self.c_name: str | None = None
        self.c_shape: str | None = None
        self.c_last: float | None = None
        self.c_total = self.c_warm_total = 0.0
        self.c_started_at: datetime | None = None
        self.group_name = "model"
        self.xla_group = False
        self.group_total: float | None = None
        self.compile_total: float | None = None
        self.engine_init: float | None = None
        self.vllm_version: str | None = None
        self.model: str | None = None
        self.util_args: float | None = None
        self.util_memstats: float | None = None
        self.max_model_len: int | None = None
        self.container_status: str | None = None
        self.container_name: str | None = None
        self.engine_core_failed = False
        self.weights_gb: float | None = None
        self.graph_s: float | None = None
        self.graph_gib: float | None = None
        self.root: Root | None = None
        self.fatal: Root | None = None
        self.in_tb = False
        self.tb_ctx: str | None = None
        self.accum: list[Any] | None = None     # [kind, text so far, lines left, evidence line]
        self.boot_marked = False

    def gpu_util(self) -> float | None:
        """``--gpu-memory-utilization`` as stated in args, else the memory-statistics ratio."""
        return self.util_args if self.util_args is not None else self.util_memstats

    # ---- time ---------------------------------------------------------------------
    def has_stamp(self, line: str) -> bool:
        """``line`` carries a docker or vLLM time stamp."""
        return bool((line[:1] in "12" and pat.DOCKER_TS.match(line))
                    or pat.VLLM_TS.search(line, 0, 200))

    def stamp(self, line: str, mutate: bool = True) -> datetime | None:
        """Time stamp of ``line``: docker RFC 3339 first, else vLLM ``MM-DD HH:MM:SS``."""
        if line[:1] in "12":
            m = pat.DOCKER_TS.match(line)
            if m:
                return pat.docker_time(m)
        m = pat.VLLM_TS.search(line, 0, 200)
        if m is None:
            return None
        month = int(m[1])
        year = self.year
        if self.last_month is not None and month < self.last_month - 6:
            year += 1
            if mutate:
                self.year = year
        if mutate:
            self.last_month = month
        try:
            return datetime(year, month, int(m[2]), int(m[3]), int(m[4]), int(m[5]),
                            tzinfo=UTC)
        except ValueError:
            return None

    def at(self, line: str) -> datetime | None:
        """Time of the line being handled (explicit ``feed_line`` time first)."""
        return self.explicit_ts if self.explicit_ts is not None else self.stamp(line)

    # ---- phases and failures ------------------------------------------------------
    def enter(self, phase: Phase, line: str) -> None:
        """Record progress into ``phase`` (the public phase sticks at ready/failed)."""
        self.progress = phase
        if self.phase is phase or self.phase in (Phase.READY, Phase.FAILED):
            return
        self._mark(phase, line)

    def _mark(self, phase: Phase, line: str) -> None:
        self.phase = phase
        if len(self.timeline) >= _MAX_MARKS:
            del self.timeline[1]
        self.timeline.append(PhaseMark(phase, self.at(line), self.lines_read))

    def boot_marker(self, line: str) -> None:
        """A vLLM banner / version line: a second one after progress means a restart."""
        if self.boot_marked and (self.progress is not Phase.STARTING or self.ready
                                 or self.fatal is not None):
            failure = self.current_failure()
            restarts = self.restarts + 1
            self.reset_boot(self.at(line), self.lines_read)
            self.restarts, self.previous_failure = restarts, failure
        self.boot_marked = True

    # ---- line entry points --------------------------------------------------------
    def bare_line(self, line: str) -> None:
        """A line without an E1/E2 envelope: docker stamp, process prefix, uvicorn, pastes."""
        msg, envelope = _bare_message(line)
        self.dispatch(msg, line, envelope=envelope)

    def bare_line_is_quiet(self, line: str) -> bool:
        """:meth:`bare_line` would do nothing with ``line`` whatever the state, as long as no
        traceback is open (``in_tb``) and no multi-line message is being joined: its message has
        no handler and nothing :meth:`dispatch` reacts to. Lets the reader skip repeated lines
        (warnings, tqdm bars, ``[Gloo]`` lines) without reading them again."""
        msg, envelope = _bare_message(line)
        if HANDLERS.get(msg[:4]) is not None:
            return False
        c = msg[:1]
        if c in pat.DIGITS:
            return True
        return not ("rror" in msg or "xception" in msg or c in pat.BANNER_GLYPHS
                    or (not envelope and ("Exited (" in msg or "vllm serve" in msg)))

    def dispatch(self, msg: str, line: str, envelope: bool) -> None:
        """Slow-path twin of the hot loop for one message."""
        h = HANDLERS.get(msg[:4])
        if h is not None:
            h(self, msg, line)
            return
        c = msg[:1]
        if c in pat.DIGITS:
            return
        if "rror" in msg or "xception" in msg or self.in_tb:
            self.on_exception(msg, line)
        elif c in pat.BANNER_GLYPHS:
            self.on_banner(msg, line)
        elif not envelope:
            if "Exited (" in msg:
                self.on_container(msg, line)
            elif "vllm serve" in msg:
                self.on_args(msg, line)

    # ---- HBM and KV cache ---------------------------------------------------------
    def on_hbm(self, msg: str, line: str) -> None:
        i = msg.find("hbm=[")
        j = msg.find("]", i)
        if i < 0 or j < 0:
            return
        pairs = pat.HBM_TUPLE.findall(msg, i, j + 1)
        if not pairs:
            return
        k = j + 1
        while k < len(msg) and msg[k].isalpha():
            k += 1
        head = msg[:i]
        cuts = [x for x in (head.find(" |"), head.find(":")) if x >= 0]
        label = (head[:min(cuts)] if cuts else head).strip(" |:")
        stage = next((s for key, s in _STAGES if key in label), "other")
        if not label.startswith("Init"):
            end = pat.envelope_end(line)
            if end >= 0 and pat.envelope_file(line, end - 2).startswith("qwix"):
                label = f"qwix {label}"
        snap = HbmSnapshot(stage, label, tuple(float(u) for u, _ in pairs),
                           tuple(float(lim) for _, lim in pairs), msg[j + 1:k], self.at(line))
        if len(self.snapshots) >= _MAX_SNAPSHOTS:
            del self.snapshots[0]
        self.snapshots.append(snap)
        if stage == "kv_cache":
            shape = pat.KV_SHAPE.search(msg, 0, i)
            if shape:
                self.kv_shape = shape[1]
            self.enter(Phase.ALLOCATING_KV_CACHE, line)
        elif stage in ("model_loaded", "before_quantization") and self.progress is Phase.STARTING:
            self.enter(Phase.LOADING_WEIGHTS, line)

    def on_init(self, msg: str, line: str) -> None:
        if "hbm=[" in msg:
            self.on_hbm(msg, line)
        elif "LLM engine (v" in msg:
            m = pat.ENGINE_VERSION.search(msg)
            if m and self.vllm_version is None:
                self.vllm_version = m[1]
            m = pat.ENGINE_MODEL.search(msg)
            if m and self.model is None:
                self.model = m[1]

    def on_memory(self, msg: str, line: str) -> None:
        if msg.startswith("Memory statistics"):
            self.memstats = {k: float(v) for k, v in pat.MEMSTAT_FIELD.findall(msg)}
            limit = self.memstats.get("total_hbm_limit_gb")
            cap = self.memstats.get("total_hbm_limit_cap_gb")
            if limit and cap:
                self.util_memstats = round(cap / limit, 2)
            self.enter(Phase.ALLOCATING_KV_CACHE, line)
        elif msg.startswith("Memory profiling results"):
            m = pat.GPU_UTIL.search(msg)
            if m:
                self.util_args = float(m[1])
            self.enter(Phase.ALLOCATING_KV_CACHE, line)
        elif "hbm=[" in msg:
            self.on_hbm(msg, line)

    def on_kv_size(self, msg: str, line: str) -> None:
        if msg.startswith("TPU info"):
            m = pat.TPU_INFO_TYPE.search(msg)
            if m:
                self.tpu_type = m[1]
            m = pat.TPU_INFO_CHIPS.search(msg)
            if m:
                self.num_chips_info = int(m[1])
            return
        m = pat.KV_SIZE.match(msg)
        if m is None:
            return
        self.kv_label, self.kv_tokens = m[1], pat.to_int(m[2])
        if "concurrency" in msg:
            self.on_concurrency(msg, line)
            self.kv_note = kv_line_disagreement(self.kv_tokens, self.conc, self.conc_tokens)
        self.enter(Phase.ALLOCATING_KV_CACHE, line)

    def on_concurrency(self, msg: str, line: str) -> None:
        m = pat.CONCURRENCY.search(msg)
        if m:
            self.conc_tokens, self.conc = pat.to_int(m[1]), pat.to_float(m[2])
            self.enter(Phase.ALLOCATING_KV_CACHE, line)

    def on_blocks(self, msg: str, line: str) -> None:
        m = pat.BLOCKS.match(msg)
        if m:
            self.blocks_label, self.blocks = m[1], int(m[2])
            if m[3]:
                self.cpu_blocks = int(m[3])
            self.enter(Phase.ALLOCATING_KV_CACHE, line)

    def on_override(self, msg: str, line: str) -> None:
        m = pat.BLOCKS_OVERRIDE.search(msg)
        if m:
            self.blocks_computed, self.blocks_override = int(m[1]), int(m[2])

    def on_kv_phase(self, msg: str, line: str) -> None:
        self.enter(Phase.ALLOCATING_KV_CACHE, line)

    # ---- loading, serving, identity -----------------------------------------------
    def on_loading(self, msg: str, line: str) -> None:
        if msg.startswith("Loading model weights took"):
            m = pat.WEIGHTS_GB.match(msg)
            if m:
                self.weights_gb = float(m[1])
        if self.progress is Phase.STARTING and msg.startswith(
                ("Loading", "Downloading", "Applying Qwix", "Starting to load")):
            self.enter(Phase.LOADING_WEIGHTS, line)

    def on_starting(self, msg: str, line: str) -> None:
        if msg.startswith("Starting vLLM"):
            m = pat.SERVER_URL.search(msg)
            if m:
                self.server_url = m[1]
            self.enter(Phase.WARMING_UP, line)
        else:
            self.on_loading(msg, line)

    def on_info(self, msg: str, line: str) -> None:
        if "startup complete" in msg and pat.READY_UVICORN.match(msg):
            self.ready = True
            self.fatal = None
            if self.root is not None:
                self.root.fatal = False
            if self.phase is not Phase.READY:
                self._mark(Phase.READY, line)
            self.progress = Phase.READY
        elif "Uvicorn running on" in msg:
            m = pat.RUNNING_UVICORN.match(msg)
            if m:
                self.server_url = m[1]
        elif msg.startswith(("INFO:     Started server process", "INFO:     Waiting for app")):
            self.enter(Phase.WARMING_UP, line)

    def on_graph(self, msg: str, line: str) -> None:
        m = pat.GRAPH_CAPTURE.match(msg)
        if m:
            self.graph_s, self.graph_gib = float(m[1]), float(m[2])
        self.enter(Phase.WARMING_UP, line)

    def on_capture(self, msg: str, line: str) -> None:
        if msg.startswith("Capturing CUDA graph"):
            self.enter(Phase.WARMING_UP, line)

    def on_platform(self, msg: str, line: str) -> None:
        m = pat.PLATFORM.match(msg)
        if m:
            self.platform = m[1]

    def on_version(self, msg: str, line: str) -> None:
        if msg.startswith("vLLM API server version"):
            self.boot_marker(line)
            m = pat.VERSION.search(msg)
            if m:
                self.vllm_version = m[1]

    def on_banner(self, msg: str, line: str) -> None:
        if "version " in msg:
            m = pat.VERSION.search(msg)
            if m:
                self.boot_marker(line)
                self.vllm_version = m[1]
        elif "model " in msg:
            m = pat.BANNER_MODEL.search(msg)
            if m:
                self.model = m[1]

    def on_using(self, msg: str, line: str) -> None:
        m = pat.USING_MAX_MODEL_LEN.match(msg)
        if m:
            self.max_model_len = int(m[1])

    def on_args(self, msg: str, line: str) -> None:
        m = pat.GPU_UTIL.search(msg)
        if m:
            self.util_args = float(m[1])
        m = pat.MAX_MODEL_LEN_ARG.search(msg)
        if m:
            self.max_model_len = int(m[1])

    # ---- compile progress (formats C1-C6) ----------------------------------------


    def _compiling(self, line: str) -> None:
        if self.progress is not Phase.COMPILING:
            self.enter(Phase.COMPILING, line)
        if self.c_started_at is None:
            self.c_started_at = self.at(line)

    def fold_compile_steps(self, started: int, finished: int, step_seconds_total: float,
                           last_step_seconds: float, deferred: int,
                           in_flight: tuple[bytes, int, int] | None) -> None:
        """Write compile-step lines read in bulk by the reader (its bytes twin of
        :meth:`on_precompile`, :meth:`on_compile`, :meth:`on_aot` for the C4 shapes, vLLM 0.26+
        tpu-inference ``compilation_manager.py``), as those handlers would have one by one.

        Args:
            started: ``Precompile <name> --> <shape>`` lines.
            finished: ``Compilation of ... finished in N [secs]`` lines.
            step_seconds_total: ``c_total`` after them (summed in log order by the reader).
            last_step_seconds: N of the last finished one, s (used only if ``finished``).
            deferred: ``AOT lower skipped`` lines.
            in_flight: ``(line, message start, index of " --> ")`` of an ASCII ``Precompile``
                line if it was the last of them (its step is in flight), else ``None``.
        """
        if started:
            self.xla_group = False
            self.c_started += started
        if finished:
            self.c_finished += finished
            self.c_last = last_step_seconds
        self.c_total = step_seconds_total
        self.c_deferred += deferred
        if in_flight is None:
            self.c_name = self.c_shape = None
        else:
            raw, p, i = in_flight
            self.c_name = raw[p + 11:i].decode("ascii")
            self.c_shape = raw[i + 5:i + 205].decode("ascii")

    def on_precompile(self, msg: str, line: str) -> None:
        i = msg.find(" --> ")
        if i > 0:
            self.xla_group = False
            self.c_started += 1
            self.c_name, self.c_shape = msg[11:i], msg[i + 5:i + 205]
        if self.progress is not _COMPILING or self.c_started_at is None:
            self._compiling(line)

    def on_compile(self, msg: str, line: str) -> None:
        if msg.startswith("Compilation"):
            i = msg.rfind(" finished in ")
            if i < 0:
                m = pat.XLA_GROUP_DONE.match(msg)
                if m:
                    self.group_total = (self.group_total or 0.0) + float(m[1])
                return
            i += 13
            typo = msg.startswith("in ", i)
            if typo:
                i += 3
            try:
                secs = float(msg[i:msg.find(" ", i)])
            except ValueError:
                return
            if typo or (self.xla_group and not msg.startswith("Compilation of ")):
                self.group_total = (self.group_total or 0.0) + secs
                self.xla_group = False
                self.c_name = self.c_shape = None
                return
            self.c_finished += 1
            self.c_last = secs
            self.c_total += secs
            self.c_name = self.c_shape = None
            if self.progress is not _COMPILING or self.c_started_at is None:
                self._compiling(line)
        elif msg.startswith("Compiling"):
            m = pat.COMPILING_GROUP.match(msg)
            if m:
                self.group_name, self.xla_group = m[1], False
            self._compiling(line)

    def on_xla_step(self, msg: str, line: str) -> None:
        head = line[:40]
        if ("(VllmWorker TP" in head and "(VllmWorker TP0 " not in head) or \
                "(RayWorkerWrapper" in head:
            return
        m = pat.XLA_STEP.match(msg)
        if m:
            self.c_started += 1
            self.c_name, self.c_shape = self.group_name, m[1][:200]
            self.xla_group = True
            self._compiling(line)

    def on_aot(self, msg: str, line: str) -> None:
        if msg.startswith("AOT lower skipped"):
            self.c_deferred += 1
            self.c_name = self.c_shape = None

    def on_warmup(self, msg: str, line: str) -> None:
        if msg.startswith("Warm-up call pass"):
            m = pat.WARMUP_PASS.search(msg)
            if m:
                self.c_warm += 1
                self.c_warm_total += float(m[1])
                self.c_deferred_done = self.c_deferred      # the pass compiled the steps deferred to it

    def on_init_engine(self, msg: str, line: str) -> None:
        m = pat.INIT_ENGINE.match(msg)
        if m:
            self.engine_init = float(m[1])
            if m[2]:
                self.compile_total = float(m[2])
            self.c_name = self.c_shape = None
            self.enter(Phase.WARMING_UP, line)

    def on_torch(self, msg: str, line: str) -> None:
        m = pat.TORCH_COMPILE_TOTAL.match(msg)
        if m:
            self.group_total = (self.group_total or 0.0) + float(m[1])
            self._compiling(line)
        elif "rror" in msg or "xception" in msg or self.in_tb:   # torch.OutOfMemoryError: ...
            self.on_exception(msg, line)

    def on_dynamo(self, msg: str, line: str) -> None:
        if msg.startswith("Dynamo bytecode"):
            self._compiling(line)

    # ---- failures: tracebacks, root causes, envelopes -------------------------------


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
        assert self.accum is not None
        kind, text, left, evidence = self.accum
        if (not msg or msg.startswith(("Traceback", 'File "', "During handling"))
                or pat.EXCEPTION_LINE.match(msg)):
            self.finish_accum()
            return False
        text = f"{text} {msg}"
        left -= 1
        if kind == "pydantic" and ("[type=" in msg or msg.startswith(("Value error", "Assertion failed"))):
            evidence = line          # the reason, not the class header, is the evidence
        self.accum = [kind, text, left, evidence]
        if kind == "pydantic":
            done = msg.startswith("For further information")
        elif kind == "derived":      # a hand-wrapped max_model_len text: until its figures are in
            done = pat.DERIVED_MAX_LEN.search(text) is not None
        elif kind == "colon":
            done = not text.endswith(":")
        else:
            done = _kv_text_done(text)
        if done or left <= 0:
            self.finish_accum()
        return True

    def finish_accum(self) -> None:
        """End a multi-line message and diagnose it."""
        assert self.accum is not None
        kind, text, _, evidence = self.accum
        self.accum = None
        m = pat.EXCEPTION_LINE.match(text) or pat.EXCEPTION_LINE_TB.match(text)
        exc_type = m[1] if m else None
        if kind == "pydantic":       # quote the reason ("Value error, ..."), not the class header
            text = dx.pydantic_detail(text)
        self.diagnose(exc_type, text, evidence)

    def on_exception(self, msg: str, line: str) -> None:
        """An ``XxxError: ...`` line, or a line mentioning an error."""
        m = pat.EXCEPTION_LINE.match(msg)
        if m is None and self.in_tb:   # a type not ending in Error (OutOfResources, Unsupported ...)
            m = pat.EXCEPTION_LINE_TB.match(msg)
        if m is None:
            if msg.startswith(("vllm serve: error:", "vllm: error:")):
                # argparse's error() (vLLM's FlexibleArgumentParser.error): a bad or unknown flag, exit 2
                self.set_root(2, FailureKind.CONFIG_ERROR, True, msg, line, {})
                return
            if ("RESOURCE_EXHAUSTED" in msg or "max seq len" in msg or "context length" in msg
                    or "MemoryStats" in msg or "out of memory" in msg
                    or "derived max_model_len" in msg):
                self.diagnose(None, msg, line)
            return
        if any(p in msg for p in dx.ENVELOPE_PHRASES):
            self.signal_fatal(msg, line)
            return
        if pat.PYDANTIC_HEADER.search(msg):
            self.accum = ["pydantic", msg, _MAX_ACCUM_LINES, line]
        elif msg.endswith(":"):
            self.accum = ["colon", msg, 3, line]
        elif ("max seq len" in msg or "To serve at least" in msg) and not _kv_text_done(msg):
            # V1's KV-fit ValueError, its "max seq len (N)" possibly wrapped by hand onto the next line
            self.accum = ["kv", msg, _MAX_ACCUM_LINES, line]
        elif "User-specified max_model_len" in msg and pat.DERIVED_MAX_LEN.search(msg) is None:
            self.accum = ["derived", msg, 4, line]
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

    # ---- snapshot -----------------------------------------------------------------
    def snapshot(self) -> StartupState:
        """Frozen snapshot of the current state (the reader caches it per version)."""
        last_at = self.last_at if not isinstance(self.last_at, str) else self.stamp(self.last_at,
                                                                                     mutate=False)
        compile_progress = CompileProgress(
            steps_finished=self.c_finished, steps_started=self.c_started,
            in_flight_name=self.c_name, in_flight_shape=self.c_shape,
            last_step_seconds=self.c_last, step_seconds_total=round(self.c_total, 6),
            started_at=self.c_started_at, deferred_steps=self.c_deferred,
            warmup_passes=self.c_warm, warmup_seconds_total=round(self.c_warm_total, 6),
            deferred_done=self.c_deferred if self.ready else self.c_deferred_done)
        num_chips = self.num_chips_info
        if num_chips is None and self.snapshots:
            num_chips = self.snapshots[0].num_chips
        return StartupState(
            phase=self.phase, timeline=tuple(self.timeline), ready=self.ready,
            server_url=self.server_url, failure=self.current_failure(),
            hbm_snapshots=tuple(self.snapshots),
            memory_statistics=frozen_map(self.memstats) if self.memstats is not None else None,
            kv_cache_tokens=self.kv_tokens, kv_cache_label=self.kv_label,
            kv_cache_shape=self.kv_shape, max_concurrency=self.conc,
            max_concurrency_tokens_per_request=self.conc_tokens, kv_cache_note=self.kv_note,
            device_blocks=self.blocks,
            device_blocks_label=self.blocks_label, cpu_blocks=self.cpu_blocks,
            num_gpu_blocks_computed=self.blocks_computed,
            num_gpu_blocks_override=self.blocks_override, compile=compile_progress,
            compile_seconds=(self.compile_total if self.compile_total is not None
                             else self.group_total),
            engine_init_seconds=self.engine_init, num_chips=num_chips, tpu_type=self.tpu_type,
            platform=self.platform, vllm_version=self.vllm_version, model=self.model,
            gpu_memory_utilization=self.gpu_util(), max_model_len=self.max_model_len,
            container_status=self.container_status, container_name=self.container_name,
            engine_core_failed=self.engine_core_failed, model_weights_gb=self.weights_gb,
            cuda_graph_capture_seconds=self.graph_s, cuda_graph_memory_gib=self.graph_gib,
            restarts=self.restarts, previous_failure=self.previous_failure,
            lines_read=self.lines_read, last_line_at=last_at)

    def current_failure(self) -> Failure | None:
        """The diagnosed failure of the current boot, or ``None``."""
        root, fatal = self.root, self.fatal
        if fatal is not None and (root is None or not root.fatal):
            root = fatal
        if root is None:
            return None
        model = self.snapshots[-1] if self.snapshots else None
        facts = dx.Facts(
            gpu_memory_utilization=self.gpu_util() or root.numbers.get("gpu_memory_utilization"),
            tpu_type=self.tpu_type, hbm_limit_gib=model.limit_gib[0] if model else None,
            max_model_len=self.max_model_len, num_gpu_blocks_computed=self.blocks_computed,
            num_gpu_blocks_override=self.blocks_override,
            in_flight=CompileProgress(in_flight_name=self.c_name,
                                      in_flight_shape=self.c_shape).in_flight)
        explanation, hint = dx.explain(root.kind, root.numbers, facts)
        return Failure(kind=root.kind, fatal=root.fatal, message=root.message,
                       evidence_line=root.evidence_line, explanation=explanation, hint=hint,
                       at=root.at, numbers=frozen_map(root.numbers))


HANDLERS = {
    "Init": BootState.on_init, "Memo": BootState.on_memory,
    "TPU ": BootState.on_kv_size, "GPU ": BootState.on_kv_size, "XPU ": BootState.on_kv_size,
    "CPU ": BootState.on_kv_size, "NPU ": BootState.on_kv_size, "HPU ": BootState.on_kv_size,
    "Maxi": BootState.on_concurrency,
    "# GP": BootState.on_blocks, "# TP": BootState.on_blocks, "# CP": BootState.on_blocks,
    "# XP": BootState.on_blocks, "# NP": BootState.on_blocks,
    "Over": BootState.on_override, "Hybr": BootState.on_kv_phase,
    "Comp": BootState.on_compile, "Prec": BootState.on_precompile,
    "-- n": BootState.on_xla_step, "batc": BootState.on_xla_step,
    "AOT ": BootState.on_aot, "Warm": BootState.on_warmup,
    "init": BootState.on_init_engine, "torc": BootState.on_torch, "Dyna": BootState.on_dynamo,
    "Load": BootState.on_loading, "Down": BootState.on_loading, "Appl": BootState.on_loading,
    "Star": BootState.on_starting, "INFO": BootState.on_info,
    "Grap": BootState.on_graph, "Capt": BootState.on_capture,
    "Auto": BootState.on_platform, "vLLM": BootState.on_version,
    "Usin": BootState.on_using, "non-": BootState.on_args,
    "Engi": BootState.on_engine, "Trac": BootState.on_traceback, "File": BootState.on_frame,
    "The ": BootState.on_plain_failure, "This": BootState.on_plain_failure,
}


def _bare_message(line: str) -> tuple[str, bool]:
    """``(message, has_envelope)`` of a line without an E1/E2 envelope at its start: docker's
    timestamp removed (then an envelope may follow it), else the process prefix stripped."""
    text = line
    if text[:1] in "12":
        m = pat.DOCKER_TS.match(text)
        if m:
            text = text[m.end():]
            end = pat.envelope_end(text)
            if end >= 0:
                return text[end:].lstrip(), True
    return pat.strip_proc_prefix(text).strip(), False
