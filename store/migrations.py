"""The history schema, as numbered migrations registered with sqlite-utils' ``Migrations``.

Rules: a migration is never edited once released; a change is a new ``mNNN_`` function
appended at the end (registration order is application order). Migrations must not
import the rest of the store: each one spells out the columns it creates, so it keeps
producing the same schema whatever later code looks like. ``HistoryStore`` applies the
pending ones when it opens a database, inside one write transaction (each migration in
its own savepoint), so two consoles opening an old database at once upgrade it once.

Schema after all migrations (JSON columns hold TEXT):

- ``launches``: see :class:`store.records.Launch` for the meaning of each column, plus
  ``writer_host``/``writer_pid``/``writer_pid_start`` (m003): the console process that
  records the launch, so a later console can tell a dead writer's ``running`` launch
  (interrupted) from a live one's.
- ``benchmarks``: see :class:`store.records.BenchmarkRecord`.
- ``launches_fts`` (m004): trigram full-text index of the launches' text columns.
- m005: both tables' ids are ``AUTOINCREMENT`` (a deleted launch's id is never reused).
- ``model_limits`` (m006): per model, its maximum length in tokens as vLLM derives it, with
  where and when it was read (``HistoryStore.record_model_limit`` / ``model_limit``).
- ``launches.restart_count`` (m007): docker's ``RestartCount`` after a restart in place.
- ``launches.ssh_user`` (m008): the user the console logged in to the node as (the OS Login
  POSIX name, ``[ssh] user``, ``--user`` or the local user).
- ``launches.metrics_*`` (m009): what the server's ``/metrics`` said once it served
  (``vllm:cache_config_info`` summed over its engines): ``metrics_kv_cache_tokens``,
  ``metrics_max_concurrency``, ``metrics_engines``, ``metrics_gpu_memory_utilization``.
- ``launches.cluster/namespace/workload/revision`` (m010): a GKE launch's where and which revision.
"""

from __future__ import annotations

import sqlite3

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

#: The migration set; its name is the key in ``_sqlite_migrations``.
migrations = Migrations("tpu_console_history")


def migration_names() -> list[str]:
    """Names of the registered migrations, in application order (``m001_initial``...)."""
    return [m.name for m in migrations._migrations]  # sqlite-utils has no public accessor


@migrations()
def m001_initial(db: Database) -> None:
    """Launches and benchmarks, as first specified in the history issue."""
    db.table("launches").create(
        {
            "id": int,
            "node": str,
            "project": str,
            "zone": str,
            "accelerator_type": str,
            "provisioning_model": str,
            "origin": str,
            "container_id": str,
            "image": str,
            "image_digest": str,
            "model": str,
            "served_model_name": str,
            "container_spec": str,
            "serve_args": str,
            "requested_at": str,
            "started_at": str,
            "ready_at": str,
            "failed_at": str,
            "outcome": str,
            "phase_durations": str,
            "compile_seconds": float,
            "engine_init_seconds": float,
            "hbm": str,
            "kv_cache_tokens": int,
            "max_concurrency": float,
            "max_model_len": int,
            "failure_kind": str,
            "failure_detail": str,
            "replaced_launch_id": int,
            "compile_key": str,
            "notes": str,
        },
        pk="id",
        not_null={"node", "origin", "requested_at", "outcome"},
        defaults={"origin": "console", "outcome": "running"},
    )
    db.table("benchmarks").create(
        {
            "id": int,
            "launch_id": int,
            "kind": str,
            "started_at": str,
            "params": str,
            "results": str,
            "price_per_hour_usd": float,
            "usd_per_mtok": float,
        },
        pk="id",
        not_null={"kind", "started_at"},
        foreign_keys=[("launch_id", "launches", "id")],
    )


