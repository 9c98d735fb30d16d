"""kill -9 during writes: the database opens, passes integrity_check and holds every record the
killed writer reported committed; a kill loses at most the write in flight."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from store.history import HistoryStore

ROOT = Path(__file__).resolve().parents[2]

# Prints a line only after each transaction committed: "L id", "U id", "B benchmark_id launch_id".
WRITER = """
import sys
from store.history import HistoryStore
store = HistoryStore(sys.argv[1])
print("open", flush=True)
for i in range(100_000):
    launch_id = store.start_launch(
        node="crash", accelerator_type="v6e-8", model="Qwen/Qwen3-8B", serve_args=["--max-model-len", "8192"] * 20,
        container_spec={"image": "vllm/vllm-tpu:nightly", "env": {f"VAR_{k}": "x" * 40 for k in range(30)}})
    print("L", launch_id, flush=True)
    store.update_launch(launch_id, kv_cache_tokens=launch_id, outcome="ready" if i % 2 else "running",
                        hbm=[{"label": "kv", "used_gib": [1.5] * 8, "limit_gib": [31.25] * 8}] * 4)
    print("U", launch_id, flush=True)
    bench_id = store.add_benchmark(launch_id, "throughput", {"streams": 16}, {"output_tokens_per_s": 10.0 * i})
    print("B", bench_id, launch_id, flush=True)
"""


def _run_and_kill(path: Path, rng: random.Random, lines_before_kill: int) -> list[list[str]]:
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reported: list[list[str]] = []
    try:
        if lines_before_kill == 0:
            time.sleep(rng.uniform(0.0, 0.4))  # somewhere in start-up: import, open, migrations
        while len(reported) < lines_before_kill:
            line = child.stdout.readline()
            assert line, f"writer ended early: {child.stderr.read()}"
            reported.append(line.split())
        time.sleep(rng.uniform(0.0, 0.003))
    finally:
        os.kill(child.pid, signal.SIGKILL)
        rest, _ = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    # A kill can tear the last line the writer printed: only whole reports count as commits.
    whole = {"L": 2, "U": 2, "B": 3}
    return reported + [fields for fields in (line.split() for line in rest.splitlines())
                       if fields and whole.get(fields[0]) == len(fields)]


def test_sigkill_at_random_points_loses_no_committed_record(tmp_path: Path) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    path = tmp_path / "history.db"
    rounds = [0] + [rng.randint(1, 60) for _ in range(5)]
    launches: set[int] = set()
    updated: set[int] = set()
    benchmarks: dict[int, int] = {}
    for lines in rounds:
        for record in _run_and_kill(path, rng, lines):
            if record[0] == "L":
                launches.add(int(record[1]))
            elif record[0] == "U":
                updated.add(int(record[1]))
            elif record[0] == "B":
                benchmarks[int(record[1])] = int(record[2])
    assert len(launches) > 20, f"seed {seed}: too few writes to prove anything"

    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok", f"seed {seed}"
    conn.close()
    with HistoryStore(path) as store:  # the last killed writer's running launch is marked here
        stored = {l.id: l for l in store.list_launches(node="crash", limit=1_000_000)}
        assert launches <= set(stored), f"seed {seed}: committed launches missing"
        for launch_id in updated:
            assert stored[launch_id].kv_cache_tokens == launch_id, f"seed {seed}"
        stored_benches = {b.id: b.launch_id for i in stored for b in store.benchmarks_for(i)}
    assert benchmarks.items() <= stored_benches.items(), f"seed {seed}: committed benchmarks missing"
    # each kill loses at most the one write in flight: at most one unreported launch per kill
    assert len(set(stored) - launches) <= len(rounds), f"seed {seed}"
    assert {l.outcome for l in stored.values()} <= {"ready", "interrupted"}, f"seed {seed}"
    assert any(l.outcome == "interrupted" for l in stored.values()), f"seed {seed}"
