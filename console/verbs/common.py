"""Helpers shared by CLI verbs: loading the config with one clear message, naming a node."""

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


def add_node_arguments(parser: argparse.ArgumentParser) -> None:
    """``NODE [--project P] [--zone Z]``, as :func:`console.flows.node_lookup.find_node` takes them."""
    parser.add_argument("node", metavar="NODE", help="TPU node name (NAME, ZONE/NAME or PROJECT/ZONE/NAME)")
    parser.add_argument("--project", metavar="P", help="project of the node (default: every configured project)")
    parser.add_argument("--zone", metavar="Z", help="zone of the node (default: every zone)")