@migrations()
def m002_benchmark_plot_columns(db: Database) -> None:
    """Scalar copies of the figures the history pane plots, backfilled from the JSON."""
    table = db.table("benchmarks")
    table.add_column("concurrency", int)
    table.add_column("output_tokens_per_s", float)
    table.add_column("ttft_median_ms", float)
    table.add_column("tpot_median_ms", float)
    db.execute(
        """
        UPDATE benchmarks SET
          concurrency = COALESCE(json_extract(params, '$.concurrency'),
                                 json_extract(params, '$.streams'),
                                 json_extract(results, '$.max_concurrency')),
          output_tokens_per_s = COALESCE(json_extract(results, '$.output_tokens_per_s'),
                                         json_extract(results, '$.output_throughput')),
          ttft_median_ms = COALESCE(json_extract(results, '$.ttft_median_ms'),
                                    json_extract(results, '$.median_ttft_ms')),
          tpot_median_ms = COALESCE(json_extract(results, '$.tpot_median_ms'),
                                    json_extract(results, '$.median_tpot_ms'))
        WHERE json_valid(params) AND json_valid(results)
        """
    )


@migrations()
def m003_writer_and_indexes(db: Database) -> None:
    """Who writes each launch (for interrupted marking) and the indexes the pane needs."""
    launches = db.table("launches")
    launches.add_column("writer_host", str)
    launches.add_column("writer_pid", int)
    launches.add_column("writer_pid_start", str)
    # Lists are newest first by id; one-column indexes end in the rowid, so an equality
    # filter walks its index backwards already in that order.
    launches.create_index(["node"], index_name="launches_node")
    launches.create_index(["model"], index_name="launches_model")
    launches.create_index(["accelerator_type", "model", "outcome"], index_name="launches_accelerator_model")
    launches.create_index(["outcome"], index_name="launches_outcome")
    launches.create_index(["compile_key"], index_name="launches_compile_key")
    launches.create_index(["node", "container_id"], index_name="launches_container")
    benchmarks = db.table("benchmarks")
    benchmarks.create_index(["launch_id"], index_name="benchmarks_launch")
    benchmarks.create_index(["kind", "concurrency"], index_name="benchmarks_kind_concurrency")


@migrations()
def m004_launch_text_search(db: Database) -> None:
    """Substring search for the free-text filter: FTS5 with the trigram tokenizer (SQLite 3.34+),
    kept in step with ``launches`` by triggers. Container ids are left out (random hex bloats
    a trigram index; :meth:`HistoryStore.find_launch_by_container` covers them)."""
    db.table("launches").enable_fts(
        ["node", "project", "zone", "accelerator_type", "model", "served_model_name", "image",
         "serve_args", "failure_kind", "failure_detail", "notes"],
        tokenize="trigram", create_triggers=True,
    )


_M005_LAUNCHES = """
CREATE TABLE "launches_m005" (
   "id" INTEGER PRIMARY KEY AUTOINCREMENT,
   "node" TEXT NOT NULL,
   "project" TEXT,
   "zone" TEXT,
   "accelerator_type" TEXT,
   "provisioning_model" TEXT,
   "origin" TEXT NOT NULL DEFAULT 'console',
   "container_id" TEXT,
   "image" TEXT,
   "image_digest" TEXT,
   "model" TEXT,
   "served_model_name" TEXT,
   "container_spec" TEXT,
   "serve_args" TEXT,
   "requested_at" TEXT NOT NULL,
   "started_at" TEXT,
   "ready_at" TEXT,
   "failed_at" TEXT,
   "outcome" TEXT NOT NULL DEFAULT 'running',
   "phase_durations" TEXT,
   "compile_seconds" REAL,
   "engine_init_seconds" REAL,
   "hbm" TEXT,
   "kv_cache_tokens" INTEGER,
   "max_concurrency" REAL,
   "max_model_len" INTEGER,
   "failure_kind" TEXT,
   "failure_detail" TEXT,
   "replaced_launch_id" INTEGER,
   "compile_key" TEXT,
   "notes" TEXT,
   "writer_host" TEXT,
   "writer_pid" INTEGER,
   "writer_pid_start" TEXT
)"""
# References the new launches table by its temporary name: renaming that table rewrites the
# reference, so the old launches table is dropped with no benchmark pointing at it.
_M005_BENCHMARKS = """
CREATE TABLE "benchmarks_m005" (
   "id" INTEGER PRIMARY KEY AUTOINCREMENT,
   "launch_id" INTEGER REFERENCES "launches_m005"("id"),
   "kind" TEXT NOT NULL,
   "started_at" TEXT NOT NULL,
   "params" TEXT,
   "results" TEXT,
   "price_per_hour_usd" REAL,
   "usd_per_mtok" REAL,
   "concurrency" INTEGER,
   "output_tokens_per_s" REAL,
   "ttft_median_ms" REAL,
   "tpot_median_ms" REAL
)"""
_M005_LAUNCH_COLUMNS = (
    "id, node, project, zone, accelerator_type, provisioning_model, origin, container_id, image, image_digest, "
    "model, served_model_name, container_spec, serve_args, requested_at, started_at, ready_at, failed_at, "
    "outcome, phase_durations, compile_seconds, engine_init_seconds, hbm, kv_cache_tokens, max_concurrency, "
    "max_model_len, failure_kind, failure_detail, replaced_launch_id, compile_key, notes, writer_host, "
    "writer_pid, writer_pid_start")
