"""First paint of ``tpu-console --demo``: process start -> the first frame showing the fleet table.

Runs the real command on a pseudo-terminal (160x45, its own ``$XDG_STATE_HOME`` and data dir)
and reads what it draws; then quits it with ``q``. Times are taken from just before the process
is spawned, so they include the interpreter's start and every import. Each round is two runs in
one fresh state dir:

* cold (no fleet cache yet): ``first frame`` = the fleet screen saying "loading fleet…";
* warm (the cache the cold run wrote): ``first frame`` = the cached fleet's nodes on screen;

and for both, ``live`` = the first frame after the sandbox started and the first TPU API list
landed (the title says "refreshed"). Repeats ``--runs`` rounds and prints each run, the medians
and the bests; ``--json`` ends with one JSON line (``first_paint_ms_median`` (warm and cold
together), ``cold_first_ms_median``, ``warm_first_ms_median``, ``live_ms_median``,
``first_paint_ms_best``, ``runs``). Target: 500 ms for the first frame.

``--config PATH`` runs ``tpu-console --config PATH`` instead (e.g. the config of a sandbox started
with ``tpu-console sandbox --state-dir DIR``): the same figures for a console with a config.

The project's modules are compiled to bytecode first (``compile_project``; ``--no-compile`` skips it).

Usage: ``.venv/bin/python benches/bench_first_paint.py [--runs 5] [--json] [--config PATH] [--no-compile]``
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
#: What the fleet screen draws with no cache (its title and the nodes' label).
LOADING = b"loading fleet"
#: A node of the demo fleet: once its name is drawn, the fleet table is on screen.
NODE = b"vllm-flex-b"
#: The title once a live refresh landed.
LIVE = b"refreshed "
TARGET_MS = 500.0


class PtyConsole:
    """The real console on a pseudo-terminal (160x45): spawn it, wait for what it draws, read its
    memory, quit it with ``q`` (also used by ``bench_fleet_scale``).

    Args:
        command: the argv to run.
        state: a folder for ``$XDG_STATE_HOME`` / ``_DATA_HOME`` / ``_CONFIG_HOME`` (``state``, ``data``, ``config``).
    """

    def __init__(self, command: list[str], state: str) -> None:
        env = {**os.environ, "XDG_STATE_HOME": f"{state}/state", "XDG_DATA_HOME": f"{state}/data",
               "XDG_CONFIG_HOME": f"{state}/config", "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "45"}
        self.started = time.perf_counter()
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the console on the pseudo-terminal
            os.execve(command[0], command, env)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 45, 160, 0, 0))
        self.seen = b""
        self.last_chunk_ms = 0.0
        self.exited = False

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000

    def read(self, wait_s: float = 0.5) -> bytes:
        """What the console wrote within ``wait_s`` (``b""``: nothing, or it closed the terminal)."""
        ready, _, _ = select.select([self.fd], [], [], wait_s)
        if not ready:
            return b""
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:
            return b""
        self.seen = (self.seen + chunk)[-8192:]
        self.last_chunk_ms = self.elapsed_ms()
        return chunk

    def wait_for(self, marker: bytes, timeout_s: float) -> float | None:
        """Milliseconds from spawn to the output chunk that brought ``marker`` (the last 8 KiB read
        are searched first), or ``None`` when it did not come within ``timeout_s``."""
        deadline = time.perf_counter() + timeout_s
        while time.perf_counter() < deadline:
            if marker in self.seen:
                return self.last_chunk_ms
            self.read()
            if marker in self.seen:
                return self.last_chunk_ms
            if os.waitpid(self.pid, os.WNOHANG) != (0, 0):
                self.exited = True
                return None
        return None

    def peak_rss_mib(self) -> float | None:
        """The console's peak resident memory so far (``VmHWM``), MiB."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return None

    def quit(self, timeout_s: float = 10.0) -> float | None:
        """Press ``q``; seconds until the process exited (killed past ``timeout_s``: ``None``)."""
        if self.exited:
            return None
        try:
            pressed = time.perf_counter()
            os.write(self.fd, b"q")
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                self.read(0.02)
            if os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                return None
            return time.perf_counter() - pressed
        except ChildProcessError:
            return time.perf_counter() - pressed
        finally:
            self.exited = True
            os.close(self.fd)


