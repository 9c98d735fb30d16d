"""``tpu-console history``: launches and benchmarks recorded in the history database.

Usage::

    tpu-console history [--json] [--limit N] [--node NAME] [--model M] [--outcome OUTCOME]
    tpu-console history deploy/NAME [--cluster C] [--namespace N] [--json] [--limit N] ...
    tpu-console history show ID [--json]
    tpu-console history compare ID ID [--json]
    tpu-console history export [--format json|csv] [--limit N] [--node NAME] [--model M]
                               [--outcome OUTCOME] [--accelerator TYPE] [--text WORDS]

Without ``--json`` a table (or the launch detail); with ``--json`` a list of launch objects
(the columns of :class:`store.records.Launch`) each with its ``benchmarks`` nested, or
that one object for ``show``. ``compare`` shows the spec and figure differences of two
launches (:mod:`console.flows.launch_compare`, as the compare view; ``--json``:
:func:`~console.flows.launch_compare.compare_json`); the first id is the baseline. ``export``
prints the filtered launches as the history pane's ``e`` writes them (JSON with benchmarks
nested, or CSV one row per launch). ``history deploy/NAME`` (or ``--workload deploy/NAME``) lists the
launches recorded for that GKE workload (``--cluster`` / ``--namespace`` narrow it; the namespace defaults
to ``default``): its watches, swaps and rollbacks. The database is ``--db PATH``, else the config's
``db_path``, else the XDG data path.

Exit codes: 0 listed/shown/compared/exported, 1 no launch with that id, 2 bad arguments,
config or database.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote.printable import printable
from store.records import OUTCOMES

if TYPE_CHECKING:
    from console.verbs.common import Subparsers


if TYPE_CHECKING:
    from store.history import HistoryStore
    from store.records import Launch


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_parser(subparsers: Subparsers) -> None:
    """Register ``history`` (and ``history show``) on the CLI's verb subparsers."""
    parser = subparsers.add_parser(
        "history", help="launches and benchmarks recorded on this machine",
        description="List launches recorded in the history database, newest first.")
    parser.add_argument("--json", action="store_true", help="print JSON (benchmarks nested)")
    parser.add_argument("--limit", type=_positive_int, default=50, metavar="N", help="at most N launches (50)")
    parser.add_argument("--node", metavar="NAME", help="only launches on this node")
    parser.add_argument("--model", metavar="M", help="only this model (Qwen/Qwen3-8B or Qwen3-8B)")
    parser.add_argument("--outcome", choices=OUTCOMES, help="only launches with this outcome")
    parser.add_argument("--workload", metavar="deploy/NAME",
                        help="only launches of this GKE workload (also as `history deploy/NAME`)")
    parser.add_argument("--cluster", metavar="C", help="with a workload: only launches in this GKE cluster")
    parser.add_argument("--namespace", metavar="N", help="with a workload: its namespace (default: default)")
    parser.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help="history database")
    commands = parser.add_subparsers(dest="history_command", metavar="COMMAND")
    show = commands.add_parser("show", help="one launch in detail, with its benchmarks")
    show.add_argument("id", type=int, metavar="ID", help="launch id (first column of the list)")
    show.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    compare = commands.add_parser("compare", help="two launches side by side: spec and figure differences")
    compare.add_argument("ids", type=int, nargs=2, metavar="ID", help="baseline launch id, then the other")
    compare.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    export = commands.add_parser("export", help="the filtered launches as JSON or CSV on stdout")
    export.add_argument("--format", choices=("json", "csv"), default="json", help="json (default) or csv")
    export.add_argument("--limit", type=_positive_int, default=argparse.SUPPRESS, metavar="N",
                        help="at most N launches (default 50)")
    export.add_argument("--node", metavar="NAME", default=argparse.SUPPRESS, help="only launches on this node")
    export.add_argument("--model", metavar="M", default=argparse.SUPPRESS, help="only this model")
    export.add_argument("--outcome", choices=OUTCOMES, default=argparse.SUPPRESS, help="only this outcome")
    export.add_argument("--accelerator", metavar="TYPE", help="only this accelerator type (v6e-8)")
    export.add_argument("--text", metavar="WORDS", help="free text, as the history pane's filter")
    parser.set_defaults(run=run)


def db_path_for(args: argparse.Namespace) -> Path | None:
    """The database path from ``--db``, the config or the XDG default; ``None`` after
    printing a config error (exit 2)."""
    from console.flows.history_store import history_path

    if getattr(args, "db", None):
        return history_path(None, args.db)
    from console.verbs.common import config_or_exit

    config = config_or_exit(args)
    if config is None:
        return None
    return history_path(config)


def run(args: argparse.Namespace) -> int:
    """Run the verb; returns the exit code (see the module docstring)."""
    from console.flows.history_store import open_history
    from store import StoreError

    path = db_path_for(args)
    if path is None:
        return 2
    try:
        store = open_history(None, path)
    except StoreError as exc:
        print(printable(f"tpu-console: history: {exc}"), file=sys.stderr)
        return 2
    try:
        command = getattr(args, "history_command", None)
        if command == "show":
            return _show(store, args.id, as_json=args.json)
        if command == "compare":
            return _compare(store, *args.ids, as_json=args.json)
        if command == "export":
            launches = store.list_launches(limit=args.limit, node=args.node, model=args.model,
                                           outcome=args.outcome, accelerator_type=args.accelerator, text=args.text)
            sys.stdout.write(store.export(launches, args.format).rstrip("\n") + "\n")
            return 0
        workload = _workload_filter(args)
        if workload is None:
            return 2
        launches = store.list_launches(limit=args.limit, node=args.node, model=args.model, outcome=args.outcome,
                                       **workload)
        if args.json:
            print(store.export(launches, "json"))
        elif not launches:
            print(printable(f"No launches recorded in {path}" + (" match those filters." if
                            (args.node or args.model or args.outcome or workload) else ".")))
        else:
            _print_table(launches)
        return 0
    finally:
        store.close()


