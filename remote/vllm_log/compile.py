"""Compile-progress handlers of the vLLM log reader (formats C1-C6 of the corpus INDEX).

Mixed into ``remote.vllm_log.state.BootState``. ``Precompile`` announces a step,
``Compilation of ... finished in N [secs]`` (or the older anonymous ``Compilation finished
in N [secs]``) finishes it; torch_xla's ``-- num_tokens: N`` steps end in a group total
(``Compilation finished in in N [secs]``, typo of 2025-03); warm-up passes are not steps.
"""

from __future__ import annotations

from remote.vllm_log import patterns as pat
from remote.startup import Phase


class CompileHandlers:
    """Compile handlers; state attributes live on ``BootState``."""

    def _compiling(self, line: str) -> None:
        if self.progress is not Phase.COMPILING:
            self.enter(Phase.COMPILING, line)
        if self.c_started_at is None:
            self.c_started_at = self.at(line)

    def on_precompile(self, msg: str, line: str) -> None:
        i = msg.find(" --> ")
        if i > 0:
            self.xla_group = False
            self.c_started += 1
            self.c_name, self.c_shape = msg[11:i], msg[i + 5:i + 205]
        if self.progress is not Phase.COMPILING or self.c_started_at is None:
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
            if self.progress is not Phase.COMPILING or self.c_started_at is None:
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

    def on_dynamo(self, msg: str, line: str) -> None:
        if msg.startswith("Dynamo bytecode"):
            self._compiling(line)
