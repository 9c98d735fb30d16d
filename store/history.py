"""The history store: the one reader and writer of the SQLite history database.

Opening a :class:`HistoryStore` creates the file (and its parent directories), switches
it to WAL, applies pending migrations and marks launches left ``running`` by a console
that has died as ``interrupted``. Every write is one ``BEGIN IMMEDIATE`` transaction,
so two consoles on the same database serialize their writes (waiting up to
``busy_timeout_ms``) and a ``kill -9`` loses at most the write in flight. Every value is
scrubbed of secrets (:mod:`remote.secrets`) before it is written.

A store object belongs to the thread that opened it (sqlite3's rule); open another one
in a worker thread if needed.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import os
import socket
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlite_utils import Database

from remote.secrets import scrub_args, scrub_value
from store.errors import StoreError
from store.migrations import migration_names, migrations
from store.records import (
    BENCHMARK_KINDS,
    LAUNCH_FIELDS,
    BenchmarkRecord,
    Launch,
    behaviour_flags,
    benchmark_from_row,
    benchmark_plot_columns,
    compile_key,
    iso_time,
    launch_from_row,
    launch_row,
)

_LAUNCH_SELECT = "SELECT id, " + ", ".join(LAUNCH_FIELDS) + " FROM launches"
_LAUNCH_COLUMNS_L = "l.id, " + ", ".join(f"l.{name}" for name in LAUNCH_FIELDS)
_BENCH_SELECT = "SELECT " + ", ".join(f.name for f in fields(BenchmarkRecord)) + " FROM benchmarks"
_TEXT_COLUMNS = ("node", "project", "zone", "accelerator_type", "model", "served_model_name",
                 "image", "serve_args", "failure_kind", "failure_detail", "notes")  # as in launches_fts
#: ``running`` launches of another host are only marked interrupted after this long.
OTHER_HOST_STALE_S = 6 * 3600
#: How many recent compile times :meth:`HistoryStore.compile_eta_s` takes the median of.
COMPILE_ETA_SAMPLES = 20

_F = TypeVar("_F", bound=Callable[..., Any])


def _store_errors(method: _F) -> _F:
    """Translate the ``sqlite3.Error`` / ``OSError`` a public method lets out into :class:`StoreError`."""
    what = method.__name__.replace("_", " ")

    @functools.wraps(method)
    def guarded(self: HistoryStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"{self.path}: history {what} failed: {exc}") from exc

    return guarded  # type: ignore[return-value]


def _pid_start(pid: int) -> str | None:
    """Start time of ``pid`` in clock ticks since boot (Linux ``/proc``), ``"Z"`` for a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    after_comm = stat[stat.rfind(")") + 2:].split()
    return "Z" if after_comm[0] == "Z" else after_comm[19]


