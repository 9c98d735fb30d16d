"""The reader's bulk path (``feed``: whole buffers, runs of skipped lines counted in bulk) and its
line-by-line path (``feed_line``) read the same state from every corpus log, whatever the chunking.

Variants of each log exercise what the bulk path special-cases: every line CRLF-ended, every
line behind a ``docker logs --timestamps`` stamp (the stamp differs on each line, so a run of
array-dump lines cannot be matched byte for byte), and tqdm redraws (lone CRs) inside a run.

Every test here runs twice: with the bulk path's C line scanner (``remote/vllm_log/_scan.c``) and
with its pure-Python twin (the hot loop reading every line, as where no C compiler built it).
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remote.startup import StartupState
from remote.vllm_log import reader as reader_module
from remote.vllm_log.reader import SKIP_HEAD, StartupReader
from tests.conftest import CORPUS

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "vllm-logs"
LOGS = sorted((CORPUS / "vllm-logs").glob("*.log")) or sorted(FIXTURES.glob("*.log"))


@pytest.fixture(autouse=True, scope="module", params=["c-scanner", "python"])
def scanner(request: pytest.FixtureRequest) -> Iterator[str]:
    """The bulk path with the C line scanner, then with the pure-Python hot loop alone."""
    if request.param == "c-scanner" and reader_module._scan is None:
        pytest.skip("the C line scanner is not built (pip install -e . builds it where a C compiler is at hand)")
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "python":
            patch.setattr(reader_module, "_scan", None)
            patch.setattr(reader_module, "_run_end", None)
        yield request.param


def test_the_c_scanner_is_built_where_a_compiler_is() -> None:
    """``pip install`` builds ``_scan.c`` (an optional extension: without a compiler the install still
    works, slower); on a machine with one, a missing scanner is a broken build, not a fallback."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here: the reader runs its pure-Python hot loop")
    from remote.vllm_log._scan import scan

    assert callable(scan)


def _by_lines(data: bytes) -> StartupState:
    reader = StartupReader(year=2025)
    text = data.decode("utf-8", "replace")
    for line in text.split("\n")[:-1]:
        reader.feed_line(line)
    if not text.endswith("\n"):
        reader.feed_line(text.rsplit("\n", 1)[-1])
    reader.close()
    return reader.state


def _in_random_chunks(data: bytes, seed: int) -> StartupState:
    rnd = random.Random(seed)
    reader = StartupReader(year=2025)
    pos = 0
    while pos < len(data):
        size = rnd.randint(1, rnd.choice((1, 7, 200, 4096, 65536, 1 << 20)))
        reader.feed(data[pos:pos + size])
        pos += size
    reader.close()
    return reader.state


def _crlf(data: bytes) -> bytes:
    return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def _docker_stamped(data: bytes) -> bytes:
    lines = data.split(b"\n")
    return b"\n".join(b"2025-08-10T22:%02d:%02d.%09dZ " % (i // 60 % 60, i % 60, i) + line
                      for i, line in enumerate(lines))


def _redraws_in_runs(data: bytes) -> bytes:
    """Every 5th array-dump line gets a redraw that turns it into another message."""
    out = []
    for i, line in enumerate(data.split(b"\n")):
        if i % 5 == 0 and SKIP_HEAD.match(line):
            line = line + b"\rINFO 08-10 22:29:27 [core.py:1] Precompile redrawn --> {'n': %d}" % i
        out.append(line)
    return b"\n".join(out)


VARIANTS = {"as-is": lambda d: d, "crlf": _crlf, "docker-stamps": _docker_stamped,
            "redraws-in-runs": _redraws_in_runs}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name[:2])
def test_bulk_and_line_paths_read_the_same_state(log: Path, variant: str) -> None:
    data = VARIANTS[variant](log.read_bytes())
    expected = _by_lines(data)
    for seed in range(3):
        assert _in_random_chunks(data, seed) == expected, f"seed {seed}"


def test_the_corpus_has_runs_the_bulk_path_skips() -> None:
    """The variants above only test the bulk path if the corpus has array-dump runs."""
    runs = sum(1 for log in LOGS for line in log.read_bytes().split(b"\n") if SKIP_HEAD.match(line))
    assert runs > 400


