"""Lines per second from a sandbox TPU VM over SSH into the startup reader.

A sandbox VM (in a child process, so the server's CPU is not charged to the client) runs a
container whose log starts with a burst of vLLM metrics lines (default 20,000 lines/s for
10 s) followed by a normal startup log. The client follows it with ``remote.container.tail.LogTail``
over the real asyncssh client and feeds every line to ``remote.vllm_log.reader.StartupReader``.

Prints: lines received and parsed per second, delivery lag (line timestamp -> on_lines),
the worst event-loop stall (how late a 10 ms timer fired: a UI would answer keys that late),
batches per second, and RSS over time (peak and growth after the first second).

Run: ``.venv/bin/python benches/bench_tail.py [--rate 20000] [--seconds 10] [--consumer-us 100]``
(``--consumer-us`` makes ``on_lines`` slower than the source: RSS must stay flat, the sender waits).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from remote.vllm_log.reader import StartupReader

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SERVE_ARGV = ["Qwen/Qwen3-8B", "--max-model-len", "8192", "--tensor-parallel-size", "4"]


async def serve(rate: int, seconds: float, client_public_key: str) -> None:
    """Child process: run one VM with a bursting container until stdin closes."""
    from sandbox.vm import SandboxVm

    vm = SandboxVm(node_name="bench", accelerator_type="v5litepod-4", authorized_client_key=client_public_key,
                   boot_s=2.0, burst_lines_per_s=rate, burst_s=seconds)
    port = await vm.start()
    print(json.dumps({"port": port, "host_key": vm.host_public_key}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)   # wait for "go"
    await vm.boot_container(SERVE_ARGV)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)       # until the parent closes it
    await vm.stop()


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Consumer:
    """The tail's ``on_lines``: feeds every line to the reader, times it (``--consumer-us`` more per
    line), counts lines and batches, and keeps each batch's delivery lag (s); ``done`` is set once the
    boot is ready or failed fatally."""

    def __init__(self, reader: StartupReader, expected_burst: int, consumer_us: float) -> None:
        self.reader = reader
        self.expected_burst = expected_burst
        self.consumer_us = consumer_us
        self.lines = 0
        self.batches = 0
        self.parse_s = 0.0
        self.first: float | None = None         # monotonic time of the first batch
        self.burst_done: float | None = None    # ... of the batch that completed the burst
        self.lags: list[float] = []
        self.done = asyncio.Event()

    def on_lines(self, batch: list[tuple[datetime | None, str]]) -> None:
        now = time.time()
        if self.first is None:
            self.first = time.monotonic()
        started = time.perf_counter()
        reader = self.reader
        for ts, text in batch:
            reader.feed_line(text, ts)
        if self.consumer_us:                     # a slow consumer: memory must stay flat anyway
            time.sleep(self.consumer_us * len(batch) / 1e6)
        self.parse_s += time.perf_counter() - started
        self.lines += len(batch)
        self.batches += 1
        if batch[-1][0] is not None:
            lag = now - batch[-1][0].timestamp()
            self.lags.append(lag)
        if self.burst_done is None and self.lines >= self.expected_burst:
            self.burst_done = time.monotonic()
        if reader.state.ready or (reader.state.failure and reader.state.failure.fatal):
            self.done.set()


async def ticker(stall: dict[str, float]) -> None:
    """Keep ``stall["max_s"]``: how late a 10 ms timer fired at worst."""
    while True:
        before = time.monotonic()
        await asyncio.sleep(0.01)
        stall["max_s"] = max(stall["max_s"], time.monotonic() - before - 0.01)


async def sample_rss(rss: list[tuple[float, float]]) -> None:
    """Append ``(seconds since start, RSS MiB)`` every 0.5 s."""
    start = time.monotonic()
    while True:
        rss.append((time.monotonic() - start, rss_mib()))
        await asyncio.sleep(0.5)


async def client(rate: int, seconds: float, consumer_us: float = 0.0) -> None:
    """Follow a bursting sandbox node's container log into the reader; print the figures."""
    import asyncssh

    from remote.container.tail import LogTail
    from remote.ssh import SshTarget, connect
    from remote.vllm_log.reader import StartupReader

    key = asyncssh.generate_private_key("ssh-ed25519")
    child = subprocess.Popen([sys.executable, __file__, "--serve", "--rate", str(rate), "--seconds", str(seconds),
                              "--key", key.export_public_key().decode().strip()],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdin is not None
    hello = json.loads(child.stdout.readline())
    known = Path("/tmp") / f"bench_tail_known_hosts_{child.pid}"
    known.write_text(f"tpu.bench-0 {hello['host_key']}\n")
    target = SshTarget("127.0.0.1", hello["port"], "bench", None, known, "tpu.bench-0", client_keys=(key,))

    consumer = Consumer(StartupReader(), int(rate * seconds), consumer_us)
    rss: list[tuple[float, float]] = []
    stall = {"max_s": 0.0}
    tail = LogTail(lambda: connect(target), "vllm", on_lines=consumer.on_lines, on_status=lambda s: None,
                   poll_interval_s=0.05)
    tasks = [asyncio.create_task(t) for t in (tail.run(), ticker(stall), sample_rss(rss))]
    await asyncio.sleep(0.3)                      # connected and waiting for the container
    child.stdin.write("go\n")
    child.stdin.flush()
    started = time.monotonic()
    try:
        await asyncio.wait_for(consumer.done.wait(), timeout=seconds * 4 + 60)
    finally:
        tail.stop()
        for task in tasks[1:]:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        child.stdin.close()
        child.wait(timeout=10)
        known.unlink(missing_ok=True)
    elapsed = time.monotonic() - started
    print_figures(consumer, rate, seconds, started, elapsed, stall["max_s"], rss)


def print_figures(consumer: Consumer, rate: int, seconds: float, started: float, elapsed: float,
                  stall_max_s: float, rss: list[tuple[float, float]]) -> None:
    """Print what :func:`client` measured (``started``: monotonic time of "go"; ``elapsed`` s since)."""
    lines, batches, parse_s, lags = consumer.lines, consumer.batches, consumer.parse_s, consumer.lags
    expected_burst = consumer.expected_burst
    load = Path("/proc/loadavg").read_text().split()[:3]
    burst_wall = (consumer.burst_done or time.monotonic()) - (consumer.first or started)
    lags.sort()
    steady = [r for t, r in rss if t >= 1.0]
    print(f"machine: {os.cpu_count()} cores, load average {' '.join(load)} (shared; wall figures scale with it)")
    if consumer.consumer_us:
        print(f"slow consumer: +{consumer.consumer_us:g} us per line in on_lines")
    print(f"burst: {rate:,} lines/s for {seconds:g} s = {expected_burst:,} lines, then a startup log")
    print(f"received and parsed: {lines:,} lines in {elapsed:.1f} s; ready={consumer.reader.state.ready}")
    print(f"burst throughput: {expected_burst / burst_wall:,.0f} lines/s received "
          f"(burst took {burst_wall:.2f} s wall, source rate {rate:,}/s)")
    print(f"reader: {lines / max(parse_s, 1e-9):,.0f} lines/s parse speed "
          f"({parse_s:.2f} s wall in feed_line)")
    print(f"batches: {batches:,} ({batches / elapsed:.1f}/s, "
          f"{lines / max(batches, 1):.0f} lines each)")
    if lags:
        print(f"delivery lag (docker timestamp -> on_lines): p50 {lags[len(lags) // 2] * 1000:.0f} ms, "
              f"p99 {lags[int(len(lags) * 0.99)] * 1000:.0f} ms, max {lags[-1] * 1000:.0f} ms")
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    me = resource.getrusage(resource.RUSAGE_SELF)
    client_cpu = me.ru_utime + me.ru_stime
    print(f"CPU: client {client_cpu:.1f} s ({client_cpu / max(lines, 1) * 1e6:.1f} us/line incl. SSH, "
          f"tail and reader = {lines / client_cpu:,.0f} lines/s per core), "
          f"sandbox VM process {children.ru_utime + children.ru_stime:.1f} s")
    print(f"worst event-loop stall: {stall_max_s * 1000:.0f} ms")
    print(f"RSS: peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MiB; "
          f"after 1 s min {min(steady or [0]):.1f} / max {max(steady or [0]):.1f} MiB "
          f"({len(rss)} samples every 0.5 s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=20000, help="burst lines per second (default 20000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="burst duration (default 10)")
    parser.add_argument("--consumer-us", type=float, default=0.0,
                        help="extra microseconds per line in on_lines (simulate a slow UI)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.rate, args.seconds, args.key))
    else:
        asyncio.run(client(args.rate, args.seconds, args.consumer_us))


if __name__ == "__main__":
    main()