_M005_BENCH_COLUMNS = ("id, launch_id, kind, started_at, params, results, price_per_hour_usd, usd_per_mtok, "
                       "concurrency, output_tokens_per_s, ttft_median_ms, tpot_median_ms")


@migrations()
def m005_ids_never_reused(db: Database) -> None:
    """``AUTOINCREMENT`` ids for launches and benchmarks: a deleted launch's id is never given again,
    so no benchmark (or ``replaced_launch_id``) left behind attaches to a newer launch.

    SQLite cannot add ``AUTOINCREMENT`` to a table, so both are copied, ids and rows as they are, in
    the store's one migration transaction (sqlite-utils' ``transform()`` keeps AUTOINCREMENT but has
    no way to add it). ``PRAGMA foreign_keys`` cannot be switched off inside a transaction, so the
    copies are dropped in child-first order with no row referencing a dropped table. Benchmarks whose
    launch was deleted outside tpu-console (foreign keys are off in the sqlite3 shell) keep their row
    with ``launch_id`` NULL and the old id in ``params.deleted_launch_id``. The id sequence starts
    above every launch id still referenced. The FTS triggers (m004) are recreated as they were; the
    index needs no rebuild since the rowids do not change. ``PRAGMA foreign_key_check`` runs last.

    Raises:
        sqlite3.IntegrityError: a foreign key is still violated after the copy (the store
            rolls back and reports a ``StoreError``).
    """
    conn = db.conn
    triggers = [row[0] for row in conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'launches' ORDER BY name")]
    indexes = [row[0] for row in conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name IN ('launches', 'benchmarks') "
        "AND sql IS NOT NULL ORDER BY name")]
    conn.execute(
        "UPDATE benchmarks SET params = json_set(CASE WHEN json_valid(params) THEN params ELSE '{}' END, "
        "'$.deleted_launch_id', launch_id), launch_id = NULL "
        "WHERE launch_id IS NOT NULL AND launch_id NOT IN (SELECT id FROM launches)")
    highest_referenced = conn.execute(
        "SELECT max(COALESCE((SELECT max(id) FROM launches), 0), "
        "COALESCE((SELECT max(replaced_launch_id) FROM launches), 0), "
        "COALESCE((SELECT max(json_extract(params, '$.deleted_launch_id')) FROM benchmarks "
        "WHERE json_valid(params)), 0))").fetchone()[0]
    conn.execute(_M005_LAUNCHES)
    conn.execute(f"INSERT INTO launches_m005 ({_M005_LAUNCH_COLUMNS}) "
                 f"SELECT {_M005_LAUNCH_COLUMNS} FROM launches ORDER BY id")
    conn.execute(_M005_BENCHMARKS)
    conn.execute(f"INSERT INTO benchmarks_m005 ({_M005_BENCH_COLUMNS}) "
                 f"SELECT {_M005_BENCH_COLUMNS} FROM benchmarks ORDER BY id")
    conn.execute("DROP TABLE benchmarks")
    conn.execute("DROP TABLE launches")  # drops its indexes and the FTS triggers with it
    conn.execute('ALTER TABLE "launches_m005" RENAME TO "launches"')
    conn.execute('ALTER TABLE "benchmarks_m005" RENAME TO "benchmarks"')
    if highest_referenced:
        conn.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'launches'", [highest_referenced])
        conn.execute("INSERT INTO sqlite_sequence (name, seq) SELECT 'launches', ? "
                     "WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'launches')",
                     [highest_referenced])
    for sql in indexes + triggers:
        conn.execute(sql)
    violations = conn.execute("PRAGMA foreign_key_check").fetchall()
    if violations:
        raise sqlite3.IntegrityError(f"m005: foreign keys violated after the copy: {violations[:5]}")


