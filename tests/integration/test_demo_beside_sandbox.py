"""A second ``--demo`` while ``tpu-console sandbox`` runs: it uses that sandbox instead of starting
another, and a sandbox pushed to a temporary state dir removes it (key, history) when it stops."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from console.tui import ServicesStarter
from sandbox.runner import Sandbox, default_state_dir, sandbox_running


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def test_demo_uses_the_running_sandbox_and_leaves_it_running(state_home: Path) -> None:
    running = Sandbox(boot=False)                  # what `tpu-console sandbox` runs, at the default dir
    running.start()
    try:
        assert running.state_dir == default_state_dir() and str(running.state_dir).startswith(str(state_home))
        starter = ServicesStarter(argparse.Namespace(demo=True, readonly=False, db=None), None, None)
        services = starter()
        try:
            assert services.shared_sandbox_dir == running.state_dir and services.sandbox is None
            assert services.config.api_endpoint == running.api_endpoint
            assert services.db_path == running.state_dir / "history.db"
        finally:
            starter.stop()
            services.close()
        assert sandbox_running(running.state_dir)     # the console's quit left it running
    finally:
        running.stop()


def test_a_sandbox_pushed_to_a_temporary_dir_removes_it_when_it_stops(state_home: Path) -> None:
    first = Sandbox(boot=False)
    first.start()
    try:
        second = Sandbox(boot=False)               # the default dir is taken: a temporary one
        second.start()
        temp = second.state_dir
        try:
            assert second.temporary and temp != first.state_dir and (temp / "id_ed25519").exists()
        finally:
            second.stop()
        assert not temp.exists()                    # no private key, no history left behind
        assert first.state_dir.exists() and not first.temporary
    finally:
        first.stop()
    assert first.state_dir.exists()                 # the default dir is kept (it is the user's)