def test_an_array_dump_inside_a_multi_line_message_is_offered_to_it() -> None:
    """While a message is being joined, lines of a run are read one by one."""
    dump = b"".join(b"INFO 08-10 22:29:27 [compilation_manager.py:137]        1, 1, 1,\n"
                    for _ in range(30))
    data = (b"INFO 08-10 22:25:53 [__init__.py:76] vLLM API server version 0.11.0\n"
            b"ERROR 08-10 22:29:26 [core.py:708] ValueError: The model's max seq len (32768) "
            b"is larger than the maximum number of tokens\n" + dump +
            b"ERROR 08-10 22:29:27 [core.py:708] that can be stored in KV cache (23648).\n")
    assert _in_random_chunks(data, 0) == _by_lines(data)
    assert _by_lines(data).lines_read == 33


def test_a_run_ends_at_the_first_line_the_hot_loop_would_read() -> None:
    """Same envelope, but three spaces then a message: dispatched, not skipped with the run."""
    env = b"(EngineCore pid=372) INFO 08-10 22:29:27 [compilation_manager.py:137] "
    data = (env + b"Compiling the model with different input shapes\n"
            + (env + b"       1, 1, 1,\n") * 25
            + env + b"   Precompile worker0 sample --> {'num_reqs': 32}\n"
            + (env + b"       1, 1, 1,\n") * 3)
    state = _in_random_chunks(data, 1)
    assert state == _by_lines(data)
    assert (state.compile.steps_started, state.lines_read) == (1, 30)


# ---- compile-step lines (read on their bytes by the bulk path while the boot compiles) ---------
_ENV = b"(EngineCore pid=372) INFO 08-10 22:28:%02d [compilation_manager.py:%d] "


def _pre(i: int, shape: bytes = b"") -> bytes:
    return _ENV % (i % 60, 137) + b"Precompile worker0 sample --> {'num_reqs': %d%s}\n" % (i, shape)


def _done(i: int, secs: bytes) -> bytes:
    return (_ENV % (i % 60, 188) + b"Compilation of worker0 sample --> {'num_reqs': %d} finished in "
            % i + secs + b" [secs].\n")


def _aot(i: int) -> bytes:
    return _ENV % (i % 60, 160) + b"AOT lower skipped for worker0 backbone (not a jit); will compile.\n"


_BOOT = (b"INFO 08-10 22:25:53 [__init__.py:76] vLLM API server version 0.11.0\n"
         + _ENV % (30, 949) + b"Compiling sampling with different input shapes.\n")


def _steps(count: int) -> bytes:
    return b"".join(_pre(i) + _done(i, b"%d.%02d" % (i % 3, i % 97)) + _aot(i) for i in range(count))


def _deferred_then_warm_up() -> bytes:
    """tpu-inference's AOT-skipped steps: 5 compiled, 3 deferred, the warm-up pass that compiles them
    ("Warm-up call pass finished ... over 3 tasks"), then 2 more deferred and no pass yet."""
    compiled = b"".join(_pre(i) + _done(i, b"1.50") for i in range(5))
    deferred = b"".join(_pre(i) + _aot(i) for i in range(5, 8))
    warm = _ENV % (40, 228) + b"Warm-up call pass finished in 194.87 [secs] over 3 tasks.\n"
    return compiled + deferred + warm + b"".join(_pre(i) + _aot(i) for i in range(8, 10))


