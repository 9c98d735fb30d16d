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
