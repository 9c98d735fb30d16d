"""Argument handling of the sandbox's simulated docker CLI: timestamps, image refs, ``run`` flags,
Go-template ``--format`` strings. Pure functions, no state."""

from __future__ import annotations

import argparse
import calendar
import dataclasses
import json
import re
import time
from dataclasses import dataclass
from typing import Any

_VALUED_RUN_FLAGS = {"--name", "--restart", "--net", "--network", "--shm-size", "-e", "--env", "-v",
                     "--volume", "-p", "--publish", "--entrypoint", "--ipc", "-w", "--workdir", "-u",
                     "--user", "--hostname", "--label", "-l", "--log-opt", "--log-driver", "--ulimit",
                     "--cap-add", "--mount", "--device", "--env-file", "--memory", "-m"}
_BOOL_RUN_FLAGS = {"-d", "--detach", "--privileged", "--rm", "-i", "-t", "-it", "-ti", "--init",
                   "--interactive", "--tty"}


def format_ts(ns: int) -> str:
    """Docker's ``--timestamps`` form: ``2025-06-01T14:05:31.123456789Z`` (always 9 digits)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 1_000_000_000)) + f".{ns % 1_000_000_000:09d}Z"


def parse_since(text: str, now_ns: int) -> int:
    """``--since`` like docker: RFC 3339 (nano), unix seconds (``1700000000.5``) or ``10m``."""
    value = _rfc3339_ns(text)
    if value is not None:
        return value
    match = re.fullmatch(r"(\d+)(?:\.(\d{1,9}))?", text)
    if match:
        return int(match.group(1)) * 1_000_000_000 + int((match.group(2) or "0").ljust(9, "0"))
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    if match:
        unit = {"ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9}[match.group(2)]
        return now_ns - int(float(match.group(1)) * unit)
    raise ValueError(f'invalid value for "since": failed to parse value as time or duration: "{text}"')


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)?")


def _rfc3339_ns(text: str) -> int | None:
    """Nanoseconds since the epoch of an RFC 3339 time (no zone means UTC, as docker takes it)."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        return None
    base, frac, zone = match.groups()
    try:
        seconds = calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return seconds * 1_000_000_000 + int((frac or "0").ljust(9, "0"))


def _bytes(size: str) -> int:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([bkmgt]?)b?", size.strip().lower())
    if not match:
        raise ValueError(f"invalid size: '{size}'")
    return int(float(match.group(1)) * 1024 ** " kmgt".index(match.group(2) or " "))


def normalize_ref(image: str) -> str:
    """``vllm/vllm-tpu`` -> ``vllm/vllm-tpu:latest``; drops a ``docker.io/`` prefix."""
    image = image.removeprefix("docker.io/").removeprefix("library/")
    if "@" in image:
        return image
    return image if ":" in image.rsplit("/", 1)[-1] else image + ":latest"


@dataclass(frozen=True)
class RunSpec:
    """``docker run`` arguments, parsed."""

    image: str
    command: list[str]
    name: str | None = None
    detach: bool = False
    restart: str = "no"
    privileged: bool = False
    network: str = "default"
    shm_size: int = 64 * 1024**2
    env: list[str] = dataclasses.field(default_factory=list)
    volumes: list[str] = dataclasses.field(default_factory=list)
    ports: list[str] = dataclasses.field(default_factory=list)
    entrypoint: list[str] | None = None


def parse_run_args(args: list[str]) -> RunSpec:
    """Split ``docker run`` arguments into flags (parsed with argparse), image and command.

    Raises:
        ValueError: docker's wording (``unknown flag: --x``, ``"docker run" requires at least 1
            argument.``, ``invalid argument ... for "--shm-size" flag``).
    """
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "-":
        flag = args[i].split("=", 1)[0]
        if flag not in _VALUED_RUN_FLAGS and flag not in _BOOL_RUN_FLAGS:
            raise ValueError(f"unknown flag: {flag}")
        i += 2 if flag in _VALUED_RUN_FLAGS and "=" not in args[i] else 1
    if i >= len(args):
        raise ValueError('"docker run" requires at least 1 argument.')
    parser = verb_parser("run")
    for flag in ("-d", "--detach", "--privileged", "--rm", "-i", "-t", "-it", "-ti", "--init", "--interactive",
                 "--tty"):
        parser.add_argument(flag, action="store_true", dest=flag.strip("-"))
    parser.add_argument("--name")
    parser.add_argument("--restart", default="no")
    parser.add_argument("--net", "--network", dest="network", default="default")
    parser.add_argument("--shm-size")
    parser.add_argument("-e", "--env", action="append", default=[])
    parser.add_argument("-v", "--volume", action="append", default=[])
    parser.add_argument("-p", "--publish", action="append", default=[])
    parser.add_argument("--entrypoint")
    for flag in sorted(_VALUED_RUN_FLAGS - {"--name", "--restart", "--net", "--network", "--shm-size", "-e",
                                            "--env", "-v", "--volume", "-p", "--publish", "--entrypoint"}):
        parser.add_argument(flag, dest="ignored_" + flag.strip("-"), action="append")
    try:
        opts = parser.parse_args(args[:i])
        shm = _bytes(opts.shm_size) if opts.shm_size else 64 * 1024**2
    except (argparse.ArgumentError, ValueError) as exc:
        raise ValueError(f"invalid argument for docker run: {exc}") from None
    return RunSpec(image=args[i], command=list(args[i + 1:]), name=opts.name, detach=opts.d or opts.detach,
                   restart=opts.restart, privileged=opts.privileged, network=opts.network, shm_size=shm,
                   env=[e for e in opts.env if "=" in e], volumes=list(opts.volume), ports=list(opts.publish),
                   entrypoint=[opts.entrypoint] if opts.entrypoint else None)


def render_template(template: str, data: dict[str, Any]) -> str:
    """A Go-template subset: ``{{.A.B}}``, ``{{json .}}``, ``{{json .A}}``."""
    def value(match: re.Match[str]) -> str:
        item: Any = data
        for part in filter(None, match.group(2).split(".")):
            item = item.get(part) if isinstance(item, dict) else None
        if match.group(1):
            return json.dumps(item)
        if item is None:
            return "<no value>"
        return json.dumps(item) if isinstance(item, (dict, list)) else str(item).lower() \
            if isinstance(item, bool) else str(item)
    return re.sub(r"\{\{\s*(json\s+)?\.([\w.]*)\s*\}\}", value, template)


class _Parser(argparse.ArgumentParser):
    """argparse that raises ``ValueError`` instead of exiting the process."""

    def error(self, message: str) -> Any:
        raise ValueError(message)


def verb_parser(verb: str) -> argparse.ArgumentParser:
    return _Parser(prog=f"docker {verb}", add_help=False, exit_on_error=False)
