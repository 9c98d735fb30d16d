"""A multi-host boot hanging in one compile step: each worker's step in flight, its age, the warning and its cause."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rich.console import Console

from console.widgets.startup_panel import PanelInfo, slice_text
from remote.vllm_log.reader import StartupReader
from remote.vllm_log.workers import compile_watch

ENV = "(EngineCore pid=372) INFO 08-10 22:{:02d}:{:02d} [compilation_manager.py:{}] "
BOOT = ["INFO 08-10 22:25:53 [__init__.py:76] vLLM API server version 0.11.0",
        ENV.format(26, 0, 949) + "Compiling sampling with different input shapes."]


def _worker(steps_done: int, hang: bool) -> list[str]:
    """tpu-inference's compile lines: ``steps_done`` steps of 6 s each from 22:26:00, then (``hang``)
    the next ``Precompile`` line and nothing after it."""
    lines = list(BOOT)
    for i in range(steps_done):
        t = 6 * i
        lines.append(ENV.format(26 + t // 60, t % 60, 137) + f"Precompile worker0 backbone --> {{'num_tokens': {16 << i}}}")
        t += 6
        lines.append(ENV.format(26 + t // 60, t % 60, 188)
                     + f"Compilation of worker0 backbone --> {{'num_tokens': {16 << i}}} finished in 6.00 [secs].")
    if hang:
        t = 6 * steps_done
        lines.append(ENV.format(26 + t // 60, t % 60, 137)
                     + f"Precompile worker0 backbone --> {{'num_tokens': {16 << steps_done}}}")
    return lines


def _state(lines: list[str]):
    reader = StartupReader(year=2026)
    for line in lines:
        reader.feed_line(line)
    return reader.state


HANG_AT = datetime(2026, 8, 10, 22, 26, 48, tzinfo=UTC)       # the 9th Precompile line of _worker(8, True)


def test_every_worker_stopped_in_the_same_step_is_a_cross_host_hang_with_each_steps_age():
    states = [_state(_worker(8, hang=True)) for _ in range(4)]
    assert states[0].last_line_at == HANG_AT
    watch = compile_watch(states, HANG_AT + timedelta(minutes=25))
    assert [(s.worker, s.step, s.age_s) for s in watch.steps] == \
        [(w, "worker0 backbone --> {'num_tokens': 4096}", 1500.0) for w in range(4)]
    assert watch.typical_step_s == 6.0
    assert watch.warning is not None
    assert watch.warning.startswith("workers 0, 1, 2, 3 stuck in one compile step for 25 min "
                                    "(a step typically takes 6.0 s): every worker waits in the same step: "
                                    "likely a cross-host hang")
    console = Console(width=200, record=True)
    console.print(slice_text(PanelInfo(workers=4, compile_watch=watch)))
    text = console.export_text()
    assert "w2 compiling for 25m00s: worker0 backbone --> {'num_tokens': 4096}" in text
    assert "⚠ workers 0, 1, 2, 3 stuck in one compile step for 25 min" in text


def test_within_its_time_a_step_in_flight_is_shown_without_a_warning():
    states = [_state(_worker(8, hang=True)) for _ in range(2)]
    watch = compile_watch(states, HANG_AT + timedelta(seconds=40))
    assert [s.age_s for s in watch.steps] == [40.0, 40.0] and watch.warning is None


def test_one_worker_behind_the_others_names_its_host_and_the_history_is_a_basis_too():
    states = [_state(_worker(12, hang=False)), _state(_worker(8, hang=True)), _state(_worker(12, hang=False))]
    watch = compile_watch(states, HANG_AT + timedelta(minutes=8), history_compile_s=240.0)
    assert [s.step is not None for s in watch.steps] == [False, True, False]
    assert watch.warning is not None
    assert watch.warning.startswith("worker 1 stuck in one compile step for 8 min (a step typically takes 6.0 s; "
                                    "the whole compile took 240 s before): workers 0, 2 moved past it: "
                                    "likely the stuck host itself")
