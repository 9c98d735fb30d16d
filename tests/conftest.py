"""Shared pytest fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
CORPUS = SHARED / "corpus"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests on the real vLLM server run last, and its ~60 s start begins now, behind the others."""
    real = [item for item in items if "real_vllm_url" in getattr(item, "fixturenames", ())]
    if not real:
        return
    moved = set(real)
    items[:] = [item for item in items if item not in moved] + real
    from tests.integration.conftest import start_in_background

    start_in_background()


def pytest_sessionfinish() -> None:
    from tests.integration.conftest import stop_background

    stop_background()


@pytest.fixture
def corpus_dir() -> Path:
    """``../shared/corpus`` from the project root; skips when it is absent."""
    if not CORPUS.is_dir():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    return CORPUS


@pytest.fixture(autouse=True)
def _state_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's ``$XDG_STATE_HOME`` (the launches' logs) is a temporary folder, never the user's."""
    state = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state
