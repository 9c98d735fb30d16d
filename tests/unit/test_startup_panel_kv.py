"""The panel's KV cache figures: marked unusable after a failed boot, warned below 1.0x concurrency."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from console.widgets.startup_panel import kv_text
from remote.vllm_log.reader import read_log

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "vllm-logs"


def rendered(name: str) -> str:
    path = next(CORPUS.glob(f"{name}-*.log"), None)
    if path is None:
        pytest.skip(f"corpus file {name} not present")
    console = Console(width=160, record=True)
    console.print(kv_text(read_log(path)))
    return console.export_text()


def test_figures_of_a_failed_boot_are_reported_never_usable():
    text = rendered("33")          # sized 16,384 tokens at 2.00x, then the KV allocation failed
    assert "16,384 tokens  reported, never usable: the boot failed" in text
    assert "2.00x at 8,192 tokens per request  reported, never usable" in text
    assert "below 1.0x" not in text


def test_concurrency_below_one_is_warned_with_the_length_that_fits():
    text = rendered("28")          # V0: 23,648 tokens, 0.82x at 29,000 tokens per request
    assert "0.82x at 29,000 tokens per request" in text
    assert "below 1.0x: the KV cache cannot hold one request at max-model-len; --max-model-len 23648 fits" in text


def test_a_ready_boot_shows_plain_figures():
    text = rendered("10")
    assert "KV cache" in text and "tokens" in text
    assert "never usable" not in text and "below 1.0x" not in text


def test_utilization_against_the_generations_known_ceiling():
    from remote.startup import StartupState

    def note(util, tpu):
        console = Console(width=160, record=True)
        console.print(kv_text(StartupState(gpu_memory_utilization=util, tpu_type=tpu)))
        return console.export_text()

    assert "0.95, above 0.92, the highest known to work on v5e" in note(0.95, "v5litepod-1")
    assert "0.90 (at most 0.92 is known to work on v6e)" in note(0.90, "v6e-1")
    assert "0.95 (no ceiling known for v5p: not checked)" in note(0.95, "v5p-8")
    assert "not checked" in note(0.95, "v9z-8")
    assert "HBM utilization" not in note(None, "v6e-1")
    assert "HBM utilization" in rendered("33") and "0.92 (at most 0.92" in rendered("33")


def _text(state, served=None) -> str:
    console = Console(width=200, record=True)
    console.print(kv_text(state, served))
    return console.export_text()


def test_the_metrics_figures_are_the_headline_once_the_server_states_them():
    from console.widgets.startup_panel import ServedKv
    from remote.startup import StartupState

    state = StartupState(ready=True, kv_cache_tokens=321_280, max_concurrency=39.22,
                         max_concurrency_tokens_per_request=8_192)
    assert "321,280 tokens" in _text(state)
    text = _text(state, ServedKv(kv_cache_tokens=642_560, max_concurrency=78.44, engines=2))
    assert "642,560 tokens (/metrics, 2 engines) · the log said 321,280" in text
    assert "78.44x at 8,192 tokens per request (/metrics) · the log said 39.22x" in text
    same = _text(state, ServedKv(kv_cache_tokens=321_280, max_concurrency=39.22))
    assert "321,280 tokens (/metrics)" in same and "the log said" not in same
    unstated = _text(state, ServedKv(kv_cache_tokens=None, max_concurrency=None))
    assert "321,280 tokens" in unstated and "/metrics" not in unstated        # nothing made up


def test_concurrency_below_one_from_metrics_alone_is_warned():
    from console.widgets.startup_panel import ServedKv
    from remote.startup import StartupState

    state = StartupState(ready=True, kv_cache_tokens=40_000, max_concurrency=1.22,
                         max_concurrency_tokens_per_request=32_768)
    text = _text(state, ServedKv(kv_cache_tokens=24_000, max_concurrency=0.73))
    assert "below 1.0x (/metrics: 0.73x): the KV cache cannot hold one request at max-model-len; " \
           "--max-model-len 24000 fits" in text
    assert "below 1.0x" not in _text(state, ServedKv(kv_cache_tokens=40_000, max_concurrency=1.22))


def test_a_one_line_kv_figure_whose_size_and_concurrency_disagree_is_flagged():
    import io

    def read_text(text: str):
        return read_log(io.BytesIO(text.encode()))

    line = ("(EngineCore pid=163) INFO 09-30 03:52:43 [kv_cache_utils.py:2404] TPU KV cache size: {} tokens, "
            "Maximum concurrency for 8,192 tokens per request: 2.00x\n")
    agrees = read_text(line.format("16,384"))
    assert agrees.kv_cache_tokens == 16_384 and agrees.kv_cache_note is None
    wrong = read_text(line.format("163,840"))
    assert wrong.kv_cache_tokens == 163_840 and wrong.max_concurrency == 2.0
    assert wrong.kv_cache_note == ("the log's KV cache size (163,840 tokens) and its maximum concurrency "
                                   "(2x 8,192 = 16,384 tokens) disagree: one of the two figures is wrong")
    assert "disagree: one of the two figures is wrong" in _text(wrong)
