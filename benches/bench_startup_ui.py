"""Key-press latency and memory of the startup view while the log bursts at 20,000 lines/s.

A sandbox VM (in a child process, so its CPU is not charged to the console) runs a container
whose log starts with a burst of vLLM metrics lines (default 20,000 lines/s for 10 s) with one
7 MB chunk of 1,400-character lines in its middle (due at once, so docker writes them in one
go), then a normal startup log. The console (the real ``TpuConsoleApp``, headless) opens the startup view
of that node: real asyncssh client, ``LogTail``, ``StartupReader``, log pane and panel.

During the burst a key (``f``, follow toggle) is sent every 100 ms as a terminal key event;
the bench records when its action ran and when the screen had refreshed after it.

Prints: key round trip (key event -> action, and -> screen refreshed) p50/p99/max in ms
against the 100 ms target, how much of each round trip the loop thread spent waiting for a CPU
(the kernel's run queue, ``/proc`` schedstat: the machine's load, not the console's work) and the
round trip less that wait, the event loop's longest stalls (a 10 ms heartbeat's overshoot),
lines shown vs lines written, RSS before/after/peak, CPU of the loop's thread and of the tail's
line thread (the reader, masking and splitting run there); with
``--json`` the last line is one JSON object: ``key_p50_ms``, ``key_p99_ms`` (key event ->
screen refreshed), ``key_p99_own_ms`` (less the run-queue wait), ``loop_runq_ms``, ``lines_sent``, ``lines_received``, ``rss_mib_max`` (peak RSS).

Huge-line mode (``--huge``): a 60,000-line burst (20,000 lines/s for 3 s) with eight 250 KB lines
spread through it and one 90 KB line of carriage-return redraws (a tqdm bar under ``docker run -t``)
in its middle, no 7 MB chunk. Both modes also print the last line's latency: from when the burst's
last line was due in the container's log (the sandbox's clock, this machine's) to when the log pane
counted it (``last_line_ms`` in the JSON line). Goals: key p99 < 100 ms in huge-line mode, < 50 ms
in the standard burst.

Run: ``.venv/bin/python benches/bench_startup_ui.py [--rate 20000] [--seconds 10] [--chunk-mib 7] [--huge] [--json]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from console.app import TpuConsoleApp
    from console.screens.startup import StartupScreen

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SERVE_ARGV = ["Qwen/Qwen3-8B", "--max-model-len", "8192", "--tensor-parallel-size", "4"]
KEY_EVERY_S = 0.1


#: Huge-line mode: 250 KB lines spread through the burst, and the size of its one CR-redrawn line.
HUGE_LINES, HUGE_LINE_BYTES, CR_LINE_BYTES = 8, 250_000, 90_000


async def serve(rate: int, seconds: float, client_public_key: str, chunk_mib: float, huge: bool) -> None:
    """Child process: one VM with a bursting container, started on "go", stopped when stdin closes."""
    from sandbox.engine import plan_startup
    from sandbox.vm import SandboxVm

    vm = SandboxVm(node_name="bench-node", accelerator_type="v5litepod-4", authorized_client_key=client_public_key,
                   boot_s=3.0, burst_lines_per_s=rate, burst_s=seconds,
                   burst_chunk_bytes=int(chunk_mib * 1e6), burst_huge_lines=HUGE_LINES if huge else 0,
                   burst_huge_line_bytes=HUGE_LINE_BYTES, burst_cr_line_bytes=CR_LINE_BYTES if huge else 0)
    port = await vm.start()
    print(json.dumps({"port": port, "host_key": vm.host_public_key}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await vm.boot_container(SERVE_ARGV)
    box = vm.docker.find("vllm")
    burst_lines = len(box.plan.lines) - len(plan_startup(SERVE_ARGV, "v5litepod-4", boot_s=3.0).lines)
    print(json.dumps({"lines": len(box.plan.lines), "burst_lines": burst_lines,
                      "last_burst_due_ns": box.line_ns[burst_lines - 1]}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await vm.stop()


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def runq_wait_s() -> float:
    """Seconds the calling thread has waited on a run queue for a CPU (``/proc`` schedstat; 0 when
    the kernel does not say): the part of a stall that is the machine's load, not the thread's work."""
    try:
        return int(Path(f"/proc/self/task/{threading.get_native_id()}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def thread_cpu_s(native_id: int | None) -> float:
    """CPU seconds (user + system) of one thread of this process, from /proc (0 when gone)."""
    if native_id is None:
        return 0.0
    try:
        fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def heartbeat(stalls: list[float], period_s: float = 0.01) -> None:
    """Record how late each 10 ms sleep wakes up: the loop's stalls."""
    loop = asyncio.get_running_loop()
    while True:
        start = loop.time()
        await asyncio.sleep(period_s)
        stalls.append(loop.time() - start - period_s)