def _workload_filter(args: argparse.Namespace) -> dict[str, str] | None:
    """``--workload deploy/NAME`` (``--cluster``, ``--namespace``) as :meth:`HistoryStore.list_launches`
    filters (``{}`` without a workload); ``None`` after one line on stderr (a bad spec, or ``--cluster`` /
    ``--namespace`` without a workload: exit 2)."""
    from console.flows.gke_target import WorkloadSpecError, parse_workload_spec

    text, cluster, namespace = getattr(args, "workload", None), args.cluster, args.namespace
    if text is None:
        if cluster is not None or namespace is not None:
            print("tpu-console: --cluster and --namespace go with a GKE workload (history deploy/NAME)",
                  file=sys.stderr)
            return None
        return {}
    try:
        spec = parse_workload_spec(text, namespace=namespace, cluster=cluster)
    except WorkloadSpecError as exc:
        print(printable(f"tpu-console: {exc}"), file=sys.stderr)
        return None
    found = {"workload": spec.ref, "namespace": spec.namespace}
    return found | ({"cluster": spec.cluster} if spec.cluster else {})


def _show(store: HistoryStore, launch_id: int, *, as_json: bool) -> int:
    launch = store.get_launch(launch_id)
    if launch is None:
        print(f"tpu-console: history: no launch with id {launch_id}", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps(json.loads(store.export([launch], "json"))[0], indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from console.render.plain import row

    console = Console(width=None if sys.stdout.isatty() else 140, markup=False, highlight=False)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    data = launch.to_json() | {"time_to_ready_s": launch.time_to_ready_s}
    for key, value in data.items():
        if key not in ("hbm", "container_spec") and value not in (None, "", [], {}):
            grid.add_row(*row(key, _plain(value)))
    if launch.container_spec:      # JSON: controls escaped by json.dumps, its line breaks are ours
        grid.add_row("container_spec", Text(json.dumps(launch.container_spec, indent=1)))
    console.print(grid)
    if launch.hbm:
        hbm = Table(title="HBM per chip (GiB used / limit)", title_justify="left")
        hbm.add_column("stage")
        hbm.add_column("chips")
        for stage in launch.hbm:
            pairs = zip(stage.get("used_gib") or [], stage.get("limit_gib") or [])
            hbm.add_row(*row(str(stage.get("label", "")), "  ".join(f"{used:.2f}/{limit:.2f}" for used, limit in pairs)))
        console.print(hbm)
    benches = store.benchmarks_for(launch_id)
    if benches:
        table = Table(title="Benchmarks", title_justify="left")
        for column in ("id", "kind", "started", "streams", "out tok/s", "TTFT ms", "TPOT ms", "$/Mtok"):
            table.add_column(column, justify="right" if column not in ("kind", "started") else "left")
        for b in benches:
            table.add_row(*row(str(b.id), b.kind, b.started_at[:19].replace("T", " "), _num(b.concurrency),
                               _num(b.output_tokens_per_s, 1), _num(b.ttft_median_ms, 1), _num(b.tpot_median_ms, 1),
                               _num(b.usd_per_mtok, 3)))
        console.print(table)
    return 0


def _compare(store: HistoryStore, a_id: int, b_id: int, *, as_json: bool) -> int:
    from console.flows.launch_compare import compare_json, figure_diff, spec_diff

    launches = {i: store.get_launch(i) for i in (a_id, b_id)}
    missing = [str(i) for i, launch in launches.items() if launch is None]
    if missing:
        print(f"tpu-console: history: no launch with id {', '.join(missing)}", file=sys.stderr)
        return 1
    a, b = launches[a_id], launches[b_id]
    assert a is not None and b is not None
    benches_a, benches_b = store.benchmarks_for(a.id), store.benchmarks_for(b.id)
    if as_json:
        print(json.dumps(compare_json(a, b, benches_a, benches_b), indent=2))
        return 0
    from rich.console import Console
    from rich.text import Text

    from console.render.launch_compare import figure_table, flag_table, who

    console = Console(width=None if sys.stdout.isatty() else 140, highlight=False)
    console.print(Text("\n").join([who("A", a), who("B", b)]))
    console.print(flag_table(spec_diff(a, b)))
    console.print(figure_table(figure_diff(a, b, benches_a, benches_b)))
    return 0


def _print_table(launches: list[Launch]) -> None:
    from rich.console import Console
    from rich.table import Table

    from console.render.plain import row

    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = ("ID", "Requested (UTC)", "Node", "Accelerator", "Model", "Outcome", "Ready s",
               "Compile s", "KV tokens", "Conc.", "Max len", "Failure")
    for name in columns:
        numeric = name in ("ID", "Ready s", "Compile s", "KV tokens", "Conc.", "Max len")
        table.add_column(name, justify="right" if numeric else "left", overflow="fold")
    for launch in launches:
        table.add_row(*row(str(launch.id), launch.requested_at[:16].replace("T", " "), launch.node,
                           launch.accelerator_type or "", launch.model or "", launch.outcome,
                           _num(launch.time_to_ready_s), _num(launch.compile_seconds), _num(launch.kv_cache_tokens),
                           _num(launch.max_concurrency, 2), _num(launch.max_model_len), launch.failure_kind or ""))
    Console(width=None if sys.stdout.isatty() else 160, markup=False, highlight=False).print(table)


def _num(value: float | int | None, digits: int = 0) -> str:
    if value is None:
        return ""
    return f"{value:,.{digits}f}" if isinstance(value, float) or digits else f"{value:,}"


def _plain(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)
