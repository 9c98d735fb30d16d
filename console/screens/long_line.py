"""A log line shown whole: the pane cuts lines at 2,000 characters ("… +N chars"); ``e`` opens
the last cut line (at or above the pane's bottom row) here, wrapped, as literal text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from console.render.plain import plain


class LongLineScreen(ModalScreen[None]):
    """Modal with one whole log line; ``y`` copies it, ``p`` copies the log file's path.

    Args:
        text: the whole line (already masked of secrets; shown through :func:`plain`).
        log_path: the launch's full log on disk, or ``None`` when none is kept.
        copy: ``(what, text) -> None``, the screen's OSC 52 copy (``ConsoleScreen.copy``).
    """

    BINDINGS = [
        Binding("escape", "close", "Close", id="line_close"),
        Binding("y", "copy_line", "Copy line", id="line_copy"),
        Binding("p", "copy_path", "Copy log path", id="line_copy_path"),
    ]

    def __init__(self, text: str, log_path: Path | None, copy: Callable[[str, str], None]) -> None:
        super().__init__()
        self.text = text
        self.log_path = log_path
        self._copy = copy

    def compose(self) -> ComposeResult:
        where = f"the whole log: {self.log_path}" if self.log_path is not None else "no log kept on disk"
        with VerticalScroll(id="line-box"):
            yield Static(plain(f"{len(self.text):,} characters · {where}", "bold"), id="line-head")
            yield Static(Text(plain(self.text).plain, overflow="fold"), id="line-text")

    def action_close(self) -> None:
        """Close the line."""
        self.dismiss()

    def action_copy_line(self) -> None:
        """Copy the whole line (OSC 52)."""
        self._copy("the whole line", self.text)

    def action_copy_path(self) -> None:
        """Copy the log file's path (open or export it from there)."""
        if self.log_path is None:
            self.app.notify("No log is kept on disk for this view.", title="No log file")
            return
        self._copy("the log file's path", str(self.log_path))
