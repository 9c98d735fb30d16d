"""Log reader speed: ``tpu-console log-summary`` on a >= 200 MB vLLM log, against ``grep -c -E``.

Builds a temporary log by repeating the corpus' full boot log (file 10: 1,075 lines,
CRLF on some lines, 163 compile steps) until it is at least ``--size-mb`` MB, then times
the ``log-summary --json`` verb in this process (``read_capture``: the record rejoin, then the reader, plus the JSON) and
``grep -c -E`` with the phrases the reader looks for (``GREP_PATTERNS``) on the same file.
Both are pinned to one CPU. Prints MB/s and lines/s (wall clock and CPU time; on a shared
machine the CPU-time figure is the fairer one) and the ratio to grep, each the best of
``--repeat`` runs (other processes on a shared core only ever slow a run down).
Target: 100 MB/s of CPU time.

Usage: ``.venv/bin/python -m benches.bench_log_summary [--size-mb 210] [--repeat 3] [--log PATH] [--keep]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from console.cli import main as cli_main  # noqa: E402
from remote.vllm_log.patterns import GREP_PATTERNS  # noqa: E402

BOOT_LOG = ROOT.parent / "shared" / "corpus" / "vllm-logs" / "10-tpujax-v6e1-full-boot-ready.log"
TARGET_MB_S = 100.0


def build_log(source: Path, size_mb: float, folder: Path) -> tuple[Path, int, int]:
    """Repeat ``source`` into ``folder/big.log`` until >= ``size_mb`` MB; (path, bytes, copies)."""
    data = source.read_bytes()
    copies = max(1, -(-int(size_mb * 1e6) // len(data)))
    path = folder / "big.log"
    with open(path, "wb") as out:
        for _ in range(copies):
            out.write(data)
    return path, copies * len(data), copies


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_reader(path: Path) -> tuple[float, float, dict]:
    """Run the log-summary verb in-process; (wall s, cpu s, its JSON)."""
    out = io.StringIO()
    wall, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(out):
        code = cli_main(["log-summary", str(path), "--json"])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if code != 0:
        raise SystemExit(f"log-summary exited {code}")
    return wall, cpu, json.loads(out.getvalue())


def time_grep(path: Path) -> tuple[float, float, int]:
    """``LC_ALL=C grep -c -E '<patterns>' path``; (wall s, cpu s, matching lines)."""
    grep = shutil.which("grep")
    if grep is None:
        raise SystemExit("grep not found")
    pattern = "|".join(GREP_PATTERNS)
    before, wall = _children_cpu(), time.perf_counter()
    done = subprocess.run([grep, "-c", "-E", pattern, str(path)], capture_output=True, text=True,
                          env={**os.environ, "LC_ALL": "C"}, check=False)
    wall, cpu = time.perf_counter() - wall, _children_cpu() - before
    if done.returncode not in (0, 1):
        raise SystemExit(f"grep failed: {done.stderr.strip()}")
    return wall, cpu, int(done.stdout.strip() or 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=210.0)
    parser.add_argument("--log", type=Path, default=BOOT_LOG, help="log to repeat (default: file 10)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best is shown")
    parser.add_argument("--keep", action="store_true", help="keep the built log and print its path")
    args = parser.parse_args(argv)
    if not args.log.is_file():
        print(f"bench_log_summary: {args.log} not found (the shared corpus is needed)",
              file=sys.stderr)
        return 2
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})  # one core, inherited by grep
    folder = Path(tempfile.mkdtemp(prefix="bench_log_summary_"))
    try:
        path, size, copies = build_log(args.log, args.size_mb, folder)
        lines = args.log.read_bytes().count(b"\n") * copies   # real lines (wc -l): a CR redraw is no line
        mb = size / 1e6
        print(f"log: {mb:.1f} MB, {lines:,} lines ({copies} copies of {args.log.name}), "
              f"pinned to CPU {cpu}, load average {os.getloadavg()[0]:.2f}")
        r_wall = r_cpu = g_wall = g_cpu = float("inf")
        for _ in range(max(1, args.repeat)):
            wall, cpu, summary = time_reader(path)
            assert summary["lines_read"] == lines and summary["restarts"] == copies - 1
            r_wall, r_cpu = min(r_wall, wall), min(r_cpu, cpu)
            wall, cpu, matched = time_grep(path)
            g_wall, g_cpu = min(g_wall, wall), min(g_cpu, cpu)
        print(f"log-summary: wall {r_wall:6.2f} s = {mb / r_wall:6.1f} MB/s {lines / r_wall:>11,.0f}"
              f" lines/s | cpu {r_cpu:6.2f} s = {mb / r_cpu:6.1f} MB/s {lines / r_cpu:>11,.0f} lines/s")
        print(f"grep -c -E : wall {g_wall:6.2f} s = {mb / g_wall:6.1f} MB/s "
              f"{lines / g_wall:>11,.0f} lines/s | cpu {g_cpu:6.2f} s "
              f"({matched:,} matching lines, {len(GREP_PATTERNS)} patterns)")
        print(f"ratio grep/log-summary: {r_wall / g_wall:.1f}x (wall), "
              f"{r_cpu / max(g_cpu, 1e-9):.1f}x (cpu)")
        print(f"load average after the runs: {os.getloadavg()[0]:.2f} "
              f"({os.cpu_count()} cores; other processes only slow a run down)")
        verdict = "meets" if mb / r_cpu >= TARGET_MB_S else "misses"
        print(f"target {TARGET_MB_S:.0f} MB/s on one core: {verdict} it (cpu-time figure); "
              f"result: ready={summary['ready']}, compile_steps_finished="
              f"{summary['compile_steps_finished']}, kv_cache_tokens={summary['kv_cache_tokens']}")
        if args.keep:
            print(f"kept: {path}")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
