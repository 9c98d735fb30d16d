"""The error screen: an unexpected failure's traceback, shown as text, with a way back."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from remote.printable import printable


class ErrorScreen(ModalScreen[None]):
    """A bug's traceback: what failed, the traceback (plain text, never markup), Escape closes.

    Args:
        title: one line saying what failed (``"worker _load failed"``).
        traceback_text: the formatted traceback ("" for none: a known failure, not a bug).
        advice: the line under the title; default: this is a bug, the traceback is in the log.
    """

    DEFAULT_CSS = """
    ErrorScreen { align: center middle; }
    ErrorScreen > Vertical { width: 90%; height: 80%; border: thick $error; background: $surface;
                             padding: 0 1; }
    ErrorScreen #error-title { text-style: bold; color: $error; }
    ErrorScreen VerticalScroll { height: 1fr; }
    """
    BINDINGS = [Binding("escape", "close", "Close", id="error_close")]

    def __init__(self, title: str, traceback_text: str, *, advice: str | None = None) -> None:
        super().__init__()
        self.error_title = title
        self.traceback_text = traceback_text
        self.advice = advice or ("This is a bug in tpu-console; the traceback is also in the log. "
                                 "The console carries on. Escape closes.")

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Content(printable(self.error_title)), id="error-title")
            yield Static(Content(printable(self.advice)), id="error-advice")
            if self.traceback_text:
                with VerticalScroll():
                    yield Static(Content(printable(self.traceback_text, keep_newlines=True)), id="error-traceback")

    def action_close(self) -> None:
        """Back to the screen that was open."""
        self.dismiss(None)
