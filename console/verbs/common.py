"""Helpers shared by CLI verbs: loading the config with one clear message."""

from __future__ import annotations

import argparse
import sys

from console.config import Config, ConfigError, load_config


def config_or_exit(args: argparse.Namespace) -> Config | None:
    """Load the config named by ``--config`` (or the default one).

    Returns:
        The config, or ``None`` after printing one ``tpu-console: ...`` line to
        stderr; the caller then exits with code 2.
    """
    try:
        return load_config(getattr(args, "config", None))
    except ConfigError as exc:
        print(f"tpu-console: config error: {exc}", file=sys.stderr)
        return None
