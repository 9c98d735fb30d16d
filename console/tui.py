"""Start the Textual console: check the config, open the app, build the services behind its first frame.

The app is on screen first (the last fleet from the cache, or "loading fleet…"); the sandbox
(``--demo``) and the services (the TPU client's imports) are built on a worker thread after the
first frame (:class:`ServicesStarter`), and the fleet's first refresh starts when they exist.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from console.config import Config, ConfigError, load_config

if TYPE_CHECKING:
    from console.flows.fleet_cache import FleetCache
    from console.services import Services
    from sandbox.runner import Sandbox

#: Seconds :meth:`ServicesStarter.stop` waits for a start in progress before stopping the sandbox.
START_WAIT_S = 60.0


class ServicesStarter:
    """Builds the console's services (after starting the sandbox for ``--demo``), once, on the thread
    that calls it; :meth:`stop` stops the sandbox it started (waiting for a start in progress).

    Args:
        args: the parsed command line (``demo``, ``readonly``, ``db``).
        config: the loaded config, or ``None`` for ``--demo`` (the sandbox writes its own).
        fleet_cache: handed to the services (where the fleet screen keeps the last fleet).
    """

    def __init__(self, args: argparse.Namespace, config: Config | None, fleet_cache: FleetCache) -> None:
        self.args = args
        self.config = config
        self.fleet_cache = fleet_cache
        self.sandbox: Sandbox | None = None
        self._done = threading.Event()
        self._stopped = False
        self._lock = threading.Lock()

    def __call__(self) -> Services:
        """Start the sandbox (``--demo``), load its config, build the services.

        Raises:
            ConfigError: the sandbox's config does not load (a bug in the sandbox).
            OSError: the sandbox could not bind its loopback ports.
        """
        from console.services import build_services

        try:
            config = self.config
            if self.args.demo and (shared := _running_sandbox_dir()) is not None:
                return self._shared(shared)
            if self.args.demo:
                from sandbox.runner import Sandbox

                with self._lock:
                    if self._stopped:
                        raise RuntimeError("the console closed before the sandbox started")
                    self.sandbox = Sandbox(gke_multi_host=True)
                self.sandbox.start()
                config = _with_flags(load_config(str(self.sandbox.config_path)), self.args)
            assert config is not None
            db_path = Path(self.args.db) if self.args.db else (
                self.sandbox.db_path if self.sandbox is not None else None)
            return build_services(config, db_path=db_path, sandbox=self.sandbox, fleet_cache=self.fleet_cache,
                                  listing_process=True)
        finally:
            self._done.set()

    def _shared(self, state_dir: Path) -> Services:
        """The services over the sandbox ``tpu-console sandbox`` runs in ``state_dir`` (its config, its
        history; it keeps running when the console quits): a second sandbox is not started."""
        from console.services import build_services

        config = _with_flags(load_config(str(state_dir / "config.toml")), self.args)
        db_path = Path(self.args.db) if self.args.db else state_dir / "history.db"
        services = build_services(config, db_path=db_path, fleet_cache=self.fleet_cache, listing_process=True)
        services.shared_sandbox_dir = state_dir
        return services

    def stop(self) -> None:
        """Stop the sandbox once its start (if one began) is over; nothing to do without ``--demo``."""
        with self._lock:
            self._stopped = True
            started = self.sandbox is not None
        if started:
            self._done.wait(START_WAIT_S)
            assert self.sandbox is not None
            self.sandbox.stop()


def _running_sandbox_dir() -> Path | None:
    """The default state dir when a sandbox (``tpu-console sandbox``, another ``--demo``) holds it, else ``None``."""
    from sandbox.runner import default_state_dir, sandbox_running

    state_dir = default_state_dir()
    return state_dir if sandbox_running(state_dir) else None


def _with_flags(config: Config, args: argparse.Namespace) -> Config:
    return dataclasses.replace(config, readonly=True) if getattr(args, "readonly", False) else config


def run_tui(args: argparse.Namespace) -> int:
    """Open the console. Returns the exit code (2 on a bad config, nothing to list)."""
    from console.flows.fleet_cache import cache_for

    config: Config | None = None
    if not args.demo:
        try:
            config = _with_flags(load_config(args.config), args)
        except ConfigError as exc:
            print(f"tpu-console: config error: {exc}", file=sys.stderr)
            return 2
        if not config.projects:
            from console.config import default_config_path

            print(f"tpu-console: no projects configured in {config.path or default_config_path()}.\n"
                  "Add a [[projects]] table with an id, or try the sandbox: tpu-console --demo",
                  file=sys.stderr)
            return 2
        if config.keys:
            from console.keymap import key_problems

            problems = key_problems(config.keys)
            for problem in problems:
                print(f"tpu-console: config error: {config.path}: {problem}", file=sys.stderr)
            if problems:
                return 2
    else:
        print("Starting the sandbox (loopback TPU API, SSH nodes, vLLM)…", file=sys.stderr)
    from console.app import TpuConsoleApp
    from console.heap import freeze_after_full_collections

    freeze_after_full_collections()      # this process is the console's alone (console.heap)
    cache = cache_for(config.path if config is not None else None, demo=args.demo)
    starter = ServicesStarter(args, config, cache)
    try:
        TpuConsoleApp(start=starter, fleet_cache=cache, readonly=bool(getattr(args, "readonly", False))
                      or bool(config and config.readonly), sandbox=args.demo,
                      keys=config.keys if config is not None else None).run()
    finally:
        starter.stop()
    leave_now(0)
    return 0


def leave_now(code: int) -> None:
    """End the process once the console has closed what it opened (terminal restored, services, the
    sandbox): streams flushed, then ``os._exit`` without tearing down the interpreter. Freeing a
    fleet of thousands of nodes object by object at exit took 1.7 s at 5,000 nodes, after ``q``."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
