"""Every corpus sidecar's ``expected`` values, read back from its real log.

Runs over ``../shared/corpus/vllm-logs`` (skipped when absent) and over the copies in
``tests/fixtures/vllm-logs`` (always). Values are compared exactly, except one documented
normalisation of free-text ``failure_detail`` strings (see ``_detail_parts``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from console.cli import main
from remote.vllm_log.reader import read_log, summary_json
from tests.conftest import CORPUS

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "vllm-logs"
CORPUS_LOGS = CORPUS / "vllm-logs"
#: The corpus has 22 logs; all of them must be present when the corpus is.
CORPUS_COUNT = 22


def _logs(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.log")) if folder.is_dir() else []


def _expected(log: Path) -> dict:
    return json.loads(log.with_suffix(".json").read_text(encoding="utf-8"))["expected"]


def _detail_parts(expected: str) -> list[str]:
    """Free-text sidecar details may carry the transcriber's own parenthetical
    ``(during ...)``; the remaining ``; ``-separated parts must all appear in ours."""
    text = re.sub(r" \(during [^)]*\)", "", expected)
    return [part for part in text.split("; ") if part]


def _check(log: Path, got: dict) -> None:
    expected = _expected(log)
    assert expected, f"{log.name}: sidecar has no expected values"
    for key, want in expected.items():
        assert key in got, f"{log.name}: --json lacks key {key!r}"
        have = got[key]
        if key == "hbm_snapshots":
            have = [{k: snap[k] for k in ("label", "used", "limit", "unit_suffix")}
                    for snap in have]
        if key == "failure_detail" and isinstance(want, str):
            assert isinstance(have, str), f"{log.name}: failure_detail {have!r}"
            for part in _detail_parts(want):
                assert part in have, f"{log.name}: failure_detail lacks {part!r}: {have!r}"
            continue
        assert have == want, f"{log.name}: {key} = {have!r}, expected {want!r}"


@pytest.mark.parametrize("log", _logs(FIXTURES), ids=lambda p: p.stem[:2])
def test_fixture_copy_matches_sidecar(log: Path) -> None:
    _check(log, summary_json(read_log(log)))


@pytest.mark.parametrize("index", range(CORPUS_COUNT))
def test_corpus_log_matches_sidecar(corpus_dir: Path, index: int) -> None:
    logs = _logs(corpus_dir / "vllm-logs")
    assert len(logs) == CORPUS_COUNT
    _check(logs[index], summary_json(read_log(logs[index])))


def test_cli_json_gives_every_sidecar_value(corpus_dir: Path, capsys) -> None:
    for log in _logs(corpus_dir / "vllm-logs"):
        assert main(["log-summary", str(log), "--json"]) == 0
        _check(log, json.loads(capsys.readouterr().out))


def test_fixture_copies_are_byte_exact(corpus_dir: Path) -> None:
    for copy in sorted(FIXTURES.glob("*.*")):
        original = corpus_dir / "vllm-logs" / copy.name
        if copy.suffix in (".log", ".json"):
            assert copy.read_bytes() == original.read_bytes(), copy.name


def test_failure_kinds_cover_the_sidecar_vocabulary(corpus_dir: Path) -> None:
    """Every corpus failure is diagnosed with a hint and an explanation."""
    for log in _logs(corpus_dir / "vllm-logs"):
        state = read_log(log)
        if _expected(log).get("failure"):
            assert state.failure is not None
            assert state.failure.explanation.endswith(".")
            assert state.failure.hint
            assert state.failure.evidence_line
