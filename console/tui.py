"""Start the Textual console: load the config (or start the sandbox), build services, run."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from console.config import ConfigError, load_config


def run_tui(args: argparse.Namespace) -> int:
    """Open the console. Returns the exit code (2 on a bad config, nothing to list)."""
    sandbox = None
    config_path = args.config
    if args.demo:
        from sandbox.runner import Sandbox

        print("Starting the sandbox (loopback TPU API, SSH nodes, vLLM)…", file=sys.stderr)
        sandbox = Sandbox()
        sandbox.start()
        config_path = str(sandbox.config_path)
    try:
        try:
            config = load_config(config_path)
        except ConfigError as exc:
            print(f"tpu-console: config error: {exc}", file=sys.stderr)
            return 2
        if getattr(args, "readonly", False):
            config = dataclasses.replace(config, readonly=True)
        if not config.projects:
            from console.config import default_config_path

            print(f"tpu-console: no projects configured in {config.path or default_config_path()}.\n"
                  "Add a [[projects]] table with an id, or try the sandbox: tpu-console --demo",
                  file=sys.stderr)
            return 2
        from console.app import TpuConsoleApp, unknown_key_ids
        from console.services import build_services

        unknown = unknown_key_ids(config.keys)
        if unknown:
            print(f"tpu-console: config error: {config.path}: [keys] names no binding id "
                  f"{', '.join(repr(k) for k in unknown)} (press ? in the console to see every id)",
                  file=sys.stderr)
            return 2

        db_path = Path(args.db) if args.db else (sandbox.db_path if sandbox is not None else None)
        services = build_services(config, db_path=db_path, sandbox=sandbox)
        TpuConsoleApp(services).run()
        return 0
    finally:
        if sandbox is not None:
            sandbox.stop()