def _process_alive(pid: int, pid_start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except OSError:
        return False
    now_start = _pid_start(pid)
    if now_start == "Z":
        return False
    return pid_start is None or now_start is None or now_start == pid_start


_HOST = socket.gethostname()
_PID = os.getpid()
_PID_START = _pid_start(_PID)
_PROCESS_STARTED_AT = iso_time(datetime.now(UTC))


class HistoryStore:
    """Launches and benchmarks in one SQLite file.

    Args:
        path: database file; parent directories are created.
        busy_timeout_ms: how long a write waits for another console's write to finish.

    Raises:
        StoreError: the file cannot be created or opened, is not a database, or was
            written by a newer tpu-console (unknown migrations).
    """

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 5000) -> None:
        self.path = Path(path).expanduser()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            # Created owner-only (its -wal/-shm files follow the database's mode): launches
            # hold container specs and failure text, scrubbed but still the operator's.
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
            conn = sqlite3.connect(str(self.path), timeout=busy_timeout_ms / 1000)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"{self.path}: cannot open the history database: {exc}") from None
        self._db = Database(conn, execute_plugins=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            conn.execute("PRAGMA foreign_keys = ON")
            self._open_retrying(busy_timeout_ms / 1000)
            self.mark_interrupted()
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StoreError(f"{self.path}: cannot use the history database: {exc}") from None
        except StoreError:
            conn.close()
            raise

    def _open_retrying(self, timeout_s: float) -> None:
        """Switch to WAL and migrate, retrying while another process does the same.

        SQLite answers "database is locked" at once, without its busy handler, when two
        connections change the journal mode of one file together; retry until ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        delay_s = 0.01
        while True:
            try:
                self._db.enable_wal()
                with self._write():
                    self._check_not_newer()
                    migrations.apply(self._db)
                return
            except sqlite3.OperationalError as exc:
                if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                    raise
                time.sleep(delay_s)
                delay_s = min(delay_s * 2, 0.2)

    # --- plumbing ---------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Database]:
        """One write transaction, taking the write lock up front (no deadlock on upgrade)."""
        conn = self._db.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            if conn.in_transaction:
                conn.rollback()
            raise
        try:
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.rollback()
            raise

    def _check_not_newer(self) -> None:
        known = set(migration_names())
        unknown = [m.name for m in migrations.applied(self._db) if m.name not in known]
        if unknown:
            raise StoreError(f"{self.path}: written by a newer tpu-console (schema migration "
                             f"{unknown[-1]}); upgrade tpu-console to use it")

    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        cursor = self._db.conn.execute(sql, tuple(params))
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    def _writer(self) -> dict[str, Any]:
        return {"writer_host": _HOST, "writer_pid": _PID, "writer_pid_start": _PID_START}

    # --- launches ---------------------------------------------------------------------

    @_store_errors
    def mark_interrupted(self) -> list[int]:
        """Mark ``running`` launches whose console is gone as ``interrupted``.

        A launch is interrupted when the process that last wrote it (same host) no longer
        runs; when its writer is unknown (rows older than migration m003) and it was
        requested before this process started; or when it belongs to another host and is
        older than :data:`OTHER_HOST_STALE_S`. Launches of a live console are left alone.

        Returns:
            Ids of the launches marked.
        """
        stale_other = iso_time(datetime.fromtimestamp(
            datetime.now(UTC).timestamp() - OTHER_HOST_STALE_S, UTC))
        ids = []
        with self._write() as db:  # read and mark in one go: no console claims a row in between
            rows = self._rows("SELECT id, requested_at, writer_host, writer_pid, writer_pid_start "
                              "FROM launches WHERE outcome = 'running'")
            for row in rows:
                if row["writer_pid"] is None:
                    gone = row["requested_at"] < _PROCESS_STARTED_AT
                elif row["writer_host"] != _HOST:
                    gone = row["requested_at"] < stale_other
                else:
                    gone = not _process_alive(row["writer_pid"], row["writer_pid_start"])
                if gone:
                    ids.append(row["id"])
            if ids:
                db.conn.execute(f"UPDATE launches SET outcome = 'interrupted' "
                                f"WHERE id IN ({','.join('?' * len(ids))})", ids)
        return ids

    @_store_errors
    def start_launch(self, **fields: Any) -> int:
        """Record a new launch (one transaction) and return its id.

        Args:
            **fields: any :class:`Launch` attribute but ``id``; ``node`` is required.
                ``requested_at`` defaults to now, ``outcome`` to ``running``, ``origin`` to
                ``console``; ``compile_key`` is computed from accelerator type, model and
                serve args when not given. Times may be ``datetime`` or ISO strings.

        Raises:
            ValueError: unknown field, missing node, bad outcome/origin or time.
        """
        if not fields.get("node"):
            raise ValueError("a launch needs a node")
        fields.setdefault("requested_at", datetime.now(UTC))
        if fields.get("compile_key") is None and fields.get("accelerator_type") and fields.get("model"):
            fields["compile_key"] = compile_key(fields["accelerator_type"], fields["model"],
                                                scrub_args(fields.get("serve_args") or []))
        row = launch_row(fields) | self._writer()
        with self._write() as db:
            return int(db.table("launches").insert(row).last_pk or 0)

    @_store_errors
    def update_launch(self, launch_id: int, **fields: Any) -> None:
        """Add facts to a launch (one transaction); this console becomes its writer.

        JSON fields (``hbm``, ``phase_durations``...) are replaced as a whole. When
        accelerator type, model or serve args change, ``compile_key`` is recomputed.

        Raises:
            KeyError: no launch has that id.
            ValueError: unknown field, bad outcome/origin or time.
        """
        row = launch_row(fields)
        with self._write() as db:
            current = self._rows("SELECT accelerator_type, model, serve_args FROM launches WHERE id = ?",
                                 [launch_id])
            if not current:
                raise KeyError(f"no launch with id {launch_id}")
            if "compile_key" not in fields and {"accelerator_type", "model", "serve_args"} & set(fields):
                merged = current[0] | {k: row[k] for k in ("accelerator_type", "model", "serve_args") if k in row}
                if merged["accelerator_type"] and merged["model"]:
                    row["compile_key"] = compile_key(merged["accelerator_type"], merged["model"],
                                                     json.loads(merged["serve_args"] or "[]"))
            db.table("launches").update(launch_id, row | self._writer())

    @_store_errors
    def get_launch(self, launch_id: int) -> Launch | None:
        """The launch with that id, or ``None``."""
        rows = self._rows(f"{_LAUNCH_SELECT} WHERE id = ?", [launch_id])
        return launch_from_row(rows[0]) if rows else None

    @_store_errors
    def list_launches(self, *, limit: int = 200, node: str | None = None, model: str | None = None,
                      accelerator_type: str | None = None, outcome: str | None = None,
                      text: str | None = None, workload: str | None = None, cluster: str | None = None,
                      namespace: str | None = None) -> list[Launch]:
        """Launches, newest first (most recently recorded: ids grow with time), filtered.

        Args:
            limit: at most this many.
            node, accelerator_type, outcome: exact match.
            workload, cluster, namespace: a GKE launch's (``deploy/NAME``, the cluster's name, the
                namespace), exact match.
            model: exact match; without a ``/`` it also matches the name after the owner
                (``Qwen3-8B`` finds ``Qwen/Qwen3-8B``).
            text: case-insensitive substring of node, project, zone, accelerator type,
                model, served name, image, serve args, failure or notes (3+ characters use
                the trigram index, shorter text scans the rows).
        """
        where, params = [], []
        for column, value in (("node", node), ("accelerator_type", accelerator_type), ("outcome", outcome),
                              ("workload", workload), ("cluster", cluster), ("namespace", namespace)):
            if value:
                where.append(f"l.{column} = ?")
                params.append(value)
        if model:
            if "/" in model:
                where.append("l.model = ?")
                params.append(model)
            else:
                where.append("(l.model = ? OR l.model LIKE ? ESCAPE '\\')")
                params += [model, "%/" + _like_escape(model)]
        text = (text or "").strip()
        source, order = "launches l", "l.id"
        if len(text) >= 3:  # the trigram index finds substrings of 3+ characters, newest first
            source, order = "launches_fts JOIN launches l ON l.id = launches_fts.rowid", "launches_fts.rowid"
            where.append("launches_fts MATCH ?")
            params.append('"' + text.replace('"', '""') + '"')
        elif text:
            haystack = " || ' ' || ".join(f"COALESCE(l.{c}, '')" for c in _TEXT_COLUMNS)
            where.append(f"({haystack}) LIKE ? ESCAPE '\\'")
            params.append(f"%{_like_escape(text)}%")
        sql = f"SELECT {_LAUNCH_COLUMNS_L} FROM {source}" + (" WHERE " + " AND ".join(where) if where else "")
        sql += f" ORDER BY {order} DESC LIMIT ?"
        return [launch_from_row(r) for r in self._rows(sql, params + [int(limit)])]

    @_store_errors
    def find_launch_by_container(self, node: str, container_id: str) -> Launch | None:
        """The newest launch on ``node`` with that container id (full or a 12+ char prefix)."""
        if not container_id:
            return None
        rows = self._rows(
            f"{_LAUNCH_SELECT} WHERE node = ? AND container_id IS NOT NULL AND (container_id = ? OR "
            "(length(?) >= 12 AND length(container_id) >= 12 AND "
            " (substr(container_id, 1, length(?)) = ? OR substr(?, 1, length(container_id)) = container_id)))"
            " ORDER BY id DESC LIMIT 1",
            [node, container_id, container_id, container_id, container_id, container_id])
        return launch_from_row(rows[0]) if rows else None

    @_store_errors
    def known_failures(self, accelerator_type: str, model: str, serve_args: list[str],
                       *, limit: int = 20) -> list[Launch]:
        """Past failed launches of the same accelerator type, model and flags, newest first.

        Flags are compared after normalization (:func:`store.records.behaviour_flags`):
        order, ``--a=b``/``--a b`` and flags like ``--port`` or ``--api-key`` do not matter.

        Args:
            accelerator_type, model, serve_args: the launch about to be made.
            limit: at most this many (the newest).
        """
        wanted = behaviour_flags(scrub_args(serve_args))
        candidates = self._rows("SELECT id, serve_args FROM launches WHERE accelerator_type = ? AND model = ? "
                                "AND outcome = 'failed' ORDER BY id DESC", [accelerator_type, model])
        ids = [r["id"] for r in candidates if behaviour_flags(json.loads(r["serve_args"] or "[]")) == wanted]
        ids = ids[:limit]
        if not ids:
            return []
        rows = self._rows(f"{_LAUNCH_SELECT} WHERE id IN ({','.join('?' * len(ids))}) ORDER BY id DESC", ids)
        return [launch_from_row(r) for r in rows]

    @_store_errors
    def failures_of_kind(self, accelerator_type: str, failure_kind: str, *, limit: int = 3) -> list[Launch]:
        """Past launches on this accelerator type that failed with ``failure_kind`` (e.g.
        ``hbm_oom_after_compile``), newest first, whatever their model and flags; at most ``limit``."""
        rows = self._rows(f"{_LAUNCH_SELECT} WHERE accelerator_type = ? AND failure_kind = ? ORDER BY id DESC "
                          "LIMIT ?", [accelerator_type, failure_kind, int(limit)])
        return [launch_from_row(r) for r in rows]

    @_store_errors
    def compile_eta_s(self, compile_key: str) -> float | None:
        """Median compile seconds of the last :data:`COMPILE_ETA_SAMPLES` launches with that
        compile key that reached ready, or ``None`` without any."""
        rows = self._rows("SELECT compile_seconds FROM launches WHERE compile_key = ? AND ready_at IS NOT NULL "
                          "AND compile_seconds IS NOT NULL ORDER BY id DESC LIMIT ?",
                          [compile_key, COMPILE_ETA_SAMPLES])
        return float(statistics.median(r["compile_seconds"] for r in rows)) if rows else None

    # --- the models' own limits ------------------------------------------------------

    @_store_errors
    def record_model_limit(self, model: str, max_model_len_tokens: int, source: str,
                           observed_at: datetime | None = None) -> None:
        """Remember ``model``'s maximum length in tokens (as vLLM derives it from config.json).

        Args:
            model: the ``vllm serve`` model id or path.
            max_model_len_tokens: the derived maximum, tokens (a positive integer).
            source: where it was read (a config.json path, ``boot log``).
            observed_at: when (default now, UTC).

        Raises:
            StoreError: the write failed, or the length is not a positive integer.
        """
        if not model or int(max_model_len_tokens) <= 0:
            raise StoreError(f"{self.path}: model limit needs a model and a positive length, "
                             f"got {model!r} = {max_model_len_tokens!r}")
        with self._write() as db:
            db.table("model_limits").upsert(
                {"model": model, "max_model_len_tokens": int(max_model_len_tokens), "source": source,
                 "observed_at": iso_time(observed_at or datetime.now(UTC))}, pk="model")

    @_store_errors
    def model_limit(self, model: str) -> tuple[int, str] | None:
        """``(max_model_len_tokens, source)`` remembered for ``model``, or ``None``."""
        rows = self._rows("SELECT max_model_len_tokens, source FROM model_limits WHERE model = ?", [model])
        return (int(rows[0]["max_model_len_tokens"]), str(rows[0]["source"] or "")) if rows else None

    # --- benchmarks -------------------------------------------------------------------

    @_store_errors
    def add_benchmark(self, launch_id: int | None, kind: str, params: dict[str, Any], results: dict[str, Any],
                      price_per_hour_usd: float | None = None, usd_per_mtok: float | None = None,
                      *, started_at: datetime | str | None = None) -> int:
        """Record a benchmark run (one transaction) and return its id.

        Args:
            launch_id: the launch measured, or ``None``.
            kind: one of :data:`store.records.BENCHMARK_KINDS`.
            params, results: JSON-ready dicts (secrets scrubbed before writing).
            price_per_hour_usd: $ per node-hour used; usd_per_mtok: $ per million output tokens.
            started_at: when the run started (default: now).

        Raises:
            ValueError: unknown kind. KeyError: no launch with ``launch_id``.
        """
        if kind not in BENCHMARK_KINDS:
            raise ValueError(f"kind must be one of {BENCHMARK_KINDS}, got {kind!r}")
        params, results = scrub_value(dict(params)), scrub_value(dict(results))
        row = {"launch_id": launch_id, "kind": kind,
               "started_at": iso_time(started_at or datetime.now(UTC)),
               "params": json.dumps(params), "results": json.dumps(results),
               "price_per_hour_usd": price_per_hour_usd, "usd_per_mtok": usd_per_mtok,
               **benchmark_plot_columns(params, results)}
        with self._write() as db:
            if launch_id is not None and not self._rows("SELECT 1 FROM launches WHERE id = ?", [launch_id]):
                raise KeyError(f"no launch with id {launch_id}")
            return int(db.table("benchmarks").insert(row).last_pk or 0)

    @_store_errors
    def benchmarks_for(self, launch_id: int) -> list[BenchmarkRecord]:
        """Benchmarks of one launch, oldest first."""
        return self.benchmarks_by_launch([launch_id]).get(launch_id, [])

    @_store_errors
    def benchmarks_by_launch(self, launch_ids: Iterable[int]) -> dict[int, list[BenchmarkRecord]]:
        """Benchmarks of several launches at once, ``{launch_id: [oldest first]}``."""
        ids = list(dict.fromkeys(launch_ids))
        found: dict[int, list[BenchmarkRecord]] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            rows = self._rows(f"{_BENCH_SELECT} WHERE launch_id IN ({','.join('?' * len(chunk))}) "
                              "ORDER BY started_at, id", chunk)
            for row in rows:
                found.setdefault(row["launch_id"], []).append(benchmark_from_row(row))
        return found

    # --- export -----------------------------------------------------------------------

    @_store_errors
    def export(self, launches: Iterable[Launch], fmt: str) -> str:
        """Launches as JSON (a list of launch objects with ``benchmarks`` nested) or CSV
        (one row per launch, JSON-valued columns as compact JSON, no benchmarks).

        Raises:
            ValueError: ``fmt`` is neither ``json`` nor ``csv``.
        """
        launches = list(launches)
        if fmt == "json":
            benches = self.benchmarks_by_launch(x.id for x in launches)
            return json.dumps([x.to_json() | {"benchmarks": [b.to_json() for b in benches.get(x.id, [])]}
                               for x in launches], indent=2)
        if fmt == "csv":
            out = io.StringIO()
            writer = csv.DictWriter(out, fieldnames=["id", *LAUNCH_FIELDS, "time_to_ready_s"], lineterminator="\n")
            writer.writeheader()
            for launch in launches:
                data = launch.to_json() | {"time_to_ready_s": launch.time_to_ready_s}
                writer.writerow({k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in data.items()})
            return out.getvalue()
        raise ValueError(f"export format must be 'json' or 'csv', got {fmt!r}")

    def close(self) -> None:
        """Close the database (idempotent)."""
        self._db.conn.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
