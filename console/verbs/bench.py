"""``tpu-console bench``: smoke, throughput or long-context benchmark of a vLLM server.

Usage::

    tpu-console bench (NODE | --url URL) --kind smoke|throughput|longctx
        [--streams 1,16,64] [--prompt-tokens N] [--output-tokens N] [--requests N | --duration S]
        [--depths 0.1,0.5,0.9] [--context-tokens N] [--over-limit] [--model M] [--json]
        [--price-per-chip-hour X --chips N] [--provisioning-model on-demand|spot|flex-start|...]

NODE (``NAME``, ``ZONE/NAME`` or ``PROJECT/ZONE/NAME``) is found with the TPU API and
reached through an SSH forward of the config's ``container.port``; its price comes from
the config's ``[prices]`` by chip generation and provisioning model. With ``--url`` give
``--price-per-chip-hour`` and ``--chips`` for a $/Mtok figure.

``--json`` prints ``{"kind": ..., "base_url": ..., "results": [...]}`` (one result per
concurrency level for throughput, keys of ``remote.bench.to_json``; throughput entries
gain ``usd_per_mtok`` when a price is known).

Exit codes: 0 the benchmark ran (whatever the figures), 1 the server (or node) could not
be reached or every request failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from console.verbs.common import config_or_exit

KINDS = ("smoke", "throughput", "longctx")


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _depth_list(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated fractions, got {text!r}") from None
    if not values or not all(0.0 <= v <= 1.0 for v in values):
        raise argparse.ArgumentTypeError(f"depths must be fractions within 0.0-1.0, got {text!r}")
    return values


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value
    return parse


def add_parser(subparsers: Any) -> None:
    """Register the ``bench`` verb."""
    p = subparsers.add_parser(
        "bench", help="benchmark a vLLM server: smoke, throughput sweep, long-context recall",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("node", nargs="?", metavar="NODE", help="node name (NAME, ZONE/NAME or PROJECT/ZONE/NAME)")
    p.add_argument("--url", help="vLLM server URL instead of a node, e.g. http://127.0.0.1:8000")
    p.add_argument("--kind", choices=KINDS, required=True, help="which benchmark")
    p.add_argument("--model", help="model name (default: the first of /v1/models)")
    p.add_argument("--streams", type=_int_list, default=[1], metavar="1,16,64",
                   help="concurrency levels for throughput (default 1)")
    p.add_argument("--prompt-tokens", type=_positive(int), default=512, metavar="N",
                   help="prompt length in tokens, estimated (default 512)")
    p.add_argument("--output-tokens", type=_positive(int), default=128, metavar="N",
                   help="output tokens per request (default 128)")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--requests", type=_positive(int), metavar="N",
                      help="requests per level (default 4 per stream, at least 8)")
    load.add_argument("--duration", type=_positive(float), metavar="S", help="seconds per level")
    p.add_argument("--depths", type=_depth_list, default=[0.1, 0.5, 0.9], metavar="0.1,0.5,0.9",
                   help="passphrase depths for longctx (default 0.1,0.5,0.9)")
    p.add_argument("--context-tokens", type=_positive(int), default=16000, metavar="N",
                   help="long-context filler length in tokens (default 16000)")
    p.add_argument("--over-limit", action="store_true",
                   help="longctx: add a probe just over the server's max-model-len (shows its 400)")
    p.add_argument("--price-per-chip-hour", type=_positive(float), metavar="X", help="$ per chip-hour")
    p.add_argument("--chips", type=_positive(int), metavar="N", help="chips billed")
    p.add_argument("--provisioning-model", metavar="M",
                   help="price the node as this provisioning model (default: the node's own)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(run=run)


def _fail(message: str, code: int) -> int:
    print(f"tpu-console: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    """Run the verb; returns the exit code (see the module docstring)."""
    import asyncio

    if (args.node is None) == (args.url is None):
        return _fail("give either a NODE or --url URL (one of them)", 2)
    if args.url is not None:
        from remote.bench.client import normalize_base_url
        from remote.errors import VllmHttpError

        try:
            normalize_base_url(args.url)
        except VllmHttpError as exc:
            return _fail(f"--url: {exc.message}", 2)
        if (args.price_per_chip_hour is None) != (args.chips is None):
            return _fail("--price-per-chip-hour and --chips go together", 2)
    config = None
    if args.node is not None:
        config = config_or_exit(args)
        if config is None:
            return 2
    try:
        return asyncio.run(_run(args, config))
    except ValueError as exc:     # argument combinations the library refuses
        return _fail(str(exc), 2)


async def _run(args: argparse.Namespace, config: Any) -> int:
    from remote.errors import RemoteError

    try:
        if args.url is not None:
            return await _bench(args, args.url, price=args.price_per_chip_hour, chips=args.chips)
        from remote.bench.cost import lookup_price
        from remote.bench.tunnel import node_endpoint

        async with node_endpoint(args.node, projects=config.projects, api_endpoint=config.api_endpoint,
                                 request_timeout_s=config.request_timeout_s, ssh=config.ssh,
                                 vllm_port=config.container.port) as endpoint:
            node = endpoint.node
            price = args.price_per_chip_hour or lookup_price(
                config.prices, node.accelerator_type, args.provisioning_model or node.provisioning_model)
            return await _bench(args, endpoint.base_url, price=price, chips=args.chips or node.chips,
                                label=f"node {node.name} ({node.accelerator_type}, {node.provisioning_model})")
    except RemoteError as exc:
        return _fail(str(exc), 1)


async def _bench(args: argparse.Namespace, url: str, *, price: float | None, chips: int | None,
                 label: str | None = None) -> int:
    from remote.bench import run_longctx, run_smoke, run_sweep

    progress = None if args.json or not sys.stderr.isatty() else _progress_line
    if args.kind == "smoke":
        results: list[Any] = [await run_smoke(url, model=args.model)]
        failed = not results[0].ok
    elif args.kind == "throughput":
        results = await run_sweep(url, concurrencies=args.streams, prompt_tokens=args.prompt_tokens,
                                  output_tokens=args.output_tokens, requests=args.requests,
                                  duration_s=args.duration, model=args.model, on_progress=progress)
        failed = all(r.metrics.completed == 0 for r in results)
    else:
        result = await run_longctx(url, context_tokens=args.context_tokens, depths=args.depths,
                                   model=args.model, on_progress=progress, over_limit=args.over_limit)
        results = [result]
        failed = all(p.error is not None for p in result.probes)
    if progress is not None:
        _clear_progress()
    _report(args.kind, results, price=price, chips=chips, label=label, as_json=args.json)
    if failed:
        print("tpu-console: every request failed (see the errors above)", file=sys.stderr)
    return 1 if failed else 0


# --- output ---------------------------------------------------------------------------------


def _progress_line(p: Any) -> None:
    """One self-overwriting stderr line: requests done, tokens, tokens/s."""
    total = f"/{p.requests_total}" if p.requests_total else ""
    streams = f"{p.concurrency} streams: " if p.concurrency else ""
    sys.stderr.write(f"\r{streams}{p.requests_done}{total} requests, {p.output_tokens:,} tokens, "
                     f"{p.output_tokens_per_s:,.0f} tok/s, {p.elapsed_s:.0f} s   ")
    sys.stderr.flush()


def _clear_progress() -> None:
    sys.stderr.write("\r\x1b[K")
    sys.stderr.flush()


def _cost(price: float | None, chips: int | None, tok_s: float) -> float | None:
    from remote.bench import usd_per_mtok

    if price is None or not chips or tok_s <= 0:
        return None
    return usd_per_mtok(price, chips, tok_s)


def _report(kind: str, results: list[Any], *, price: float | None, chips: int | None,
            label: str | None, as_json: bool) -> None:
    import json

    from remote.bench import to_json

    if as_json:
        items = []
        for r in results:
            item = to_json(r)
            if kind == "throughput":
                item["price_per_chip_hour_usd"], item["chips"] = price, chips
                item["usd_per_mtok"] = _cost(price, chips, r.metrics.output_throughput)
            items.append(item)
        print(json.dumps({"kind": kind, "base_url": results[0].base_url, "node": label,
                          "results": items}, indent=2))
        return
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 200, highlight=False)
    head = f"{results[0].model} at {label or results[0].base_url}"
    {"smoke": _smoke, "throughput": _throughput, "longctx": _longctx}[kind](
        console, head, results, price=price, chips=chips)


def _smoke(console: Any, head: str, results: list[Any], **_: Any) -> None:
    r = results[0]
    console.print(f"Smoke: {head}", markup=False)
    if r.ok:
        console.print(f"  answer in {r.latency_s:.2f} s ({r.prompt_tokens} prompt + "
                      f"{r.completion_tokens} output tokens): {r.answer.strip()}", markup=False)
    else:
        console.print(f"  FAILED: {r.error}", markup=False)
    t = r.tool
    if t.called:
        call = f"{t.name}({json_args(t.arguments)})"
        console.print(f"  tool call: {call} {'right' if t.arguments_ok else 'WRONG'}; final answer "
                      f"{t.final_answer.strip()!r} {'right' if t.final_ok else f'WRONG (expected {t.expected})'}",
                      markup=False)
    if t.error:
        console.print(f"  tool check: {t.error}", markup=False)
    console.print(f"  tool calling: {'PASS' if t.passed else 'FAIL'}", markup=False)


def json_args(arguments: dict[str, Any] | None) -> str:
    """``{"a": 1, "b": 2}`` -> ``a=1, b=2``."""
    return ", ".join(f"{k}={v}" for k, v in (arguments or {}).items())


def _ms(stats: Any) -> str:
    return f"{stats.mean_ms:,.1f} / {stats.median_ms:,.1f} / {stats.p99_ms:,.1f}"


def _throughput(console: Any, head: str, results: list[Any], *, price: float | None,
                chips: int | None) -> None:
    from rich.table import Table

    first = results[0]
    table = Table(title=f"Throughput: {head}; prompt ~{first.prompt_tokens_target} tokens, "
                        f"output {first.output_tokens_target} tokens", title_justify="left")
    for column in ("STREAMS", "OK", "FAILED", "SECONDS", "PROMPT TOK", "REQ/S", "OUT TOK/S", "TOTAL TOK/S",
                   "TTFT ms mean/med/p99", "TPOT ms mean/med/p99", "ITL ms mean/med/p99", "$/Mtok"):
        table.add_column(column, justify="right", no_wrap=True)
    for r in results:
        m = r.metrics
        cost = _cost(price, chips, m.output_throughput)
        table.add_row(str(r.concurrency), str(m.completed), str(m.failed), f"{m.duration_s:.1f}",
                      f"{r.mean_prompt_tokens:,.0f}", f"{m.request_throughput:.2f}",
                      f"{m.output_throughput:,.1f}", f"{m.total_token_throughput:,.1f}",
                      _ms(m.ttft), _ms(m.tpot), _ms(m.itl), "-" if cost is None else f"{cost:.3f}")
    console.print(table)
    if price is None:
        console.print("$/Mtok: no price (give --price-per-chip-hour and --chips)", markup=False)
    else:
        console.print(f"$/Mtok at ${price:.2f} per chip-hour x {chips} chips", markup=False)
    for r in results:
        for message, count in r.errors:
            console.print(f"{r.concurrency} streams: {count} failed: {message}", markup=False)


def _longctx(console: Any, head: str, results: list[Any], **_: Any) -> None:
    from rich.table import Table

    r = results[0]
    limit = f", max-model-len {r.max_model_len:,}" if r.max_model_len else ""
    table = Table(title=f"Long-context recall: {head}; ~{r.context_tokens:,} tokens{limit}",
                  title_justify="left")
    for column in ("DEPTH", "PROMPT TOK", "FOUND", "SECONDS", "PROMPT TOK/S", "ANSWER / SERVER MESSAGE"):
        table.add_column(column, justify="left" if column.startswith("ANSWER") else "right",
                         overflow="fold")
    for p in r.probes:
        if p.error is not None:
            status = f"HTTP {p.status_code}: " if p.status_code else ""
            table.add_row(f"{p.depth:.2f}", f"~{p.context_tokens_target:,}", "refused", "-", "-",
                          f"{status}{p.error}")
        else:
            table.add_row(f"{p.depth:.2f}", f"{p.prompt_tokens:,}", "yes" if p.found else "NO",
                          f"{p.seconds:.2f}", f"{p.prompt_tokens_per_s:,.0f}", p.answer)
    console.print(table)
