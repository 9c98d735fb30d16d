"""Schema migrations: a fresh database has the expected schema; every older version upgrades
with its data kept; released migrations keep producing the schema they shipped with."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlite_utils import Database

from store.history import HistoryStore, StoreError
from store.migrations import migration_names, migrations

ROOT = Path(__file__).resolve().parents[2]
NAMES = migration_names()

LAUNCH_COLUMNS_V1 = [
    ("id", "INTEGER"), ("node", "TEXT"), ("project", "TEXT"), ("zone", "TEXT"), ("accelerator_type", "TEXT"),
    ("provisioning_model", "TEXT"), ("origin", "TEXT"), ("container_id", "TEXT"), ("image", "TEXT"),
    ("image_digest", "TEXT"), ("model", "TEXT"), ("served_model_name", "TEXT"), ("container_spec", "TEXT"),
    ("serve_args", "TEXT"), ("requested_at", "TEXT"), ("started_at", "TEXT"), ("ready_at", "TEXT"),
    ("failed_at", "TEXT"), ("outcome", "TEXT"), ("phase_durations", "TEXT"), ("compile_seconds", "REAL"),
    ("engine_init_seconds", "REAL"), ("hbm", "TEXT"), ("kv_cache_tokens", "INTEGER"),
    ("max_concurrency", "REAL"), ("max_model_len", "INTEGER"), ("failure_kind", "TEXT"),
    ("failure_detail", "TEXT"), ("replaced_launch_id", "INTEGER"), ("compile_key", "TEXT"), ("notes", "TEXT"),
]
BENCH_COLUMNS_V1 = [
    ("id", "INTEGER"), ("launch_id", "INTEGER"), ("kind", "TEXT"), ("started_at", "TEXT"), ("params", "TEXT"),
    ("results", "TEXT"), ("price_per_hour_usd", "REAL"), ("usd_per_mtok", "REAL"),
]
EXPECTED_COLUMNS = {
    "launches": LAUNCH_COLUMNS_V1 + [("writer_host", "TEXT"), ("writer_pid", "INTEGER"),
                                     ("writer_pid_start", "TEXT"), ("restart_count", "INTEGER"),   # m007
                                     ("ssh_user", "TEXT"),   # m008
                                     ("metrics_kv_cache_tokens", "INTEGER"), ("metrics_max_concurrency", "REAL"),
                                     ("metrics_engines", "INTEGER"), ("metrics_gpu_memory_utilization", "REAL"),  # m009
                                     ("cluster", "TEXT"), ("namespace", "TEXT"), ("workload", "TEXT"),
                                     ("revision", "TEXT")],  # m010
    "benchmarks": BENCH_COLUMNS_V1 + [("concurrency", "INTEGER"), ("output_tokens_per_s", "REAL"),
                                      ("ttft_median_ms", "REAL"), ("tpot_median_ms", "REAL")],
}
EXPECTED_INDEXES = {
    "launches": {
        "launches_node": ["node"], "launches_model": ["model"],
        "launches_accelerator_model": ["accelerator_type", "model", "outcome"],
        "launches_outcome": ["outcome"], "launches_compile_key": ["compile_key"],
        "launches_container": ["node", "container_id"],
    },
    "benchmarks": {"benchmarks_launch": ["launch_id"], "benchmarks_kind_concurrency": ["kind", "concurrency"]},
}

# The v1 schema exactly as m001_initial released it: an old console's database.
V1_SQL = """
CREATE TABLE "_sqlite_migrations" ("id" INTEGER PRIMARY KEY, "migration_set" TEXT, "name" TEXT, "applied_at" TEXT);
CREATE UNIQUE INDEX "idx__sqlite_migrations_migration_set_name" ON "_sqlite_migrations" ("migration_set", "name");
CREATE TABLE "launches" ("id" INTEGER PRIMARY KEY, "node" TEXT NOT NULL, "project" TEXT, "zone" TEXT,
  "accelerator_type" TEXT, "provisioning_model" TEXT, "origin" TEXT NOT NULL DEFAULT 'console',
  "container_id" TEXT, "image" TEXT, "image_digest" TEXT, "model" TEXT, "served_model_name" TEXT,
  "container_spec" TEXT, "serve_args" TEXT, "requested_at" TEXT NOT NULL, "started_at" TEXT, "ready_at" TEXT,
  "failed_at" TEXT, "outcome" TEXT NOT NULL DEFAULT 'running', "phase_durations" TEXT, "compile_seconds" REAL,
  "engine_init_seconds" REAL, "hbm" TEXT, "kv_cache_tokens" INTEGER, "max_concurrency" REAL,
  "max_model_len" INTEGER, "failure_kind" TEXT, "failure_detail" TEXT, "replaced_launch_id" INTEGER,
  "compile_key" TEXT, "notes" TEXT);
