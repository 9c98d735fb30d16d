"""Robustness properties of the vLLM log reader (hypothesis).

Arbitrary input never raises; any chunking gives the state whole-file reading gives;
memory does not grow with the log's length.
"""

from __future__ import annotations

import gc
import io
import json
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remote.vllm_log import patterns as pat
from remote.vllm_log.reader import StartupReader, read_log, summary_json
from tests.conftest import CORPUS

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "vllm-logs"
SAMPLES = {p.name[:2]: p.read_bytes() for p in sorted(FIXTURES.glob("*.log"))}
BOOT_LOG = CORPUS / "vllm-logs" / "10-tpujax-v6e1-full-boot-ready.log"
FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: Every transport artefact at once: CRLF and CR CR LF, lone CRs (tqdm), ANSI colours,
#: invalid UTF-8, multi-byte glyphs, blank lines, a line longer than the line cap with CRs
#: and an escape sequence around the cut, a docker time stamp, a 3-line OOM message.
NASTY = b"".join([
    SAMPLES["33"][:3000], b"\r\n",
    b"(APIServer pid=1) \x1b[32mINFO\x1b[0m:     Application startup complete.\r\n",
    b"(EngineCore pid=9) \rLoading safetensors 10%\rLoading safetensors 100%\r\n\x0c\xc2\x85",
    b"bad \xff\xfe bytes \xe2\x96 cut glyph \xe2\x96\x88 ok \xc6\x92\xe2\x88\x82\n\n\r\r\n",
    b"2026-11-30T01:02:03.123456789Z INFO 11-30 01:02:03 [tpu_runner.py:1264] "
    b"Init model | hbm=[(8.97, 31.24)]GiB\r\n",
    b"x" * (pat.MAX_LINE_CHARS - 3) + b"\r\r\x1b[31mtail" + b"y" * 5000 + b"\n",
    b"ERROR 09-30 03:53:19 [core.py:1434] ValueError: RESOURCE_EXHAUSTED: E0100: "
    b"RuntimeBufferAllocationFailure:\n",
    b"ERROR 09-30 03:53:19 [core.py:1434] Error allocating device buffer: Attempting to "
    b"allocate 128.00M. That was not possible. There are 69.02M free.; (0x0x0_HBM0)\n",
    SAMPLES["12"], b"trailing partial line without newline\r",
])


def _whole(data: bytes) -> object:
    return read_log(io.BytesIO(data))


def _chunked(data: bytes | str, cuts: list[int]) -> object:
    """Feed ``data`` cut at ``cuts`` (byte or character positions)."""
    reader = StartupReader()
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    for a, b in zip(points, points[1:]):
        reader.feed(data[a:b])
    reader.close()
    return reader.state


@FAST
@given(st.binary(max_size=4096))
def test_random_bytes_never_raise(data: bytes) -> None:
    reader = StartupReader()
    reader.feed(data)
    reader.close()
    json.dumps(summary_json(reader.state))


@FAST
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=2000))
def test_random_text_never_raises(text: str) -> None:
    reader = StartupReader()
    reader.feed(text)
    reader.feed_line(text)
    reader.close()
    json.dumps(summary_json(reader.state))


@FAST
@given(st.lists(st.tuples(st.sampled_from(sorted(SAMPLES)), st.integers(0, 10**6),
                          st.integers(0, 400)), max_size=40),
       st.randoms(use_true_random=False))
def test_truncated_and_shuffled_real_lines_never_raise(picks, rnd) -> None:
    """Real lines of every format, cut at random points and mixed out of order."""
    lines = []
    for name, index, cut in picks:
        sample = SAMPLES[name].split(b"\n")
        lines.append(sample[index % len(sample)][:cut].replace(b"\r", b""))
    rnd.shuffle(lines)
    state = _whole(b"".join(line + b"\n" for line in lines))
    assert state.lines_read == len(lines)
    json.dumps(summary_json(state))


