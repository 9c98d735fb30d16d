"""How long ``tpu-console nodes`` takes against a hostile TPU API, next to its goal: 2 x request_timeout_s.

A loopback API (in this process, on its own threads) answers every ``nodes`` list with one of:
``repeat`` (the same ``nextPageToken`` on every page), ``int-token`` (``"nextPageToken": 7``),
``trickle-body`` (headers at once, then the body a byte every 50 ms) or ``trickle-headers``
(the status line, then one header a byte every 50 ms). ``nodes`` runs in its own process, as an
operator runs it (interpreter start and imports included, ~1.2 s of it on an idle machine), with
``request_timeout_s`` from ``--timeout-s``.

Run: ``.venv/bin/python -m benches.bench_hostile_api [--timeout-s 2] [--json]``. Prints per case
``listing_s`` (``FleetSource.list_fleet`` in this process, client setup included: the verb's own
part, the goal's measure), the ``nodes`` process's wall time and exit code, and whether the
listing met ``2 x timeout`` (on a loaded machine the process's start alone can take seconds).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs

from sandbox.loopback_http import LoopbackHttp

PROJECT = "hostile-proj"
CASES = ("repeat", "int-token", "trickle-body", "trickle-headers")


def _handler(mode: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            token = parse_qs(query).get("pageToken", [""])[0]
            node = {"name": f"projects/{PROJECT}/locations/us-east5-a/nodes/vllm-{len(token)}", "state": "READY",
                    "acceleratorType": "v6e-8"}
            body: dict[str, object] = {}
            if path.endswith("/nodes"):
                body = {"nodes": [node], "nextPageToken": 7 if mode == "int-token" else "again"}
            data = json.dumps(body).encode()
            try:
                if mode == "trickle-headers":
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                    for _ in range(4000):
                        self.wfile.write(b"x")
                        self.wfile.flush()
                        time.sleep(0.05)
                    return
                data = b" " * 4000 + data if mode == "trickle-body" else data
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                step = 1 if mode == "trickle-body" else len(data)
                for i in range(0, len(data), step):
                    self.wfile.write(data[i:i + step])
                    self.wfile.flush()
                    if mode == "trickle-body":
                        time.sleep(0.05)
            except OSError:
                self.close_connection = True

    return Handler


def run_case(mode: str, timeout_s: float) -> dict[str, object]:
    """``list_fleet`` in this process, then one ``nodes`` process, against ``mode``."""
    import asyncio

    from console.config import ProjectConfig
    from remote.tpu.api import FleetSource

    http = LoopbackHttp(f"bench-{mode}")
    url = http.start(_handler(mode))
    try:
        source = FleetSource([ProjectConfig(PROJECT)], api_endpoint=url, timeout_s=timeout_s)
        started = time.monotonic()
        asyncio.run(source.list_fleet())
        listing_s = time.monotonic() - started
        source.close()
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "config.toml"
            config.write_text(f'request_timeout_s = {timeout_s}\napi_endpoint = "{url}"\n'
                              f'[[projects]]\nid = "{PROJECT}"\n')
            env = {"XDG_STATE_HOME": tmp, "XDG_CONFIG_HOME": tmp, "XDG_DATA_HOME": tmp, "HOME": tmp,
                   "PATH": "/usr/bin:/bin"}
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-c", "import sys; from console.cli import main; "
                                   "sys.exit(main(sys.argv[1:]))", "--config", str(config), "nodes"],
                                  env=env, capture_output=True, text=True, timeout=600)
            wall_s = time.monotonic() - started
    finally:
        http.stop()
    return {"case": mode, "listing_s": round(listing_s, 2), "process_s": round(wall_s, 2), "exit": done.returncode,
            "goal_s": 2 * timeout_s, "met": listing_s <= 2 * timeout_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout-s", type=float, default=2.0, help="request_timeout_s of the config (default 2)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per case")
    args = parser.parse_args()
    for mode in CASES:
        result = run_case(mode, args.timeout_s)
        if args.json:
            print(json.dumps(result), flush=True)
        else:
            print(f"{mode:16} listing {result['listing_s']:5.2f} s  process {result['process_s']:5.2f} s  "
                  f"exit {result['exit']}  goal <= {result['goal_s']:g} s: {'met' if result['met'] else 'MISSED'}",
                  flush=True)


if __name__ == "__main__":
    main()
