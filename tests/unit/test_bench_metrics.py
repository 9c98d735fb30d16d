"""Benchmark arithmetic on hand-computed data: percentiles, TPOT, ITL, throughput, cost, prompts."""

from __future__ import annotations

import random

import pytest

from remote.bench import (
    LatencyStats,
    RequestRecord,
    calculate_metrics,
    lookup_price,
    to_json,
    usd_per_mtok,
)
from remote.bench.longctx import build_prompt, make_passphrase
from remote.bench.metrics import percentile
from remote.bench.progress import BenchProgress, ProgressTracker
from remote.bench.prompts import CHARS_PER_TOKEN, synthetic_prompt
from remote.bench.smoke import numbers_in
from remote.bench.throughput import ThroughputResult, default_requests


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([1.0, 2.0, 3.0, 4.0], 50, 2.5),          # rank 1.5: halfway between 2 and 3
    ([1.0, 2.0, 3.0, 4.0], 99, 3.97),         # rank 2.97: 3 + 0.97 * (4 - 3)
    ([4.0, 1.0, 3.0, 2.0], 0, 1.0),           # order of input does not matter
    ([4.0, 1.0, 3.0, 2.0], 100, 4.0),
    ([10.0], 99, 10.0),
    ([], 50, 0.0),                            # vLLM's ``values or 0``
])
def test_percentile_interpolates_linearly_like_numpy(values, q, expected):
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_rejects_out_of_range():
    with pytest.raises(ValueError, match="0..100"):
        percentile([1.0], 101)


def test_tpot_is_decode_time_over_tokens_after_the_first():
    record = RequestRecord(success=True, ttft_s=0.1, latency_s=1.0, output_tokens=10)
    assert record.tpot_s == pytest.approx(0.9 / 9)
    assert RequestRecord(success=True, ttft_s=0.1, latency_s=0.1, output_tokens=1).tpot_s is None
    assert RequestRecord(success=False, ttft_s=0.1, latency_s=1.0, output_tokens=10).tpot_s is None


def _records() -> list[RequestRecord]:
    a = RequestRecord(success=True, ttft_s=0.1, latency_s=1.0, itl_s=[0.1] * 9,
                      prompt_tokens=100, output_tokens=10)
    b = RequestRecord(success=True, ttft_s=0.2, latency_s=0.6, itl_s=[0.05, 0.15, 0.1, 0.1],
                      prompt_tokens=50, output_tokens=5)
    failed = RequestRecord(success=False, ttft_s=0.3, prompt_tokens=999, output_tokens=7,
                           error="HTTP 500: boom")
    return [a, b, failed]


def test_calculate_metrics_matches_hand_computed_figures():
    m = calculate_metrics(_records(), duration_s=2.0)
    assert (m.completed, m.failed) == (2, 1)
    assert (m.total_input_tokens, m.total_output_tokens) == (150, 15)  # failed one excluded
    assert m.request_throughput == pytest.approx(1.0)
    assert m.output_throughput == pytest.approx(7.5)
    assert m.total_token_throughput == pytest.approx(82.5)
    # TTFT: 100 and 200 ms; p99 rank 0.99 -> 100 + 0.99 * 100.
    assert (m.ttft.mean_ms, m.ttft.median_ms, m.ttft.p99_ms) == pytest.approx((150.0, 150.0, 199.0))
    # TPOT: a = 0.9 s / 9, b = 0.4 s / 4 -> both 100 ms.
    assert (m.tpot.mean_ms, m.tpot.p99_ms, m.tpot.samples) == pytest.approx((100.0, 100.0, 2))
    # ITL pooled over requests: 13 gaps, sorted 0.05, 0.1 x 11, 0.15; p99 rank 11.88.
    assert m.itl.samples == 13
    assert m.itl.mean_ms == pytest.approx(1300 / 13)
    assert m.itl.median_ms == pytest.approx(100.0)
    assert m.itl.p99_ms == pytest.approx(100.0 + 0.88 * 50.0)
    assert m.e2el.mean_ms == pytest.approx(800.0)


def test_itl_is_per_token_when_chunks_carry_several_tokens_and_per_chunk_as_vllm_bench_has_it():
    # 1 + 4 + 4 + 1 tokens; chunks 8, 8 and 2 ms apart -> per token 2, 2, 2, 2, 2, 2, 2, 2, 2 ms
    fast = RequestRecord(success=True, ttft_s=0.1, latency_s=0.118, last_token_s=0.118,
                         itl_s=[0.008, 0.008, 0.002], chunk_tokens=[1, 4, 4, 1], output_tokens=10)
    assert fast.itl_per_token_s() == pytest.approx([0.002] * 9)
    m = calculate_metrics([fast], duration_s=1.0)
    assert (m.itl.samples, m.itl.mean_ms, m.itl.median_ms) == pytest.approx((9, 2.0, 2.0))
    assert m.itl.mean_ms == pytest.approx(m.tpot.mean_ms)          # 18 ms / 9 tokens either way
    assert (m.itl_chunk.samples, m.itl_chunk.median_ms, m.itl_chunk.mean_ms) == pytest.approx((3, 8.0, 6.0))
    # no running usage (or counts that do not line up): one chunk counts as one token
    unknown = RequestRecord(success=True, itl_s=[0.008, 0.002], output_tokens=10)
    assert unknown.itl_per_token_s() == [0.008, 0.002]
    data = to_json(ThroughputResult("http://h:8000", "m", 1, 8, 10, 1, m))
    assert (data["median_itl_ms"], data["median_itl_chunk_ms"]) == pytest.approx((2.0, 8.0))


