"""The reader's bulk path (``feed``: whole buffers, runs of skipped lines counted in bulk) and its
line-by-line path (``feed_line``) read the same state from every corpus log, whatever the chunking.

Variants of each log exercise what the bulk path special-cases: every line CRLF-ended, every
line behind a ``docker logs --timestamps`` stamp (the stamp differs on each line, so a run of
array-dump lines cannot be matched byte for byte), and tqdm redraws (lone CRs) inside a run.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from remote.startup import StartupState
from remote.vllm_log.reader import SKIP_HEAD, StartupReader
from tests.conftest import CORPUS

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "vllm-logs"
LOGS = sorted((CORPUS / "vllm-logs").glob("*.log")) or sorted(FIXTURES.glob("*.log"))


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
