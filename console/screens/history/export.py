"""Export the history pane's rows: a small modal asking for the file, and the writer.

The format follows the file name: ``.json`` (each launch with its benchmarks nested, the
``history --json`` shape) or ``.csv`` (one row per launch). A relative name is taken from
the current directory; an existing file is never overwritten.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from console.render.plain import plain
from store.records import Launch

if TYPE_CHECKING:
    from store.history import HistoryStore


def default_export_name(now: datetime) -> str:
    """``tpu-console-history-20261130-120000.json`` for ``now``."""
    return f"tpu-console-history-{now:%Y%m%d-%H%M%S}.json"


def export_target(text: str, cwd: Path | None = None) -> tuple[Path, str]:
    """The file and format (``json``/``csv``) for a typed name.

    Raises:
        ValueError: empty name, a suffix other than ``.json``/``.csv``, a missing folder or
            an existing file, as a sentence.
    """
    name = text.strip()
    if not name:
        raise ValueError("Type a file name ending in .json or .csv.")
    path = Path(name).expanduser()
    if not path.is_absolute():
        path = (cwd or Path.cwd()) / path
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in ("json", "csv"):
        raise ValueError(f"{path.name}: end the name in .json or .csv to choose the format.")
    if not path.parent.is_dir():
        raise ValueError(f"{path.parent} is not a folder.")
    if path.exists():
        raise ValueError(f"{path} already exists; choose another name (nothing is overwritten).")
    return path, fmt


def write_export(store: HistoryStore, launches: Sequence[Launch], path: Path, fmt: str) -> int:
    """Write ``launches`` to a new file ``path`` as ``fmt``; returns the bytes written.

    Raises:
        FileExistsError: ``path`` appeared meanwhile. OSError: it cannot be written.
    """
    text = store.export(launches, fmt)
    with path.open("x", encoding="utf-8", newline="") as out:
        out.write(text if text.endswith("\n") else text + "\n")
    return path.stat().st_size


class ExportScreen(ModalScreen["tuple[Path, str] | None"]):
    """Ask where to export; dismisses with ``(path, format)`` or ``None``.

    Args:
        count: how many launches are exported (shown in the title).
        default: the proposed file name.
        cwd: folder for relative names (default: the current directory).
    """

    CSS_PATH = "history.tcss"
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="export_cancel")]

    def __init__(self, count: int, default: str, cwd: Path | None = None) -> None:
        super().__init__()
        self.count = count
        self.default = default
        self.cwd = cwd

    def compose(self) -> ComposeResult:
        with Vertical(id="export-box"):
            yield Label(f"Export the {self.count} launches shown", id="export-title")
            yield Input(self.default, id="export-path")
            yield Static(".json: launches with their benchmarks nested · .csv: one row per launch\n"
                         f"Relative names go in {self.cwd or Path.cwd()}. Enter saves, Esc cancels.",
                         classes="dim")
            yield Static("", id="export-error")

    def on_mount(self) -> None:
        self.query_one("#export-path", Input).focus()

    @on(Input.Submitted, "#export-path")
    def _submitted(self, event: Input.Submitted) -> None:
        try:
            target = export_target(event.value, self.cwd)
        except ValueError as exc:
            self.query_one("#export-error", Static).update(plain(exc))
            return
        self.dismiss(target)

    def action_cancel(self) -> None:
        """Close without exporting."""
        self.dismiss(None)
