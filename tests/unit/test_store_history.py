"""HistoryStore against a real SQLite file: launches, filters, known failures, compile ETA, export."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from store import BenchmarkRecord, HistoryStore, Launch, compile_key
from store.history import StoreError, iso_time
from store.records import parse_flags

ARGS_8K = ["--max-model-len", "8192", "--tensor-parallel-size", "8", "--gpu-memory-utilization", "0.95"]


@pytest.fixture
def store(tmp_path: Path) -> HistoryStore:
    s = HistoryStore(tmp_path / "data" / "history.db")
    yield s
    s.close()


def test_opening_creates_parent_dirs_and_wal(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "history.db"
    with HistoryStore(path) as s:
        assert s._db.journal_mode == "wal"
        assert s._db.conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    assert path.is_file()


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    path.write_bytes(b"this is a text file, not SQLite" * 100)
    with pytest.raises(StoreError, match="history.db: cannot use the history database: file is not a database"):
        HistoryStore(path)


def test_launch_round_trip_and_incremental_updates(store: HistoryStore) -> None:
    launch_id = store.start_launch(
        node="vllm-a", project="p1", zone="us-east5-b", accelerator_type="v6e-8", provisioning_model="flex-start",
        container_id="c" * 64, image="vllm/vllm-tpu:nightly", image_digest="sha256:" + "d" * 64,
        model="Qwen/Qwen3-8B", served_model_name="qwen", serve_args=ARGS_8K,
        container_spec={"image": "vllm/vllm-tpu:nightly", "env": {"TPU_NAME": "vllm-a"}, "volumes": [],
                        "network": "host", "restart_policy": "unless-stopped", "ports": [8000]},
        requested_at="2026-05-01T12:00:00Z")
    got = store.get_launch(launch_id)
    assert got is not None and got.outcome == "running" and got.origin == "console"
    assert got.requested_at == "2026-05-01T12:00:00.000Z"
    assert got.compile_key == compile_key("v6e-8", "Qwen/Qwen3-8B", ARGS_8K)
    store.update_launch(launch_id, started_at="2026-05-01T12:00:05+00:00",
                        hbm=[{"label": "weights", "used_gib": [2.1] * 8, "limit_gib": [31.25] * 8}])
    store.update_launch(launch_id, phase_durations={"weights": 40.5, "compile": 381.25}, compile_seconds=381.25,
                        engine_init_seconds=402.0, kv_cache_tokens=1_234_567, max_concurrency=150.7,
                        max_model_len=8192, ready_at="2026-05-01T12:07:30Z", outcome="ready")
    got = store.get_launch(launch_id)
    assert got.outcome == "ready" and got.ready_at == "2026-05-01T12:07:30.000Z"
    assert got.started_at == "2026-05-01T12:00:05.000Z"
    assert got.time_to_ready_s == 450.0
    assert got.hbm == ({"label": "weights", "used_gib": [2.1] * 8, "limit_gib": [31.25] * 8},)
    assert got.phase_durations == {"weights": 40.5, "compile": 381.25}
    assert (got.kv_cache_tokens, got.max_concurrency, got.max_model_len) == (1_234_567, 150.7, 8192)
    assert got.serve_args == tuple(ARGS_8K) and got.container_spec["restart_policy"] == "unless-stopped"
    assert store.get_launch(launch_id + 99) is None


def test_update_recomputes_compile_key_and_rejects_bad_input(store: HistoryStore) -> None:
    launch_id = store.start_launch(node="n", accelerator_type="v5litepod-8", model="m", serve_args=ARGS_8K)
    store.update_launch(launch_id, serve_args=["--max-model-len", "4096"])
    assert store.get_launch(launch_id).compile_key == compile_key("v5litepod-8", "m", ["--max-model-len", "4096"])
    with pytest.raises(ValueError, match="unknown launch fields: colour"):
        store.update_launch(launch_id, colour="red")
    with pytest.raises(ValueError, match="outcome must be one of"):
        store.update_launch(launch_id, outcome="exploded")
    with pytest.raises(ValueError, match="origin must be one of"):
        store.start_launch(node="n", origin="alien")
    with pytest.raises(ValueError, match="a launch needs a node"):
        store.start_launch(model="m")
    with pytest.raises(ValueError):
        store.update_launch(launch_id, ready_at="yesterday")
    with pytest.raises(KeyError, match="no launch with id 999"):
        store.update_launch(999, outcome="ready")
    assert store.get_launch(launch_id).outcome == "running"  # failed updates changed nothing


def test_compile_key_ignores_order_spelling_and_irrelevant_flags() -> None:
    a = compile_key("v6e-8", "m", ["--max-model-len", "8192", "--kv-cache-dtype", "FP8", "--port", "8000"])
    b = compile_key("v6e-8", "m", ["--kv_cache_dtype=fp8", "--max-model-len=8192"])
    assert a == b and a.startswith("v6e-8:") and len(a) == len("v6e-8:") + 16
    assert compile_key("v6e-4", "m", ["--max-model-len", "8192", "--kv-cache-dtype", "fp8"]) != a
    assert compile_key("v6e-8", "m", ["--max-model-len", "4096", "--kv-cache-dtype", "fp8"]) != a
    assert compile_key("v6e-8", "other", ["--max-model-len", "8192", "--kv-cache-dtype", "fp8"]) != a
    assert parse_flags(["vllm", "serve", "m", "--enable-auto-tool-choice", "--no-enable-prefix-caching",
                        "--tool-call-parser", "hermes"]) == {
        "enable-auto-tool-choice": "true", "enable-prefix-caching": "false", "tool-call-parser": "hermes"}


def _seed(store: HistoryStore) -> dict[str, int]:
    ids = {}
    rows = [
        ("old-ready", "vllm-a", "v6e-8", "Qwen/Qwen3-8B", "ready", "2026-05-01T10:00:00Z", {}),
        ("a-failed", "vllm-a", "v6e-8", "Qwen/Qwen3-8B", "failed", "2026-05-01T11:00:00Z",
         {"failure_kind": "RESOURCE_EXHAUSTED", "failure_detail": "Ran out of memory in memory space hbm"}),
        ("b-ready", "vllm-b", "v5litepod-8", "meta-llama/Llama-3.1-8B-Instruct", "ready", "2026-05-01T12:00:00Z",
         {"notes": "50% faster with the cache_volume"}),
        ("b-interrupted", "vllm-b", "v5litepod-8", "Qwen/Qwen3-8B", "interrupted", "2026-05-01T13:00:00Z", {}),
    ]
    for key, node, acc, model, outcome, at, extra in rows:
        ids[key] = store.start_launch(node=node, accelerator_type=acc, model=model, outcome=outcome,
                                      requested_at=at, serve_args=ARGS_8K, **extra)
    return ids


def test_list_newest_first_and_filters(store: HistoryStore) -> None:
    ids = _seed(store)

    def keys(launches: list[Launch]) -> list[int]:
        return [launch.id for launch in launches]

    assert keys(store.list_launches()) == [ids["b-interrupted"], ids["b-ready"], ids["a-failed"], ids["old-ready"]]
    assert keys(store.list_launches(limit=2)) == [ids["b-interrupted"], ids["b-ready"]]
    assert keys(store.list_launches(node="vllm-a")) == [ids["a-failed"], ids["old-ready"]]
    assert keys(store.list_launches(outcome="ready")) == [ids["b-ready"], ids["old-ready"]]
    assert keys(store.list_launches(model="Qwen/Qwen3-8B")) == [ids["b-interrupted"], ids["a-failed"], ids["old-ready"]]
    assert keys(store.list_launches(model="Qwen3-8B", node="vllm-b")) == [ids["b-interrupted"]]
    assert keys(store.list_launches(accelerator_type="v5litepod-8", outcome="ready")) == [ids["b-ready"]]
    assert keys(store.list_launches(text="out of MEMORY")) == [ids["a-failed"]]
    assert keys(store.list_launches(text="%")) == [ids["b-ready"]]  # % is literal, not a wildcard
    assert keys(store.list_launches(text="_")) == [ids["b-ready"], ids["a-failed"]]  # so is _
    assert keys(store.list_launches(text="llama")) == [ids["b-ready"]]
    assert keys(store.list_launches(text="ock")) == []  # three characters: the trigram index
    assert keys(store.list_launches(text="fas")) == [ids["b-ready"]]
    assert keys(store.list_launches(text='max-model-len", "8192')) == keys(store.list_launches())
    assert keys(store.list_launches(text='OR "x')) == []  # quotes and operators are plain text
    store.update_launch(ids["old-ready"], notes="rerun after the XLA cache fix")
    assert keys(store.list_launches(text="xla cache")) == [ids["old-ready"]]  # the index follows updates
    assert store.list_launches(node="nope") == []


def test_find_launch_by_container(store: HistoryStore) -> None:
    full = "4f2a9c" + "0" * 58
    first = store.start_launch(node="vllm-a", container_id=full, requested_at="2026-05-01T10:00:00Z")
    store.start_launch(node="vllm-b", container_id=full, requested_at="2026-05-01T11:00:00Z")
    assert store.find_launch_by_container("vllm-a", full).id == first
    assert store.find_launch_by_container("vllm-a", full[:12]).id == first  # docker ps short id
    assert store.find_launch_by_container("vllm-a", full[:6]) is None  # too short to be sure
    assert store.find_launch_by_container("vllm-c", full) is None


def test_known_failures_match_type_model_and_flags(store: HistoryStore) -> None:
    ids = _seed(store)
    reordered = ["--gpu-memory-utilization=0.95", "--tensor-parallel-size", "8", "--max-model-len", "8192",
                 "--port", "8001", "--api-key", "xyz"]
    found = store.known_failures("v6e-8", "Qwen/Qwen3-8B", reordered)
    assert [f.id for f in found] == [ids["a-failed"]]
    assert found[0].failure_kind == "RESOURCE_EXHAUSTED" and found[0].requested_at.startswith("2026-05-01T11")
    assert store.known_failures("v6e-8", "Qwen/Qwen3-8B", ARGS_8K[:4] + ["--gpu-memory-utilization", "0.9"]) == []
    assert store.known_failures("v6e-4", "Qwen/Qwen3-8B", ARGS_8K) == []
    assert store.known_failures("v6e-8", "Qwen/Qwen3-4B", ARGS_8K) == []


def test_compile_eta_is_the_median_of_ready_launches_with_that_key(store: HistoryStore) -> None:
    key = compile_key("v5litepod-8", "Qwen/Qwen3-8B", ARGS_8K)
    assert store.compile_eta_s(key) is None
    for i, (seconds, ready) in enumerate([(857.0, True), (497.0, True), (510.0, True), (30.0, False)]):
        launch_id = store.start_launch(node="n", accelerator_type="v5litepod-8", model="Qwen/Qwen3-8B",
                                       serve_args=ARGS_8K, requested_at=f"2026-05-0{i + 1}T00:00:00Z")
        store.update_launch(launch_id, compile_seconds=seconds,
                            **({"ready_at": f"2026-05-0{i + 1}T00:15:00Z", "outcome": "ready"} if ready
                               else {"outcome": "failed"}))
    other = store.start_launch(node="n", accelerator_type="v5litepod-8", model="Qwen/Qwen3-8B",
                               serve_args=["--max-model-len", "1024"])
    store.update_launch(other, compile_seconds=5.0, ready_at="2026-05-09T00:00:00Z")
    assert store.compile_eta_s(key) == 510.0  # the failed 30 s and the other key's 5 s are left out


def test_benchmarks_attach_to_launches(store: HistoryStore) -> None:
    launch_id = store.start_launch(node="n")
    first = store.add_benchmark(launch_id, "throughput", {"streams": 16, "prompt_tokens": 1024},
                                {"output_throughput": 2210.5, "median_ttft_ms": 180.0, "median_tpot_ms": 7.1},
                                price_per_hour_usd=10.8, usd_per_mtok=1.357, started_at="2026-05-01T10:00:00Z")
    second = store.add_benchmark(launch_id, "smoke", {}, {"latency_s": 0.4}, started_at="2026-05-01T11:00:00Z")
    bare = store.add_benchmark(None, "longctx", {"depths": [0.1]}, {"found": [True]})
    got = store.benchmarks_for(launch_id)
    assert [b.id for b in got] == [first, second]
    assert got[0] == BenchmarkRecord(
        id=first, launch_id=launch_id, kind="throughput", started_at="2026-05-01T10:00:00.000Z",
        params={"streams": 16, "prompt_tokens": 1024},
        results={"output_throughput": 2210.5, "median_ttft_ms": 180.0, "median_tpot_ms": 7.1},
        price_per_hour_usd=10.8, usd_per_mtok=1.357, concurrency=16, output_tokens_per_s=2210.5,
        ttft_median_ms=180.0, tpot_median_ms=7.1)
    assert bare > second and store.benchmarks_for(999) == []
    with pytest.raises(ValueError, match="kind must be one of"):
        store.add_benchmark(launch_id, "vibes", {}, {})
    with pytest.raises(KeyError, match="no launch with id 999"):
        store.add_benchmark(999, "smoke", {}, {})


def test_export_json_and_csv(store: HistoryStore) -> None:
    ids = _seed(store)
    store.update_launch(ids["b-ready"], ready_at="2026-05-01T12:10:00Z", kv_cache_tokens=500_000)
    store.add_benchmark(ids["b-ready"], "throughput", {"concurrency": 1}, {"output_tokens_per_s": 90.0})
    launches = store.list_launches(node="vllm-b")
    data = json.loads(store.export(launches, "json"))
    assert [d["id"] for d in data] == [ids["b-interrupted"], ids["b-ready"]]
    assert data[0]["benchmarks"] == []
    assert [b["output_tokens_per_s"] for b in data[1]["benchmarks"]] == [90.0]
    assert data[1]["kv_cache_tokens"] == 500_000 and data[1]["serve_args"] == ARGS_8K
    rows = list(csv.DictReader(io.StringIO(store.export(launches, "csv"))))
    assert [int(r["id"]) for r in rows] == [ids["b-interrupted"], ids["b-ready"]]
    assert rows[1]["time_to_ready_s"] == "600.0" and rows[1]["notes"] == "50% faster with the cache_volume"
    assert json.loads(rows[1]["serve_args"]) == ARGS_8K and rows[1]["ready_at"] == "2026-05-01T12:10:00.000Z"
    with pytest.raises(ValueError, match="export format"):
        store.export(launches, "xml")


def test_iso_time_is_fixed_width_utc() -> None:
    assert iso_time("2026-05-01T14:00:00+02:00") == "2026-05-01T12:00:00.000Z"
    assert iso_time("2026-05-01T12:00:00.5") == "2026-05-01T12:00:00.500Z"
    assert iso_time("2026-05-01T12:00:00.5Z") > iso_time("2026-05-01T12:00:00Z")


def test_known_failures_newest_first_up_to_limit(store: HistoryStore) -> None:
    ids = [store.start_launch(node="n", accelerator_type="v6e-8", model="m", serve_args=ARGS_8K, outcome="failed")
           for _ in range(3)]
    assert [f.id for f in store.known_failures("v6e-8", "m", ARGS_8K, limit=2)] == ids[:0:-1]


def test_newest_first_means_most_recently_recorded(store: HistoryStore) -> None:
    booted = store.start_launch(node="a", requested_at="2026-05-01T12:00:00Z")
    # a container started earlier elsewhere, noticed afterwards: recorded later, listed first
    observed = store.start_launch(node="a", origin="observed", requested_at="2026-05-01T09:00:00Z")
    assert [l.id for l in store.list_launches()] == [observed, booted]
    assert [l.id for l in store.list_launches(text="a")] == [observed, booted]
    assert [l.id for l in store.list_launches(node="a")] == [observed, booted]


def test_every_sqlite_error_inside_the_store_is_a_store_error(tmp_path: Path) -> None:
    """A failure after opening (here: the connection is gone) is a StoreError naming the file,
    not a bare sqlite3 error escaping into a worker."""
    from store.history import HistoryStore

    store = HistoryStore(tmp_path / "history.db")
    store.close()
    with pytest.raises(StoreError, match=r"history\.db: history list launches failed"):
        store.list_launches()
    with pytest.raises(StoreError, match=r"history start launch failed"):
        store.start_launch(node="n", model="m")


def test_model_limits_are_remembered_per_model(tmp_path):
    from store import StoreError
    from store.history import HistoryStore

    with HistoryStore(tmp_path / "h.db") as store:
        assert store.model_limit("google/gemma-3-27b-it") is None
        store.record_model_limit("google/gemma-3-27b-it", 131072, "/root/.cache/x/config.json")
        store.record_model_limit("Qwen/Qwen3-8B", 40960, "boot log")
        store.record_model_limit("google/gemma-3-27b-it", 131072, "boot log")     # newest wins, one row
        assert store.model_limit("google/gemma-3-27b-it") == (131072, "boot log")
        assert store.model_limit("Qwen/Qwen3-8B") == (40960, "boot log")
        with pytest.raises(StoreError, match="positive length"):
            store.record_model_limit("Qwen/Qwen3-8B", 0, "x")
    with HistoryStore(tmp_path / "h.db") as again:                                  # it persists
        assert again.model_limit("Qwen/Qwen3-8B") == (40960, "boot log")


def test_the_database_is_created_owner_only(tmp_path) -> None:
    import os
    import stat

    path = tmp_path / "new" / "history.db"
    old = os.umask(0o022)
    try:
        with HistoryStore(path) as store:
            store.start_launch(node="vllm-a", accelerator_type="v6e-8", model="m", requested_at="2026-05-01T10:00:00Z")
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in path.parent.iterdir()}
    finally:
        os.umask(old)
    assert modes["history.db"] == 0o600
    assert all(mode == 0o600 for name, mode in modes.items() if name.startswith("history.db")), modes
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
