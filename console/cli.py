"""Command line entry point: ``tpu-console [--demo] [--config PATH] [VERB ...]``.

With no verb it opens the console (Textual). Each verb lives in its own module
under ``console/verbs/`` exposing ``add_parser(subparsers)``; the parser it adds
sets ``run=<callable(args) -> int>`` as a default. Verb modules keep heavy imports
inside ``run`` so ``--help`` stays fast.

Exit codes: each verb documents its own; 2 is always bad arguments or config.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: Verb modules under console/verbs, in help order.
VERB_MODULES = ("nodes", "watch", "ssh", "swap", "rollback", "request", "delete", "probe", "bench", "metrics", "forward",
                "history", "log_summary", "sandbox")


#: Options of the command itself (before any verb) that take a value: ``--config PATH``, ``--db PATH``.
_VALUE_OPTIONS = ("--config", "--db")


def build_parser(*, verbs: bool = True) -> argparse.ArgumentParser:
    """The argument parser, with every available verb registered (``verbs=False``: none of them, for a
    command line that names no verb and asks no help: the console's own start, which then imports no
    verb module before its first frame)."""
    parser = argparse.ArgumentParser(
        prog="tpu-console",
        description="Keyboard-driven console for vLLM on Cloud TPU VMs.",
    )
    parser.add_argument("--version", action="version", version=f"tpu-console {_version()}")
    _add_global_options(parser, None)
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for name in VERB_MODULES if verbs else ():
        importlib.import_module(f"console.verbs.{name}").add_parser(sub)
    for verb_parser in _all_subparsers(sub):
        _add_global_options(verb_parser, argparse.SUPPRESS)
    return parser


def _version() -> str:
    """The installed distribution's version (``pyproject.toml``), or ``unknown`` outside an install."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tpu-console")
    except PackageNotFoundError:
        return "unknown"


def _add_global_options(parser: argparse.ArgumentParser, default: object) -> None:
    """``--config --db --demo --readonly`` on ``parser``: the command's own (``default`` ``None``), or a verb's
    (``default`` ``SUPPRESS``: given after the verb, they set the same names; absent, they leave the command's)."""
    taken = {o for action in parser._actions for o in action.option_strings}
    for flag, metavar, text in _GLOBAL_OPTIONS:
        if flag in taken:
            continue
        if metavar:
            parser.add_argument(flag, metavar=metavar, default=default, help=text)
        else:                                   # a switch: False unless given (before or after the verb)
            parser.add_argument(flag, action="store_true", default=default if default is argparse.SUPPRESS else False,
                                help=text)


#: The command's own options, accepted before or after any verb: ``(flag, metavar or "" for a switch, help)``.
_GLOBAL_OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("--config", "PATH", "config file (default: the XDG config path)"),
    ("--db", "PATH", "history database (default: the XDG data path)"),
    ("--demo", "", "run against the built-in sandbox (no cloud account needed)"),
    ("--readonly", "", "hide and refuse every action that changes the fleet (like config readonly = true)"),
)


def _all_subparsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> list[argparse.ArgumentParser]:
    """Every verb's parser, and the parsers of its own sub-verbs (``history show``...)."""
    out: list[argparse.ArgumentParser] = []
    pending = list(dict.fromkeys(sub.choices.values()))
    while pending:
        parser = pending.pop(0)
        out.append(parser)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(dict.fromkeys(action.choices.values()))
    return out


def names_a_verb(argv: Sequence[str]) -> bool:
    """Whether ``argv`` (without the program name) holds a word that is not an option or an option's
    value (a verb, or a mistake argparse should report against every verb), or asks for help."""
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help") or word == "--" or not word.startswith("-"):
            return True
        if word in _VALUE_OPTIONS:
            next(words, None)
    return False


def workload_as_option(argv: list[str]) -> list[str]:
    """``history deploy/NAME ...`` as ``history --workload deploy/NAME ...``: ``history`` has sub-verbs
    (``show``, ``compare``, ``export``), so argparse would read a workload in their place."""
    from console.flows.gke_target import is_workload_spec

    words = iter(enumerate(argv))
    for i, word in words:
        if word in _VALUE_OPTIONS:
            next(words, None)
        elif not word.startswith("-"):
            if word == "history" and i + 1 < len(argv) and is_workload_spec(argv[i + 1]):
                return [*argv[:i + 1], "--workload", *argv[i + 1:]]
            return argv
    return argv


#: Frames a second the console draws at most (Textual's ``TEXTUAL_FPS``, 60 unless set): a key's redraw
#: waits for the next frame, and at 120 that wait halves (a filter keystroke on 5,000 nodes redrawn
#: in 31 ms at the median instead of 49; ``benches/bench_fleet_scale.py``). A ``TEXTUAL_FPS`` set wins.
CONSOLE_FPS = 120


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tpu-console``; returns the process exit code."""
    argv = workload_as_option(sys.argv[1:] if argv is None else list(argv))
    parser = build_parser(verbs=names_a_verb(argv))
    args = parser.parse_args(argv)
    run = getattr(args, "run", None)
    if run is not None and args.demo and args.config is None and args.verb != "sandbox":
        # `tpu-console --demo VERB`: the config of the sandbox running in the default state dir.
        from sandbox.runner import default_state_dir, sandbox_running

        state_dir = default_state_dir()
        if not sandbox_running(state_dir):
            print(f"tpu-console: --demo {args.verb}: no sandbox is running in {state_dir}; start one with "
                  "`tpu-console sandbox` in another terminal (or give --config DIR/config.toml for a sandbox "
                  "started with --state-dir DIR)", file=sys.stderr)
            return 2
        args.config = str(state_dir / "config.toml")
    if run is None:
        import os

        os.environ.setdefault("TEXTUAL_FPS", str(CONSOLE_FPS))   # Textual reads it when imported: before that
        from console.tui import run_tui

        return run_tui(args)
    try:
        return int(run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `tpu-console ... | head`: the reader went away; not an error worth a traceback.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
