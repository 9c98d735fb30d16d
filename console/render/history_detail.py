"""How a recorded launch looks in the history pane: table cells, the detail panel, key results.

Pure functions from :class:`store.records.Launch` / :class:`store.records.BenchmarkRecord`
to strings and Rich renderables; no I/O, no Textual. Times are shown in UTC as stored.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from console.render import format as fmt
from console.render.plain import plain, printable, row
from store.records import BenchmarkRecord, Launch, parse_flags


def _add(table: Any, *cells: Any) -> None:
    """One row, each recorded value literal and printable (:func:`console.render.plain.row`)."""
    table.add_row(*row(*cells))


#: Outcome -> Rich style (green serving, red failed, yellow cut short, dim superseded).
OUTCOME_STYLES: dict[str, str] = {
    "ready": "bold green",
    "failed": "bold red",
    "interrupted": "yellow",
    "running": "cyan",
    "unwatched": "cyan",
    "replaced": "dim",
}
#: What a masked secret looks like in the history.
MASK = "***"

#: The launch table's columns: (key, title).
LAUNCH_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "ID"), ("time", "REQUESTED (UTC)"), ("node", "NODE"), ("accelerator", "ACCELERATOR"),
    ("model", "MODEL"), ("outcome", "OUTCOME"), ("ready", "READY IN"), ("kv", "KV TOKENS"),
    ("conc", "MAX CONC"), ("len", "MAX LEN"), ("gpu_mem", "GPU MEM"), ("tp", "TP"), ("failure", "FAILURE"),
)


def short_time(iso: str | None) -> str:
    """``2026-11-30T11:02:03.123Z`` -> ``2026-11-30 11:02:03``; ``-`` when missing."""
    return iso[:19].replace("T", " ") if iso else "-"


def number(value: float | int | None, digits: int = 0) -> str:
    """Thousands-separated number (``1,234,567``, ``12.5``); ``-`` for ``None``."""
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def styled_outcome(outcome: str) -> Text:
    """The outcome coloured by :data:`OUTCOME_STYLES`."""
    return Text(printable(outcome), style=OUTCOME_STYLES.get(outcome, ""))


def key_flags(launch: Launch) -> dict[str, str | None]:
    """``max-model-len``, ``gpu-memory-utilization`` and ``tensor-parallel-size`` of a launch."""
    flags = parse_flags(launch.serve_args)
    length = flags.get("max-model-len") or (str(launch.max_model_len) if launch.max_model_len else None)
    return {"max-model-len": length, "gpu-memory-utilization": flags.get("gpu-memory-utilization"),
            "tensor-parallel-size": flags.get("tensor-parallel-size")}


class TableCell:
    """A launch table cell: ``Text`` made only when drawn, never measured.

    ``DataTable`` measures every cell of every new row through the console, which was
    most of the cost of filling 200 rows; the pane sets each column's width from the data.
    """

    __slots__ = ("plain", "style")

    def __init__(self, plain: str, style: str = "") -> None:
        self.plain = plain
        self.style = style

    def __rich_console__(self, console: Any, options: Any) -> Any:
        return Text(printable(self.plain), style=self.style, no_wrap=True, overflow="ellipsis",
                    end="").__rich_console__(console, options)

    def __str__(self) -> str:
        return self.plain


def launch_cells(launch: Launch, *, marked: bool = False) -> list[tuple[str, str]]:
    """One table row for ``launch`` in :data:`LAUNCH_COLUMNS` order: ``(text, Rich style)`` per
    cell (``◆`` before a marked id). Plain strings, so the table builds ``Text`` only for the
    rows it draws and never reads recorded values as markup."""
    flags = key_flags(launch)
    length = flags["max-model-len"]
    return [
        (f"◆{launch.id}", "bold magenta") if marked else (str(launch.id), ""),
        (short_time(launch.requested_at), ""), (launch.node, ""), (fmt.dash(launch.accelerator_type), ""),
        (fmt.dash(launch.model), ""), (launch.outcome, OUTCOME_STYLES.get(launch.outcome, "")),
        (fmt.duration(launch.time_to_ready_s), ""), (number(launch.kv_cache_tokens), ""),
        (number(launch.max_concurrency, 1), ""),
        (number(int(length)) if length and length.isdigit() else fmt.dash(length), ""),
        (fmt.dash(flags["gpu-memory-utilization"]), ""), (fmt.dash(flags["tensor-parallel-size"]), ""),
        (launch.failure_kind, "red") if launch.failure_kind else ("-", "dim"),
    ]


def masked_secrets(launch: Launch) -> list[str]:
    """Names of env vars and flags whose values were masked when the launch was stored."""
    env = (launch.container_spec or {}).get("env") or {}
    names = [k for k, v in env.items() if v == MASK]
    args = list(launch.serve_args)
    names += [a.split("=", 1)[0] for a in args if a.endswith("=" + MASK)]
    names += [a for a, b in zip(args, args[1:]) if a.startswith("--") and b == MASK]
    return names


def bench_summary(bench: BenchmarkRecord) -> str:
    """The key result of one benchmark in a line (``16 streams · 3,120 out tok/s · TTFT 210 ms ...``)."""
    r = bench.results
    if bench.kind == "throughput":
        streams = bench.concurrency
        parts = [f"{streams} stream{'' if streams == 1 else 's'}" if streams is not None else "streams ?",
                 f"{number(bench.output_tokens_per_s, 1)} out tok/s",
                 f"TTFT {number(bench.ttft_median_ms, 1)} ms", f"TPOT {number(bench.tpot_median_ms, 1)} ms"]
        if r.get("failed"):
            parts.append(f"{r['failed']} failed")
        return " · ".join(parts)
    if bench.kind == "smoke" and "ok" in r:
        tool = (r.get("tool") or {}).get("passed")
        head = f"answered in {r.get('latency_s', 0):.2f} s" if r["ok"] else f"no answer: {r.get('error') or '?'}"
        return head + ("" if tool is None else f" · tool call {'ok' if tool else 'failed'}")
    if bench.kind == "longctx" and "found_all" in r:
        length = number(r.get("context_tokens"))
        return f"needle {'found at every depth' if r['found_all'] else 'MISSED'} · {length} tokens"
    pairs = [f"{k}={v}" for k, v in r.items() if isinstance(v, (int, float, str, bool))][:4]
    return ", ".join(pairs) or "-"


def _grid() -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    return grid


def _timeline(launch: Launch) -> Table:
    grid = _grid()
    for label, at in (("requested", launch.requested_at), ("started", launch.started_at),
                      ("ready", launch.ready_at), ("failed", launch.failed_at)):
        if at:
            _add(grid, label, short_time(at))
    if launch.time_to_ready_s is not None:
        _add(grid, "time to ready", fmt.duration(launch.time_to_ready_s))
    if launch.phase_durations:
        _add(grid, "phases", "  ".join(f"{k} {fmt.duration(v)}" for k, v in launch.phase_durations.items()))
    if launch.compile_seconds is not None:
        _add(grid, "XLA compile", f"{launch.compile_seconds:,.1f} s")
    if launch.engine_init_seconds is not None:
        _add(grid, "engine init", f"{launch.engine_init_seconds:,.1f} s")
    return grid


def _hbm_line(stage: dict[str, Any]) -> str:
    used = [u for u in stage.get("used_gib") or [] if isinstance(u, (int, float))]
    limit = [x for x in stage.get("limit_gib") or [] if isinstance(x, (int, float))]
    if not used:
        return "-"
    span = f"{used[0]:.2f}" if min(used) == max(used) else f"{min(used):.2f}–{max(used):.2f}"
    cap = f" of {max(limit):.2f}" if limit else ""
    return f"{span}{cap} GiB per chip ×{len(used)}"


def _figures(launch: Launch) -> Table:
    grid = _grid()
    kv = launch.kv_cache_tokens
    _add(grid, "KV cache", "-" if kv is None else f"{number(kv)} tokens")
    _add(grid, "max concurrency", number(launch.max_concurrency, 2))
    _add(grid, "max-model-len", number(launch.max_model_len))
    for stage in launch.hbm:
        _add(grid, f"HBM {stage.get('label') or stage.get('stage') or '?'}", _hbm_line(stage))
    return grid


def _container(launch: Launch) -> Table:
    grid = _grid()
    spec = launch.container_spec or {}
    _add(grid, "image", fmt.dash(launch.image or spec.get("image")))
    if launch.image_digest:
        _add(grid, "digest", launch.image_digest)
    for key in ("name", "network", "shm_size"):
        if spec.get(key):
            _add(grid, key, str(spec[key]))
    if spec.get("volumes"):
        _add(grid, "volumes", "  ".join(spec["volumes"]))
    for name, value in (spec.get("env") or {}).items():
        _add(grid, f"env {name}", Text(str(value), style="dim italic" if value == MASK else ""))
    _add(grid, "serve args", shlex.join(launch.serve_args) if launch.serve_args else "-")
    return grid


def benchmarks_table(benches: Sequence[BenchmarkRecord]) -> Table:
    """Benchmarks of one launch: started, kind, key result, $/Mtok."""
    table = Table(box=None, pad_edge=False, header_style="bold", expand=False)
    table.add_column("started (UTC)", no_wrap=True)
    table.add_column("kind")
    table.add_column("key results", overflow="fold")
    table.add_column("$/Mtok", justify="right")
    for b in benches:
        _add(table, short_time(b.started_at), b.kind, bench_summary(b), number(b.usd_per_mtok, 3))
    return table


def section(title: str) -> Text:
    """A section heading inside the detail panel."""
    return Text(f"\n{title}", style="bold underline")


def launch_detail(launch: Launch, benches: Sequence[BenchmarkRecord] | None,
                  log_path: Path | None = None) -> RenderableType:
    """The detail panel of one launch: header, timeline, figures, container, log file, benchmarks.

    Args:
        launch: the launch.
        benches: its benchmarks (oldest first), or ``None`` while they load.
        log_path: the launch's full log on disk (``console.flows.launch_log``), or ``None``.
    """
    head = Text.assemble((f"Launch {launch.id} ", "bold"), styled_outcome(launch.outcome),
                         printable(f"  {launch.node} · {fmt.dash(launch.accelerator_type)} · "
                                   f"{fmt.dash(launch.model)} · {launch.origin}"))
    where = plain(f"{fmt.dash(launch.project)}/{fmt.dash(launch.zone)} · {fmt.dash(launch.provisioning_model)}"
                  + (f" · replaced launch {launch.replaced_launch_id}" if launch.replaced_launch_id else "")
                  + (f" · logged in as {launch.ssh_user}" if launch.ssh_user else ""),
                  style="dim")
    parts: list[RenderableType] = [head, where]
    if launch.failure_kind or launch.failure_detail:
        parts.append(Text.assemble(("failure ", "bold red"), fmt.dash(launch.failure_kind), ": ",
                                   printable(launch.failure_detail or "")))
    parts += [section("Timeline"), _timeline(launch), section("HBM / KV cache"), _figures(launch),
              section("Container"), _container(launch)]
    secrets = masked_secrets(launch)
    if secrets:
        parts.append(plain(f"secrets masked in the history: {', '.join(secrets)}", style="dim italic"))
    parts.append(plain(f"full log: {log_path}" if log_path is not None
                       else "full log: none kept on disk (the startup view and watch keep one)", style="dim"))
    parts.append(section("Benchmarks"))
    if benches is None:
        parts.append(Text("loading…", style="dim"))
    elif not benches:
        parts.append(Text("none recorded (b on the fleet runs one)", style="dim"))
    else:
        parts.append(benchmarks_table(benches))
    return Group(*parts)
