"""What a GKE workload's forward costs per request: the API server's port-forward (kr8s, WebSocket) with the pod
chosen per connection, against the sandbox's Kubernetes API stand-in and its OpenAI server.

Run:  ``.venv/bin/python -m benches.bench_workload_forward [--requests 50] [--rounds 3] [--json]``

Per round, ``GET /v1/models`` ``--requests`` times (a) on one kept-alive connection through the forward,
(b) on a new connection each (each one lists the pods to choose the serving one, then opens a WebSocket),
and (c) the pod choice alone (one pod listing). Prints milliseconds per request (median and p90) and the
machine's load average. The machine is 2 cores shared with other work: compare rounds, not single runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median_ms": round(1000 * statistics.median(ordered), 2),
            "p90_ms": round(1000 * ordered[int(0.9 * (len(ordered) - 1))], 2)}


async def _round(config: Any, requests: int) -> dict[str, Any]:
    import httpx

    from console.flows.gke_target import parse_workload_spec
    from console.flows.workload_forward import workload_tunnel

    async with workload_tunnel(config, parse_workload_spec("deploy/vllm-llama")) as (_w, _pool, forward):
        kept, fresh, choose = [], [], []
        async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
            for _ in range(requests):
                t = time.perf_counter()
                (await client.get(f"{forward.url}/v1/models")).raise_for_status()
                kept.append(time.perf_counter() - t)
        for _ in range(requests):
            async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
                t = time.perf_counter()
                (await client.get(f"{forward.url}/v1/models")).raise_for_status()
                fresh.append(time.perf_counter() - t)
        for _ in range(requests):
            t = time.perf_counter()
            await forward.choose()
            choose.append(time.perf_counter() - t)
    return {"kept_alive": _ms(kept), "new_connection": _ms(fresh), "pod_choice": _ms(choose)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from console.config import load_config
    from remote.errors import RemoteError
    from sandbox.runner import Sandbox

    with tempfile.TemporaryDirectory() as folder:
        box = Sandbox(Path(folder), boot_s=1.0, fast_boot_s=0.3, gke_boot_s=1.0, gke_create_s=0.3)
        box.start()
        try:
            config = load_config(box.config_path)
            rounds = []
            for _ in range(args.rounds):
                for _attempt in range(120):             # until the pod is Ready (the first round)
                    try:
                        rounds.append(asyncio.run(_round(config, args.requests)))
                        break
                    except RemoteError as exc:
                        if "no Ready pod" not in exc.message:
                            raise
                        time.sleep(0.5)
        finally:
            box.stop()
    load = os.getloadavg()
    if args.json:
        print(json.dumps({"requests": args.requests, "rounds": rounds, "loadavg": load}, indent=2))
        return 0
    print(f"{args.requests} GET /v1/models per case, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for i, r in enumerate(rounds, 1):
        print(f"round {i}: " + " · ".join(f"{k.replace('_', ' ')} {v['median_ms']:.1f} ms (p90 {v['p90_ms']:.1f})"
                                          for k, v in r.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