CREATE TABLE "benchmarks" ("id" INTEGER PRIMARY KEY, "launch_id" INTEGER REFERENCES "launches"("id"),
  "kind" TEXT NOT NULL, "started_at" TEXT NOT NULL, "params" TEXT, "results" TEXT, "price_per_hour_usd" REAL,
  "usd_per_mtok" REAL);
INSERT INTO _sqlite_migrations (migration_set, name, applied_at)
  VALUES ('tpu_console_history', 'm001_initial', '2026-05-01 00:00:00.000000+00:00');
"""


def _columns(db: Database, table: str) -> list[tuple[str, str]]:
    return [(c.name, c.type) for c in db[table].columns]


def _indexes(db: Database, table: str) -> dict[str, list[str]]:
    return {i.name: i.columns for i in db[table].indexes}


def _check_current_schema(path: Path) -> None:
    db = Database(path)
    try:
        for table in ("launches", "benchmarks"):
            assert _columns(db, table) == EXPECTED_COLUMNS[table]
            assert _indexes(db, table) == EXPECTED_INDEXES[table]
        assert db["benchmarks"].foreign_keys[0].other_table == "launches"
        for table in ("launches", "benchmarks"):  # m005: ids are never reused
            assert '"id" INTEGER PRIMARY KEY AUTOINCREMENT' in db[table].schema
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []
        db.execute("INSERT INTO launches_fts(launches_fts) VALUES ('integrity-check')")  # raises when out of sync
        assert db["launches"].detect_fts() == "launches_fts"
        assert "tokenize='trigram'" in db["launches_fts"].schema
        assert [c.name for c in db["launches_fts"].columns] == [
            "node", "project", "zone", "accelerator_type", "model", "served_model_name", "image", "serve_args",
            "failure_kind", "failure_detail", "notes"]
        assert {t.name for t in db["launches"].triggers} == {"launches_ai", "launches_ad", "launches_au"}
        applied = [r["name"] for r in db["_sqlite_migrations"].rows_where(order_by="id")]
        assert applied == NAMES
    finally:
        db.close()


def _insert_v1_rows(db: Database) -> None:
    db.execute("""INSERT INTO launches (id, node, accelerator_type, model, serve_args, requested_at, outcome,
                    compile_seconds, hbm) VALUES
                  (1, 'vllm-a', 'v6e-8', 'Qwen/Qwen3-8B', '["--max-model-len", "8192"]',
                   '2026-04-01T10:00:00.000Z', 'ready', 380.5, '[{"label": "weights", "used_gib": [2.0],
                   "limit_gib": [31.25]}]'),
                  (2, 'vllm-a', 'v6e-8', 'Qwen/Qwen3-8B', '[]', '2026-04-01T11:00:00.000Z', 'running', NULL, NULL)""")
    db.execute("""INSERT INTO benchmarks (id, launch_id, kind, started_at, params, results, usd_per_mtok) VALUES
                  (1, 1, 'throughput', '2026-04-01T10:30:00.000Z', '{"streams": 16}',
                   '{"output_throughput": 2210.5, "median_ttft_ms": 180.0, "median_tpot_ms": 7.1}', 1.36)""")
    db.conn.commit()


def _check_v1_rows_kept(path: Path) -> None:
    with HistoryStore(path) as store:
        ready, running = store.get_launch(1), store.get_launch(2)
        assert ready.outcome == "ready" and ready.compile_seconds == 380.5
        assert ready.serve_args == ("--max-model-len", "8192")
        assert ready.hbm == ({"label": "weights", "used_gib": [2.0], "limit_gib": [31.25]},)
        # left running by a console that no longer exists (no writer recorded, older than us)
        assert running.outcome == "interrupted"
        # m004 indexed the rows already there for the free-text filter
        assert [l.id for l in store.list_launches(text="MAX-MODEL")] == [1]
        (bench,) = store.benchmarks_for(1)
        assert bench.params == {"streams": 16} and bench.usd_per_mtok == 1.36
        # m002 backfilled the plot columns from the JSON (or a v2 console wrote them)
        assert (bench.concurrency, bench.output_tokens_per_s, bench.ttft_median_ms, bench.tpot_median_ms) == (
            16, 2210.5, 180.0, 7.1)


def test_fresh_database_matches_expected_schema(tmp_path: Path) -> None:
    HistoryStore(tmp_path / "h.db").close()
    _check_current_schema(tmp_path / "h.db")


def test_released_m001_still_builds_the_v1_schema(tmp_path: Path) -> None:
    by_migration = Database(tmp_path / "m.db")
    migrations.apply(by_migration, stop_before=NAMES[1])
    literal = Database(tmp_path / "l.db")
    literal.conn.executescript(V1_SQL)
    for table in ("launches", "benchmarks"):
        assert _columns(by_migration, table) == _columns(literal, table)
        assert by_migration[table].schema.replace(" ", "").replace("\n", "") == \
            literal[table].schema.replace(" ", "").replace("\n", "")


def test_upgrade_from_hand_built_v1_database(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = Database(path)
    db.conn.executescript(V1_SQL)
    _insert_v1_rows(db)
    db.close()
    _check_v1_rows_kept(path)
    _check_current_schema(path)


@pytest.mark.parametrize("version", range(1, len(NAMES)))
def test_upgrade_from_every_older_version(tmp_path: Path, version: int) -> None:
    path = tmp_path / f"v{version}.db"
    db = Database(path)
    migrations.apply(db, stop_before=NAMES[version])
    assert [r["name"] for r in db["_sqlite_migrations"].rows] == NAMES[:version]
    _insert_v1_rows(db)
    if version >= 2:  # a v2 console wrote the plot columns along with the JSON
        db.execute("UPDATE benchmarks SET concurrency = 16, output_tokens_per_s = 2210.5, ttft_median_ms = 180.0, "
                   "tpot_median_ms = 7.1")
        db.conn.commit()
    db.close()
    _check_v1_rows_kept(path)
    _check_current_schema(path)
    with HistoryStore(path) as store:  # opening again is a no-op
        assert store.get_launch(1).compile_seconds == 380.5
    _check_current_schema(path)


def test_database_from_a_newer_console_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    HistoryStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
                     "VALUES ('tpu_console_history', 'm999_from_the_future', '2030-01-01')")
    with pytest.raises(StoreError, match="newer tpu-console .*m999_from_the_future"):
        HistoryStore(path)


OPEN_AFTER_GO = """
import sys, time
from pathlib import Path
from store.history import HistoryStore
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.005)
HistoryStore(sys.argv[1]).close()
print("opened")
"""


def test_two_processes_upgrading_at_once_apply_each_migration_once(tmp_path: Path) -> None:
    path, go = tmp_path / "old.db", tmp_path / "go"
    db = Database(path)
    db.conn.executescript(V1_SQL)
    _insert_v1_rows(db)
    db.close()
    children = [subprocess.Popen([sys.executable, "-c", OPEN_AFTER_GO, str(path), str(go)], cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    time.sleep(0.5)  # both have imported sqlite-utils and wait for the go file
    go.touch()
    for child in children:
        out, err = child.communicate(timeout=60)
        assert (child.returncode, out.strip()) == (0, "opened"), err
    _check_current_schema(path)
    db = Database(path)
    assert json.loads(db.execute("SELECT json_group_array(name) FROM _sqlite_migrations").fetchone()[0]) == NAMES
    db.close()


def _newest_launch_deleted_in_the_sqlite_shell(path: Path, launch_id: int) -> None:
    """What an operator does with ``sqlite3 history.db``: foreign keys are off there by default."""
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM launches WHERE id = ?", [launch_id])
    conn.commit()
    conn.close()


def test_a_deleted_launch_id_is_never_given_again(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    with HistoryStore(path) as store:
        first = store.start_launch(node="vllm-a", requested_at="2026-11-01T10:00:00Z")
        newest = store.start_launch(node="vllm-a", requested_at="2026-11-01T11:00:00Z")
        bench = store.add_benchmark(newest, "smoke", {"prompt": "hi"}, {"ok": True})
    _newest_launch_deleted_in_the_sqlite_shell(path, newest)
    with HistoryStore(path) as store:
        again = store.start_launch(node="vllm-b", requested_at="2026-11-01T12:00:00Z")
        assert again > newest > first
        assert store.benchmarks_for(again) == []
        assert store.benchmarks_for(newest)[0].id == bench  # the orphan stays where it was
        next_bench = store.add_benchmark(again, "smoke", {}, {"ok": True})
        assert next_bench > bench
        assert [l.id for l in store.list_launches(text="vllm-b")] == [again]


def test_m005_keeps_ids_and_gives_orphans_no_new_parent(tmp_path: Path) -> None:
    """A v4 database where the newest launch was deleted in the shell: its benchmark keeps its row
    (unlinked, the old id noted), the id sequence starts above it, every other id stays."""
    path = tmp_path / "v4.db"
    db = Database(path)
    migrations.apply(db, stop_before="m005_ids_never_reused")
    _insert_v1_rows(db)
    db.execute("""INSERT INTO launches (id, node, requested_at, outcome) VALUES
                  (3, 'vllm-b', '2026-04-02T10:00:00.000Z', 'ready')""")
    db.execute("""INSERT INTO benchmarks (id, launch_id, kind, started_at, params, results) VALUES
                  (2, 3, 'smoke', '2026-04-02T10:30:00.000Z', '{"prompt": "hi"}', '{"ok": true}'),
                  (3, 2, 'smoke', '2026-04-02T10:40:00.000Z', '{}', '{}')""")
    db.execute("UPDATE benchmarks SET concurrency = 16, output_tokens_per_s = 2210.5, ttft_median_ms = 180.0, "
               "tpot_median_ms = 7.1 WHERE id = 1")
    db.conn.commit()
    db.close()
    _newest_launch_deleted_in_the_sqlite_shell(path, 3)
    _check_v1_rows_kept(path)
    _check_current_schema(path)
    with HistoryStore(path) as store:
        assert [l.id for l in store.list_launches()] == [2, 1]
        assert [b.id for b in store.benchmarks_for(2)] == [3]
        new = store.start_launch(node="vllm-c", requested_at="2026-11-01T12:00:00Z")
        assert new == 4
        assert store.benchmarks_for(new) == []
    db = Database(path)
    orphan = db["benchmarks"].get(2)
    assert orphan["launch_id"] is None
    assert json.loads(orphan["params"]) == {"prompt": "hi", "deleted_launch_id": 3}
    assert json.loads(orphan["results"]) == {"ok": True}
    db.close()
