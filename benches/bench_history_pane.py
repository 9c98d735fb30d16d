"""The history pane at scale: 100,000 launches and 500,000 benchmark rows.

Runs the real app headless (Textual ``run_test``) on a database filled by
``benches.bench_history.generate`` and times, from the user's side:

- pane open: ``open_feature("history")`` until the launch table holds its rows (the pane's
  reader thread opens the store, migrates, marks interrupted launches, lists the newest
  100), and until
  the benchmarks of those rows are in (detail panel and plot);
- a filter: Enter in the filter line until the table holds the filtered rows.

Targets: pane open under 300 ms, filter under 100 ms (wall time). Every figure is a median
over several runs, with the worst run and the process CPU time (all threads), which does
not count time spent waiting for a core on a busy machine.

Usage: ``.venv/bin/python -m benches.bench_history_pane [--launches N] [--benchmarks N] [--db PATH]``
(an existing ``--db`` with launches in it is reused as is).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benches.bench_history import ensure_db  # noqa: E402
from console.app import TpuConsoleApp  # noqa: E402
from console.config import Config  # noqa: E402
from console.flows.history_query import DEFAULT_LIMIT  # noqa: E402
from console.screens.history.screen import HistoryScreen  # noqa: E402
from console.services import Services  # noqa: E402
from remote.models import FleetSnapshot  # noqa: E402

FILTERS = [
    ("node:node-07", None),
    ("outcome:failed", None),
    ("node:node-07 outcome:failed", None),
    ("model:Qwen/Qwen3-8B", None),
    ("model:Qwen3-8B (owner-less)", "model:Qwen3-8B"),
    ("accelerator:v6e-4 outcome:failed", None),
    ("RESOURCE_EXH (text index)", "RESOURCE_EXH"),
    ("no-such-thing (text, no match)", "no-such-thing"),
    ("v6e-4 131072 (two words)", "v6e-4 131072"),
    ("(clear: the newest 100)", ""),
    ("limit:1000", None),
]


class EmptyFleet:
    """A fleet lister with nothing in it (the bench is about the history)."""

    async def list_fleet(self) -> FleetSnapshot:
        return FleetSnapshot()


async def _until(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.perf_counter() + timeout_s
    while not check():
        if time.perf_counter() > deadline:
            raise TimeoutError("the pane did not get there in time")
        await asyncio.sleep(0.001)


async def measure(db: Path, runs: int) -> dict[str, list[tuple[float, float, float]]]:
    """``(wall ms to rows in the table, process CPU ms to then, wall ms to table laid out)``
    per measured step, ``runs`` samples each.

    "Laid out" is after the screen handled its pending events (the table measured and
    placed the new rows), as ``pilot.pause()`` waits for. CPU time (all threads of this
    process) is printed because the machine is shared: wall time also counts waiting for a core.
    """
    services = Services(config=Config(refresh_interval_s=3600), fleet=EmptyFleet(), db_path=db)
    app = TpuConsoleApp(services)
    out: dict[str, list[tuple[float, float, float]]] = {"pane open": [], "pane open: benchmarks + plot": []}
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause(0.2)

        async def timed(start: Callable[[], None], done: Callable[[], bool]) -> tuple[float, float, float]:
            t0, c0 = time.perf_counter(), time.process_time()
            start()
            await _until(done)
            wall, cpu = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
            await pilot._wait_for_screen()  # what pilot.pause() does first: pending events handled
            return wall, cpu, (time.perf_counter() - t0) * 1000

        for _ in range(runs):
            t0 = time.perf_counter()
            out["pane open"].append(await timed(
                lambda: app.open_feature("history", None),
                lambda: isinstance(app.screen, HistoryScreen) and app.screen.loads >= 1))
            screen = app.screen
            assert len(screen.launches) == DEFAULT_LIMIT, len(screen.launches)
            await _until(lambda screen=screen: screen.benches_loaded)
            ms = (time.perf_counter() - t0) * 1000
            out["pane open: benchmarks + plot"].append((ms, float("nan"), ms))
            await pilot.pause(0.05)
            app.pop_screen()
            await pilot.pause(0.05)
        app.open_feature("history", None)
        await _until(lambda: isinstance(app.screen, HistoryScreen) and app.screen.benches_loaded)
        screen = app.screen
        for label, line in FILTERS:
            samples = out.setdefault(f"filter {label}", [])
            for _ in range(runs):
                loads = screen.loads
                # what Enter in the filter line does
                text = label if line is None else line
                samples.append(await timed(lambda text=text: screen.apply_filter(text),
                                           lambda loads=loads: screen.loads > loads))
                await _until(lambda: screen.benches_loaded)
        await pilot.pause(0.05)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=100_000)
    parser.add_argument("--benchmarks", type=int, default=500_000)
    parser.add_argument("--db", type=Path)
    parser.add_argument("--runs", type=int, default=7)
    opts = parser.parse_args()
    opts.db, tmp = ensure_db(opts.db, opts.launches, opts.benchmarks)
    conn = sqlite3.connect(opts.db)
    counts = [conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("launches", "benchmarks")]
    conn.close()
    print(f"database: {counts[0]:,} launches, {counts[1]:,} benchmarks; {opts.runs} runs each, headless 200x50")
    results = asyncio.run(measure(opts.db, opts.runs))
    targets: dict[str, float] = {"pane open": 300.0}
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores; "
          "ms; CPU and laid out are medians")
    print(f"{'what':<40} {'rows in table: median min (max)':>31} {'CPU':>6} {'laid out':>15}  target")
    failed = False
    for name, samples in results.items():
        target = targets.get(name, 100.0 if name.startswith("filter") and "limit:" not in name else None)
        wall = [s[0] for s in samples]
        laid = [s[2] for s in samples]
        median = statistics.median(wall)
        verdict = "" if target is None else (f"< {target:.0f} ms " + ("ok" if median < target else "MISSED"))
        failed |= target is not None and median >= target
        print(f"{name:<40} {median:>14.1f} {min(wall):>6.1f} ({max(wall):>6.1f}) "
              f"{statistics.median(s[1] for s in samples):>6.1f} {statistics.median(laid):>6.1f} ({max(laid):>6.1f})"
              f"  {verdict}")
    if tmp is not None:
        tmp.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
