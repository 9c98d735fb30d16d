"""The article's node end to end on the whole sandbox: ``request`` a v5e-1 flex-start node in
us-west4-a running google/gemma-4-E2B-it on vllm/vllm-tpu:v0.30.0, ``watch`` it to ready over SSH
(the real log reader on the simulated container's ``docker logs``), then ``swap`` to 131,072 tokens
and watch again. The figures are the article's, in log time; the sandbox boots in wall seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.cli import main
from sandbox.runner import Sandbox

IMAGE = "vllm/vllm-tpu:v0.30.0"
MODEL = "google/gemma-4-E2B-it"


@pytest.fixture
def box(tmp_path: Path):
    sandbox = Sandbox(tmp_path / "sandbox", boot_s=1.5, fast_boot_s=0.3, time_scale=0.05)
    sandbox.start()
    yield sandbox
    sandbox.stop()


def _watch(box: Sandbox, capsys) -> dict:
    code = main(["--config", str(box.config_path), "watch", "demo-v5e", "--json", "--poll-s", "0.05"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def test_request_watch_ready_shows_the_articles_figures_and_131072_gives_2_45x(box: Sandbox, capsys,
                                                                               tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    code = main(["--config", str(box.config_path), "--db", str(db), "request", "demo-v5e",
                 "--project", "inference-prod", "--zone", "us-west4-a", "--accelerator-type", "v5litepod-1",
                 "--provisioning-model", "flex-start", "--max-run-duration", "4h", "--image", IMAGE,
                 "--model", MODEL, "--set", "max-model-len=8192", "--yes", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    summary = _watch(box, capsys)
    assert (summary["phase"], summary["model"], summary["tpu_type"], summary["vllm_version_in_log"]) == (
        "ready", MODEL, "v5litepod-1", "0.30.0")
    assert [(s["label"], s["used"], s["limit"]) for s in summary["hbm_snapshots"]] == [
        ("Init worker", [0.0], [15.75]), ("Init model", [8.97], [15.75]), ("Init kv-cache", [14.51], [15.75])]
    assert summary["memory_statistics"] == {"total_hbm_limit_gb": 15.75, "total_hbm_limit_cap_gb": 14.49,
                                            "total_hbm_used_gb": 8.97, "total_hbm_avail_gb": 5.52}
    assert (summary["kv_cache_tokens"], summary["max_concurrency"], summary["max_concurrency_tokens_per_request"]) \
        == (321_280, 39.22, 8192)
    assert (summary["engine_init_seconds"], summary["compile_seconds"]) == (503.54, 413.41)

    code = main(["--config", str(box.config_path), "--db", str(db), "swap", "demo-v5e",
                 "--set", "max-model-len=131072", "--yes"])
    assert code == 0, capsys.readouterr()
    capsys.readouterr()
    summary = _watch(box, capsys)
    assert (summary["kv_cache_tokens"], summary["max_concurrency"], summary["max_concurrency_tokens_per_request"]) \
        == (321_280, 2.45, 131_072)
    assert summary["memory_statistics"]["total_hbm_avail_gb"] == 5.52
