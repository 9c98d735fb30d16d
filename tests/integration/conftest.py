"""Fixtures shared by the integration tests.

``real_vllm_url``: one real vLLM 0.32 (CPU, tiny local model) server for the whole session,
started with ``../shared/real-vllm/serve.sh`` (~60-100 s) the first time a test asks for it
and stopped at the end; every test that uses it skips, saying why, when ``setup.sh`` has not
been run or the shared folder is not beside the project. ``REAL_VLLM_URL`` (e.g.
``http://127.0.0.1:8011``, serving ``tiny``) reuses a running server instead.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REAL_VLLM_DIR = Path(os.environ.get("REAL_VLLM_DIR", Path.home() / ".cache" / "real-vllm"))
SERVE = ROOT.parent / "shared" / "real-vllm" / "serve.sh"


@pytest.fixture(scope="session")
def real_vllm_url() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of the session's real vLLM server (model ``tiny``)."""
    if url := os.environ.get("REAL_VLLM_URL"):
        yield url.rstrip("/")
        return
    if not (REAL_VLLM_DIR / "venv" / "bin" / "vllm").exists():
        pytest.skip(f"the real vLLM is not set up at {REAL_VLLM_DIR} (run ../shared/real-vllm/setup.sh)")
    if not SERVE.exists():
        pytest.skip(f"{SERVE} is absent (the shared folder is not beside the project)")
    port = 8000 + os.getpid() % 500 + 60
    started = subprocess.run([str(SERVE), str(port)], capture_output=True, text=True, timeout=900)
    if started.returncode != 0:
        pytest.skip(f"the real vLLM did not start: {started.stderr[-300:]}")
    pid = int(started.stdout.strip())
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        os.kill(pid, 15)
