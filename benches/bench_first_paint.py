"""First paint of ``tpu-console --demo``: process start -> the first frame showing the fleet table.

Runs the real command on a pseudo-terminal (160x45, its own ``$XDG_STATE_HOME`` and data dir)
and reads what it draws until a fleet node's name appears in a frame; then quits it with ``q``.
The time is taken from just before the process is spawned, so it includes the interpreter's
start, every import, the sandbox's start and the first TPU API list. Repeats ``--runs`` times
and prints each run, the median and the best; ``--json`` ends with one JSON line
(``first_paint_ms_median``, ``first_paint_ms_best``, ``runs``). Target: 500 ms.

Usage: ``.venv/bin/python benches/bench_first_paint.py [--runs 5] [--json]``
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import select
import signal
import statistics
import struct
import sys
import tempfile
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND = [str(ROOT / ".venv" / "bin" / "tpu-console"), "--demo"]
#: A node of the demo fleet: once its name is drawn, the fleet table is on screen.
MARKER = b"vllm-flex-b"
TARGET_MS = 500.0


def one_run(timeout_s: float = 30.0) -> float:
    """Milliseconds from spawn to the first output holding :data:`MARKER`."""
    state = tempfile.mkdtemp(prefix="bench_first_paint_")
    env = {**os.environ, "XDG_STATE_HOME": f"{state}/state", "XDG_DATA_HOME": f"{state}/data",
           "XDG_CONFIG_HOME": f"{state}/config", "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "45"}
    started = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:  # the child: the console on the pseudo-terminal
        os.execve(COMMAND[0], COMMAND, env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 45, 160, 0, 0))
    seen = b""
    try:
        while time.perf_counter() - started < timeout_s:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen = (seen + chunk)[-4096:]
            if MARKER in seen:
                return (time.perf_counter() - started) * 1000
        raise SystemExit(f"no fleet table within {timeout_s:.0f} s; last output: {seen[-300:]!r}")
    finally:
        try:
            os.write(fd, b"q")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
                select.select([fd], [], [], 0.1)
                try:
                    os.read(fd, 65536)
                except OSError:
                    pass
            if os.waitpid(pid, os.WNOHANG) == (0, 0):
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = parser.parse_args(argv)
    times = []
    for i in range(args.runs):
        times.append(one_run())
        print(f"run {i + 1}: first fleet frame after {times[-1]:.0f} ms")
    median, best = statistics.median(times), min(times)
    load = os.getloadavg()[0]
    print(f"first paint of --demo: median {median:.0f} ms, best {best:.0f} ms over {len(times)} runs "
          f"(target {TARGET_MS:.0f} ms; load average {load:.2f} on {os.cpu_count()} cores, shared)")
    if args.json:
        print(json.dumps({"first_paint_ms_median": round(median), "first_paint_ms_best": round(best),
                          "runs": len(times)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
