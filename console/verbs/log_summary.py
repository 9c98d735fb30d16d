"""``tpu-console log-summary FILE [--json]``: what a saved vLLM startup log says.

Reads the file (``-`` = standard input) with the same reader the startup view
uses, after rejoining docker's 16 KiB records on bytes as the live tail does
(``remote.container.docker_records``: a capture of ``docker logs --timestamps``
reads as vLLM printed it), and prints a panel, or with ``--json`` one object whose keys match the
corpus sidecars (see ``remote.vllm_log.reader.summary_json``).

Exit codes: 0 the file was read (whatever the log says); 2 it could not be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from remote.printable import printable

if TYPE_CHECKING:
    from console.verbs.common import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """Register ``log-summary`` on the CLI's subparsers."""
    parser = subparsers.add_parser(
        "log-summary", help="summarise a vLLM startup log (HBM, KV cache, compile, failure)",
        description="Read a saved vLLM startup log (docker logs output) and summarise it.")
    parser.add_argument("file", metavar="FILE", help="log file, or - for standard input")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Read ``args.file`` and print the summary; returns the exit code (0 or 2)."""
    from remote.vllm_log.reader import summary_json

    try:
        state = read_capture(args.file)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        print(printable(f"tpu-console: log-summary: cannot read {args.file}: {reason}"), file=sys.stderr)
        return 2
    summary = summary_json(state)
    if not _recognised(state):
        source = "standard input" if args.file == "-" else args.file
        print(printable(f"tpu-console: log-summary: no vLLM startup line recognised in {source} "
                        f"({state.lines_read} lines read); is it a vLLM server log?"), file=sys.stderr)
    if args.json:
        json.dump(summary, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        print_summary_panel(f"log-summary {args.file}", summary)
    return 0


def read_capture(path: str) -> Any:
    """The :class:`~remote.startup.StartupState` of a saved log (``-`` = standard input).

    The bytes go through :func:`~remote.container.docker_records.rejoined_blocks` (docker's
    record borders removed, docker/cli#4941) before the reader, in 128 KiB blocks.

    Raises:
        OSError: the file cannot be opened or read.
    """
    import contextlib

    from remote.container.docker_records import rejoined_blocks
    from remote.vllm_log.reader import StartupReader

    reader = StartupReader()
    with contextlib.ExitStack() as stack:
        stream = sys.stdin.buffer if path == "-" else stack.enter_context(open(path, "rb"))
        for block in rejoined_blocks(iter(lambda: stream.read(1 << 17), b"")):
            reader.feed(block)
    reader.close()
    return reader.state


def _recognised(state: Any) -> bool:
    """Whether the reader found anything of vLLM's in the log (a version, a figure, a phase...)."""
    return any((state.vllm_version, state.hbm_snapshots, state.kv_cache_tokens, state.server_url, state.ready,
                state.failure, state.compile.steps_finished, state.model, len(state.timeline) > 1,
                state.engine_init_seconds))


def _used_of_limit(used: list[float] | None, limit: list[float] | None) -> str:
    """Per-chip HBM: ``6.38 / 31.25 GiB per chip (8 chips)``, or one pair per chip when they differ."""
    if not used:
        return "-"
    limit = limit if limit and len(limit) == len(used) else [None] * len(used)  # type: ignore[list-item]
    pairs = sorted(set(zip(used, limit)))
    if len(pairs) == 1:
        u, lim = pairs[0]
        of = f" / {lim:.2f}" if lim is not None else ""
        chips = f" ({len(used)} chips)" if len(used) > 1 else ""
        return f"{u:.2f}{of} GiB per chip{chips}"
    return ", ".join(f"{u:.2f}" + (f"/{lim:.2f}" if lim is not None else "") for u, lim in zip(used, limit)) + " GiB"


def _rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    def num(value: Any, fmt: str = "{}") -> str:
        return "-" if value is None else fmt.format(value)

    rows = [("Phase", s["phase"]),
            ("Server", num(s["server_url"])),
            ("vLLM", num(s["vllm_version_in_log"])), ("Model", num(s["model"])),
            ("TPU", f"{num(s['tpu_type'])}, chips {num(s['num_chips'])}"),
            ("HBM used / limit", _used_of_limit(s["hbm_used_gib"], s["hbm_limit_gib"])),
            ("HBM after KV cache", _used_of_limit(s["hbm_after_kv_used_gib"], s["hbm_limit_gib"]))]
    if s.get("workers", 1) > 1:
        rows.insert(4, ("Workers", f"{s['workers']} workers (per-chip figures above are worker 0's)"))
        for item in s.get("slice_hbm") or []:
            rows.append((f"HBM {item['stage'].replace('_', ' ')}, slice",
                         f"{item['used_gib']:.2f} of {item['limit_gib']:.2f} GiB over {item['chips']} chips "
                         f"({item['workers']} of {s['workers']} workers)"))
        if s.get("failure_worker") is not None:
            rows.append(("Failed on", f"worker {s['failure_worker']}"))
    stats = s["memory_statistics"]
    if stats:
        rows.append(("Memory statistics", ", ".join(
            f"{k.removeprefix('total_hbm_').removesuffix('_gb')} {v:g}" for k, v in stats.items())
            + " GiB (sum over chips)"))
    label = f"{s['kv_cache_label']} " if s["kv_cache_label"] else ""
    rows += [("KV cache", f"{label}{num(s['kv_cache_tokens'], '{:,} tokens')}"),
             ("Max concurrency", "-" if s["max_concurrency"] is None else
              f"{s['max_concurrency']:.2f}x at {s['max_concurrency_tokens_per_request']:,} "
              "tokens/request"),
             *([("KV figures", s["kv_cache_note"])] if s.get("kv_cache_note") else []),
             ("Compile", f"{s['compile_steps_done']} steps done"
                         + (f" ({s['compile_deferred_done']} compiled in warm-up)" if s["compile_deferred_done"] else "")
                         + (f", {pending} deferred to warm-up"
                            if (pending := s["compile_deferred_steps"] - s["compile_deferred_done"]) else "")
                         + ", "
                         f"total {num(s['compile_seconds'], '{:g} s')}, "
                         f"engine init {num(s['engine_init_seconds'], '{:g} s')}")]
    if s["compile_in_progress"]:
        rows.append(("In flight", s["compile_in_progress"]))
    if s["failure"]:
        detail = s["failure_detail"]
        if isinstance(detail, dict):
            detail = ", ".join(f"{k}={v}" for k, v in detail.items())
        rows += [("Failure", s["failure"] + ("" if s["failure_fatal"] else " (not fatal)")),
                 ("Why", s["failure_explanation"]), ("Evidence", str(detail)),
                 ("Try", s["failure_hint"])]
    if s["restarts"]:
        rows.append(("Restarts", f"{s['restarts']} (previous failure: "
                                 f"{s['previous_failure'] or 'none'})"))
    rows.append(("Lines read", f"{s['lines_read']:,}, last stamp {num(s['last_line_at'])}"
                 + (f" (per worker {', '.join(f'{n:,}' for n in s['worker_lines_read'])})"
                    if s.get("workers", 1) > 1 else "")))
    return rows


def print_summary_panel(title: str, summary: dict[str, Any]) -> None:
    """Print a startup summary (``summary_json`` keys) as the readable panel, to stdout.

    Shared by ``log-summary`` and ``watch``.
    """
    from rich.console import Console
    from rich.panel import Panel
    from rich.table import Table

    from console.render.plain import plain, row

    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in _rows(summary):
        table.add_row(*row(key, value))
    Console(markup=False, highlight=False).print(Panel(table, title=plain(title), expand=False))