#: Each case: a compile phase with one edge the fold must read as the hot loop does.
COMPILE_CASES = {
    "plain": _BOOT + _steps(40),
    "ends-in-flight": _BOOT + _steps(40) + _pre(99, b", 'x': 1"),
    "crlf": _crlf(_BOOT + _steps(40)),
    "keyword-in-shape": _BOOT + _steps(10)
    + _pre(50, b", 'k': '] Compilation of x finished in 9.5 [secs]'") + _done(50, b"1.25") + _steps(10),
    "two-finish-times": _BOOT + _steps(10) + _done(60, b"2.5 [secs] finished in 3.75") + _steps(10),
    "odd-time": _BOOT + _steps(10) + _done(61, b"1.2.3") + _done(62, b"in 7.5") + _steps(10),
    "redraw": _BOOT + _steps(10) + _pre(70)[:-1] + b"\r" + _done(70, b"4.5") + _steps(10),
    "ansi": _BOOT + _steps(10) + _done(71, b"\x1b[1m4.5\x1b[0m") + _steps(10),
    "array-dump-between": _BOOT + _steps(10)
    + b"".join(_ENV % (1, 137) + b"       1, 1, 1,\n" for _ in range(30)) + _steps(10),
    "failure-inside": _BOOT + _steps(10) + _pre(80)
    + b"ERROR 08-10 22:29:26 [core.py:708] Traceback (most recent call last):\n"
    + b"ERROR 08-10 22:29:26 [core.py:708] jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: "
    + b"Error allocating device buffer: Attempting to allocate 128.00M. That was not possible. "
    + b"There are 69.02M free.\n" + _steps(5),
    "pydantic-inside": _BOOT + _steps(5)
    + b"ERROR 08-10 22:29:26 [core.py:708] pydantic_core._pydantic_core.ValidationError: "
    + b"1 validation error for ModelConfig\n" + _steps(5),
    "invalid-utf8": _BOOT + _steps(5) + _pre(90, b", 'n': '\xff\xfe'") + _steps(5)
    + _pre(91, b", 'n': '\xe2\x82'"),
    "before-the-phase": _steps(5) + _BOOT + _steps(5),
    "restart": _BOOT + _steps(20) + _BOOT + _steps(3),
    "deferred-to-warm-up": _BOOT + _deferred_then_warm_up(),
}


@pytest.mark.parametrize("case", sorted(COMPILE_CASES))
def test_compile_runs_read_as_line_by_line(case: str) -> None:
    data = COMPILE_CASES[case]
    expected = _by_lines(data)
    assert expected.compile.steps_started > 0
    whole = StartupReader(year=2025)
    whole.feed(data)
    whole.close()
    assert whole.state == expected
    for seed in range(8):          # chunk borders inside step lines, runs cut anywhere
        assert _in_random_chunks(data, seed) == expected, f"seed {seed}"


def test_a_folded_run_has_the_values_of_its_lines() -> None:
    """The values themselves (not only both paths agreeing): 40 steps of 3 lines, summed in order."""
    data = _BOOT + _steps(40) + _pre(99, b", 'x': 1")
    reader = StartupReader(year=2025)
    reader.feed(data)
    reader.close()
    comp = reader.state.compile
    secs = [float(b"%d.%02d" % (i % 3, i % 97)) for i in range(40)]
    total = 0.0
    for s in secs:
        total += s
    assert (comp.steps_started, comp.steps_finished, comp.deferred_steps) == (41, 40, 40)
    assert comp.last_step_seconds == secs[-1] and comp.step_seconds_total == round(total, 6)
    assert comp.in_flight == "worker0 sample --> {'num_reqs': 99, 'x': 1}"
    assert reader.state.lines_read == 2 + 120 + 1


def test_a_repeated_quiet_bare_line_is_read_again_inside_a_traceback() -> None:
    """Bare lines that did nothing are skipped when repeated, but not once a traceback is open:
    there a type not ending in Error is a root cause."""
    quiet = b"(EngineCore pid=372) OutOfResources: out of resource: shared memory, Required: 1\n"
    data = (_BOOT + quiet * 5 + _steps(3)
            + b"(EngineCore pid=372) Traceback (most recent call last):\n"
            + b'(EngineCore pid=372)   File "/x/triton.py", line 3, in run\n' + quiet
            + b"(EngineCore pid=372) [Gloo] Rank 0 is connected to 0 peer ranks.\n" * 3)
    expected = _by_lines(data)
    assert expected.failure is not None and "OutOfResources" in expected.failure.evidence_line
    whole = StartupReader(year=2025)
    whole.feed(data)
    whole.close()
    assert whole.state == expected
    for seed in range(4):
        assert _in_random_chunks(data, seed) == expected, f"seed {seed}"


