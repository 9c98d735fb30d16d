"""The sandbox vLLM server's ``/metrics``: vLLM V1's names, exposed with ``prometheus_client`` as vLLM does.

The figures follow the load the server really carries: requests waiting for their prefill and
running in decode, KV cache tokens held by running requests against the engine's KV cache size,
prompt and generation token counters, time-to-first-token and inter-token-latency histograms with
vLLM's bucket bounds, and ``vllm:cache_config_info`` with the cache configuration as labels. The
sandbox has no prefix cache: queries count every prompt token, hits stay 0.
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

#: vLLM 0.32's bucket bounds (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                  20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                 40.0, 80.0)
#: Tokens per KV cache block (tpu-inference's default page size for these models).
BLOCK_SIZE = 16


class ServerMetrics:
    """The counters and gauges of one served model (thread-safe).

    Args:
        model_name: the served model name (the ``model_name`` label).
        kv_cache_tokens: the engine's KV cache size in tokens.
        max_model_len: tokens per request at most (for ``kv_cache_max_concurrency``).
        gpu_memory_utilization: as the engine was started (a ``cache_config_info`` label).
        block_size: tokens per KV cache block (``block_size``; ``num_gpu_blocks`` is the size over it).
    """

    def __init__(self, model_name: str, kv_cache_tokens: int, max_model_len: int,
                 gpu_memory_utilization: float = 0.92, block_size: int = BLOCK_SIZE) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self._labels = {"model_name": model_name, "engine": "0"}
        self._lock = threading.Lock()
        self._kv_cache_tokens = max(1, kv_cache_tokens)
        self._held_tokens = 0
        r = self.registry
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                             labels, registry=r).labels(**self._labels)
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                             labels, registry=r).labels(**self._labels)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                              labels, registry=r).labels(**self._labels)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                                     labels, registry=r).labels(**self._labels)
        self.generation_tokens = Counter("vllm:generation_tokens", "Number of generation tokens processed.",
                                         labels, registry=r).labels(**self._labels)
        self.preemptions = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                                   labels, registry=r).labels(**self._labels)
        self.prefix_queries = Counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number "
                                      "of queried tokens.", labels, registry=r).labels(**self._labels)
        self.prefix_hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached "
                                   "tokens.", labels, registry=r).labels(**self._labels)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              labels, buckets=TTFT_BUCKETS_S, registry=r).labels(**self._labels)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             labels, buckets=ITL_BUCKETS_S, registry=r).labels(**self._labels)
        info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                     ["block_size", "cache_dtype", "enable_prefix_caching", "engine", "gpu_memory_utilization",
                      "kv_cache_max_concurrency", "kv_cache_size_tokens", "num_gpu_blocks"], registry=r)
        blocks = self._kv_cache_tokens // block_size
        info.labels(block_size=str(block_size), cache_dtype="auto", enable_prefix_caching="True", engine="0",
                    gpu_memory_utilization=str(gpu_memory_utilization),
                    kv_cache_max_concurrency=str(round(self._kv_cache_tokens / max(1, max_model_len), 2)),
                    kv_cache_size_tokens=str(self._kv_cache_tokens), num_gpu_blocks=str(blocks)).set(1)
        self.kv_usage.set(0.0)

    def admitted(self, prompt_tokens: int, cached_tokens: int = 0) -> None:
        """A request waits for its prefill; ``cached_tokens`` of its prompt were in the prefix cache."""
        self.waiting.inc()
        self.prompt_tokens.inc(prompt_tokens)
        self.prefix_queries.inc(prompt_tokens)
        self.prefix_hits.inc(cached_tokens)

    def started(self, prompt_tokens: int, ttft_s: float) -> None:
        """Its first token is out: it runs, holding its prompt in the KV cache."""
        self.waiting.dec()
        self.running.inc()
        self.ttft.observe(ttft_s)
        self._hold(prompt_tokens)

    def tokens(self, n: int, interval_s: float | None) -> None:
        """``n`` more output tokens written ``interval_s`` after the previous ones (``None`` for the
        first token, which has no inter-token latency)."""
        self.generation_tokens.inc(n)
        if interval_s is not None:
            for _ in range(n):
                self.itl.observe(interval_s / n)
        self._hold(n)

    def finished(self, held_tokens: int, *, started: bool) -> None:
        """The request ended (done or aborted); its KV cache blocks are free again."""
        if started:
            self.running.dec()
            self._hold(-held_tokens)
        else:
            self.waiting.dec()

    def _hold(self, tokens: int) -> None:
        with self._lock:
            self._held_tokens = max(0, self._held_tokens + tokens)
            self.kv_usage.set(min(1.0, self._held_tokens / self._kv_cache_tokens))

    def render(self) -> bytes:
        """The exposition text, as ``GET /metrics`` answers it."""
        return generate_latest(self.registry)


class PrefixCache:
    """vLLM's automatic prefix caching as ``/metrics`` sees it: a prompt's leading full blocks of
    :data:`BLOCK_SIZE` sandbox tokens (4-character pieces), each known by the hash of everything up to
    its end (vLLM chains block hashes the same way), are hits when an earlier prompt had them; at most
    ``max_blocks`` block hashes are kept (all forgotten when full, as an evicted cache would).
    """

    def __init__(self, max_blocks: int = 65_536) -> None:
        self._blocks: set[int] = set()
        self._max_blocks = max_blocks
        self._lock = threading.Lock()

    def hit_tokens(self, prompt_text: str) -> int:
        """Tokens of ``prompt_text`` found in the cache (whole leading blocks); its blocks are then kept."""
        step = BLOCK_SIZE * 4
        hashes, running = [], 0
        for start in range(0, len(prompt_text) - step + 1, step):
            running = hash((running, prompt_text[start:start + step]))
            hashes.append(running)
        with self._lock:
            hits = next((i for i, h in enumerate(hashes) if h not in self._blocks), len(hashes))
            if len(self._blocks) + len(hashes) > self._max_blocks:
                self._blocks.clear()
            self._blocks.update(hashes)
        return hits * BLOCK_SIZE
