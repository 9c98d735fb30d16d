"""vLLM's Prometheus ``/metrics``: samples, the figures an operator watches, and rates between samples.

The text is parsed with ``prometheus_client``'s parser (the exposition format vLLM writes with
``prometheus_client`` itself). Names are vLLM V1's (0.8 ... 0.32): ``vllm:num_requests_running``,
``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` (a fraction, 1 = 100 %, despite the
name; V0 called it ``vllm:gpu_cache_usage_perc``, read too), ``vllm:prefix_cache_queries`` /
``vllm:prefix_cache_hits`` (counters, in tokens), ``vllm:prompt_tokens`` /
``vllm:generation_tokens`` / ``vllm:num_preemptions`` (counters), the histograms
``vllm:time_to_first_token_seconds`` and ``vllm:inter_token_latency_seconds`` (V0:
``vllm:time_per_output_token_seconds``), and ``vllm:cache_config_info`` whose labels carry the
cache configuration (``block_size``, ``num_gpu_blocks``, ``gpu_memory_utilization``, ...).

A data-parallel server (``--data-parallel-size N``) labels every sample with ``engine="0"``,
``engine="1"``, ... (``PrometheusStatLogger`` in ``vllm/v1/metrics/loggers.py``: ``labelnames =
["model_name", "engine"]``, one label set per engine index; ``vllm:cache_config_info`` once per engine
too). Counts and capacities are summed over the engines (requests, token counters, histogram
buckets, KV cache tokens, max concurrency); the KV cache usage fraction is averaged (the mean over the
engines, their maximum kept beside it); the number of engines is said.

A single sample gives gauges and totals; rates (generation tokens/s, prefix-cache hit rate) and
latency percentiles need two samples: :class:`MetricsWindow` keeps the last minute of them.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from remote.errors import VllmHttpError

#: How far back :meth:`MetricsWindow.figures` looks for rates and percentiles.
WINDOW_S = 60.0
#: Seconds one ``/metrics`` read may take, whole (connect, headers and body).
FETCH_DEADLINE_S = 10.0
#: Bytes of one ``/metrics`` answer read at most.
MAX_METRICS_BYTES = 32 << 20

_GAUGES = {"running": ("vllm:num_requests_running",), "waiting": ("vllm:num_requests_waiting",)}
#: Per-engine fractions (0..1): averaged over engines, never summed; the first name served wins.
_FRACTIONS = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_COUNTERS = {"prompt_tokens": "vllm:prompt_tokens", "generation_tokens": "vllm:generation_tokens",
             "prefix_cache_queries": "vllm:prefix_cache_queries", "prefix_cache_hits": "vllm:prefix_cache_hits",
             "preemptions": "vllm:num_preemptions"}
_HISTOGRAMS = {"ttft": ("vllm:time_to_first_token_seconds",),
               "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")}


@dataclass(frozen=True)
class Histogram:
    """A cumulative Prometheus histogram: ``buckets`` of ``(upper bound le, count <= le)``, ascending,
    the last one ``+Inf``; ``count`` observations summing to ``sum`` (seconds for vLLM's latencies)."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float

    def since(self, older: Histogram | None) -> Histogram:
        """The observations made after ``older`` (bucket by bucket); all of them without one, or
        when the server restarted in between (a count went down, in any bucket)."""
        if (older is None or older.count > self.count or [b for b, _ in older.buckets] != [b for b, _ in self.buckets]
                or any(m > n for (_, n), (_, m) in zip(self.buckets, older.buckets))):
            return self
        return Histogram(tuple((le, n - m) for (le, n), (_, m) in zip(self.buckets, older.buckets)),
                         self.count - older.count, self.sum - older.sum)

    def quantile(self, q: float) -> float | None:
        """The ``q``-quantile (0..1) as Prometheus' ``histogram_quantile`` estimates it: linear within
        the bucket it falls in; the highest finite bound when it falls in ``+Inf``; ``None`` without
        observations."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        lower_bound, lower_count = 0.0, 0.0
        for bound, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(bound):
                    return lower_bound
                width = cumulative - lower_count
                return lower_bound + (bound - lower_bound) * ((rank - lower_count) / width if width else 1.0)
            lower_bound, lower_count = bound, cumulative
        return lower_bound


@dataclass(frozen=True)
class MetricsSample:
    """One read of ``/metrics``.

    Attributes:
        at_s: when it was read (``time.monotonic()``), for rates.
        running / waiting: requests running and waiting now (``None``: not served).
        kv_cache_usage: KV cache blocks in use, a fraction 0..1 as vLLM reports it.
        totals: counters since the server started: ``prompt_tokens``, ``generation_tokens``,
            ``prefix_cache_queries``, ``prefix_cache_hits`` (tokens), ``preemptions``.
        ttft / itl: time-to-first-token and inter-token-latency histograms (seconds).
        kv_cache_usage_max: the fullest engine's fraction (equal to ``kv_cache_usage`` with one engine).
        cache_config: the labels of the first engine's ``vllm:cache_config_info`` (strings as served).
        engine_cache_configs: every engine's ``vllm:cache_config_info`` labels, by engine index order.
        model_names: the ``model_name`` labels seen.
        engines: how many engines the samples are labelled with (1 without an ``engine`` label).
    """

    at_s: float
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    totals: dict[str, float] = field(default_factory=dict)
    ttft: Histogram | None = None
    itl: Histogram | None = None
    cache_config: dict[str, str] = field(default_factory=dict)
    model_names: tuple[str, ...] = ()
    kv_cache_usage_max: float | None = None
    engine_cache_configs: tuple[dict[str, str], ...] = ()
    engines: int = 1


def _engine_order(engine: str) -> tuple[int, str]:
    return (int(engine), "") if engine.isdigit() else (1 << 30, engine)


def parse_metrics(text: str, at_s: float | None = None) -> MetricsSample:
    """Read vLLM's ``/metrics`` text (Prometheus exposition format).

    Args:
        text: the response body.
        at_s: the ``time.monotonic()`` of the read (default: now).

    Raises:
        ValueError: the text is not in the exposition format (the parser's message).
    """
    values: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    hist_sums: dict[str, float] = {}
    hist_counts: dict[str, float] = {}
    cache_configs: dict[str, dict[str, str]] = {}
    usage: dict[str, dict[str, float]] = {}       # gauge name -> engine -> fraction
    engines: set[str] = set()
    models: set[str] = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, float(sample.value)
            if "model_name" in labels:
                models.add(labels["model_name"])
            engine = labels.get("engine", "")
            if engine:
                engines.add(engine)
            if family.name == "vllm:cache_config_info":
                cache_configs.setdefault(engine, {}).update(
                    {k: v for k, v in labels.items() if k not in ("engine", "model_name")})
            elif family.name in _FRACTIONS:
                per_engine = usage.setdefault(family.name, {})
                per_engine[engine] = per_engine.get(engine, 0.0) + value
            elif family.type == "histogram":
                if name.endswith("_bucket"):
                    le = float(labels.get("le", "inf"))
                    per = buckets.setdefault(family.name, {})
                    per[le] = per.get(le, 0.0) + value
                elif name.endswith("_sum"):
                    hist_sums[family.name] = hist_sums.get(family.name, 0.0) + value
                elif name.endswith("_count"):
                    hist_counts[family.name] = hist_counts.get(family.name, 0.0) + value
            elif family.type == "counter" and not name.endswith("_total"):
                continue                     # the _created samples
            else:
                values[family.name] = values.get(family.name, 0.0) + value

    def first(names: Iterable[str]) -> float | None:
        return next((values[n] for n in names if n in values), None)

    def histogram(names: Iterable[str]) -> Histogram | None:
        for n in names:
            if n in buckets:
                ordered = tuple(sorted(buckets[n].items()))
                return Histogram(ordered, hist_counts.get(n, ordered[-1][1]), hist_sums.get(n, 0.0))
        return None

    fractions = next((usage[n] for n in _FRACTIONS if n in usage), {})
    configs = tuple(cache_configs[e] for e in sorted(cache_configs, key=_engine_order))
    return MetricsSample(
        at_s=time.monotonic() if at_s is None else at_s,
        running=first(_GAUGES["running"]), waiting=first(_GAUGES["waiting"]),
        kv_cache_usage=sum(fractions.values()) / len(fractions) if fractions else None,
        kv_cache_usage_max=max(fractions.values()) if fractions else None,
        totals={key: values[name] for key, name in _COUNTERS.items() if name in values},
        ttft=histogram(_HISTOGRAMS["ttft"]), itl=histogram(_HISTOGRAMS["itl"]),
        cache_config=dict(configs[0]) if configs else {}, engine_cache_configs=configs,
        model_names=tuple(sorted(models)), engines=max(1, len(engines)))


async def fetch_metrics(client: Any, base_url: str, *, deadline_s: float = FETCH_DEADLINE_S,
                        max_bytes: int = MAX_METRICS_BYTES) -> MetricsSample:
    """GET ``{base_url}/metrics`` with an ``httpx.AsyncClient`` and parse it.

    The whole call (connect, headers, body) has ``deadline_s`` seconds: a server that sends its
    headers and then a byte at a time never hits the client's read timeout, which bounds only
    the gap between reads. The body is read up to ``max_bytes`` (vLLM's ``/metrics`` is tens of KiB).

    Raises:
        VllmHttpError: unreachable, timed out, too long, not HTTP 200, or not the exposition
            format (one sentence).
    """
    import httpx

    url = base_url.rstrip("/") + "/metrics"
    try:
        async with asyncio.timeout(deadline_s), client.stream("GET", url) as response:
            if response.status_code != 200:
                raise VllmHttpError(f"{url} answered HTTP {response.status_code}", title="No metrics")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    raise VllmHttpError(f"{url} sent more than {max_bytes // (1 << 20)} MiB of metrics; "
                                        "read no further", title="No metrics")
            text = body.decode(response.encoding or "utf-8", errors="replace")
    except TimeoutError:
        raise VllmHttpError(f"{url}: no whole answer within {deadline_s:g} s (timed out)",
                            title="vLLM unreachable") from None
    except httpx.HTTPError as exc:
        raise VllmHttpError(f"{url}: {type(exc).__name__}: {exc}".rstrip(": "), title="vLLM unreachable") from None
    try:
        return parse_metrics(text)
    except ValueError as exc:
        raise VllmHttpError(f"{url} did not answer Prometheus text: {exc}", title="No metrics") from None


@dataclass(frozen=True)
class ServingFigures:
    """What the server is doing, from the newest sample and the window before it.

    Attributes (``None`` when the server does not say, or the window is too short):
        running / waiting: requests now.
        kv_cache_usage_perc: KV cache in use now, percent (0-100): the mean over the engines.
        kv_cache_usage_max_perc: the fullest engine's usage, percent.
        kv_cache_size_tokens: the KV cache's size in tokens as the server states it, summed over
            its engines (:func:`server_kv_cache`); never made up.
        kv_cache_derived_tokens: ``num_gpu_blocks`` x ``block_size`` summed, only when the server
            states no size (derived here: show it as such).
        max_concurrency: requests at max-model-len the KV cache holds, as the server states it,
            summed over its engines.
        gpu_memory_utilization: ``--gpu-memory-utilization`` as the first engine's cache config says.
        engines: how many engines the server reports (``--data-parallel-size``; 1 without labels).
        generation_tokens_per_s: output tokens per second between the last two samples.
        prefix_cache_hit_rate: prefix-cache hits / queries over the window (0..1).
        ttft_p50_s / ttft_p90_s / itl_p50_s / itl_p90_s: latency percentiles over the window.
        preemptions: preemptions over the window.
        window_s: how far back the window reaches.
    """

    running: float | None = None
    waiting: float | None = None
    kv_cache_usage_perc: float | None = None
    kv_cache_usage_max_perc: float | None = None
    kv_cache_size_tokens: int | None = None
    kv_cache_derived_tokens: int | None = None
    max_concurrency: float | None = None
    gpu_memory_utilization: float | None = None
    engines: int = 1
    generation_tokens_per_s: float | None = None
    prefix_cache_hit_rate: float | None = None
    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    itl_p50_s: float | None = None
    itl_p90_s: float | None = None
    preemptions: float | None = None
    window_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The figures by name (``running``, ``waiting``, ``kv_cache_usage_perc``, ...); floats to 6 places."""
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in values.items()}


def kv_cache_size_tokens(cache_config: dict[str, str]) -> int | None:
    """The KV cache's size in tokens as ``vllm:cache_config_info`` states it (``kv_cache_size_tokens``,
    vLLM 0.32), or ``None`` when it does not: never made up (see :func:`kv_cache_blocks_tokens`)."""
    try:
        return int(cache_config["kv_cache_size_tokens"])
    except (KeyError, ValueError):
        return None


def kv_cache_blocks_tokens(cache_config: dict[str, str]) -> int | None:
    """``num_gpu_blocks`` x ``block_size`` of ``vllm:cache_config_info``: a figure derived here, not
    the server's (a hybrid or sliding-window model's KV cache holds another number of tokens), shown as
    derived only; ``None`` when either label is missing or not a number."""
    try:
        return int(cache_config["num_gpu_blocks"]) * int(cache_config["block_size"])
    except (KeyError, ValueError):
        return None


def kv_cache_max_concurrency(cache_config: dict[str, str]) -> float | None:
    """``kv_cache_max_concurrency`` of ``vllm:cache_config_info`` (requests at max-model-len the KV
    cache holds at once, vLLM 0.32), or ``None``."""
    try:
        return float(cache_config["kv_cache_max_concurrency"])
    except (KeyError, ValueError):
        return None


def _percent(fraction: float | None) -> float | None:
    return None if fraction is None else round(100.0 * fraction, 2)


def _float(labels: dict[str, str], key: str) -> float | None:
    try:
        return float(labels[key])
    except (KeyError, ValueError):
        return None


@dataclass(frozen=True)
class ServerKvCache:
    """The server's KV cache over all its engines, from ``vllm:cache_config_info``.

    Attributes:
        size_tokens: the stated sizes summed (``None`` unless every engine states one).
        derived_tokens: ``num_gpu_blocks`` x ``block_size`` summed, only when no size is stated.
        max_concurrency: the stated concurrencies summed (requests at max-model-len), or ``None``.
        engines: how many engines stated a cache configuration.
    """

    size_tokens: int | None = None
    derived_tokens: int | None = None
    max_concurrency: float | None = None
    engines: int = 0


def _total(values: list[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else sum(v for v in values if v is not None)


def server_kv_cache(configs: tuple[dict[str, str], ...]) -> ServerKvCache:
    """Sum each engine's cache configuration (:class:`ServerKvCache`); all ``None`` for ``()``."""
    stated = _total([kv_cache_size_tokens(c) for c in configs])
    derived = None if stated is not None else _total([kv_cache_blocks_tokens(c) for c in configs])
    concurrency = _total([kv_cache_max_concurrency(c) for c in configs])
    return ServerKvCache(None if stated is None else int(stated), None if derived is None else int(derived),
                         None if concurrency is None else round(concurrency, 2), len(configs))


class MetricsWindow:
    """The samples of the last ``window_s`` seconds, and the figures they give.

    Args:
        window_s: how far back rates and percentiles look (:data:`WINDOW_S`).
    """

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: deque[MetricsSample] = deque()

    def add(self, sample: MetricsSample) -> None:
        """Add the newest sample; older ones beyond the window are dropped (one is kept as the base)."""
        self._samples.append(sample)
        while len(self._samples) > 2 and sample.at_s - self._samples[1].at_s >= self.window_s:
            self._samples.popleft()

    @property
    def latest(self) -> MetricsSample | None:
        """The newest sample."""
        return self._samples[-1] if self._samples else None

    def figures(self) -> ServingFigures:
        """:class:`ServingFigures` of the newest sample against the window."""
        if not self._samples:
            return ServingFigures()
        new, base = self._samples[-1], self._samples[0]
        previous = self._samples[-2] if len(self._samples) > 1 else None
        older = base if base is not new else None

        def delta(key: str, since: MetricsSample | None) -> float | None:
            if since is None or key not in new.totals or key not in since.totals:
                return None
            change = new.totals[key] - since.totals[key]
            return change if change >= 0 else new.totals[key]   # a restarted server counts from 0

        rate = None
        generated = delta("generation_tokens", previous)
        if previous is not None and generated is not None and new.at_s > previous.at_s:
            rate = generated / (new.at_s - previous.at_s)
        queries, hits = delta("prefix_cache_queries", older), delta("prefix_cache_hits", older)
        # a counter that went down means the server restarted: its histograms start afresh too
        restarted = older is not None and any(new.totals.get(k, 0.0) < v for k, v in older.totals.items())
        base_ttft = None if older is None or restarted else older.ttft
        base_itl = None if older is None or restarted else older.itl
        ttft = new.ttft.since(base_ttft) if new.ttft else None
        itl = new.itl.since(base_itl) if new.itl else None
        kv = server_kv_cache(new.engine_cache_configs)
        return ServingFigures(
            running=new.running, waiting=new.waiting,
            kv_cache_usage_perc=_percent(new.kv_cache_usage), kv_cache_usage_max_perc=_percent(new.kv_cache_usage_max),
            kv_cache_size_tokens=kv.size_tokens, kv_cache_derived_tokens=kv.derived_tokens,
            max_concurrency=kv.max_concurrency, engines=new.engines,
            gpu_memory_utilization=_float(new.cache_config, "gpu_memory_utilization"),
            generation_tokens_per_s=rate,
            prefix_cache_hit_rate=hits / queries if queries and hits is not None else None,
            ttft_p50_s=ttft.quantile(0.5) if ttft else None, ttft_p90_s=ttft.quantile(0.9) if ttft else None,
            itl_p50_s=itl.quantile(0.5) if itl else None, itl_p90_s=itl.quantile(0.9) if itl else None,
            preemptions=delta("preemptions", older),
            window_s=round(new.at_s - base.at_s, 3))