# ---- generated logs: what the bulk path counts, folds or skips, mixed with what it must read ----
_ENVELOPES = (
    b"(EngineCore pid=372) INFO 08-10 22:28:%02d [compilation_manager.py:137] ",
    b"(EngineCore pid=372) INFO 08-10 22:28:%02d [compilation_manager.py:188] ",
    b"INFO 08-10 22:29:%02d [core.py:9] ",
    b"2025-08-10T22:30:%02d.000000001Z (APIServer pid=1) WARNING 08-10 22:30:00 [api.py:1] ",
    b"(VllmWorker TP1 pid=3) INFO 08-10 22:31:%02d [tpu_worker.py:4] ",
)
_MESSAGES = (
    b"Precompile worker0 sample --> {'num_reqs': 8}",
    b"Precompile worker0 backbone --> {'k': '] Compilation of x finished in 9.5 [secs]'}",
    b"Precompile without an arrow",
    b"Compilation of worker0 sample --> {'num_reqs': 8} finished in 0.69 [secs].",
    b"Compilation of worker0 sample finished in 1.2.3 [secs].",
    b"Compilation of worker0 sample finished in in 7.5 [secs].",
    b"Compilation of x finished in 2.5 [secs] finished in 3.75 [secs].",
    b"Compilation finished in 4.0 [secs].",
    b"AOT lower skipped for worker0 backbone (not a jit); will compile in warmup.",
    b"AOT something else",
    b"Compiling the model with different input shapes.",
    b"       1, 1, 1, 1, 1, 1, 1, 1,",
    b"   three spaces, then text",
    b"       \xe2\x96\x88 banner dump",
    b"12 starts with a digit, Error inside",
    b"Routing something ordinary",
    b"Init model | hbm=[(8.97, 31.24)]GiB",
    b"GPU KV cache size: 1,151,744 tokens",
    b"vLLM API server version 0.11.0",
    b"Traceback (most recent call last):",
    b'File "/x/y.py", line 3, in load_model',
    b"ValueError: The model's max seq len (32768) is larger than the maximum number of tokens",
    b"that can be stored in KV cache (23648).",
    b"pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
    b"  Value error, something [type=value_error]",
    b"For further information visit https://errors.pydantic.dev",
    b"init engine (profile, create kv cache, warmup model) took 457.25 s (compilation: 402.27 s)",
)
_BARE = (b"(EngineCore pid=372) warnings.warn(", b"[Gloo] Rank 0 is connected to 0 peer ranks.",
         b"(EngineCore pid=372)   File \"/x.py\", line 1, in run", b"OutOfResources: out of resource",
         b"INFO:     Application startup complete.", b"")
_ENDINGS = (b"\n", b"\r\n", b"\r\r\n")
_DECORATIONS = (b"", b"", b"", b"\rINFO 08-10 22:29:27 [core.py:1] Precompile redrawn --> {'n': 1}",
                b"\x1b[0m", b" \xff\xfe", b" \xe2\x82")


@st.composite
def _generated_log(draw: st.DrawFn) -> bytes:
    lines = [b"INFO 08-10 22:25:53 [__init__.py:76] vLLM API server version 0.11.0\n",
             _ENVELOPES[0] % 1 + b"Compiling sampling with different input shapes.\n"]
    for _ in range(draw(st.integers(0, 60))):
        if draw(st.integers(0, 9)) == 0:
            text = draw(st.sampled_from(_BARE))
        else:
            text = (draw(st.sampled_from(_ENVELOPES)) % draw(st.integers(0, 59))
                    + draw(st.sampled_from(_MESSAGES)))
        ending = draw(st.sampled_from(_ENDINGS))
        lines.append(text + draw(st.sampled_from(_DECORATIONS)) + ending)
        lines.extend([text + ending] * draw(st.sampled_from((0, 0, 1, 5, 30))))   # a run
    return b"".join(lines)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_generated_log(), st.integers(0, 2**16))
def test_generated_logs_read_the_same_in_bulk_and_line_by_line(data: bytes, seed: int) -> None:
    """Compile steps, array dumps and skipped lines in any mix with the lines the bulk path must
    read (other envelopes, bare lines, tracebacks, multi-line messages, restarts), with CRLF,
    CR redraws, ANSI and invalid UTF-8 on any line: the bulk path reads the line path's state."""
    whole = StartupReader(year=2025)
    whole.feed(data)
    whole.close()
    expected = _by_lines(data)
    assert whole.state == expected
    assert _in_random_chunks(data, seed) == expected


