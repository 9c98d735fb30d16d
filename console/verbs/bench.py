"""``tpu-console bench``: smoke, throughput or long-context benchmark of a vLLM server.

Usage::

    tpu-console bench (NODE [--project P] [--zone Z] [--worker N] | --url URL) --kind smoke|throughput|longctx
        [--streams 1,16,64] [--prompt-tokens N] [--output-tokens N] [--requests N | --duration S]
        [--depths 0.1,0.5,0.9] [--context-tokens N] [--over-limit] [--model M] [--json]
        [--price-per-chip-hour X --chips N] [--provisioning-model on-demand|spot|flex-start|...]

NODE (``NAME``, ``ZONE/NAME`` or ``PROJECT/ZONE/NAME``) is found with the TPU API and
reached through an SSH forward of the config's ``container.port``; its price comes from
the config's ``[prices]`` by chip generation and provisioning model. With ``--url`` give
``--price-per-chip-hour`` and ``--chips`` for a $/Mtok figure. An unknown SSH host key is
asked about on the terminal (refused when stdin is not a tty). A NODE run is recorded in
the history (``--db``, else the config's) against the node's current launch, like the
console's benchmark screen does (both use :mod:`console.flows.bench`).

``--json`` prints ``{"kind", "node", "accelerator_type", "provisioning_model", "base_url", "results": [...]}``
(``node`` the node's name and ``base_url`` ``null`` for a NODE, whose SSH forward closes with the verb;
the node fields ``null`` and ``base_url`` the server for ``--url``; one result per
concurrency level for throughput, keys of ``remote.bench.to_json``; throughput entries
gain ``usd_per_mtok`` when a price is known).

``bench deploy/NAME [--cluster C] [--namespace N]`` (a GKE workload) runs the same benchmark through a
port-forward of the API server to the workload's serving pod (its newest Ready pod, as ``forward
deploy/NAME``); $/Mtok from the node pool's chip generation (its machine type) and provisioning model
(spot, flex-start, reserved, on-demand) in ``[prices]``, chips the pod's ``google.com/tpu``; recorded
against the launch of that pod (``node`` in ``--json``: ``CLUSTER/NAMESPACE/deploy/NAME``).

Exit codes: 0 the benchmark ran (whatever the figures), 1 the server (or node) could not
be reached, the node is not READY, or every request failed, 2 bad input (including an
unknown or ambiguous NODE).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from console.flows.bench import KINDS, parse_depths, parse_streams
from console.verbs.common import config_or_exit
from remote.models import Node
from remote.printable import printable

if TYPE_CHECKING:
    from console.config import Config
    from console.flows.bench import BenchParams, Pricing
    from console.services import FleetLister
    from console.verbs.common import Subparsers


def _arg(parse: Any) -> Any:
    """An argparse ``type`` from a :mod:`console.flows.bench` parser (its reason on bad input)."""
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return convert


def _positive(kind: type) -> Any:
    from console.flows.bench import parse_positive

    return _arg(lambda text: parse_positive(text, kind))


def add_parser(subparsers: Subparsers) -> None:
    """Register the ``bench`` verb."""
    from console.verbs.common import add_node_arguments, plain_help

    p = subparsers.add_parser(
        "bench", help="benchmark a vLLM server: smoke, throughput sweep, long-context recall",
        description=plain_help(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    add_node_arguments(p, optional=True, worker_help="the worker whose vLLM server is used (default 0)")
    p.add_argument("--url", help="vLLM server URL instead of a node, e.g. http://127.0.0.1:8000")
    p.add_argument("--kind", choices=KINDS, required=True, help="which benchmark")
    p.add_argument("--model", help="model name (default: the first of /v1/models)")
    p.add_argument("--streams", type=_arg(parse_streams), default=(1,), metavar="1,16,64",
                   help="concurrency levels for throughput (default 1)")
    p.add_argument("--prompt-tokens", type=_positive(int), default=512, metavar="N",
                   help="prompt length in tokens, estimated (default 512)")
    p.add_argument("--output-tokens", type=_positive(int), default=128, metavar="N",
                   help="output tokens per request (default 128)")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--requests", type=_positive(int), metavar="N",
                      help="requests per level (default 4 per stream, at least 8)")
    load.add_argument("--duration", type=_positive(float), metavar="S", help="seconds per level")
    p.add_argument("--depths", type=_arg(parse_depths), default=(0.1, 0.5, 0.9), metavar="0.1,0.5,0.9",
                   help="passphrase depths for longctx (default 0.1,0.5,0.9)")
    p.add_argument("--context-tokens", type=_positive(int), default=16000, metavar="N",
                   help="long-context filler length in tokens (default 16000)")
    p.add_argument("--over-limit", action="store_true",
                   help="longctx: add a probe just over the server's max-model-len (shows its 400)")
    p.add_argument("--price-per-chip-hour", type=_positive(float), metavar="X", help="$ per chip-hour")
    p.add_argument("--chips", type=_positive(int), metavar="N", help="chips billed")
    p.add_argument("--provisioning-model", metavar="M",
                   help="price the node as this provisioning model (default: the node's own)")
    p.add_argument("--api-key", metavar="KEY",
                   help="the server's --api-key (default: $VLLM_API_KEY, else the running container's)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(run=run)


def _fail(message: str, code: int) -> int:
    print(f"tpu-console: {printable(message)}", file=sys.stderr)
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


async def _run(args: argparse.Namespace, config: Config | None) -> int:
    from console.flows.bench import (
        BenchParams,
        Pricing,
        api_key_for,
        pricing_for,
    )
    from console.flows.node_lookup import (
        NodeLookupError,
        lookup_exit_code,
    )
    from remote.errors import RemoteError

    params = BenchParams(kind=args.kind, streams=tuple(args.streams), prompt_tokens=args.prompt_tokens,
                         output_tokens=args.output_tokens, requests=args.requests, duration_s=args.duration,
                         depths=tuple(args.depths), context_tokens=args.context_tokens,
                         over_limit=args.over_limit, model=args.model)
    try:
        if args.url is not None:
            pricing = Pricing(args.price_per_chip_hour, args.chips)
            return await _bench(args, params, args.url, pricing,
                                api_key=await api_key_for(None, "", given=args.api_key))
        from console.verbs.common import workload_spec_or_none

        assert config is not None               # (run loads it whenever NODE is given)
        spec = workload_spec_or_none(args)
        if spec is False:
            return 2
        if spec is not None:
            return await _bench_workload(args, config, spec, params)
        from console.flows.node_lookup import find_node, fleet_source_for

        with fleet_source_for(config, project=args.project, zone=args.zone) as source:
            node = await find_node(source, args.node, project=args.project, zone=args.zone, require_ready=True)
            pricing = pricing_for(node, config.prices, provisioning_model=args.provisioning_model)
            if args.price_per_chip_hour is not None or args.chips is not None:
                pricing = Pricing(args.price_per_chip_hour or pricing.price_per_chip_hour_usd,
                                  args.chips or node.chips, pricing.generation, pricing.provisioning_model)
            return await _bench_node(args, config, node, params, pricing, source)
    except NodeLookupError as exc:      # unknown or ambiguous NODE: bad input; not READY or API down: unreachable
        return _fail(str(exc), lookup_exit_code(exc))
    except RemoteError as exc:
        return _fail(str(exc), 1)


async def _bench(args: argparse.Namespace, params: BenchParams, url: str, pricing: Pricing, *,
                 api_key: str | None = None) -> int:
    """``--url``: the server given, no node, nothing recorded."""
    from console.flows.bench import every_request_failed, run_benchmark

    progress = None if args.json or not sys.stderr.isatty() else _progress_line
    results = await run_benchmark(url, params, on_progress=progress, api_key=api_key)
    if progress is not None:
        _clear_progress()
    _report(args.kind, results, pricing=pricing, node=None, as_json=args.json)
    failed = every_request_failed(results)
    if failed:
        print("tpu-console: every request failed (see the errors above)", file=sys.stderr)
    return 1 if failed else 0


async def _bench_node(args: argparse.Namespace, config: Config, node: Node, params: BenchParams,
                      pricing: Pricing, fleet: FleetLister) -> int:
    """The node's benchmark through the use case (:class:`console.flows.bench.BenchCase`): the same
    connection, launch, flags and recording as the benchmark view."""
    from console.flows.bench import BenchCase
    from console.flows.history_access import HistoryAccess
    from console.flows.history_store import open_history
    from console.verbs.watch import terminal_host_key_prompt
    from remote.ssh import SshTarget

    async def ask(target: SshTarget, fingerprint: str) -> bool:
        return await terminal_host_key_prompt(target)(fingerprint)

    history = HistoryAccess(lambda: open_history(config, getattr(args, "db", None)))
    case = BenchCase(node, config, params, pricing, history, fleet=fleet, worker=args.worker, api_key=args.api_key)
    progress = None if args.json or not sys.stderr.isatty() else _progress_line
    try:
        results = await case.run(accept_new_host_key=ask, on_progress=progress)
    finally:
        history.close()
        if progress is not None:
            _clear_progress()
    return _report_and_exit(args, results, pricing, node, history.problem)


async def _bench_workload(args: argparse.Namespace, config: Config, spec: Any, params: BenchParams) -> int:
    """``bench deploy/NAME``: through the workload's own forward (the API server's port-forward to its serving
    pod), priced by its node pool (:func:`console.flows.workload_bench.workload_pricing`), recorded against
    the pod's launch."""
    from console.flows.bench import Pricing
    from console.flows.gke_target import WorkloadSpecError, lint_node
    from console.flows.history_access import HistoryAccess
    from console.flows.history_store import open_history
    from console.flows.workload_bench import WorkloadBenchCase, workload_pricing
    from console.flows.workload_forward import workload_tunnel

    if not config.gke.enabled:
        return _fail(f"{spec.ref} is a GKE workload and {config.path or 'the config'} has no [gke] table", 2)
    history = HistoryAccess(lambda: open_history(config, getattr(args, "db", None)))
    progress = None if args.json or not sys.stderr.isatty() else _progress_line
    try:
        async with workload_tunnel(config, spec) as (workload, pool, forward):
            pricing = workload_pricing(workload, pool, config.prices, provisioning_model=args.provisioning_model)
            if args.price_per_chip_hour is not None or args.chips is not None:
                pricing = Pricing(args.price_per_chip_hour or pricing.price_per_chip_hour_usd,
                                  args.chips or pricing.chips, pricing.generation, pricing.provisioning_model)
            case = WorkloadBenchCase(workload, forward, params, pricing, history, api_key=args.api_key)
            if not args.json:
                print(printable(f"{workload.ref} in {workload.cluster}/{workload.namespace}: pod {forward.pod}, "
                                f"{pricing.describe()}"), file=sys.stderr)
            results = await case.run(on_progress=progress)
    except WorkloadSpecError as exc:
        return _fail(str(exc), 2)
    finally:
        history.close()
        if progress is not None:
            _clear_progress()
    return _report_and_exit(args, results, pricing, lint_node(workload), history.problem)


