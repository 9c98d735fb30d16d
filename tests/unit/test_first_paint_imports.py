"""The modules the first frame needs do not import the heavy clients (they cost ~0.6 s at start):
google-cloud-tpu / grpc, asyncssh, httpx and sqlite-utils are imported when first used."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("google.cloud", "grpc", "asyncssh", "httpx", "sqlite_utils")


def test_the_app_imports_no_heavy_client() -> None:
    code = ("import sys, console.app, console.services, console.tui, console.screens.fleet; "
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
