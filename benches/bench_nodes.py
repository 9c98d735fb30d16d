"""Fleet listing across 8 projects vs 1 project, against a sandbox TPU API adding 200 ms per response.

Each project holds a copy of the demo ``inference-prod`` fleet (9 nodes, 5 queued resources:
3 + 2 pages at the sandbox's page size), so one project costs 4 concurrent call chains
(v2 and v2alpha1, nodes and queued resources) of up to 3 sequential pages.

Run: ``.venv/bin/python -m benches.bench_nodes [--latency-s 0.2] [--projects 8] [--runs 3]``.
The server runs in a child process (like the real API, it must not share our GIL). Prints,
for N projects and for 1: "warm" = median ``list_fleet`` of a source that already listed once
(the fleet view's refresh), "cold" = the first ``list_fleet`` in a fresh process (client setup
included, like ``tpu-console nodes``), and the ratios. Target: ratio <= 1.3.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import statistics
import subprocess
import sys
import time

from console.config import ProjectConfig
from remote.models import utc_now
from remote.tpu.api import FleetSource
from sandbox.fleet_data import SandboxWorld, default_world
from sandbox.tpu_server import SandboxTpuApi


def world_of(projects: int) -> SandboxWorld:
    """A world with ``projects`` copies of the demo ``inference-prod`` project (``bench-0`` ...)."""
    demo = default_world(utc_now()).projects["inference-prod"]
    world = SandboxWorld()
    for i in range(projects):
        pid = f"bench-{i}"
        world.add_project(pid, demo.zones)
        rename = f"projects/{pid}/"
        for node in demo.nodes.values():
            world.add_node(pid, {**copy.deepcopy(node), "name": node["name"].replace("projects/inference-prod/", rename)})
        for qr in demo.queued_resources.values():
            world.add_queued_resource(pid, {**copy.deepcopy(qr), "name": qr["name"].replace("projects/inference-prod/", rename)})
    return world


async def measure(endpoint: str, projects: int, runs: int) -> tuple[float, float, int]:
    """``(cold seconds, median warm seconds, nodes listed)`` for ``projects`` projects."""
    source = FleetSource([ProjectConfig(f"bench-{i}") for i in range(projects)], api_endpoint=endpoint, timeout_s=10)
    try:
        started = time.perf_counter()
        snapshot = await source.list_fleet()
        cold = time.perf_counter() - started
        assert not snapshot.problems, snapshot.problems
        warm = []
        for _ in range(runs):
            started = time.perf_counter()
            snapshot = await source.list_fleet()
            warm.append(time.perf_counter() - started)
        return cold, statistics.median(warm) if warm else cold, len(snapshot.nodes)
    finally:
        source.close()


def serve(projects: int, latency_s: float) -> None:
    """Child-process mode: run the sandbox server, print its endpoint, stop when stdin closes."""
    server = SandboxTpuApi(world_of(projects), latency_s=latency_s)
    print(server.start(), flush=True)
    sys.stdin.read()
    server.stop()


def cold(endpoint: str, projects: int) -> None:
    """Child-process mode: print the seconds of the first ``list_fleet`` in a fresh process."""
    print(asyncio.run(measure(endpoint, projects, 0))[0], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-s", type=float, default=0.2)
    parser.add_argument("--projects", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cold", metavar="ENDPOINT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.projects, args.latency_s)
    if args.cold:
        return cold(args.cold, args.projects)
    me = [sys.executable, "-m", "benches.bench_nodes"]
    # The server runs in its own process, like the real API: it does not compete for our GIL.
    server = subprocess.Popen([*me, "--serve", "--projects", str(args.projects), "--latency-s", str(args.latency_s)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        endpoint = server.stdout.readline().strip()
        _, warm_n, nodes_n = asyncio.run(measure(endpoint, args.projects, args.runs))
        _, warm_1, nodes_1 = asyncio.run(measure(endpoint, 1, args.runs))
        colds = {n: statistics.median(
            float(subprocess.run([*me, "--cold", endpoint, "--projects", str(n)], capture_output=True,
                                 text=True, check=True).stdout) for _ in range(args.runs)) for n in (args.projects, 1)}
    finally:
        server.stdin.close()
        server.wait(timeout=10)
    cold_n, cold_1 = colds[args.projects], colds[1]
    print(f"latency per response: {args.latency_s * 1000:.0f} ms")
    print(f"{args.projects} projects: {warm_n:.3f} s warm, {cold_n:.3f} s cold (medians of {args.runs}), {nodes_n} nodes")
    print(f"1 project:  {warm_1:.3f} s warm, {cold_1:.3f} s cold (medians of {args.runs}), {nodes_1} nodes")
    ratio = warm_n / warm_1
    print(f"ratio {args.projects}/1: {ratio:.2f}x warm, {cold_n / cold_1:.2f}x cold (target <= 1.3x warm): "
          f"{'OK' if ratio <= 1.3 else 'OVER TARGET'}")


if __name__ == "__main__":
    main()
