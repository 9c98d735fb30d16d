"""Snapshot tests of the startup panel and log pane mid-compile, ready and failed.

Fixed corpus lines are fed into the widgets; "now" is five seconds after the last stamped line,
so elapsed times and running durations are the same at every run.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from textual.app import App, ComposeResult
from textual.containers import Horizontal

from console.widgets.log_view import LogView
from console.widgets.startup_panel import PanelInfo, StartupPanel
from remote.container.tail import TailStatus
from remote.vllm_log.reader import StartupReader
from tests.ui.test_startup import FIXTURES, KV_OOM, READY, read_lines


class StartupWidgetsApp(App[None]):
    """The startup screen's two panes (same widths), fed once from fixed lines."""

    CSS = """
    Horizontal { height: 1fr; }
    StartupPanel { width: 70; border-right: solid $primary 40%; }
    LogView { width: 1fr; }
    """

    def __init__(self, lines: list[str], **info: Any) -> None:
        super().__init__()
        self.lines = lines
        self.info = info

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield StartupPanel(id="panel")
            yield LogView(5000, id="log")

    def on_mount(self) -> None:
        reader = StartupReader(year=2026)
        for line in self.lines:
            reader.feed_line(line)
        state = reader.state
        now = state.last_line_at + timedelta(seconds=5) if state.last_line_at else None
        self.query_one("#panel", StartupPanel).show(PanelInfo(state=state, now=now, **self.info))
        self.query_one("#log", LogView).write_lines(self.lines)


CONNECTED = TailStatus("connected", container_id="4f1c0ffee", message="following container vllm (4f1c0ffee000)")


def test_panel_mid_compile(snap_compare: Any) -> None:
    lines = read_lines(FIXTURES / f"{READY}.log")[:600]
    app = StartupWidgetsApp(lines, status=CONNECTED, compile_eta_s=420.0, history_known=True)
    assert snap_compare(app, terminal_size=(160, 45))


def test_panel_ready(snap_compare: Any) -> None:
    lines = read_lines(FIXTURES / f"{READY}.log")
    app = StartupWidgetsApp(lines, status=CONNECTED, tunnel_url="http://127.0.0.1:18000",
                            served_models=("google/gemma-4-E2B-it",))
    assert snap_compare(app, terminal_size=(160, 45))


def test_panel_failed(snap_compare: Any) -> None:
    lines = read_lines(FIXTURES / f"{KV_OOM}.log")
    status = TailStatus("exited", container_id="4f1c0ffee", exit_code=1, message="container vllm exited with code 1")
    app = StartupWidgetsApp(lines, status=status)
    assert snap_compare(app, terminal_size=(160, 45))
