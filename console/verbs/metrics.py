"""``tpu-console metrics``: what a vLLM server is doing now, from its Prometheus ``/metrics``.

Usage::

    tpu-console metrics (NODE [--project P] [--zone Z] [--worker N] | --url URL) [--json] [--watch] [--interval S]
                        [--timeout S]

NODE (``NAME``, ``ZONE/NAME`` or ``PROJECT/ZONE/NAME``) is found with the TPU API and reached
through an SSH forward of the config's ``container.port``, as ``bench`` does. Two samples
``--interval`` seconds apart (default 2) give the rates: requests running and waiting, KV cache
usage (percent) and size (tokens), generation tokens/s, prefix-cache hit rate, TTFT and
inter-token latency p50/p90 over the samples, preemptions. ``--watch`` prints a line every
interval (figures over the last minute) until Ctrl-C. Each read of ``/metrics`` must be whole
within ``--timeout`` seconds (default 10): a server that trickles its answer fails like one that
does not answer.

A data-parallel server (vLLM labels each engine's samples ``engine="0"``, ``engine="1"``...) is
read as one server: requests, tokens and KV cache sizes summed over its engines, the KV cache usage
the mean of the engines' (with the fullest engine's beside it), and the line says how many engines.
The KV cache size is the one the server states (``kv_cache_size_tokens``); a server that states
only ``num_gpu_blocks`` and ``block_size`` gets their product marked "derived".

``--json`` prints one object per sample line: ``running``, ``waiting``, ``kv_cache_usage_perc``
(mean over engines), ``kv_cache_usage_max_perc``, ``kv_cache_size_tokens`` (stated, else null),
``kv_cache_derived_tokens`` (blocks x block size, only when no size is stated), ``max_concurrency``,
``gpu_memory_utilization``, ``engines``, ``generation_tokens_per_s``, ``prefix_cache_hit_rate``, ``ttft_p50_s``,
``ttft_p90_s``, ``itl_p50_s``, ``itl_p90_s``, ``preemptions``, ``window_s``, plus ``node`` (its name, or
``null`` with ``--url``), ``url`` (the ``--url`` given, ``null`` for a NODE: the verb's own SSH forward is
closed when it ends) and ``model_names``.

``metrics deploy/NAME [--cluster C] [--namespace N]`` (a GKE workload) reads the serving pod's
``/metrics`` through a port-forward of the API server (as ``forward deploy/NAME``); ``node`` in
``--json`` is ``CLUSTER/NAMESPACE/deploy/NAME``.

Exit codes: 0 read, 1 the server or node could not be reached (or answered no metrics), 2 bad
input (including an unknown or ambiguous NODE).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any

from console.verbs.common import config_or_exit
from remote.printable import printable

if TYPE_CHECKING:
    from console.config import Config
    from console.verbs.common import Subparsers
    from remote.ssh import SshTarget
    from remote.vllm_metrics import ServingFigures

#: Seconds each whole read of ``/metrics`` may take (``remote.vllm_metrics.FETCH_DEADLINE_S``; not
#: imported here: building the parser must not load prometheus_client).
FETCH_DEADLINE_S = 10.0


def add_parser(subparsers: Subparsers) -> None:
    """Register the ``metrics`` verb."""
    from console.verbs.common import add_node_arguments, plain_help

    p = subparsers.add_parser("metrics", help="live serving figures from a vLLM server's /metrics",
                              description=plain_help(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    add_node_arguments(p, optional=True, worker_help="the worker whose vLLM server is used (default 0)")
    p.add_argument("--url", help="vLLM server URL instead of a node, e.g. http://127.0.0.1:8000")
    p.add_argument("--json", action="store_true", help="print JSON (one object per line)")
    p.add_argument("--watch", action="store_true", help="keep sampling until Ctrl-C")
    p.add_argument("--interval", type=float, default=2.0, metavar="S", help="seconds between samples (default 2)")
    p.add_argument("--timeout", type=float, default=FETCH_DEADLINE_S, metavar="S",
                   help=f"seconds each whole read of /metrics may take (default {FETCH_DEADLINE_S:g})")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the verb; returns the exit code (see the module docstring)."""
    if (args.node is None) == (args.url is None):
        return _fail("give either a NODE or --url URL (one of them)", 2)
    if not args.interval > 0:
        return _fail("--interval must be a positive number of seconds", 2)
    if not 0 < args.timeout < float("inf"):
        return _fail("--timeout must be a positive number of seconds", 2)
    config = None
    if args.node is not None:
        config = config_or_exit(args)
        if config is None:
            return 2
    try:
        return asyncio.run(_run(args, config))
    except KeyboardInterrupt:           # the way out of --watch
        return 0


