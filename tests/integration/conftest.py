"""Fixtures shared by the integration tests.

``real_vllm_url``: one real vLLM 0.32 (CPU, tiny local model) server for the whole session,
started with ``../shared/real-vllm/serve.sh`` (~60-100 s) and stopped at the end; every test
that uses it skips, saying why, when ``setup.sh`` has not been run or the shared folder is not
beside the project. ``REAL_VLLM_URL`` (e.g. ``http://127.0.0.1:8011``, serving ``tiny``) reuses
a running server instead. When the session has such tests, tests/conftest.py moves them to the
end and :func:`start_in_background` starts the server at collection, so its start overlaps the
other tests instead of adding a minute to the suite.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REAL_VLLM_DIR = Path(os.environ.get("REAL_VLLM_DIR", Path.home() / ".cache" / "real-vllm"))
SERVE = ROOT.parent / "shared" / "real-vllm" / "serve.sh"
#: The context the session's server is started with (the tiny model's ``max_position_embeddings``).
MAX_MODEL_LEN = 4096


_background: subprocess.Popen[str] | None = None


def _why_not() -> str | None:
    if not (REAL_VLLM_DIR / "venv" / "bin" / "vllm").exists():
        return f"the real vLLM is not set up at {REAL_VLLM_DIR} (run ../shared/real-vllm/setup.sh)"
    if not SERVE.exists():
        return f"{SERVE} is absent (the shared folder is not beside the project)"
    return None


def _port() -> int:
    return 8000 + os.getpid() % 500 + 60


def start_in_background() -> None:
    """Start ``serve.sh`` now without waiting (nothing when ``REAL_VLLM_URL`` is set or the real
    vLLM is not set up); :func:`real_vllm_url` waits for it. Its own process group, so
    :func:`stop_background` stops the server even before ``serve.sh`` printed its pid."""
    global _background
    if _background is not None or os.environ.get("REAL_VLLM_URL") or _why_not() is not None:
        return
    # The tiny model's whole context (serve.sh says 2,048): the metrics test's requests then run ~20 s on
    # 2 cores, longer than the verb's two samples even when a /metrics GET under load takes 5 s.
    # Its model runner on one core (VLLM_CPU_OMP_THREADS_BIND): with both, the API process starved and
    # admitted requests sent together one after another (each ran alone: never three at once).
    _background = subprocess.Popen([str(SERVE), str(_port()), "--max-model-len", str(MAX_MODEL_LEN)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                   env={**os.environ, "VLLM_CPU_OMP_THREADS_BIND": "0"})


def stop_background() -> None:
    """Stop a server :func:`start_in_background` started that no test waited for."""
    global _background
    if _background is not None:
        try:
            os.killpg(_background.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        _background.communicate()
        _background = None


def _warm_up(url: str) -> None:
    """One short completion, then four at once: a fresh vLLM CPU server's first requests are slow
    (its /metrics too), and so is its first batch of several (seen: three requests a fresh server took
    7-8 s apart, then ran together), which the first test would otherwise measure."""
    import threading

    import httpx

    def one() -> None:
        try:
            httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": "hello", "max_tokens": 8},
                       timeout=120, trust_env=False)
        except httpx.HTTPError:
            pass     # the tests say what is wrong with the server

    one()
    batch = [threading.Thread(target=one) for _ in range(4)]
    for thread in batch:
        thread.start()
    for thread in batch:
        thread.join()


@pytest.fixture(scope="session")
def real_vllm_url() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of the session's real vLLM server (model ``tiny``)."""
    global _background
    if url := os.environ.get("REAL_VLLM_URL"):
        yield url.rstrip("/")
        return
    if (why := _why_not()) is not None:
        pytest.skip(why)
    start_in_background()
    assert _background is not None
    started, _background = _background, None
    out, err = started.communicate(timeout=900)
    if started.returncode != 0:
        pytest.skip(f"the real vLLM did not start: {err[-300:]}")
    pid = int(out.strip())
    url = f"http://127.0.0.1:{_port()}"
    try:
        _warm_up(url)
        yield url
    finally:
        os.kill(pid, 15)