@migrations()
def m006_model_limits(db: Database) -> None:
    """The served models' own maximum length (``max_model_len_tokens``, what vLLM derives from
    config.json), one row per model: where it was read (``source``: the config.json path in the
    container, or ``boot log``) and when (``observed_at``, ISO 8601 UTC). Numbered m006 so it
    never collides with another branch's m005; independent of every other table."""
    db.table("model_limits").create(
        {"model": str, "max_model_len_tokens": int, "source": str, "observed_at": str},
        pk="model", not_null={"max_model_len_tokens"},
    )


@migrations()
def m007_launch_restart_count(db: Database) -> None:
    """``launches.restart_count`` (INTEGER): docker's ``RestartCount`` of a container that restarted
    in place; the launch keeps one row per container, describing its newest boot."""
    db.table("launches").add_column("restart_count", int)


@migrations()
def m008_launch_ssh_user(db: Database) -> None:
    """``launches.ssh_user`` (TEXT, NULL for launches recorded before): the user the console logged
    in to the node as when it recorded the launch (OS Login's POSIX name, e.g. ``alice_example_com``)."""
    db.execute('ALTER TABLE "launches" ADD COLUMN "ssh_user" TEXT')


@migrations()
def m009_launch_metrics_kv_cache(db: Database) -> None:
    """What ``/metrics`` said after ready, beside the log's figures (NULL until the console read it):
    ``metrics_kv_cache_tokens`` (INTEGER, the stated ``kv_cache_size_tokens`` summed over the engines),
    ``metrics_max_concurrency`` (REAL, ``kv_cache_max_concurrency`` summed), ``metrics_engines``
    (INTEGER, engines labelled), ``metrics_gpu_memory_utilization`` (REAL)."""
    for column, kind in (("metrics_kv_cache_tokens", "INTEGER"), ("metrics_max_concurrency", "REAL"),
                         ("metrics_engines", "INTEGER"), ("metrics_gpu_memory_utilization", "REAL")):
        db.execute(f'ALTER TABLE "launches" ADD COLUMN "{column}" {kind}')


@migrations()
def m010_launch_gke_workload(db: Database) -> None:
    """Launches on GKE (NULL for a TPU VM's): ``cluster`` (TEXT, the GKE cluster or kubeconfig context),
    ``namespace`` (TEXT), ``workload`` (TEXT, ``deploy/NAME`` or ``lws/NAME``) and ``revision`` (TEXT, the
    Deployment's ``deployment.kubernetes.io/revision`` the launch made, or the object's resourceVersion
    after the patch when the revision is not known yet). ``node`` holds ``CLUSTER/NAMESPACE/WORKLOAD``."""
    for column in ("cluster", "namespace", "workload", "revision"):
        db.execute(f'ALTER TABLE "launches" ADD COLUMN "{column}" TEXT')