async def _run(args: argparse.Namespace, config: Config | None) -> int:
    from console.flows.bench import open_tunnel
    from console.flows.node_lookup import NodeLookupError, lookup_exit_code
    from remote.bench.client import normalize_base_url
    from remote.errors import RemoteError, VllmHttpError

    try:
        if args.url is not None:
            try:
                url = normalize_base_url(args.url)
            except VllmHttpError as exc:
                return _fail(f"--url: {exc.message}", 2)
            return await _sample(args, url, url_shown=url)
        assert config is not None               # (run loads it whenever NODE is given)
        from console.verbs.common import workload_spec_or_none

        spec = workload_spec_or_none(args)
        if spec is False:
            return 2
        if spec is not None:
            return await _sample_workload(args, config, spec)
        from console.flows.ssh_target import ready_node_target
        from console.verbs.watch import terminal_host_key_prompt

        node, target = await ready_node_target(config, args.node, project=args.project, zone=args.zone,
                                                 worker=args.worker)

        async def ask(target: SshTarget, fingerprint: str) -> bool:
            return await terminal_host_key_prompt(target)(fingerprint)

        async with open_tunnel(node, target, config.container.port, accept_new_host_key=ask) as tunnel:
            return await _sample(args, tunnel.base_url, node_name=node.name)
    except NodeLookupError as exc:      # unknown or ambiguous NODE: bad input; not READY or API down: unreachable
        return _fail(str(exc), lookup_exit_code(exc))
    except RemoteError as exc:
        return _fail(str(exc), 1)


async def _sample(args: argparse.Namespace, url: str, *, url_shown: str | None = None,
                  node_name: str | None = None) -> int:
    """Sample ``url``'s ``/metrics`` (twice, or every interval with ``--watch``); the JSON names ``node_name``
    and ``url_shown`` (``None`` for a node: its URL is the verb's own forward, closed when it ends)."""
    import httpx

    from remote.vllm_metrics import MetricsWindow, fetch_metrics

    window = MetricsWindow()
    async with httpx.AsyncClient(timeout=args.timeout, trust_env=False) as client:
        window.add(await fetch_metrics(client, url, deadline_s=args.timeout))
        while True:
            await asyncio.sleep(args.interval)
            window.add(await fetch_metrics(client, url, deadline_s=args.timeout))
            _print(window, url_shown, node_name, as_json=args.json)
            if not args.watch:
                return 0


async def _sample_workload(args: argparse.Namespace, config: Config, spec: Any) -> int:
    """``metrics deploy/NAME``: the serving pod's ``/metrics`` through the workload's own forward (the API
    server's port-forward); ``node`` in the JSON is ``CLUSTER/NAMESPACE/deploy/NAME``."""
    from console.flows.gke_target import WorkloadSpecError, lint_node
    from console.flows.workload_forward import workload_tunnel

    if not config.gke.enabled:
        return _fail(f"{spec.ref} is a GKE workload and {config.path or 'the config'} has no [gke] table", 2)
    try:
        async with workload_tunnel(config, spec) as (workload, _pool, forward):
            print(printable(f"{workload.ref} in {workload.cluster}/{workload.namespace}: pod {forward.pod} port "
                            f"{forward.container_port} (through the API server)"), file=sys.stderr, flush=True)
            return await _sample(args, forward.url, node_name=lint_node(workload).name)
    except WorkloadSpecError as exc:
        return _fail(str(exc), 2)


def _print(window: Any, url: str | None, node_name: str | None, *, as_json: bool) -> None:
    figures = window.figures()
    if as_json:
        names = window.latest.model_names if window.latest is not None else ()
        print(json.dumps({"node": node_name, "url": url, "model_names": list(names), **figures.to_json()}),
              flush=True)
        return
    print(_line(figures), flush=True)


def _num(value: float | None, fmt: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{fmt}}{unit}"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def kv_words(f: ServingFigures) -> str:
    """The KV cache part of the line: ``KV 12.5% of 262,144 tokens``; over engines
    ``KV 60.0% (mean of 2 engines, max 62.0%) of 300,000 tokens``; a derived size says so."""
    usage = _num(f.kv_cache_usage_perc, '.1f', '%')
    if f.engines > 1:
        usage += f" (mean of {f.engines} engines, max {_num(f.kv_cache_usage_max_perc, '.1f', '%')})"
    if f.kv_cache_size_tokens:
        usage += f" of {f.kv_cache_size_tokens:,} tokens"
    elif f.kv_cache_derived_tokens:
        usage += f" of ~{f.kv_cache_derived_tokens:,} tokens (derived: blocks x block size)"
    return f"KV {usage}"


def _line(f: ServingFigures) -> str:
    """One line of the figures, e.g. ``running 4 · waiting 0 · KV 12.5% of 262,144 tokens · ...``."""
    engines = f" · {f.engines} engines" if f.engines > 1 else ""
    hit = _num(None if f.prefix_cache_hit_rate is None else 100 * f.prefix_cache_hit_rate, ".1f", "%")
    return (f"running {_num(f.running, '.0f')} · waiting {_num(f.waiting, '.0f')} · "
            f"{kv_words(f)} · "
            f"{_num(f.generation_tokens_per_s, ',.1f')} tok/s · prefix hits {hit} · "
            f"TTFT p50 {_ms(f.ttft_p50_s)} p90 {_ms(f.ttft_p90_s)} · "
            f"ITL p50 {_ms(f.itl_p50_s)} p90 {_ms(f.itl_p90_s)} · preemptions {_num(f.preemptions, '.0f')} "
            f"(over {f.window_s:.0f} s){engines}")


def _fail(message: str, code: int) -> int:
    print(f"tpu-console: {printable(message)}", file=sys.stderr)
    return code
