"""History store at scale: 100,000 launches and 500,000 benchmark rows.

Times opening the pane (open the store, which migrates and marks interrupted launches, then
``list_launches(limit=200)``), filtered queries, and ``tpu-console history --json --limit 50``
(the verb's ``run`` in this process, and the whole command in a fresh process).
Targets: pane open under 300 ms, a filter under 100 ms.

Usage: ``.venv/bin/python -m benches.bench_history [--launches N] [--benchmarks N] [--db PATH]``
(an existing ``--db`` with launches in it is reused as is).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from store.history import LAUNCH_FIELDS, HistoryStore, iso_time  # noqa: E402
from store.records import compile_key  # noqa: E402

MODELS = ["Qwen/Qwen3-8B", "Qwen/Qwen3-32B", "meta-llama/Llama-3.1-8B-Instruct", "google/gemma-3-27b-it",
          "mistralai/Mistral-7B-Instruct-v0.3", "Qwen/Qwen2.5-72B-Instruct", "openai/gpt-oss-20b", "x/tiny"]
ACCELERATORS = ["v5litepod-8", "v6e-8", "v6e-4", "v5litepod-4"]
OUTCOMES = ["ready"] * 14 + ["failed"] * 4 + ["interrupted", "replaced"]


def generate(path: Path, n_launches: int, n_benchmarks: int, seed: int = 7) -> None:
    """Fill a fresh store with synthetic, realistically sized rows (one transaction each table)."""
    rng = random.Random(seed)
    HistoryStore(path).close()  # schema via the migrations
    start = datetime(2024, 6, 1, tzinfo=UTC)
    spec = json.dumps({"image": "vllm/vllm-tpu:nightly", "env": {"TPU_NAME": "x", "HF_TOKEN": "***",
                       "VLLM_XLA_CACHE_PATH": "/cache"}, "volumes": ["/dev/shm:/dev/shm", "/cache:/cache"],
                       "network": "host", "restart_policy": "unless-stopped", "ports": [8000]})
    phases = json.dumps({"pull": 20.0, "weights": 41.0, "compile": 380.0, "init": 60.0})
    launch_rows = []
    for i in range(1, n_launches + 1):
        model, acc = rng.choice(MODELS), rng.choice(ACCELERATORS)
        args = ["--max-model-len", str(rng.choice([4096, 8192, 32768, 131072])), "--tensor-parallel-size",
                acc.rsplit("-", 1)[1], "--gpu-memory-utilization", rng.choice(["0.9", "0.95"])]
        outcome = rng.choice(OUTCOMES)
        at = start + timedelta(minutes=10 * i)
        chips = int(acc.rsplit("-", 1)[1])
        row: dict[str, Any] = {
            "node": f"node-{rng.randrange(50):02d}", "project": "proj", "zone": "us-east5-b",
            "accelerator_type": acc, "provisioning_model": rng.choice(["spot", "flex-start", "on-demand"]),
            "origin": "console", "container_id": f"{rng.getrandbits(128):032x}" * 2, "image": "vllm/vllm-tpu:nightly",
            "image_digest": f"sha256:{rng.getrandbits(256):064x}", "model": model, "served_model_name": None,
            "container_spec": spec,
            "serve_args": json.dumps(args), "requested_at": iso_time(at),
            "started_at": iso_time(at + timedelta(seconds=20)),
            "ready_at": iso_time(at + timedelta(seconds=500)) if outcome in ("ready", "replaced") else None,
            "failed_at": iso_time(at + timedelta(seconds=700)) if outcome == "failed" else None,
            "outcome": outcome,
            "phase_durations": phases,
            "compile_seconds": rng.uniform(300, 900), "engine_init_seconds": rng.uniform(400, 1000),
            "hbm": json.dumps([{"label": s, "used_gib": [round(rng.uniform(1, 30), 2)] * chips,
                                "limit_gib": [31.25] * chips} for s in ("weights", "kv")]),
            "kv_cache_tokens": rng.randrange(100_000, 3_000_000), "max_concurrency": rng.uniform(1, 200),
            "max_model_len": int(args[1]),
            "failure_kind": "RESOURCE_EXHAUSTED" if outcome == "failed" else None,
            "failure_detail": "Ran out of memory in memory space hbm" if outcome == "failed" else None,
            "replaced_launch_id": i - 1 if i > 1 and rng.random() < 0.3 else None,
            "compile_key": compile_key(acc, model, args), "notes": None,
        }
        launch_rows.append(tuple(row[f] for f in LAUNCH_FIELDS))
    bench_rows = []
    for j in range(n_benchmarks):
        launch_id = rng.randrange(1, n_launches + 1)
        streams = rng.choice([1, 16, 64])
        results = {"output_tokens_per_s": rng.uniform(50, 5000), "ttft_median_ms": rng.uniform(20, 900),
                   "tpot_median_ms": rng.uniform(5, 40), "request_throughput": rng.uniform(0.1, 30),
                   "failed": 0}
        bench_rows.append((launch_id, "throughput", iso_time(start + timedelta(minutes=2 * j)),
                           json.dumps({"streams": streams, "prompt_tokens": 1024, "output_tokens": 256}),
                           json.dumps(results), 10.8, rng.uniform(0.5, 20), streams,
                           results["output_tokens_per_s"], results["ttft_median_ms"], results["tpot_median_ms"]))
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous = OFF")  # throwaway data: no fsync while loading
    conn.execute("PRAGMA cache_size = -200000")
    with conn:
        conn.executemany(f"INSERT INTO launches ({', '.join(LAUNCH_FIELDS)}) "
                         f"VALUES ({', '.join('?' * len(LAUNCH_FIELDS))})", launch_rows)
        conn.executemany("INSERT INTO benchmarks (launch_id, kind, started_at, params, results, price_per_hour_usd, "
                         "usd_per_mtok, concurrency, output_tokens_per_s, ttft_median_ms, tpot_median_ms) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", bench_rows)
    conn.execute("ANALYZE")
    conn.close()


def timed(fn: Callable[[], Any], repeat: int = 7) -> tuple[float, float]:
    """(median, max) milliseconds over ``repeat`` runs."""
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t0) * 1000)
    return statistics.median(runs), max(runs)


def ensure_db(db: Path | None, launches: int, benchmarks: int) -> tuple[Path, Any]:
    """The benchmark database: ``db`` if it already holds launches, else generated there.

    Returns:
        ``(path, tmp)`` where ``tmp`` is the TemporaryDirectory to keep alive (``None`` for ``db``).
    """
    tmp = None
    if db is None:
        tmp = tempfile.TemporaryDirectory()
        db = Path(tmp.name) / "history.db"
    if not db.exists() or sqlite3.connect(db).execute(
            "SELECT count(*) FROM sqlite_master WHERE name = 'launches'").fetchone()[0] == 0:
        t0 = time.perf_counter()
        generate(db, launches, benchmarks)
        print(f"generated {launches:,} launches, {benchmarks:,} benchmarks in "
              f"{time.perf_counter() - t0:.1f} s ({db.stat().st_size / 2**20:.0f} MiB)")
    return db, tmp


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=100_000)
    parser.add_argument("--benchmarks", type=int, default=500_000)
    parser.add_argument("--db", type=Path)
    opts = parser.parse_args()
    opts.db, tmp = ensure_db(opts.db, opts.launches, opts.benchmarks)

    def pane_open() -> None:
        store = HistoryStore(opts.db)
        assert len(store.list_launches(limit=200)) == 200
        store.close()

    store = HistoryStore(opts.db)
    key = store.list_launches(limit=1)[0].compile_key
    queries: list[tuple[str, Callable[[], Any], float | None]] = [
        ("pane open: open store + list_launches(limit=200)", pane_open, 300.0),
        ("filter node=node-07", lambda: store.list_launches(node="node-07"), 100.0),
        ("filter outcome=failed", lambda: store.list_launches(outcome="failed"), 100.0),
        ("filter node + outcome=failed", lambda: store.list_launches(node="node-07", outcome="failed"), 100.0),
        ("filter model=Qwen/Qwen3-8B", lambda: store.list_launches(model="Qwen/Qwen3-8B"), 100.0),
        ("filter model=Qwen3-8B (owner-less)", lambda: store.list_launches(model="Qwen3-8B"), 100.0),
        ("filter accelerator v6e-4 + failed", lambda: store.list_launches(accelerator_type="v6e-4",
                                                                         outcome="failed"), 100.0),
        ("filter text 'RESOURCE_EXH'", lambda: store.list_launches(text="RESOURCE_EXH"), 100.0),
        ("filter text, rare 'no-such-thing'", lambda: store.list_launches(text="no-such-thing"), 100.0),
        ("filter text, 2 chars 'zq' (row scan, no index)", lambda: store.list_launches(text="zq"), None),
        ("known_failures(v6e-8, Qwen/Qwen3-8B, ...)", lambda: store.known_failures(
            "v6e-8", "Qwen/Qwen3-8B", ["--max-model-len", "8192"]), None),
        ("compile_eta_s(key)", lambda: store.compile_eta_s(key), None),
        ("benchmarks_for + export json of 200", lambda: store.export(store.list_launches(limit=200), "json"), None),
    ]

    from console.cli import build_parser
    from console.verbs.history import run

    def cli_json() -> None:
        args = build_parser().parse_args(["--db", str(opts.db), "history", "--json", "--limit", "50"])
        with contextlib.redirect_stdout(io.StringIO()) as out:
            assert run(args) == 0
        assert len(json.loads(out.getvalue())) == 50

    queries.append(("history --json --limit 50 (verb run, in process)", cli_json, None))
    print(f"{'what':<52} {'median ms':>10} {'max ms':>8}  target")
    failed = False
    for name, fn, target in queries:
        median, worst = timed(fn)
        verdict = "" if target is None else (f"< {target:.0f} ms " + ("ok" if median < target else "MISSED"))
        failed |= target is not None and median >= target
        print(f"{name:<52} {median:>10.1f} {worst:>8.1f}  {verdict}")
    store.close()

    def cli_process() -> None:
        subprocess.run([sys.executable, "-m", "console.cli", "--db", str(opts.db), "history", "--json",
                        "--limit", "50"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)

    median, worst = timed(cli_process, repeat=3)
    print(f"{'history --json --limit 50 (new process, with imports)':<52} {median:>10.1f} {worst:>8.1f}")
    if tmp is not None:
        tmp.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
