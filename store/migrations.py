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
- ``model_limits`` (m006): per model, its maximum length in tokens as vLLM derives it, with
  where and when it was read (``HistoryStore.record_model_limit`` / ``model_limit``).
"""

from __future__ import annotations

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