def _report_and_exit(args: argparse.Namespace, results: list[Any], pricing: Any, node: Node | None,
                     history_problem: str | None) -> int:
    """Print the results (and a history that could not record them); 1 when every request failed, else 0."""
    from console.flows.bench import every_request_failed

    _report(args.kind, results, pricing=pricing, node=node, as_json=args.json)
    if history_problem:
        print(printable(f"tpu-console: the results were not recorded: {history_problem}"), file=sys.stderr)
    failed = every_request_failed(results)
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


def _report(kind: str, results: list[Any], *, pricing: Any, node: Node | None, as_json: bool) -> None:
    """The results as a table, or ``--json``: ``{"kind", "node", "accelerator_type", "provisioning_model",
    "base_url", "results"}``; for a NODE, ``node`` is its name and ``base_url`` is ``null`` (the verb's own
    SSH forward, closed when it ends); for ``--url``, ``node`` and the node fields are ``null``."""
    import json

    from console.flows.bench import result_json

    label = f"node {node.name} ({node.accelerator_type}, {node.provisioning_model})" if node is not None else None
    if as_json:
        print(json.dumps({"kind": kind, "node": node.name if node is not None else None,
                          "accelerator_type": node.accelerator_type if node is not None else None,
                          "provisioning_model": node.provisioning_model if node is not None else None,
                          "base_url": results[0].base_url if node is None else None,
                          "results": [result_json(r, pricing) for r in results]}, indent=2))
        return
    from rich.console import Console

    from console.render.bench_tables import result_view

    console = Console(width=None if sys.stdout.isatty() else 200, highlight=False, markup=False)
    console.print(result_view(kind, f"{results[0].model} at {label or results[0].base_url}", results, pricing))
