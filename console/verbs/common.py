"""Helpers shared by CLI verbs: loading the config with one clear message, read-only mode, naming a node."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import TYPE_CHECKING, TypeAlias

from console.config import Config, ConfigError, load_config
from console.keymap import key_problems

if TYPE_CHECKING:
    #: What each verb module's ``add_parser`` registers its verb on.
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def config_or_exit(args: argparse.Namespace) -> Config | None:
    """Load the config named by ``--config`` (or the default one).

    Returns:
        The config, or ``None`` after printing one ``tpu-console: ...`` line to
        stderr; the caller then exits with code 2.
    """
    try:
        config = load_config(getattr(args, "config", None))
    except ConfigError as exc:
        print(f"tpu-console: config error: {exc}", file=sys.stderr)
        return None
    if getattr(args, "readonly", False):
        config = dataclasses.replace(config, readonly=True)
    if config.keys and (problems := key_problems(config.keys)):      # as the console refuses them
        print("\n".join(f"tpu-console: config error: {config.path}: {p}" for p in problems), file=sys.stderr)
        return None
    return config


def refused_readonly(config: Config, verb: str) -> bool:
    """``True`` (after one line on stderr) when ``config.readonly`` forbids the mutating ``verb``
    (:func:`console.flows.policy.refuse_in_readonly`, the policy every door shares)."""
    from console.flows.policy import ReadOnlyRefused, refuse_in_readonly

    try:
        refuse_in_readonly(config, verb, where=str(config.path or "the config"))
    except ReadOnlyRefused as exc:
        print(f"tpu-console: {exc}", file=sys.stderr)
        return True
    return False


def add_node_arguments(parser: argparse.ArgumentParser, *, optional: bool = False,
                       worker_help: str | None = "the worker of a multi-host slice (default 0)") -> None:
    """The one node grammar of every verb that takes a node: ``NODE [--project P] [--zone Z] [--worker N]``,
    as :func:`console.flows.node_lookup.find_node` takes them; or a GKE workload, ``deploy/NAME`` or
    ``lws/NAME`` with ``[--cluster C] [--namespace N]`` (:mod:`console.flows.gke_target`).

    Args:
        optional: NODE may be left out (a verb that also takes ``--url``).
        worker_help: the help of ``--worker``, or ``None`` when the verb adds its own.
    """
    parser.add_argument("node", metavar="NODE", nargs="?" if optional else None,
                        help="TPU node name: NAME, ZONE/NAME or PROJECT/ZONE/NAME; or a GKE workload: "
                             "deploy/NAME or lws/NAME")
    parser.add_argument("--project", metavar="P", help="project of the node (default: every configured project)")
    parser.add_argument("--zone", metavar="Z", help="zone of the node (default: every zone)")
    parser.add_argument("--cluster", metavar="C",
                        help="GKE cluster of a deploy/NAME or lws/NAME (default: the one listed cluster that has it)")
    parser.add_argument("--namespace", metavar="N", help="namespace of a deploy/NAME or lws/NAME (default: default)")
    if worker_help is not None:
        parser.add_argument("--worker", type=int, default=0, metavar="N", help=worker_help)


def plain_help(doc: str | None) -> str:
    """A module docstring as ``--help`` text for operators: reST/Sphinx markup dropped
    (````x```` -> ``x``, ``:class:`a.b.C``` -> ``C``, ``:func:`~m.f``` -> ``f``)."""
    import re

    text = doc or ""
    text = re.sub(r":[a-z]+:`~?([^`<]*?)\s*<[^`>]*>`", r"\1", text)            # :role:`text <target>`
    text = re.sub(r":[a-z]+:`~?([^`]*)`", lambda m: m.group(1).rsplit(".", 1)[-1] if m.group(1).startswith(
        ("console.", "remote.", "store.", "sandbox.")) else m.group(1), text)
    return text.replace("``", "").replace("::\n", ":\n")


def ask_yes_no(question: str) -> bool:
    """``question [y/N]`` on the terminal; ``False`` when stdin is not a terminal or at EOF."""
    if not sys.stdin.isatty():
        return False
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def ask_typed(prompt: str, expected: str) -> bool:
    """The operator types ``expected`` (e.g. the resource's name) to confirm; ``False`` without a terminal."""
    if not sys.stdin.isatty():
        return False
    try:
        answer = input(f"{prompt} ")
    except EOFError:
        return False
    return answer.strip() == expected


def add_location_arguments(parser: argparse.ArgumentParser) -> None:
    """``--project P --zone Z``, both required (a queued resource or probe lives in one zone)."""
    parser.add_argument("--project", metavar="P", required=True, help="GCP project id")
    parser.add_argument("--zone", metavar="Z", required=True, help="zone, e.g. us-west4-a")


def say(text: str = "", *, err: bool = False) -> None:
    """One output line through the one sanitizer (API text cannot add lines, hide text with
    escapes or be read as markup): stdout, or stderr with ``err``."""
    from remote.printable import printable

    print(printable(text), file=sys.stderr if err else sys.stdout, flush=True)


def workload_spec_or_none(args: argparse.Namespace) -> object:
    """The :class:`~console.flows.gke_target.WorkloadSpec` a verb's NODE names (``deploy/NAME``,
    ``lws/NAME``), ``None`` for a TPU node, or ``False`` after one line on stderr (bad spec; exit 2).
    ``--cluster`` / ``--namespace`` given with a TPU node are refused the same way."""
    from console.flows.gke_target import WorkloadSpecError, is_workload_spec, parse_workload_spec

    node = getattr(args, "node", None)
    cluster, namespace = getattr(args, "cluster", None), getattr(args, "namespace", None)
    if not is_workload_spec(node):
        if cluster is not None or namespace is not None:
            say("tpu-console: --cluster and --namespace go with a GKE workload (deploy/NAME or lws/NAME), "
                "not a TPU node", err=True)
            return False
        return None
    try:
        return parse_workload_spec(str(node), namespace=namespace, cluster=cluster)
    except WorkloadSpecError as exc:
        say(f"tpu-console: {exc}", err=True)
        return False