# ---- batches of lines with their own times (``feed_lines``: a followed tail's batches) ---------
def _timed_lines(data: bytes) -> list[tuple[datetime | None, str]]:
    """Each line with a docker-like time (every 7th without one: its own stamp is used)."""
    text = data.decode("utf-8", "replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    start = datetime(2025, 8, 10, 22, 25, tzinfo=UTC)
    return [(None if i % 7 == 3 else start + timedelta(milliseconds=37 * i), line) for i, line in enumerate(lines)]


def _line_by_line(items: list[tuple[datetime | None, str]]) -> StartupState:
    reader = StartupReader(year=2025)
    for ts, line in items:
        reader.feed_line(line, ts)
    reader.close()
    return reader.state


def _in_random_batches(items: list[tuple[datetime | None, str]], seed: int) -> StartupState:
    rnd = random.Random(seed)
    reader = StartupReader(year=2025)
    pos = 0
    while pos < len(items):
        size = rnd.randint(1, rnd.choice((1, 5, 100, 2000)))
        reader.feed_lines(items[pos:pos + size])
        pos += size
    reader.close()
    return reader.state


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name[:2])
def test_batches_of_timed_lines_read_as_line_by_line(log: Path, variant: str) -> None:
    items = _timed_lines(VARIANTS[variant](log.read_bytes()))
    expected = _line_by_line(items)
    for seed in range(2):
        assert _in_random_batches(items, seed) == expected, f"seed {seed}"


@pytest.mark.parametrize("case", sorted(COMPILE_CASES))
def test_batches_of_compile_steps_read_as_line_by_line(case: str) -> None:
    items = _timed_lines(COMPILE_CASES[case])
    expected = _line_by_line(items)
    assert expected.compile.steps_started > 0
    for seed in range(4):
        assert _in_random_batches(items, seed) == expected, f"seed {seed}"


def test_a_batch_takes_each_line_time_not_the_batch_time() -> None:
    """The phases a batch enters are dated by their own lines' times (and the boot by its first)."""
    t0 = datetime(2025, 8, 10, 22, 0, tzinfo=UTC)
    items = [(t0, "INFO 08-10 21:00:00 [__init__.py:76] vLLM API server version 0.11.0"),
             (t0 + timedelta(seconds=40), "INFO 08-10 21:00:00 [compilation_manager.py:949] "
                                          "Compiling sampling with different input shapes."),
             (t0 + timedelta(seconds=41), "INFO 08-10 21:00:00 [compilation_manager.py:137] "
                                          "Precompile worker0 sample --> {'num_reqs': 8}")]
    reader = StartupReader(year=2025)
    reader.feed_lines(items)
    state = reader.state
    assert state == _line_by_line(items)
    marks = {mark.phase.value: mark.started_at for mark in state.timeline}
    assert marks["starting"] == t0
    assert marks["compiling"] == t0 + timedelta(seconds=40)
    assert state.compile.steps_started == 1


def test_steps_deferred_to_warm_up_count_as_done_once_a_warm_up_pass_compiled_them() -> None:
    """The panel no longer reads "5 done of 10 started" after the warm-up compiled the deferred steps."""
    from console.widgets.startup_panel import steps_words

    whole = StartupReader(year=2025)
    whole.feed(_BOOT + _deferred_then_warm_up())
    whole.close()
    comp = whole.state.compile
    assert (comp.steps_finished, comp.steps_started, comp.deferred_steps) == (5, 10, 5)
    assert (comp.deferred_done, comp.steps_done, comp.deferred_pending) == (3, 8, 2)
    assert steps_words(comp) == "8 done (3 compiled in warm-up), 2 deferred to warm-up"
    assert whole.state == _by_lines(_BOOT + _deferred_then_warm_up())


def test_after_ready_every_step_of_a_real_boot_is_done() -> None:
    """Corpus 10 (v6e-1, ready): 163 steps finished, 36 deferred and compiled in warm-up passes, 199 started."""
    from console.widgets.startup_panel import steps_words
    from remote.vllm_log.reader import read_log

    log = next((CORPUS / "vllm-logs").glob("10-*.log"), None)
    if log is None:
        pytest.skip("corpus file 10 not present")
    state = read_log(log)
    assert state.ready and state.compile.steps_started == 199
    assert steps_words(state.compile) == "199 done (36 compiled in warm-up)"       # was "163 done of 199 started"