def test_megabyte_lines_never_raise_and_are_cut() -> None:
    big = b"(EngineCore pid=1) INFO 01-01 00:00:00 [x.py:1] " + b"1, " * 350_000
    data = big + b"\n" + big + b"hbm=[(1.0, 2.0)]Gb\n" + SAMPLES["33"]
    whole = _whole(data)
    assert whole.lines_read == 2 + SAMPLES["33"].count(b"\n")
    assert whole.kv_cache_tokens == 16384  # the real lines after the huge ones still count
    assert _chunked(data, list(range(0, len(data), 65_536))) == whole
    reader = StartupReader()
    reader.feed(b"y" * 3_000_000)  # no newline at all: the held line stays capped
    assert reader.footprint()["pending_bytes"] <= pat.MAX_LINE_CHARS
    reader.close()
    assert reader.state.lines_read == 1


@FAST
@given(st.sampled_from(sorted(SAMPLES)), st.lists(st.integers(0, 10**6), max_size=30))
def test_random_chunk_splits_give_the_whole_file_state(name: str, cuts: list[int]) -> None:
    data = SAMPLES[name]
    assert _chunked(data, cuts) == _whole(data)


@FAST
@given(st.lists(st.integers(0, 10**6), max_size=40), st.booleans())
def test_random_splits_of_transport_artefacts_give_the_same_state(cuts, as_text) -> None:
    if as_text:  # str chunks split between characters
        text = NASTY.decode("utf-8", "replace")
        assert _chunked(text, cuts) == _whole(text.encode("utf-8"))
    else:
        assert _chunked(NASTY, cuts) == _whole(NASTY)


def test_single_byte_feeding_gives_the_same_state() -> None:
    reader = StartupReader()
    for i in range(len(NASTY)):
        reader.feed(NASTY[i:i + 1])
    reader.close()
    assert reader.state == _whole(NASTY)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_feed_line_gives_the_same_state_as_feed(name: str) -> None:
    text = SAMPLES[name].decode("utf-8", "replace")
    reader = StartupReader()
    for line in text.split("\n")[:-1]:
        reader.feed_line(line)
    if not text.endswith("\n"):
        reader.feed_line(text.rsplit("\n", 1)[-1])
    assert reader.state == _whole(SAMPLES[name])


def _boot_log() -> bytes:
    return BOOT_LOG.read_bytes() if BOOT_LOG.is_file() else SAMPLES["33"] + SAMPLES["30"]


def _reader_after(copies: int, data: bytes) -> StartupReader:
    reader = StartupReader()
    for _ in range(copies):
        reader.feed(data)
    reader.close()
    return reader


def test_memory_stays_flat_over_fifty_boots() -> None:
    data = _boot_log()
    once = summary_json(_reader_after(1, data).state)
    tracemalloc.start()
    try:
        gc.collect()
        small = _reader_after(5, data)
        gc.collect()
        after_5 = tracemalloc.get_traced_memory()[0]
        large = _reader_after(50, data)
        gc.collect()
        after_55 = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # the second reader holds one more reader's state, not 45 more boots' lines
    assert after_55 - after_5 < 256 * 1024
    for reader in (small, large):
        held = reader.footprint()
        assert held["timeline_marks"] <= 64 and held["hbm_snapshots"] <= 32
        assert held["pending_bytes"] == 0 and held["accumulating"] == 0
    state = large.state
    assert state.lines_read == 50 * data.count(b"\n")  # real lines, as wc -l counts them: a redraw is no line
    assert state.restarts == 49  # each copy starts with a new vLLM banner
    got = summary_json(state)
    timeline, once_timeline = got.pop("phase_timeline"), once.pop("phase_timeline")
    for key in ("lines_read", "restarts", "previous_failure"):
        got.pop(key), once.pop(key)
    assert got == once  # the newest boot reads exactly like a single one
    # same phases; line numbers count from the start of the stream
    offset = 49 * data.count(b"\n")
    assert [m["phase"] for m in timeline] == [m["phase"] for m in once_timeline]
    assert [m["line"] - offset for m in timeline[1:]] == [m["line"] for m in once_timeline[1:]]
