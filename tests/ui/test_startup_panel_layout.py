"""The startup panel re-lays out the screen only when a section's height changes (issue 18).

A screen layout beside a log flood costs the loop ~25 ms plus a full repaint; the running compile
and phase durations change once a second without changing any section's height.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from textual.app import App, ComposeResult
from textual.widgets import Static

from console.widgets.in_place import update_in_place
from console.widgets.startup_panel import PanelInfo, StartupPanel
from remote.vllm_log.reader import StartupReader
from tests.ui.conftest import text_of
from tests.ui.test_startup import FIXTURES, READY, read_lines

#: The READY log up to the middle of its XLA compile (steps done, one in flight).
MID_COMPILE_LINES = 150


class PanelOnly(App[None]):
    """The startup panel alone, with a count of the screen's layouts."""

    def compose(self) -> ComposeResult:
        yield StartupPanel(id="panel")

    def on_mount(self) -> None:
        self.layouts = 0
        self.screen.screen_layout_refresh_signal.subscribe(self, self._laid_out)

    def _laid_out(self, _screen: Any) -> None:
        self.layouts += 1


async def settle(pilot: Any) -> None:
    """Wait out the layouts and repaints already asked for (a layout's resize events ask for a frame more)."""
    await pilot.pause()
    await pilot.pause()


def mid_compile_info(seconds_later: int) -> PanelInfo:
    reader = StartupReader()
    for line in read_lines(FIXTURES / f"{READY}.log")[:MID_COMPILE_LINES]:
        reader.feed_line(line)
    state = reader.state
    assert state.compile.steps_finished and not state.ready and state.last_line_at is not None
    return PanelInfo(state=state, now=state.last_line_at + timedelta(seconds=seconds_later))


async def test_a_running_duration_that_keeps_the_height_repaints_without_a_layout() -> None:
    app = PanelOnly()
    async with app.run_test(size=(100, 60)) as pilot:
        panel = app.query_one("#panel", StartupPanel)
        panel.show(mid_compile_info(5))
        await settle(pilot)
        compile_box = app.query_one("#panel-compile", Static)
        before, height = text_of(compile_box, width=68), compile_box.size.height
        assert "Elapsed" in before and height == len(before.splitlines())
        laid_out = app.layouts
        panel.show(mid_compile_info(6))           # one second on: elapsed and the phase's duration grow
        await pilot.pause()
        after = text_of(compile_box, width=68)
        assert after != before and text_of(app.query_one("#panel-timeline", Static), width=68)
        assert app.layouts == laid_out, "a same-height update laid out the screen"
        assert compile_box.size.height == height


async def test_a_section_that_grows_is_laid_out_to_its_new_height() -> None:
    app = PanelOnly()
    async with app.run_test(size=(100, 60)) as pilot:
        await settle(pilot)
        box = app.query_one("#panel-kv", Static)
        assert box.size.height == 1                      # "KV cache  not sized yet"
        laid_out = app.layouts
        assert update_in_place(box, "another row") is False
        await pilot.pause()
        assert app.layouts == laid_out and "another row" in text_of(box)
        assert update_in_place(box, "one\ntwo\nthree") is True
        await pilot.pause()
        assert app.layouts > laid_out and box.size.height == 3
        assert update_in_place(box, "a row " * box.size.width) is True     # wraps at the box's width
        await pilot.pause()
        assert box.size.height == len(text_of(box, width=box.size.width).splitlines()) > 3


def test_a_revisited_phase_is_listed_once_with_its_total_time() -> None:
    """tpu-inference sizes the KV cache, compiles, allocates, compiles again: the phases list shows
    compiling and allocating_kv_cache once each, with the time over both visits and ×2."""
    from datetime import UTC, datetime, timedelta

    from console.widgets.startup_panel import PanelInfo, phase_spans, timeline_table
    from remote.startup import Phase, PhaseMark, StartupState
    from tests.ui.conftest import text_of

    t0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    at = [t0 + timedelta(seconds=s) for s in (0, 30, 60, 90, 100, 400, 410)]
    marks = (PhaseMark(Phase.STARTING, at[0], 1), PhaseMark(Phase.LOADING_WEIGHTS, at[1], 10),
             PhaseMark(Phase.ALLOCATING_KV_CACHE, at[2], 20), PhaseMark(Phase.COMPILING, at[3], 30),
             PhaseMark(Phase.ALLOCATING_KV_CACHE, at[4], 40), PhaseMark(Phase.COMPILING, at[5], 50),
             PhaseMark(Phase.READY, at[6], 60))
    assert phase_spans(marks, None) == [
        (Phase.STARTING, at[0], 30.0, 1), (Phase.LOADING_WEIGHTS, at[1], 30.0, 1),
        (Phase.ALLOCATING_KV_CACHE, at[2], 30.0 + 300.0, 2), (Phase.COMPILING, at[3], 10.0 + 10.0, 2),
        (Phase.READY, at[6], 0.0, 1)]

    class Shown:
        content = timeline_table(PanelInfo(state=StartupState(timeline=marks), now=at[6]))

    rows = [line.split() for line in text_of(Shown()).splitlines()]
    assert [r[0] for r in rows] == ["starting", "loading_weights", "allocating_kv_cache", "compiling", "ready"]
    assert rows[2] == ["allocating_kv_cache", "×2", "12:01:00", "5m30s"] and rows[3] == ["compiling", "×2", "12:01:30", "20s"]
    running = (*marks[:-1],)                                  # still compiling, 60 s into its second visit
    Shown.content = timeline_table(PanelInfo(state=StartupState(timeline=running), now=at[5] + timedelta(seconds=60)))
    rows = [line.split() for line in text_of(Shown()).splitlines()]
    assert rows[-1] == ["compiling", "×2", "12:01:30", "1m10s", "▸"]
