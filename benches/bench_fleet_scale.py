"""A fleet of thousands: the console and the ``nodes`` verb on 5,000 and 50,000 nodes across 50 projects.

The sandbox's TPU API (``sandbox.tpu_server``) serves a generated fleet
(:func:`sandbox.fleet_data.scale_world`: a flex-start node with its queued resource in 10, spot,
CREATING and PREEMPTED ones) from a child process (it must not share our GIL), 500 items a page.
For each size, in a fresh state folder with a config naming the 50 projects and that endpoint:

* ``nodes_json_s`` / ``nodes_table_s`` (and ``_mib``, peak RSS): ``tpu-console nodes --json`` and
  the ``nodes`` table (stdout to a file), each a fresh process;
* the fleet cache is written from one listing (what a previous session leaves);
* ``first_frame_s``: the real ``tpu-console --config CFG`` on a pseudo-terminal
  (``bench_first_paint.PtyConsole``): spawn -> the cached fleet's first node name drawn;
  ``live_s``: -> the title says "refreshed" (the first live listing landed and was drawn);
  ``rss_mib``: its peak RSS (``VmHWM``) after ``--settle-s`` more seconds of live fleet (refreshes,
  countdown, serving samples); ``quit_s``: ``q`` -> the process exited (killed past 60 s: null);
* ``key_p99_ms`` (and ``key_p50_ms``, ``keys``): the console in a child process, headless (the real
  ``TpuConsoleApp``, as ``bench_startup_ui`` drives it, at the console's ``TEXTUAL_FPS``), refreshing back to back for
  ``--key-window-s`` while a ``down`` key goes to the nodes table every 50 ms: key event -> the
  table's cursor action ran -> the screen refreshed after it; ``filter_key_p99_ms``: ``/`` then
  typing a node's name one character at a time (each re-filters the table) during refreshes.

Targets (issue 28): at 5,000 nodes first frame < 1 s, key p99 < 100 ms, RSS < 400 MiB, ``q`` at
once; at 50,000 ``q`` within 2 s; the ``nodes`` table as fast as ``--json``. A phase that does not
finish within its bound reports ``null``.

Prints one JSON line per size with ``--json``:
``{"nodes": N, "first_frame_s", "live_s", "key_p99_ms", "rss_mib", "quit_s", ...}``.

Run: ``.venv/bin/python benches/bench_fleet_scale.py [--nodes 5000 50000] [--projects 50] [--json]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benches.bench_first_paint import LIVE, PtyConsole, compile_project  # noqa: E402
from benches.bench_startup_ui import StallSampler, heartbeat_sampled, pct  # noqa: E402
from console.cli import CONSOLE_FPS  # noqa: E402

TPU_CONSOLE = str(ROOT / ".venv" / "bin" / "tpu-console")
PAGE_SIZE = 500
KEY_EVERY_S = 0.05


def serve(nodes: int, projects: int) -> None:
    """Child-process mode: serve a generated fleet, print the endpoint, stop when stdin closes."""
    from remote.models import utc_now
    from sandbox.fleet_data import scale_world
    from sandbox.tpu_server import SandboxTpuApi

    server = SandboxTpuApi(scale_world(nodes, projects, utc_now()), page_size=PAGE_SIZE)
    print(server.start(), flush=True)
    sys.stdin.read()
    server.stop()


def write_config(state: Path, endpoint: str, projects: int) -> Path:
    """A config naming the generated projects and the loopback endpoint (SSH to nowhere: no key)."""
    lines = [f'api_endpoint = "{endpoint}"', "refresh_interval_s = 10", "request_timeout_s = 120", "",
             "[ssh]", f'private_key = "{state}/no-key"', f'known_hosts = "{state}/known_hosts"', "connect_timeout_s = 5"]
    lines += [f'[[projects]]\nid = "scale-{p:02d}"' for p in range(projects)]
    path = state / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def write_cache(state: Path, config_path: Path) -> str:
    """List the fleet once and keep it as the console's cache; returns the first node's name."""
    from console.config import load_config
    from console.flows.fleet_cache import FILE_NAME, cache_for
    from remote.tpu.api import FleetSource

    config = load_config(str(config_path))
    source = FleetSource(config.projects, api_endpoint=config.api_endpoint, timeout_s=120)
    try:
        snapshot = asyncio.run(source.list_fleet())
    finally:
        source.close()
    assert not snapshot.problems, snapshot.problems[:3]
    cache_for(config_path, demo=False, path=state / "state" / "tpu-console" / FILE_NAME).save(snapshot)
    return snapshot.nodes[0].name


def run_verb(config_path: Path, state: Path, *extra: str, timeout_s: float = 300) -> tuple[float | None, float | None]:
    """``tpu-console nodes --config CFG [extra]`` in a fresh process: (seconds, peak RSS MiB of the
    child), ``(None, None)`` past ``timeout_s``."""
    code = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
            "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
            "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, r.returncode)")
    try:
        done = subprocess.run([sys.executable, "-c", code, TPU_CONSOLE, "--config", str(config_path), "nodes", *extra],
                              capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "XDG_STATE_HOME": f"{state}/state"})
    except subprocess.TimeoutExpired:
        return None, None
    seconds, mib, rc = done.stdout.split()
    return (round(float(seconds), 2), round(float(mib))) if rc in ("0", "1") else (None, None)


def console_on_pty(config_path: Path, state: Path, first_name: str, settle_s: float,
                   timeout_s: float) -> dict[str, Any]:
    """first_frame_s, live_s, rss_mib and quit_s of the real console on a pseudo-terminal."""
    console = PtyConsole([TPU_CONSOLE, "--config", str(config_path)], str(state))
    out: dict[str, Any] = {"first_frame_s": None, "live_s": None, "rss_mib": None, "quit_s": None}
    try:
        first_ms = console.wait_for(first_name.encode(), timeout_s)
        out["first_frame_s"] = round(first_ms / 1000, 3) if first_ms is not None else None
        live_ms = console.wait_for(LIVE, timeout_s)
        out["live_s"] = round(live_ms / 1000, 3) if live_ms is not None else None
        settled = time.perf_counter() + settle_s
        while time.perf_counter() < settled and not console.exited:
            console.read(0.2)
        rss = console.peak_rss_mib()
        out["rss_mib"] = round(rss) if rss is not None else None
    finally:
        quit_s = console.quit(timeout_s=60)
        out["quit_s"] = round(quit_s, 3) if quit_s is not None else None
    return out


def gc_pause_recorder() -> list[float]:
    """A list that fills with the seconds of every garbage collection from now on (``gc.callbacks``)."""
    import gc

    pauses: list[float] = []
    started: list[float] = []

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            pauses.append(time.perf_counter() - started[0])
            if os.environ.get("BENCH_GC_LOG") and pauses[-1] > 0.02:
                print(f"gc gen {info['generation']}: {pauses[-1] * 1000:.0f} ms, collected {info['collected']}",
                      file=sys.stderr)

    gc.callbacks.append(timed)
    return pauses


async def keys_during_refresh(config_path: Path, state: Path, window_s: float, name: str,
                              stall_stacks: bool = False) -> dict[str, Any]:
    """Child-process mode: the headless console refreshing back to back; key latencies (see module doc)."""
    from textual import events
    from textual.widgets import DataTable

    from console.app import TpuConsoleApp
    from console.config import load_config
    from console.flows.fleet_cache import FILE_NAME, cache_for
    from console.heap import freeze_after_full_collections
    from console.services import build_services

    freeze_after_full_collections()      # as console.tui does for the console's process
    cache = cache_for(config_path, demo=False, path=state / "state" / "tpu-console" / FILE_NAME)
    services = build_services(load_config(str(config_path)), db_path=state / "history.db", fleet_cache=cache,
                              listing_process=True)     # as the console builds them (console.tui)
    app = TpuConsoleApp(services)
    to_action: list[float] = []
    to_refresh: list[float] = []
    filter_ms: list[float] = []
    stalls: list[float] = []
    refreshes = 0
    async with app.run_test(size=(160, 45)):
        deadline = time.monotonic() + 600
        while not ((screen := app.fleet_screen) is not None and screen.snapshot is not None
                   and screen.cached_at is None):
            if time.monotonic() > deadline:
                return {"key_p99_ms": None}
            await asyncio.sleep(0.1)
        errors = [s for s in app.screen_stack if type(s).__name__ == "ErrorScreen"]
        if errors:
            return {"key_p99_ms": None, "keys_error": str(getattr(errors[0], "error_title", errors[0]))[:300]}
        table = screen.query_one("#nodes", DataTable)
        sent: deque[float] = deque()      # keys are handled in order: each action takes the oldest
        original = table.action_cursor_down

        def timed_down() -> None:
            start = sent.popleft() if sent else None
            original()
            if start is not None:
                to_action.append(time.perf_counter() - start)
                app.call_after_refresh(lambda: to_refresh.append(time.perf_counter() - start))

        table.action_cursor_down = timed_down  # type: ignore[method-assign]
        gc_pauses = gc_pause_recorder()
        sampler = StallSampler(all_threads=True, depth=16) if stall_stacks else None
        if sampler is not None:
            sampler.start()
        beat = asyncio.create_task(heartbeat_sampled(stalls, sampler))

        def refresh_again() -> None:
            nonlocal refreshes
            if not screen._refreshing:
                refreshes += 1
                screen.action_refresh_fleet()

        started = time.monotonic()
        keys_sent = 0
        while time.monotonic() - started < window_s:
            keys_sent += 1
            refresh_again()
            sent.append(time.perf_counter())
            app.post_message(events.Key("down", None))
            await asyncio.sleep(KEY_EVERY_S)
        while sent and time.monotonic() - started < window_s + 30:    # the keys still queued
            await asyncio.sleep(0.05)
        app.post_message(events.Key("slash", "/"))
        await asyncio.sleep(0.2)
        for i, char in enumerate(name):
            refresh_again()
            start = time.perf_counter()
            app.post_message(events.Key(char, char))
            while screen.filter_words != [name[:i + 1]] and time.perf_counter() - start < 10:
                await asyncio.sleep(0.002)
            done = asyncio.get_running_loop().create_future()
            app.call_after_refresh(lambda d=done: d.done() or d.set_result(time.perf_counter()))
            filter_ms.append((await done - start) * 1000)
            await asyncio.sleep(KEY_EVERY_S)
        beat.cancel()
        if sampler is not None:
            sampler.stop()
            with contextlib.redirect_stdout(sys.stderr):
                sampler.report()
    return {"key_p50_ms": round(pct(to_refresh, .5) * 1000, 1), "key_p99_ms": round(pct(to_refresh, .99) * 1000, 1),
            "key_action_p99_ms": round(pct(to_action, .99) * 1000, 1), "keys": len(to_refresh),
            "keys_sent": keys_sent, "refreshes": refreshes, "filter_key_p99_ms": round(pct(filter_ms, .99), 1),
            "loop_stall_max_ms": round(max(stalls or [0]) * 1000, 1),
            "gc_max_ms": round(max(gc_pauses or [0]) * 1000, 1), "gc_over_40ms": sum(p > 0.04 for p in gc_pauses),
            "keys_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def measure(size: int, projects: int, args: argparse.Namespace) -> dict[str, Any]:
    """Every figure of one fleet size (see module doc)."""
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(size), "--projects", str(projects)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdin is not None and server.stdout is not None
    state = Path(tempfile.mkdtemp(prefix=f"bench_fleet_scale_{size}_"))
    out: dict[str, Any] = {"nodes": size, "projects": projects}
    try:
        endpoint = server.stdout.readline().strip()
        config_path = write_config(state, endpoint, projects)
        out["nodes_json_s"], out["nodes_json_mib"] = run_verb(config_path, state, "--json")
        out["nodes_table_s"], out["nodes_table_mib"] = run_verb(config_path, state)
        first_name = write_cache(state, config_path)
        out.update(console_on_pty(config_path, state, first_name, args.settle_s, args.timeout_s))
        if not args.skip_keys:
            try:
                keys = subprocess.run([sys.executable, __file__, "--keys", str(config_path), "--state", str(state),
                                       "--key-window-s", str(args.key_window_s), "--name", first_name,
                                       *(["--stall-stacks"] if args.stall_stacks else [])],
                                      capture_output=True, text=True, timeout=args.timeout_s + 120,
                                      env={"TEXTUAL_FPS": str(CONSOLE_FPS), **os.environ})   # as console.cli sets it
                if args.stall_stacks:
                    print(keys.stderr, file=sys.stderr)
                out.update(json.loads(keys.stdout.strip().splitlines()[-1]) if keys.returncode == 0
                           else {"key_p99_ms": None, "keys_error": keys.stderr[-300:]})
            except subprocess.TimeoutExpired:
                out["key_p99_ms"] = None
    finally:
        server.stdin.close()
        server.wait(timeout=30)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[5000, 50000])
    parser.add_argument("--projects", type=int, default=50)
    parser.add_argument("--settle-s", type=float, default=15.0, help="live seconds before RSS is read (15)")
    parser.add_argument("--key-window-s", type=float, default=15.0, help="seconds of keys during refreshes (15)")
    parser.add_argument("--timeout-s", type=float, default=180.0, help="bound of each wait (180)")
    parser.add_argument("--skip-keys", action="store_true", help="leave out the headless key run")
    parser.add_argument("--json", action="store_true", help="one JSON line per size")
    parser.add_argument("--stall-stacks", action="store_true",
                        help="sample the loop's stack while it stalls > 40 ms in the key run; print the commonest")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--keys", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    parser.add_argument("--name", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve, args.projects)
    if args.keys:
        print(json.dumps(asyncio.run(keys_during_refresh(Path(args.keys), Path(args.state), args.key_window_s,
                                                         args.name, args.stall_stacks))))
        return None
    compile_project()
    for size in args.nodes:
        figures = measure(size, args.projects, args)
        load = os.getloadavg()[0]
        if args.json:
            print(json.dumps(figures), flush=True)
        else:
            print(f"{size:,} nodes: " + ", ".join(f"{k} {v}" for k, v in figures.items() if k != "nodes")
                  + f" (load average {load:.2f} on {os.cpu_count()} cores, shared)", flush=True)
    return None


if __name__ == "__main__":
    main()
