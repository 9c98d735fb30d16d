"""The help screen: every binding of the app and of the screen underneath, by id."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static


def bindings_table(title: str, bindings: list[Binding]) -> Table:
    """A Rich table of ``bindings``: key, action description and the id used for remapping."""
    table = Table(title=title, title_justify="left", expand=True, show_edge=False)
    table.add_column("key", style="bold cyan", no_wrap=True)
    table.add_column("action")
    table.add_column(Text("id (for [keys] in the config)"), style="dim")
    for b in bindings:
        key = b.key_display or b.key
        table.add_row(key, b.description or b.action, b.id or "-")
    return table


def _bindings_of(obj: object) -> list[Binding]:
    result = []
    for b in getattr(obj, "BINDINGS", []):
        if isinstance(b, Binding):
            result.append(b)
        else:
            key, action, *rest = b
            result.append(Binding(key, action, rest[0] if rest else ""))
    return result


class HelpScreen(ModalScreen[None]):
    """Modal list of bindings; ``escape``, ``q`` or ``?`` closes it."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close", id="help_close"),
        Binding("q", "dismiss", "Close", show=False),
        Binding("question_mark", "dismiss", "Close", show=False),
    ]

    def __init__(self, under: Screen[object]) -> None:
        super().__init__()
        self.under = under

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(bindings_table(f"{type(self.under).__name__.removesuffix('Screen')} keys",
                                        _bindings_of(self.under)))
            yield Static(bindings_table("Everywhere", _bindings_of(self.app)))
            yield Static(Text("ctrl+p opens the command palette: every action above is there too.\n"
                              "Remap keys in the config:  [keys]  refresh = \"ctrl+r\""), classes="dim")

    def action_dismiss(self) -> None:  # type: ignore[override]
        """Close the help screen."""
        self.dismiss()