def test_calculate_metrics_all_failed_gives_zero_figures():
    m = calculate_metrics([_records()[2]], duration_s=1.0)
    assert (m.completed, m.failed, m.output_throughput) == (0, 1, 0.0)
    assert m.ttft == LatencyStats()


def test_calculate_metrics_needs_a_positive_duration():
    with pytest.raises(ValueError, match="positive"):
        calculate_metrics(_records(), duration_s=0.0)


def test_throughput_json_uses_vllm_bench_key_names():
    m = calculate_metrics(_records(), duration_s=2.0)
    result = ThroughputResult("http://h:8000", "m", 4, 128, 10, 3, m, (("HTTP 500: boom", 1),))
    data = to_json(result)
    assert data["kind"] == "throughput"
    assert data["output_throughput"] == pytest.approx(7.5)
    assert data["p99_itl_ms"] == pytest.approx(144.0)
    assert data["mean_prompt_tokens"] == pytest.approx(75.0)
    assert data["errors"] == [{"message": "HTTP 500: boom", "count": 1}]


@pytest.mark.parametrize(("price", "chips", "tok_s", "expected"), [
    (0.60, 1, 126.9, 1.3134),   # v5e-1 flex-start at c=1 (public report: $1.314/M)
    (0.60, 1, 1877.7, 0.0888),  # same chip at c=64 ($0.089/M)
    (2.70, 8, 3000.0, 2.0),     # v6e-8 on-demand: 21.6 $/h / 10.8 Mtok/h
])
def test_usd_per_mtok(price, chips, tok_s, expected):
    assert usd_per_mtok(price, chips, tok_s) == pytest.approx(expected, abs=1e-4)


def test_usd_per_mtok_refuses_zero_throughput():
    with pytest.raises(ValueError, match="no output tokens"):
        usd_per_mtok(1.0, 1, 0.0)


def test_lookup_price_by_generation_and_provisioning_model():
    prices = {"v5e": {"spot": 0.48}, "v6e": {"flex-start": 1.35}}
    assert lookup_price(prices, "v5litepod-8", "spot") == 0.48
    assert lookup_price(prices, "v6e-4", "flex-start") == 1.35
    assert lookup_price(prices, "v6e-4", "spot") is None
    assert lookup_price(prices, None, "spot") is None


def test_numbers_in_joins_digit_groups():
    assert numbers_in("The product is 7,006,652.") == [7006652]
    assert numbers_in("7 006 652 and 12") == [7006652, 12]
    assert numbers_in("none") == []


def test_synthetic_prompt_size_and_uniqueness():
    one, two = synthetic_prompt(1000, seed=1), synthetic_prompt(1000, seed=1)
    assert one.splitlines()[0] != two.splitlines()[0]   # unique first line defeats prefix caching
    assert abs(len(one) - 1000 * CHARS_PER_TOKEN) < 20


@pytest.mark.parametrize("depth", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_build_prompt_puts_the_passphrase_at_depth(depth):
    rng = random.Random(7)
    phrase = make_passphrase(rng)
    prompt = build_prompt(2000, depth, phrase, rng)
    lines = prompt.split("\n")
    body = lines[1]
    at = body.index(f"The passphrase is {phrase}.") / len(body)
    assert at == pytest.approx(depth, abs=0.02)
    assert lines[0].startswith("Document ") and "passphrase" in lines[-1]


def test_progress_tracker_replaces_chunk_counts_with_server_counts():
    seen: list[BenchProgress] = []
    tracker = ProgressTracker("throughput", seen.append, requests_total=2, concurrency=2, interval_s=0)
    for _ in range(3):
        tracker.token()
    tracker.request_done(streamed_chunks=3, output_tokens=4)
    assert seen[-1].output_tokens == 4
    assert seen[-1].requests_done == 1 and seen[-1].requests_total == 2
    assert seen[-1].output_tokens_per_s > 0


def test_default_requests():
    assert default_requests(1) == 8
    assert default_requests(64) == 256


@pytest.mark.parametrize(("body", "expected"), [
    ({"object": "error", "message": "This model's maximum context length is 8 tokens.", "code": 400},
     "This model's maximum context length is 8 tokens."),                       # vLLM up to 0.9
    ({"error": {"message": "The model `x` does not exist.", "code": 404}}, "The model `x` does not exist."),
    ({"detail": "Not Found"}, '{"detail": "Not Found"}'),                       # not vLLM: shown raw
])
def test_error_message_reads_both_vllm_error_shapes(body, expected):
    import httpx

    from remote.bench.client import error_message

    assert error_message(httpx.Response(400, json=body)) == expected
    assert error_message(httpx.Response(502, text="Bad gateway\n")) == "Bad gateway"


def test_normalize_base_url():
    from remote.bench.client import normalize_base_url
    from remote.errors import VllmHttpError

    assert normalize_base_url(" http://h:8000/v1/ ") == "http://h:8000"
    with pytest.raises(VllmHttpError, match="not an http"):
        normalize_base_url("h:8000")


def test_prompt_factory_prompts_are_unique_and_sized():
    from remote.bench.prompts import PromptFactory

    factory = PromptFactory(2000, seed=5)
    prompts = [factory.make() for _ in range(20)]
    assert len({p.splitlines()[0] for p in prompts}) == 20
    assert len({p.splitlines()[1][:40] for p in prompts}) > 10          # rotated filler, not one text
    assert all(abs(len(p) - 2000 * CHARS_PER_TOKEN) <= 12 for p in prompts)   # at most a word over
