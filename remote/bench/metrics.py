"""Serving metrics with the definitions of ``vllm bench serve`` (``vllm/benchmarks/serve.py``).

Pure functions over per-request records; no I/O. Definitions (vLLM 0.10-0.11
``calculate_metrics``):

* request throughput = completed requests / benchmark duration (req/s);
* output throughput = sum of output tokens of completed requests / duration (tokens/s);
* total token throughput = (prompt tokens + output tokens of completed requests) / duration;
* TTFT = time from sending the request to the first streamed token chunk;
* TPOT per request = (time of the last token chunk - TTFT) / (output tokens - 1), only for
  requests with more than one output token (vLLM 0.32 ends a request's latency at its last
  token chunk, not at the trailing usage chunk);
* ITL per token (``itl``): a token chunk of ``k`` tokens arriving ``g`` seconds after the
  previous one contributes ``k`` gaps of ``g / k``, pooled over all requests, so its mean
  agrees with TPOT even when the server sends several tokens per chunk; ``k`` is the increase of
  vLLM's running ``usage.completion_tokens`` (``stream_options.continuous_usage_stats``);
  without it every chunk counts as one token;
* ITL per chunk (``itl_chunk``) = every gap between consecutive streamed token chunks, pooled
  over all requests: what ``vllm bench serve`` 0.32 reports as ITL
  (``endpoint_request_func.py`` appends ``timestamp - most_recent_timestamp`` once per chunk
  with ``choices``; ``serve.py`` ``calculate_metrics`` pools them with ``itls +=
  outputs[i].itl``; its TPOT is ``(latency - ttft) / (output_len - 1)``);
* percentiles use linear interpolation between closest ranks (``numpy.percentile``'s
  default), the median is the 50th percentile.

Output tokens come from the server's ``usage.completion_tokens`` (OpenAI
``stream_options.include_usage``, the last value sent); without a usage chunk they are the
number of token chunks and the record says ``output_tokens_estimated``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass
class RequestRecord:
    """What the client saw for one streamed request.

    Attributes:
        start_s: ``time.perf_counter()`` when the request was sent.
        success: the stream ended normally with at least one token chunk.
        ttft_s: seconds to the first token chunk (0.0 when none arrived).
        latency_s: seconds from sending to the end of the stream (``[DONE]`` or the body's end).
        last_token_s: seconds from sending to the last token chunk (TPOT's end).
        itl_s: gaps in seconds between consecutive token chunks (``vllm bench serve``'s ITL).
        chunk_tokens: tokens in each token chunk (by the running usage), one per chunk, or
            empty when the server did not send it.
        prompt_tokens: ``usage.prompt_tokens`` as reported by the server; without usage the
            count the prompt was sized to by ``/tokenize`` (0 if neither is known).
        output_tokens: ``usage.completion_tokens`` (or the token chunk count, see below).
        usage_reported: the stream carried a ``usage`` chunk.
        output_tokens_estimated: no usage chunk and no tokenizer count: ``output_tokens`` is the
            token chunk count (the throughput run counts the text by ``/tokenize`` when it can).
        token_chunks: streamed chunks that carried a token (content, reasoning or tool call).
        text: the generated text.
        error: why it failed (HTTP status and the server's message, or a transport error).
        status_code: HTTP status of a failed request, 0 for transport errors.
        error_type, error_code: the server's error ``type`` and ``code`` (HTTP body or an error
            event inside a 200 stream), when it gave them.
        error_kind: ``"context_length"`` for vLLM's maximum-context-length refusal, else ``""``.
    """

    start_s: float = 0.0
    success: bool = False
    ttft_s: float = 0.0
    latency_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    token_chunks: int = 0
    text: str = ""
    error: str = ""
    status_code: int | None = None
    last_token_s: float = 0.0
    usage_reported: bool = False
    output_tokens_estimated: bool = False
    error_type: str = ""
    error_code: int | str | None = None
    error_kind: str = ""

    @property
    def tpot_s(self) -> float | None:
        """(last token chunk - TTFT) / (output tokens - 1) in seconds, ``None`` with fewer than 2 tokens."""
        if not self.success or self.output_tokens <= 1:
            return None
        end_s = self.last_token_s or self.latency_s   # records built without a last-token time
        return (end_s - self.ttft_s) / (self.output_tokens - 1)


    def itl_per_token_s(self) -> list[float]:
        """Gaps between consecutive tokens in seconds: each chunk's gap ``g`` before its ``k``
        tokens as ``k`` gaps of ``g / k`` (``k`` = 1 when ``chunk_tokens`` is unknown)."""
        if len(self.chunk_tokens) != len(self.itl_s) + 1:
            return list(self.itl_s)
        gaps: list[float] = []
        for gap_s, k in zip(self.itl_s, self.chunk_tokens[1:], strict=True):
            gaps.extend([gap_s / k] * k)
        return gaps


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation, like ``numpy.percentile``.

    Args:
        values: samples (any order); an empty sequence gives 0.0 like vLLM's ``values or 0``.
        q: percentile between 0 and 100.

    Raises:
        ValueError: ``q`` outside [0, 100].
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class LatencyStats:
    """Mean, median and 99th percentile of a latency, in milliseconds; all 0.0 without samples."""

    mean_ms: float = 0.0
    median_ms: float = 0.0
    p99_ms: float = 0.0
    samples: int = 0

    @classmethod
    def of_seconds(cls, values_s: Iterable[float]) -> LatencyStats:
        """Summarise samples given in seconds."""
        values = list(values_s)
        if not values:
            return cls()
        return cls(
            mean_ms=sum(values) / len(values) * 1000.0,
            median_ms=percentile(values, 50) * 1000.0,
            p99_ms=percentile(values, 99) * 1000.0,
            samples=len(values),
        )


@dataclass(frozen=True)
class ServingMetrics:
    """Aggregate figures of one benchmark run (vLLM ``BenchmarkMetrics`` subset).

    Attributes:
        completed: successful requests.
        failed: failed requests.
        duration_s: benchmark wall time in seconds.
        total_input_tokens: prompt tokens of completed requests (server-reported).
        total_output_tokens: output tokens of completed requests.
        request_throughput: completed requests per second.
        output_throughput: output tokens per second.
        total_token_throughput: (prompt + output) tokens per second.
        ttft, tpot, itl, e2el: latency statistics in milliseconds (``itl`` per token).
        itl_chunk: the gaps between token chunks in milliseconds (``vllm bench serve``'s ITL).
        output_tokens_estimated: completed requests without a usage chunk, whose output
            tokens are the token chunk count.
    """

    completed: int
    failed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats
    e2el: LatencyStats
    itl_chunk: LatencyStats = field(default_factory=LatencyStats)
    output_tokens_estimated: int = 0


def calculate_metrics(records: Sequence[RequestRecord], duration_s: float) -> ServingMetrics:
    """Aggregate per-request records the way ``vllm bench serve`` does.

    Args:
        records: one record per request sent (failed ones included).
        duration_s: wall time of the whole run in seconds (must be > 0).

    Raises:
        ValueError: ``duration_s`` is not positive.
    """
    if duration_s <= 0:
        raise ValueError(f"benchmark duration must be positive, got {duration_s}")
    done = [r for r in records if r.success]
    total_in = sum(r.prompt_tokens for r in done)
    total_out = sum(r.output_tokens for r in done)
    tpots = [t for t in (r.tpot_s for r in done) if t is not None]
    return ServingMetrics(
        completed=len(done),
        failed=len(records) - len(done),
        duration_s=duration_s,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=len(done) / duration_s,
        output_throughput=total_out / duration_s,
        total_token_throughput=(total_in + total_out) / duration_s,
        ttft=LatencyStats.of_seconds(r.ttft_s for r in done),
        tpot=LatencyStats.of_seconds(tpots),
        itl=LatencyStats.of_seconds(gap for r in done for gap in r.itl_per_token_s()),
        itl_chunk=LatencyStats.of_seconds(gap for r in done for gap in r.itl_s),
        e2el=LatencyStats.of_seconds(r.latency_s for r in done),
        output_tokens_estimated=sum(1 for r in done if r.output_tokens_estimated),
    )
