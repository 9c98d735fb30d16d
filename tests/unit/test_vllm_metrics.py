"""vLLM /metrics: parsing the exposition text, histogram quantiles, rates between samples."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from remote.vllm_metrics import Histogram as Hist
from remote.vllm_metrics import (
    MetricsWindow,
    kv_cache_blocks_tokens,
    kv_cache_size_tokens,
    parse_metrics,
    server_kv_cache,
)

LABELS = {"model_name": "tiny", "engine": "0"}


def _exposition(*, running: float, generated: float, ttft_s: list[float], hits: float, queries: float) -> str:
    """Text as vLLM writes it (prometheus_client), from known values."""
    r = CollectorRegistry()
    names = list(LABELS)
    Gauge("vllm:num_requests_running", "", names, registry=r).labels(**LABELS).set(running)
    Gauge("vllm:num_requests_waiting", "", names, registry=r).labels(**LABELS).set(2)
    Gauge("vllm:kv_cache_usage_perc", "", names, registry=r).labels(**LABELS).set(0.125)
    Counter("vllm:generation_tokens", "", names, registry=r).labels(**LABELS).inc(generated)
    Counter("vllm:prefix_cache_queries", "", names, registry=r).labels(**LABELS).inc(queries)
    Counter("vllm:prefix_cache_hits", "", names, registry=r).labels(**LABELS).inc(hits)
    h = Histogram("vllm:time_to_first_token_seconds", "", names, buckets=(0.01, 0.1, 1.0), registry=r)
    for value in ttft_s:
        h.labels(**LABELS).observe(value)
    Gauge("vllm:cache_config_info", "", ["block_size", "num_gpu_blocks", "engine"], registry=r).labels(
        block_size="16", num_gpu_blocks="2048", engine="0").set(1)
    return generate_latest(r).decode()


def test_one_sample_reads_gauges_totals_histograms_and_the_cache_config() -> None:
    sample = parse_metrics(_exposition(running=3, generated=500, ttft_s=[0.005, 0.05, 0.05, 0.5],
                                       hits=30, queries=120), at_s=10.0)
    assert (sample.running, sample.waiting, sample.kv_cache_usage) == (3.0, 2.0, 0.125)
    assert sample.totals == {"generation_tokens": 500.0, "prefix_cache_queries": 120.0, "prefix_cache_hits": 30.0}
    assert sample.ttft is not None and sample.ttft.count == 4 and sample.ttft.sum == pytest.approx(0.605)
    assert sample.ttft.buckets == ((0.01, 1.0), (0.1, 3.0), (1.0, 4.0), (float("inf"), 4.0))
    assert sample.cache_config == {"block_size": "16", "num_gpu_blocks": "2048"}
    assert kv_cache_size_tokens(sample.cache_config) is None      # not stated: never made up
    assert kv_cache_blocks_tokens(sample.cache_config) == 32_768
    assert sample.model_names == ("tiny",) and sample.engines == 1


def test_quantiles_interpolate_inside_the_bucket_like_histogram_quantile() -> None:
    h = Hist(((0.01, 1.0), (0.1, 3.0), (1.0, 4.0), (float("inf"), 4.0)), 4.0, 0.605)
    assert h.quantile(0.5) == pytest.approx(0.01 + (0.1 - 0.01) * (2 - 1) / (3 - 1))   # rank 2 in (0.01, 0.1]
    assert h.quantile(0.25) == pytest.approx(0.01)                                      # rank 1: the first bound
    assert h.quantile(1.0) == pytest.approx(1.0)
    overflow = Hist(((0.1, 0.0), (float("inf"), 2.0)), 2.0, 5.0)
    assert overflow.quantile(0.5) == 0.1          # in +Inf: the highest finite bound, as Prometheus does
    assert Hist((), 0.0, 0.0).quantile(0.5) is None


def test_the_window_gives_rates_hit_rate_and_percentiles_of_what_happened_in_it() -> None:
    window = MetricsWindow(window_s=60)
    window.add(parse_metrics(_exposition(running=1, generated=1000, ttft_s=[0.5] * 10, hits=0, queries=100),
                             at_s=100.0))
    window.add(parse_metrics(_exposition(running=4, generated=1600, ttft_s=[0.5] * 10 + [0.05] * 30,
                                         hits=50, queries=300), at_s=102.0))
    f = window.figures()
    assert f.running == 4.0 and f.waiting == 2.0 and f.kv_cache_usage_perc == 12.5
    assert f.generation_tokens_per_s == pytest.approx(300.0)        # 600 tokens in 2 s
    assert f.prefix_cache_hit_rate == pytest.approx(50 / 200)       # over the window only
    assert f.ttft_p50_s == pytest.approx(0.01 + 0.09 * 15 / 30)     # the 30 new ones, all in (0.01, 0.1]
    assert f.kv_cache_size_tokens is None and f.kv_cache_derived_tokens == 32_768 and f.window_s == 2.0
    assert f.to_json()["generation_tokens_per_s"] == 300.0


def test_a_restarted_server_counts_from_zero_and_garbage_is_a_value_error() -> None:
    window = MetricsWindow()
    window.add(parse_metrics(_exposition(running=1, generated=5000, ttft_s=[0.5], hits=0, queries=0), at_s=1.0))
    window.add(parse_metrics(_exposition(running=1, generated=100, ttft_s=[0.05], hits=0, queries=0), at_s=3.0))
    f = window.figures()
    assert f.generation_tokens_per_s == pytest.approx(50.0)         # 100 since the restart, in 2 s
    assert f.ttft_p50_s is not None and f.ttft_p50_s < 0.1          # the new server's histogram only
    with pytest.raises(ValueError):
        parse_metrics("vllm:num_requests_running{model_name=\"x\" 3\n")


FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "vllm-metrics"


def test_the_real_vllm_032_text_reads_to_its_figures() -> None:
    """A capture of the real vLLM 0.32 (CPU build) two seconds into three requests, and after."""
    during = parse_metrics((FIXTURES / "vllm-0.32-cpu-tiny-3-running.txt").read_text(), at_s=0.0)
    after = parse_metrics((FIXTURES / "vllm-0.32-cpu-tiny-after.txt").read_text(), at_s=10.0)
    assert (during.running, during.waiting) == (3.0, 0.0)     # waiting_by_reason is another family
    assert during.kv_cache_usage == pytest.approx(0.0006103888176768324)
    assert during.totals["prompt_tokens"] == 456 and during.totals["generation_tokens"] == 841
    assert during.ttft is not None and during.ttft.count == 3 and during.itl is not None
    assert during.model_names == ("tiny",)
    assert kv_cache_size_tokens(during.cache_config) == 2_097_152 == 16_384 * 128
    window = MetricsWindow()
    window.add(during)
    window.add(after)
    f = window.figures()
    assert f.running == 0 and f.max_concurrency == 1024.0 and f.kv_cache_size_tokens == 2_097_152
    assert f.generation_tokens_per_s == pytest.approx((900 - 841) / 10)


def _two_engines(text: str) -> str:
    """The real 0.32 capture as a ``--data-parallel-size 2`` server prints it: every ``engine="0"``
    sample again with ``engine="1"`` (``PrometheusStatLogger``: one label set per engine index),
    the engines' KV cache usage 0.62 and 0.58, engine 1's stated size and concurrency smaller."""
    out = []
    for line in text.splitlines():
        if 'engine="0"' not in line:
            out.append(line)
            continue
        twin = line.replace('engine="0"', 'engine="1"')
        if line.startswith("vllm:kv_cache_usage_perc{"):
            line, twin = line.rsplit(" ", 1)[0] + " 0.62", twin.rsplit(" ", 1)[0] + " 0.58"
        twin = twin.replace('kv_cache_size_tokens="2097152"', 'kv_cache_size_tokens="1900000"')
        twin = twin.replace('kv_cache_max_concurrency="1024.0"', 'kv_cache_max_concurrency="927.73"')
        out += [line, twin]
    return "\n".join(out) + "\n"


def test_a_data_parallel_server_sums_counts_and_capacities_and_averages_usage_over_its_engines() -> None:
    """Two engines at 62% and 58% of 2,097,152 and 1,900,000 tokens: 60% of 3,997,152, not 120%."""
    one = (FIXTURES / "vllm-0.32-cpu-tiny-3-running.txt").read_text()
    sample = parse_metrics(_two_engines(one), at_s=0.0)
    assert sample.engines == 2
    assert sample.kv_cache_usage == pytest.approx(0.60) and sample.kv_cache_usage_max == pytest.approx(0.62)
    assert (sample.running, sample.waiting) == (6.0, 0.0)                     # 3 on each engine
    assert sample.totals["generation_tokens"] == 2 * 841
    assert sample.ttft is not None and sample.ttft.count == 6
    assert [c["kv_cache_size_tokens"] for c in sample.engine_cache_configs] == ["2097152", "1900000"]
    kv = server_kv_cache(sample.engine_cache_configs)
    assert (kv.size_tokens, kv.max_concurrency, kv.engines) == (3_997_152, 1951.73, 2)
    window = MetricsWindow()
    window.add(sample)
    window.add(parse_metrics(_two_engines(one), at_s=2.0))
    f = window.figures()
    assert (f.kv_cache_usage_perc, f.kv_cache_usage_max_perc, f.engines) == (60.0, 62.0, 2)
    assert f.kv_cache_size_tokens == 3_997_152 and f.max_concurrency == 1951.73
    assert f.gpu_memory_utilization == 0.92 and f.to_json()["engines"] == 2


def test_the_metrics_line_says_how_many_engines_and_marks_a_derived_size() -> None:
    from console.verbs.metrics import _line, kv_words
    from remote.vllm_metrics import ServingFigures

    two = ServingFigures(kv_cache_usage_perc=60.0, kv_cache_usage_max_perc=62.0, kv_cache_size_tokens=3_997_152,
                         engines=2)
    assert kv_words(two) == "KV 60.0% (mean of 2 engines, max 62.0%) of 3,997,152 tokens"
    assert _line(two).endswith("· 2 engines")
    derived = ServingFigures(kv_cache_usage_perc=12.5, kv_cache_derived_tokens=32_768)
    assert kv_words(derived) == "KV 12.5% of ~32,768 tokens (derived: blocks x block size)"
    assert "engines" not in _line(derived)
