"""Two consoles on one database: nothing lost; a dead console's running launches become interrupted."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from store.history import HistoryStore, iso_time

ROOT = Path(__file__).resolve().parents[2]

WRITER = """
import sys, time
from pathlib import Path
from store.history import HistoryStore
path, go, tag, count = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
store = HistoryStore(path)
while not go.exists():
    time.sleep(0.005)
for i in range(count):
    launch_id = store.start_launch(node=tag, model="m", serve_args=["--max-model-len", str(i)])
    store.update_launch(launch_id, outcome="ready", kv_cache_tokens=i)
    store.add_benchmark(launch_id, "smoke", {"i": i}, {"tag": tag})
    print(launch_id, flush=True)
store.close()
"""

HOLDER = """
import sys
from store.history import HistoryStore
store = HistoryStore(sys.argv[1])
print(store.start_launch(node="held", model="m"), flush=True)
if sys.argv[2] == "wait":
    sys.stdin.readline()
"""


def _child(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _check_all_there(path: Path, written: dict[str, list[int]], count: int) -> None:
    with HistoryStore(path) as store:
        for tag, ids in written.items():
            assert len(ids) == count
            launches = store.list_launches(node=tag, limit=10 * count)
            assert sorted(l.id for l in launches) == sorted(ids)
            assert sorted(l.kv_cache_tokens for l in launches) == list(range(count))
            assert all(l.outcome == "ready" for l in launches)
            assert sum(len(store.benchmarks_for(i)) for i in ids) == count
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    path, go, count = tmp_path / "h.db", tmp_path / "go", 60
    children = {tag: _child(WRITER, str(path), str(go), tag, str(count)) for tag in ("console-1", "console-2")}
    time.sleep(0.5)
    go.touch()
    written = {}
    for tag, child in children.items():
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        written[tag] = [int(line) for line in out.split()]
    assert not set(written["console-1"]) & set(written["console-2"])
    _check_all_there(path, written, count)


def test_two_stores_in_two_threads_lose_nothing(tmp_path: Path) -> None:
    path, count = tmp_path / "h.db", 80
    HistoryStore(path).close()
    written: dict[str, list[int]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def write(tag: str) -> None:
        try:
            with HistoryStore(path) as store:  # each thread its own connection
                start.wait()
                ids = written.setdefault(tag, [])
                for i in range(count):
                    launch_id = store.start_launch(node=tag, model="m")
                    store.update_launch(launch_id, outcome="ready", kv_cache_tokens=i)
                    store.add_benchmark(launch_id, "smoke", {}, {})
                    ids.append(launch_id)
        except BaseException as exc:  # noqa: BLE001 - surfaced below, in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(tag,)) for tag in ("t1", "t2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    _check_all_there(path, written, count)


def test_dead_consoles_running_launch_becomes_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    child = _child(HOLDER, str(path), "exit")
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    dead_id = int(out)
    with HistoryStore(path) as store:
        assert store.get_launch(dead_id).outcome == "interrupted"
        assert store.mark_interrupted() == []  # already done


def test_live_consoles_running_launch_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    child = _child(HOLDER, str(path), "wait")
    live_id = int(child.stdout.readline())
    with HistoryStore(path) as store:
        own_id = store.start_launch(node="mine")
        with HistoryStore(path) as second:  # a second store in this (live) process
            assert second.mark_interrupted() == []
        assert store.get_launch(live_id).outcome == "running"
        child.communicate("\n", timeout=60)  # the other console exits without finishing
        assert store.mark_interrupted() == [live_id]
        assert store.get_launch(live_id).outcome == "interrupted"
        assert store.get_launch(own_id).outcome == "running"


def test_a_console_that_resumes_an_interrupted_launch_owns_it(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    child = _child(HOLDER, str(path), "exit")
    launch_id = int(child.communicate(timeout=60)[0])
    with HistoryStore(path) as store:
        store.update_launch(launch_id, outcome="running")  # container seen booting again
    with HistoryStore(path) as store:
        assert store.get_launch(launch_id).outcome == "running"


def test_unknown_and_other_host_writers(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    now = datetime.now(UTC)
    with HistoryStore(path) as store:
        rows = {
            "other-old": ("elsewhere", 4242, now - timedelta(hours=7)),
            "other-recent": ("elsewhere", 4242, now - timedelta(minutes=5)),
            "unknown-old": (None, None, now - timedelta(hours=1)),
            "unknown-new": (None, None, now + timedelta(seconds=5)),
        }
        ids = {key: store.start_launch(node=key) for key in rows}
        for key, (host, pid, at) in rows.items():
            store._db.conn.execute("UPDATE launches SET writer_host = ?, writer_pid = ?, requested_at = ? "
                                   "WHERE id = ?", [host, pid, iso_time(at), ids[key]])
        store._db.conn.commit()
        assert sorted(store.mark_interrupted()) == sorted([ids["other-old"], ids["unknown-old"]])
