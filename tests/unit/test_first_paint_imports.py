"""The modules the first frame needs do not import the heavy clients (they cost ~0.6 s at start):
google-cloud-tpu / grpc, asyncssh, httpx, sqlite-utils, prometheus_client and the sandbox are imported
when first used (the services and the sandbox are built on a thread after the first frame)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("google.cloud", "google.auth", "grpc", "asyncssh", "httpx", "sqlite_utils", "prometheus_client",
         "sandbox", "remote.tpu.api", "remote.ssh")


def test_the_app_imports_no_heavy_client() -> None:
    code = ("import sys, console.app, console.services, console.tui, console.screens.fleet, "
            "console.flows.fleet_cache, console.flows.forwards; "
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_the_first_frame_of_a_cached_fleet_imports_no_heavy_client() -> None:
    """What the fleet screen runs on a cached fleet before the services exist (the CLI's parser,
    the inactive-zone banners, a stuck request's verdict) needs no TPU client either."""
    code = (
        "import sys\n"
        "from console.cli import build_parser\n"
        "from console.flows.triage import inactive_by_zone, stuck_verdict\n"
        "from remote.models import FleetSnapshot, QueuedResource\n"
        "build_parser()\n"
        "qrs = (QueuedResource('p', 'z', 'a', 'SUSPENDED'), QueuedResource('p', 'z', 'b', 'FAILED', failure='quota'))\n"
        "zones = inactive_by_zone(FleetSnapshot(queued_resources=qrs))\n"
        "assert zones[0].commands[0] == 'tpu-console delete a --project=p --zone=z', zones\n"
        "assert stuck_verdict(qrs[1]) == 'quota'\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
