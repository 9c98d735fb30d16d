"""Snapshot tests of the benchmark screen: the form (with a reason beside a bad field) and
results views built from fixed figures (so the SVG is stable), frozen clock."""

from __future__ import annotations

from typing import Any

from textual.widgets import Input, Select

from console.app import TpuConsoleApp
from console.flows.bench import pricing_for
from console.screens.bench import BenchScreen
from console.services import Services
from remote.bench import LatencyStats, LongCtxProbe, LongCtxResult, ServingMetrics, ThroughputResult
from remote.models import Node

NODE = Node(project="inference-prod", zone="us-west4-a", name="vllm-v5e-a", state="READY",
            accelerator_type="v5litepod-4", node_id="4711000000000000001")
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
URL = "http://127.0.0.1:41000"


def _level(concurrency: int, out_tok_s: float, ttft_ms: float, tpot_ms: float, failed: int = 0) -> ThroughputResult:
    requests = 4 * concurrency
    completed = requests - failed
    duration = completed * 128 / out_tok_s
    return ThroughputResult(
        base_url=URL, model=MODEL, concurrency=concurrency, prompt_tokens_target=512, output_tokens_target=128,
        requests_sent=requests,
        metrics=ServingMetrics(
            completed=completed, failed=failed, duration_s=duration, total_input_tokens=completed * 519,
            total_output_tokens=completed * 128, request_throughput=completed / duration,
            output_throughput=out_tok_s, total_token_throughput=completed * (519 + 128) / duration,
            ttft=LatencyStats(ttft_ms, ttft_ms * 0.95, ttft_ms * 1.8, completed),
            tpot=LatencyStats(tpot_ms, tpot_ms * 0.98, tpot_ms * 1.3, completed),
            itl=LatencyStats(tpot_ms, tpot_ms * 0.97, tpot_ms * 2.1, completed * 127),
            itl_chunk=LatencyStats(tpot_ms * 2, tpot_ms * 1.9, tpot_ms * 4.0, completed * 63),
            e2el=LatencyStats(ttft_ms + 127 * tpot_ms, ttft_ms + 127 * tpot_ms, ttft_ms + 160 * tpot_ms, completed)),
        errors=(("HTTP 503: Service Unavailable", failed),) if failed else (), prompt_tokens_exact=True)


THROUGHPUT = [_level(1, 98.4, 41.2, 10.1), _level(16, 1210.7, 96.5, 13.2), _level(64, 2874.3, 402.8, 21.6, failed=2)]
LONGCTX = LongCtxResult(
    base_url=URL, model=MODEL, context_tokens=16000, max_model_len=32768,
    probes=(
        LongCtxProbe(0.1, 16000, "amber-orchid-4821", found=True, seconds=1.84, ttft_s=1.21, prompt_tokens=16043,
                     prompt_tokens_per_s=13258.7, answer="amber-orchid-4821"),
        LongCtxProbe(0.5, 16000, "cobalt-falcon-1207", found=True, seconds=1.79, ttft_s=1.18, prompt_tokens=16039,
                     prompt_tokens_per_s=13592.4, answer="cobalt-falcon-1207"),
        LongCtxProbe(0.9, 16000, "nimbus-quartz-9034", found=False, seconds=1.81, ttft_s=1.20, prompt_tokens=16047,
                     prompt_tokens_per_s=13372.5, answer="I could not find a passphrase."),
        LongCtxProbe(0.5, 33792, "velvet-tundra-5550", error=(
            "This model's maximum context length is 32768 tokens. However, you requested 33831 tokens "
            "(33799 in the messages, 32 in the completion). Please reduce the length of the messages "
            "or completion."), status_code=400),
    ))


async def _bench_screen(pilot: Any) -> BenchScreen:
    from console.screens.fleet import FleetScreen

    for _ in range(200):
        await pilot.pause(0.05)
        if isinstance(pilot.app.screen, FleetScreen) and pilot.app.screen.snapshot is not None:
            break
    screen = BenchScreen(NODE)
    await pilot.app.push_screen(screen)
    await pilot.pause()
    return screen


def test_bench_form_with_a_reason(snap_compare: Any, services: Services) -> None:
    async def run_before(pilot: Any) -> None:
        screen = await _bench_screen(pilot)
        screen.query_one("#f-streams", Input).value = "1,16,x"
        await pilot.pause()

    assert snap_compare(TpuConsoleApp(services), terminal_size=(180, 40), run_before=run_before)


def test_bench_throughput_results(snap_compare: Any, services: Services) -> None:
    async def run_before(pilot: Any) -> None:
        screen = await _bench_screen(pilot)
        screen.show_results("throughput", THROUGHPUT, pricing_for(NODE, services.config.prices))
        await pilot.pause()

    assert snap_compare(TpuConsoleApp(services), terminal_size=(180, 40), run_before=run_before)


def test_bench_longctx_results(snap_compare: Any, services: Services) -> None:
    async def run_before(pilot: Any) -> None:
        screen = await _bench_screen(pilot)
        screen.query_one("#f-kind", Select).value = "longctx"
        screen.show_results("longctx", [LONGCTX], pricing_for(NODE, services.config.prices))
        await pilot.pause()

    assert snap_compare(TpuConsoleApp(services), terminal_size=(180, 40), run_before=run_before)
