"""Benchmark results as plain JSON-ready dicts, for the history database and ``bench --json``.

Throughput results are flattened with ``vllm bench serve``'s key names
(``request_throughput``, ``output_throughput``, ``mean_ttft_ms``, ``p99_tpot_ms`` ...)
so figures can be compared with its JSON output directly; one exception: our ``*_itl_ms`` is
per token, and ``vllm bench serve``'s per-chunk ``*_itl_ms`` is our ``*_itl_chunk_ms``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from remote.bench.longctx import LongCtxResult
from remote.bench.metrics import LatencyStats
from remote.bench.smoke import SmokeResult
from remote.bench.throughput import ThroughputResult


def _latency(prefix: str, stats: LatencyStats) -> dict[str, float]:
    return {f"mean_{prefix}_ms": stats.mean_ms, f"median_{prefix}_ms": stats.median_ms,
            f"p99_{prefix}_ms": stats.p99_ms}


def to_json(result: SmokeResult | ThroughputResult | LongCtxResult) -> dict[str, Any]:
    """``result`` as a dict of JSON types (str, int, float, bool, None, lists, dicts).

    Raises:
        TypeError: not a benchmark result.
    """
    if isinstance(result, ThroughputResult):
        m = result.metrics
        out: dict[str, Any] = {
            "kind": result.kind, "base_url": result.base_url, "model": result.model,
            "concurrency": result.concurrency,
            "prompt_tokens_target": result.prompt_tokens_target,
            "output_tokens_target": result.output_tokens_target,
            "requests_sent": result.requests_sent, "completed": m.completed, "failed": m.failed,
            "duration_s": m.duration_s,
            "total_input_tokens": m.total_input_tokens, "total_output_tokens": m.total_output_tokens,
            "mean_prompt_tokens": result.mean_prompt_tokens,
            "prompt_tokens_exact": result.prompt_tokens_exact,
            "prompt_tokens_sent": result.prompt_tokens_sent,
            "output_tokens_estimated": m.output_tokens_estimated,
            "mean_output_tokens": result.mean_output_tokens,
            "output_short": result.output_short,
            "output_short_requests": result.output_short_requests,
            "output_tokens_counted_by": ("tokenize" if result.output_tokens_tokenized else
                                         "chunks" if m.output_tokens_estimated else "usage"),
            "output_tokens_tokenized": result.output_tokens_tokenized,
            "prefix_cache_hit_rate": result.prefix_cache_hit_rate,
            "prefix_cache_queried_tokens": result.prefix_cache_queried_tokens,
            "caveats": result.caveats(),
            "stopped": result.stopped,
            "request_throughput": m.request_throughput, "output_throughput": m.output_throughput,
            "total_token_throughput": m.total_token_throughput,
        }
        for name in ("ttft", "tpot", "itl", "itl_chunk", "e2el"):
            out.update(_latency(name, getattr(m, name)))
        out["errors"] = [{"message": msg, "count": n} for msg, n in result.errors]
        return out
    if isinstance(result, (SmokeResult, LongCtxResult)):
        out = dataclasses.asdict(result)
        if isinstance(result, SmokeResult):
            out["tool"]["passed"] = result.tool.passed
            out["tool"]["verdict"] = result.tool.verdict
        else:
            out["found_all"] = result.found_all
        return out
    raise TypeError(f"not a benchmark result: {type(result).__name__}")