class StallSampler:
    """A watchdog thread: while the loop's heartbeat is more than ``late_s`` overdue, it samples the
    loop thread's stack every ``every_s`` and counts each sample's innermost frames (``--stall-stacks``)."""

    def __init__(self, late_s: float = 0.04, every_s: float = 0.005, depth: int = 6, all_threads: bool = False) -> None:
        import threading

        self.late_s, self.every_s, self.depth, self.all_threads = late_s, every_s, depth, all_threads
        self._names: dict[int, str] = {}
        self.last_beat = time.perf_counter()
        self.samples: dict[tuple[str, ...], int] = {}
        self._loop_thread = threading.get_ident()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import threading

        while not self._stop.wait(self.every_s):
            if time.perf_counter() - self.last_beat < self.late_s:
                continue
            self._names = {t.ident: t.name for t in threading.enumerate() if t.ident is not None}
            frames = sys._current_frames()
            for ident, frame in frames.items():
                if ident == threading.get_ident() or (ident != self._loop_thread and not self.all_threads):
                    continue
                stack: list[str] = [] if ident == self._loop_thread else [f"[thread {self._names.get(ident, ident)}]"]
                while frame is not None and len(stack) < self.depth:
                    code = frame.f_code
                    stack.append(f"{Path(code.co_filename).name}:{frame.f_lineno} {code.co_name}")
                    frame = frame.f_back
                key = tuple(stack)
                if ident != self._loop_thread and any(w in key[1] for w in ("_work", "_worker", " wait", " select")):
                    continue                      # an idle pool thread
                self.samples[key] = self.samples.get(key, 0) + 1

    def report(self, top: int = 12) -> None:
        total = sum(self.samples.values())
        print(f"loop stack samples while the heartbeat was > {self.late_s * 1000:.0f} ms late: {total} "
              f"({self.every_s * 1000:.0f} ms apart)")
        for stack, count in sorted(self.samples.items(), key=lambda kv: -kv[1])[:top]:
            print(f"  {count:4d}  " + " <- ".join(stack))


async def heartbeat_sampled(stalls: list[float], sampler: StallSampler | None, period_s: float = 0.01) -> None:
    """:func:`heartbeat` that also tells ``sampler`` when the loop last ran."""
    loop = asyncio.get_running_loop()
    while True:
        start = loop.time()
        if sampler is not None:
            sampler.last_beat = time.perf_counter()
        await asyncio.sleep(period_s)
        stalls.append(loop.time() - start - period_s)


def state_of(watch: Any) -> Any:
    """The watch's published snapshot (``watch.state``; ``watch.reader.state`` before issue 18's thread)."""
    return getattr(watch, "state", None) or watch.reader.state  # type: ignore[attr-defined]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


@dataclass
class BurstFigures:
    """What :func:`client` measured: lines, key round trips (s), loop stalls (s), CPU (s), RSS (MiB)."""

    total_lines: int            # lines the container's log holds in all
    burst_lines: int            # of them in the burst
    burst_wall_s: float
    to_action_s: list[float]    # key event -> action ran
    to_refresh_s: list[float]   # key event -> screen refreshed
    key_runq_s: list[float]     # of each answered key's round trip, the loop thread's wait for a CPU
    loop_runq_s: float          # the loop thread's wait for a CPU during the burst
    keys_unanswered: int
    last_line_s: float | None   # the burst's last line: due in the log -> counted by the log pane
    stalls_s: list[float]       # the 10 ms heartbeat's overshoots
    loop_cpu_s: float
    line_cpu_s: float
    cpu_s: float                # the console process, burst and startup
    rss_before_mib: float
    rss_samples_mib: list[float]
    rss_after_mib: float
    received: int
    ready: bool
    shown_total: int
    kept: int
    sampler: StallSampler | None


