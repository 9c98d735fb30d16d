"""``tpu-console history``: table, JSON with benchmarks nested, show, exit codes, DB path resolution."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.cli import main
from store.history import HistoryStore


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "history.db"
    with HistoryStore(path) as store:
        a = store.start_launch(node="vllm-a", accelerator_type="v6e-8", model="Qwen/Qwen3-8B",
                               serve_args=["--max-model-len", "8192"], requested_at="2026-05-01T10:00:00Z")
        store.update_launch(a, outcome="ready", ready_at="2026-05-01T10:08:00Z", compile_seconds=381.0,
                            kv_cache_tokens=1_234_567, max_concurrency=150.75, max_model_len=8192)
        store.add_benchmark(a, "throughput", {"concurrency": 16}, {"output_tokens_per_s": 2210.5,
                                                                    "ttft_median_ms": 180.0}, usd_per_mtok=1.357)
        b = store.start_launch(node="vllm-b", accelerator_type="v5litepod-8", model="Qwen/Qwen3-8B",
                               requested_at="2026-05-01T11:00:00Z", replaced_launch_id=a)
        store.update_launch(b, outcome="failed", failure_kind="RESOURCE_EXHAUSTED",
                            failure_detail="[rank0] Ran out of memory in memory space hbm")
    return path


def test_table_lists_newest_first(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--db", str(db), "history"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["ID", "Requested", "(UTC)", "Node"]
    assert lines[1].split() == ["2", "2026-05-01", "11:00", "vllm-b", "v5litepod-8", "Qwen/Qwen3-8B", "failed",
                                "RESOURCE_EXHAUSTED"]
    assert lines[2].split() == ["1", "2026-05-01", "10:00", "vllm-a", "v6e-8", "Qwen/Qwen3-8B", "ready", "480",
                                "381", "1,234,567", "150.75", "8,192"]


def test_json_nests_benchmarks_and_filters(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--db", str(db), "history", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["id"] for d in data] == [2, 1]
    assert data[1]["benchmarks"][0]["output_tokens_per_s"] == 2210.5
    assert data[1]["benchmarks"][0]["params"] == {"concurrency": 16}
    assert data[0]["replaced_launch_id"] == 1 and data[0]["benchmarks"] == []
    assert main(["history", "--db", str(db), "--json", "--outcome", "ready", "--model", "Qwen3-8B"]) == 0
    assert [d["id"] for d in json.loads(capsys.readouterr().out)] == [1]
    assert main(["--db", str(db), "history", "--json", "--node", "vllm-b", "--limit", "1"]) == 0
    assert [d["id"] for d in json.loads(capsys.readouterr().out)] == [2]
    assert main(["--db", str(db), "history", "--node", "nowhere"]) == 0
    assert "match those filters" in capsys.readouterr().out


def test_show(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--db", str(db), "history", "show", "1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["id"] == 1 and shown["kv_cache_tokens"] == 1_234_567
    assert [b["usd_per_mtok"] for b in shown["benchmarks"]] == [1.357]
    assert main(["--db", str(db), "history", "show", "2"]) == 0
    out = capsys.readouterr().out
    assert "[rank0] Ran out of memory in memory space hbm" in out  # brackets are text, not markup
    assert "RESOURCE_EXHAUSTED" in out
    assert main(["--db", str(db), "history", "show", "1"]) == 0
    out = capsys.readouterr().out
    assert "2,210.5" in out and "1.357" in out  # the benchmark table


def test_exit_codes(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--db", str(db), "history", "show", "99"]) == 1
    assert "no launch with id 99" in capsys.readouterr().err
    for bad in (["--limit", "0"], ["--limit", "x"], ["--outcome", "great"], ["show", "one"]):
        with pytest.raises(SystemExit) as exc:
            main(["--db", str(db), "history", *bad])
        assert exc.value.code == 2
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("hello" * 1000)
    assert main(["--db", str(not_a_db), "history"]) == 2
    assert "not a database" in capsys.readouterr().err


def test_db_path_from_config_then_default(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'db_path = "{db}"\n')
    assert main(["--config", str(config), "history", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 2
    config.write_text("db_path = 3\n")
    assert main(["--config", str(config), "history"]) == 2
    assert "config error" in capsys.readouterr().err
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    assert main(["history", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert (tmp_path / "xdg" / "tpu-console" / "history.db").is_file()


def test_compare_two_launches(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--db", str(db), "history", "compare", "1", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["a"], data["b"]) == (1, 2)
    assert {"setting": "--max-model-len", "a": "8192", "b": None, "change": "removed"} in data["spec"]
    kv = next(f for f in data["figures"] if f["figure"] == "KV cache (tokens)")
    assert (kv["a"], kv["b"], kv["verdict"]) == (1_234_567, None, "")
    tok = next(f for f in data["figures"] if f["figure"] == "out tok/s @16 streams")
    assert (tok["a"], tok["b"]) == (2210.5, None)
    assert main(["--db", str(db), "history", "compare", "1", "2"]) == 0
    out = capsys.readouterr().out
    assert "A  launch 1  ready" in out and "B  launch 2  failed" in out
    assert "--max-model-len" in out and "removed" in out and "noise" in out
    assert main(["--db", str(db), "history", "compare", "1", "9"]) == 1
    assert "no launch with id 9" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["--db", str(db), "history", "compare", "1"])
    assert exc.value.code == 2


def test_export_json_and_csv_with_filters(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--db", str(db), "history", "export"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["id"] for d in data] == [2, 1] and data[1]["benchmarks"][0]["output_tokens_per_s"] == 2210.5
    assert main(["--db", str(db), "history", "export", "--format", "csv", "--outcome", "failed"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].startswith("id,node,") and len(rows) == 2 and rows[1].startswith("2,vllm-b,")
    assert main(["--db", str(db), "history", "export", "--text", "memory space", "--format", "csv"]) == 0
    assert [r.split(",")[0] for r in capsys.readouterr().out.splitlines()[1:]] == ["2"]
    assert main(["--db", str(db), "history", "export", "--accelerator", "v6e-8"]) == 0
    assert [d["id"] for d in json.loads(capsys.readouterr().out)] == [1]
    with pytest.raises(SystemExit) as exc:
        main(["--db", str(db), "history", "export", "--format", "xml"])
    assert exc.value.code == 2
