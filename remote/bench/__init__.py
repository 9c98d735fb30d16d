"""Benchmarks against vLLM's OpenAI-compatible API (httpx): smoke, throughput, long context, cost.

Import from here; the submodules are ``metrics`` (``vllm bench serve`` definitions),
``client`` (httpx plumbing), ``prompts``, ``smoke``, ``throughput``, ``longctx``,
``cost``, ``progress`` and ``report``. Nothing here imports Textual or Rich.
"""

from __future__ import annotations

from remote.bench.cost import lookup_price, usd_per_mtok
from remote.bench.longctx import LongCtxProbe, LongCtxResult, run_longctx
from remote.bench.metrics import LatencyStats, RequestRecord, ServingMetrics, calculate_metrics
from remote.bench.progress import BenchProgress
from remote.bench.report import to_json
from remote.bench.smoke import SmokeResult, ToolCheck, run_smoke
from remote.bench.throughput import ThroughputResult, default_requests, run_sweep, run_throughput

__all__ = [
    "BenchProgress", "LatencyStats", "LongCtxProbe", "LongCtxResult", "RequestRecord",
    "ServingMetrics", "SmokeResult", "ThroughputResult", "ToolCheck", "calculate_metrics",
    "default_requests", "lookup_price", "run_longctx", "run_smoke", "run_sweep",
    "run_throughput", "to_json", "usd_per_mtok",
]
