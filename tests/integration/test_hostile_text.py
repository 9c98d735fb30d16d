"""Hostile text from the TPU API, logs, containers and servers through every CLI verb.

Each verb shows :data:`tests.hostile.HOSTILE` as :data:`tests.hostile.SHOWN` (markup literal, no
control bytes, newline as ``\\n``) and exits with its usual code, never a traceback; ``--json``
keeps the data.
"""

from __future__ import annotations

import json

import pytest

from console.cli import main
from remote.models import utc_now
from tests.hostile import HOSTILE, HOSTILE_NAME, SHOWN, SHOWN_NAME, assert_clean, hostile_world


@pytest.fixture(scope="module")
def hostile_api():
    from sandbox.tpu_server import SandboxTpuApi

    server = SandboxTpuApi(hostile_world(utc_now()))
    yield server.start()
    server.stop()


def test_nodes_table_shows_hostile_api_fields_literally(hostile_api, capsys) -> None:
    code = main(["nodes", "--api-endpoint", hostile_api, "--project", "inference-prod"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert_clean(captured.out)
    assert SHOWN in captured.out                          # the RUNTIME column (no wrapping)
    assert SHOWN_NAME in captured.out
    failure = " ".join(line.strip("│ ") for line in captured.out.splitlines() if "qr-failed" in line or "│" in line)
    assert "[/x][link=http://e.x]L[/link]" in failure    # FAILURE (wraps: its first part)


def test_nodes_json_keeps_the_data(hostile_api, capsys) -> None:
    assert main(["nodes", "--api-endpoint", hostile_api, "--project", "inference-prod", "--json"]) == 0
    out = capsys.readouterr().out
    assert_clean(out)                                     # JSON escapes the controls...
    data = json.loads(out)
    node = next(n for n in data["nodes"] if n["name"] == "vllm-v5e-a")
    assert node["runtime_version"] == HOSTILE             # ... and keeps them
    assert any(n["name"] == HOSTILE_NAME for n in data["nodes"])
    assert next(q for q in data["queued_resources"] if q["name"] == "qr-failed")["failure"] == HOSTILE