async def client(rate: int, seconds: float, chunk_mib: float = 7.0, as_json: bool = False,
                 stall_stacks: bool = False, huge: bool = False) -> None:
    """Open the startup view of a bursting sandbox node, press keys through the burst, print the figures."""
    work = Path(tempfile.mkdtemp(prefix="bench_startup_ui_"))
    child, hello = start_child(work, rate, seconds, chunk_mib, huge)
    app, screen_class = bench_app(work, hello)
    async with app.run_test(size=(200, 50)):
        for _ in range(200):
            await asyncio.sleep(0.05)
            screen = app.screen
            if isinstance(screen, screen_class) and screen.watcher is not None and screen.watcher.status is not None:
                break
        screen = app.screen
        assert isinstance(screen, screen_class), "the startup view did not open"
        figures = await burst(app, screen, child, rate, seconds, chunk_mib, stall_stacks)
    assert child.stdin is not None
    child.stdin.close()
    child.wait(timeout=10)
    print_figures(figures, rate, seconds, as_json, huge)


def start_child(work: Path, rate: int, seconds: float, chunk_mib: float,
                huge: bool) -> tuple[subprocess.Popen[str], dict[str, object]]:
    """Start :func:`serve` in a child process with a new client key in ``work``; (child, its hello:
    ``port`` and ``host_key``)."""
    import asyncssh

    key = asyncssh.generate_private_key("ssh-ed25519")
    (work / "id").write_bytes(key.export_private_key())
    os.chmod(work / "id", 0o600)
    child = subprocess.Popen([sys.executable, __file__, "--serve", "--rate", str(rate), "--seconds", str(seconds),
                              "--chunk-mib", str(chunk_mib), "--key", key.export_public_key().decode().strip(),
                              *(["--huge"] if huge else [])],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdin is not None
    return child, json.loads(child.stdout.readline())


def bench_app(work: Path, hello: dict[str, object]) -> tuple[TpuConsoleApp, type[StartupScreen]]:
    """The real console app (headless) that opens the startup view of the child's node; (app, the
    startup screen's class)."""
    from textual import events

    from console.app import TpuConsoleApp
    from console.config import Config, ContainerConfig, SshConfig
    from console.screens.startup import StartupScreen
    from console.services import Services
    from remote.models import Node, WorkerEndpoint

    node = Node(project="bench", zone="us-west4-a", name="bench-node", state="READY", accelerator_type="v5litepod-4",
                node_id="77", workers=(WorkerEndpoint(0, "127.0.0.1", None),))
    (work / "known_hosts").write_text(f"tpu.77-0 {hello['host_key']}\n")
    config = Config(ssh=SshConfig(user="bench", private_key=work / "id", known_hosts=work / "known_hosts",
                                  hosts={"bench-node": f"127.0.0.1:{hello['port']}"}, connect_timeout_s=5),
                    container=ContainerConfig(name="vllm", port=8000))

    class NoFleet:
        async def list_fleet(self) -> None:
            raise RuntimeError("not used")

    services = Services(config=config, fleet=NoFleet(), db_path=work / "history.db")

    class BenchApp(TpuConsoleApp):
        CSS_PATH = str(ROOT / "console" / "app.tcss")

        def on_mount(self, event: events.Mount) -> None:
            event.prevent_default()
            self.push_screen(StartupScreen(node))

    return BenchApp(services), StartupScreen


async def burst(app: TpuConsoleApp, screen: StartupScreen, child: subprocess.Popen[str], rate: int, seconds: float,
                chunk_mib: float, stall_stacks: bool) -> BurstFigures:
    """Start the child's container and press ``f`` every :data:`KEY_EVERY_S` through its burst,
    timing each press, the loop's stalls, CPU and RSS; then wait for ready."""
    from textual import events

    from console.widgets.log_view import LogView

    assert child.stdout is not None and child.stdin is not None
    to_action: list[float] = []
    to_refresh: list[float] = []
    sent: dict[str, float] = {}
    original = screen.action_toggle_follow

    key_runq: list[float] = []

    def timed_toggle() -> None:
        start = sent.pop("t", None)
        original()
        if start is not None:
            to_action.append(time.perf_counter() - start)
            runq_at_key = sent.pop("runq", 0.0)

            def refreshed() -> None:
                to_refresh.append(time.perf_counter() - start)
                key_runq.append(runq_wait_s() - runq_at_key)

            app.call_after_refresh(refreshed)

    screen.action_toggle_follow = timed_toggle  # type: ignore[method-assign]
    await asyncio.sleep(0.5)
    rss_before = rss_mib()
    cpu_before = time.process_time()
    child.stdin.write("go\n")
    child.stdin.flush()
    planned = json.loads(await asyncio.get_running_loop().run_in_executor(None, child.stdout.readline))
    total_lines, burst_lines = planned["lines"], planned["burst_lines"]
    started = time.monotonic()
    view = screen.query_one("#log", LogView)
    last_line: list[float] = []
    watch_last = asyncio.create_task(last_line_seen(view, burst_lines, planned["last_burst_due_ns"], last_line))
    rss_samples = []
    stalls: list[float] = []
    sampler = StallSampler() if stall_stacks else None
    if sampler is not None:
        sampler.start()
    beat = asyncio.create_task(heartbeat_sampled(stalls, sampler))
    loop_cpu_before, runq_before = time.thread_time(), runq_wait_s()
    while screen.watcher.lines_received < burst_lines and time.monotonic() - started < seconds * 6:
        sent["t"], sent["runq"] = time.perf_counter(), runq_wait_s()
        app.post_message(events.Key("f", None))
        await asyncio.sleep(KEY_EVERY_S)
        rss_samples.append(rss_mib())
    burst_wall = time.monotonic() - started
    beat.cancel()
    if sampler is not None:
        sampler.stop()
    loop_cpu, loop_runq = time.thread_time() - loop_cpu_before, runq_wait_s() - runq_before
    line_thread = getattr(screen.watcher, "tail_thread", None)      # None before issue 18's thread
    line_cpu = thread_cpu_s(line_thread.native_id if line_thread is not None else None)
    while not state_of(screen.watcher).ready and time.monotonic() - started < seconds * 6 + 30:
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    watch_last.cancel()
    cpu = time.process_time() - cpu_before
    rss_after = rss_mib()
    return BurstFigures(
        total_lines=total_lines, burst_lines=burst_lines, burst_wall_s=burst_wall, to_action_s=to_action,
        to_refresh_s=to_refresh, key_runq_s=key_runq, loop_runq_s=loop_runq,
        keys_unanswered=len([k for k in sent if k == "t"]), last_line_s=last_line[0] if last_line else None,
        stalls_s=stalls, loop_cpu_s=loop_cpu,
        line_cpu_s=line_cpu, cpu_s=cpu, rss_before_mib=rss_before, rss_samples_mib=rss_samples,
        rss_after_mib=rss_after, received=screen.watcher.lines_received, ready=state_of(screen.watcher).ready,
        shown_total=view.buffer.total, kept=len(view.buffer.entries), sampler=sampler)


async def last_line_seen(view: Any, burst_lines: int, due_ns: int, into: list[float]) -> None:
    """Append how late (s) the log pane counted the burst's last line: from ``due_ns`` (when the
    container's log had it, wall clock) to the first 2 ms poll that finds ``burst_lines`` counted."""
    while view.buffer.total < burst_lines:
        await asyncio.sleep(0.002)
    into.append((time.time_ns() - due_ns) / 1e9)


def print_figures(f: BurstFigures, rate: int, seconds: float, as_json: bool, huge: bool = False) -> None:
    """Print :func:`burst`'s figures (and with ``as_json`` one JSON line of the headline ones)."""
    to_action, to_refresh, stalls, received = f.to_action_s, f.to_refresh_s, f.stalls_s, f.received
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"machine: {os.cpu_count()} cores, load average {' '.join(load)} (shared; wall figures scale with it)")
    extra = (f" (with {HUGE_LINES} lines of {HUGE_LINE_BYTES // 1000} KB and one {CR_LINE_BYTES // 1000} KB "
             "line of CR redraws)") if huge else ""
    print(f"burst: {rate:,} lines/s for {seconds:g} s = {f.burst_lines:,} lines{extra}, then a startup log "
          f"({f.total_lines:,} lines in all)")
    last = f"{f.last_line_s * 1000:.0f} ms" if f.last_line_s is not None else "never counted"
    print(f"the burst's last line: due in the log -> counted by the log pane: {last}")
    print(f"received {received:,} lines (log pane counted {f.shown_total:,}, keeps the last {f.kept:,}); "
          f"burst read in {f.burst_wall_s:.1f} s wall; ready={f.ready}")
    print(f"key 'f' during the burst: {len(to_action)} presses answered of {len(to_action) + f.keys_unanswered} sent")
    print(f"  key event -> action ran:       p50 {pct(to_action, .5) * 1000:.1f} ms, p99 "
          f"{pct(to_action, .99) * 1000:.1f} ms, max {max(to_action or [0]) * 1000:.1f} ms")
    print(f"  key event -> screen refreshed: p50 {pct(to_refresh, .5) * 1000:.1f} ms, p99 "
          f"{pct(to_refresh, .99) * 1000:.1f} ms, max {max(to_refresh or [0]) * 1000:.1f} ms (target < 100 ms)")
    own = [wall - wait for wall, wait in zip(to_refresh, f.key_runq_s)]
    print(f"  of which the loop thread waited for a CPU (run queue): p99 {pct(f.key_runq_s, .99) * 1000:.1f} ms; "
          f"key -> refreshed less that wait: p50 {pct(own, .5) * 1000:.1f} ms, p99 {pct(own, .99) * 1000:.1f} ms")
    print(f"event loop stalls during the burst (10 ms heartbeat, {len(stalls)} beats): p50 "
          f"{pct(stalls, .5) * 1000:.1f} ms, p99 {pct(stalls, .99) * 1000:.1f} ms, max {max(stalls or [0]) * 1000:.1f} ms")
    print(f"CPU during the burst: loop thread {f.loop_cpu_s:.1f} s (and {f.loop_runq_s:.1f} s waiting for a CPU), "
          f"tail line thread {f.line_cpu_s:.1f} s")
    print(f"RSS: before the burst {f.rss_before_mib:.1f} MiB, during max {max(f.rss_samples_mib or [0]):.1f} MiB, "
          f"after ready {f.rss_after_mib:.1f} MiB, peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MiB")
    print(f"CPU (console process): {f.cpu_s:.1f} s for {received:,} lines = {f.cpu_s / max(received, 1) * 1e6:.0f} us/line "
          f"(SSH, tail, reader, log pane, panel, rendering)")
    if f.sampler is not None:
        f.sampler.report()
    if as_json:
        print(json.dumps({"key_p50_ms": round(pct(to_refresh, .5) * 1000, 1),
                          "key_p99_ms": round(pct(to_refresh, .99) * 1000, 1),
                          "key_p99_own_ms": round(pct(own, .99) * 1000, 1),
                          "loop_runq_ms": round(f.loop_runq_s * 1000, 1),
                          "last_line_ms": round(f.last_line_s * 1000, 1) if f.last_line_s is not None else None,
                          "lines_sent": f.total_lines, "lines_received": received,
                          "rss_mib_max": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=20000, help="burst lines per second (default 20000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="burst duration (default 10)")
    parser.add_argument("--chunk-mib", type=float, default=7.0, help="MB of long lines due at once mid-burst (7)")
    parser.add_argument("--huge", action="store_true",
                        help="huge-line mode: a 60,000-line burst with 250 KB lines and a 90 KB CR-redrawn line")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    parser.add_argument("--profile", action="store_true", help="print where the console's CPU went (cProfile)")
    parser.add_argument("--stall-stacks", action="store_true",
                        help="sample the loop's stack while it stalls > 40 ms and print the commonest")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.huge and not args.serve:
        args.rate, args.seconds, args.chunk_mib = 20000, 3.0, 0.0
    if not args.serve:                  # the console's process as console.cli and console.tui set it up
        from console.cli import CONSOLE_FPS
        from console.heap import freeze_after_full_collections

        os.environ.setdefault("TEXTUAL_FPS", str(CONSOLE_FPS))      # before Textual is imported
        freeze_after_full_collections()
    if args.serve:
        asyncio.run(serve(args.rate, args.seconds, args.key, args.chunk_mib, args.huge))
    elif args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        asyncio.run(client(args.rate, args.seconds, args.chunk_mib, huge=args.huge))
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    else:
        asyncio.run(client(args.rate, args.seconds, args.chunk_mib, args.json, args.stall_stacks, args.huge))


if __name__ == "__main__":
    main()