def one_run(command: list[str], state: str, first_marker: bytes, timeout_s: float = 60.0) -> tuple[float, float]:
    """Milliseconds from spawn to the first output holding ``first_marker``, and to :data:`LIVE`."""
    console = PtyConsole(command, state)
    try:
        first_ms = console.wait_for(first_marker, timeout_s)
        live_ms = console.wait_for(LIVE, timeout_s) if first_ms is not None else None
        if first_ms is None or live_ms is None:
            raise SystemExit(f"no {first_marker!r} / live fleet within {timeout_s:.0f} s; "
                             f"last output: {console.seen[-300:]!r}")
        return first_ms, live_ms
    finally:
        console.quit()


def compile_project() -> str:
    """Write the ``__pycache__`` bytecode of the project's packages, as a user's first start does.

    An editable install leaves our modules uncompiled until they are imported; an environment with
    ``PYTHONDONTWRITEBYTECODE=1`` (this workplace's shell has it) never writes the bytecode, so every
    start compiles ~100 modules from source: 100-150 ms more to the first frame than a user sees from
    the second start on. Returns what was done, for the printout.
    """
    import compileall

    ok = all(compileall.compile_dir(ROOT / package, quiet=1) for package in ("console", "remote", "store", "sandbox"))
    return "ok" if ok else "some failed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    parser.add_argument("--config", metavar="PATH", help="run `tpu-console --config PATH` instead of --demo")
    parser.add_argument("--no-compile", action="store_true",
                        help="leave the project's bytecode as it is (default: compile it first)")
    args = parser.parse_args(argv)
    if not args.no_compile:
        compiled = compile_project()
        print(f"compiled the project's modules first ({compiled}); "
              f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r} here")
    command = [COMMAND[0], "--config", args.config] if args.config else COMMAND
    what = f"--config {args.config}" if args.config else "--demo"
    cold, warm, live = [], [], []
    for i in range(args.runs):
        state = tempfile.mkdtemp(prefix="bench_first_paint_")
        first, ready = one_run(command, state, LOADING)
        cold.append(first)
        live.append(ready)
        print(f"round {i + 1} cold: loading frame after {first:.0f} ms, live fleet after {ready:.0f} ms")
        if not (Path(state) / "state" / "tpu-console" / ("fleet-cache.json" if args.config else "fleet-cache-demo.json")).exists():
            raise SystemExit("the cold run wrote no fleet cache")
        first, ready = one_run(command, state, NODE)
        warm.append(first)
        live.append(ready)
        print(f"round {i + 1} warm: cached fleet after {first:.0f} ms, live fleet after {ready:.0f} ms")
    both = cold + warm
    load = os.getloadavg()[0]
    print(f"first paint of {what}: median {statistics.median(both):.0f} ms (cold {statistics.median(cold):.0f}, "
          f"warm {statistics.median(warm):.0f}), best {min(both):.0f} ms; live fleet median "
          f"{statistics.median(live):.0f} ms; over {args.runs} rounds (target {TARGET_MS:.0f} ms; "
          f"load average {load:.2f} on {os.cpu_count()} cores, shared)")
    if args.json:
        print(json.dumps({"first_paint_ms_median": round(statistics.median(both)),
                          "cold_first_ms_median": round(statistics.median(cold)),
                          "warm_first_ms_median": round(statistics.median(warm)),
                          "live_ms_median": round(statistics.median(live)),
                          "first_paint_ms_best": round(min(both)), "runs": args.runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
