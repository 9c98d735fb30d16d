"""``:`` command mode, as in k9s: jump to a view, or to a node by name, with completion.

Commands (:func:`parse_command`): ``fleet``, ``history``, ``request``, ``forwards``, ``help``, ``quit``;
``node NAME`` (or just ``NAME``) selects the node in the fleet; ``startup NAME`` (``watch``),
``swap NAME``, ``rollback NAME``, ``bench NAME`` and ``history NAME`` open that view of the node.
``tab`` completes (the first candidate that starts with what was typed, shown greyed as you
type), ``enter`` runs, ``escape`` closes. :class:`CommandScreen` dismisses with the text typed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Input, Static

from console.render.plain import printable

#: Views that need no node.
VIEWS = ("fleet", "history", "request", "forwards", "help", "quit")
#: Views of one node: command word -> feature name (:data:`console.app.FEATURES`, ``node`` = the fleet row).
NODE_VIEWS = {"node": "node", "startup": "startup", "watch": "startup", "swap": "swap",
              "rollback": "rollback", "bench": "bench", "history": "history"}


@dataclass(frozen=True)
class Command:
    """A parsed command: ``view`` (``fleet``, ``node``, ``startup``...) and the node name or ``None``."""

    view: str
    node: str | None = None


def candidates(node_names: Sequence[str]) -> list[str]:
    """Every completion, views first: ``fleet``..., then ``node NAME``, ``bench NAME``... per node."""
    result = list(VIEWS)
    for word in NODE_VIEWS:
        result.extend(f"{word} {name}" for name in node_names)
    return result


def parse_command(text: str, node_names: Sequence[str]) -> Command:
    """Parse what was typed after ``:`` (case-insensitive words, node names as listed).

    Raises:
        ValueError: an unknown command or node; the message says what is known.
    """
    words = text.strip().removeprefix(":").split()
    if not words:
        raise ValueError("Type a view (fleet, history, request, forwards, help, quit) or node NAME, bench NAME…")
    head = words[0].lower()
    if len(words) == 1 and head in VIEWS:
        return Command(head)
    if len(words) == 1 and words[0] in node_names:
        return Command("node", words[0])
    if head not in NODE_VIEWS:
        raise ValueError(f"Unknown command {words[0]!r}: try {', '.join(VIEWS)}, or "
                         f"{', '.join(w + ' NAME' for w in NODE_VIEWS)}")
    if len(words) != 2:
        raise ValueError(f"{head} takes one node name: {head} NAME")
    if words[1] not in node_names:
        raise ValueError(f"No node named {words[1]!r} in the fleet")
    return Command(NODE_VIEWS[head], words[1])


def complete(text: str, options: Sequence[str]) -> str:
    """``tab``: the first option that starts with ``text`` (case-insensitive), else ``text``."""
    lowered = text.lower()
    return next((o for o in options if o.lower().startswith(lowered) and o != text), text)


class CommandScreen(ModalScreen[str | None]):
    """The ``:`` prompt at the bottom of the screen, with the matching commands above it."""

    DEFAULT_CSS = """
    CommandScreen {
        align: left bottom;
    }
    #command-box {
        height: auto;
        max-height: 14;
        background: $surface;
        border-top: solid $primary;
    }
    #command-matches {
        height: auto;
        max-height: 10;
        padding: 0 1;
        color: $text-muted;
    }
    """

    BINDINGS = [
        Binding("escape", "close", "Close", id="command_close"),
        Binding("tab", "complete", "Complete", id="command_complete"),
    ]

    def __init__(self, options: Sequence[str]) -> None:
        super().__init__()
        self.options = list(options)

    def compose(self) -> ComposeResult:
        with Vertical(id="command-box"):
            yield Static("", id="command-matches")
            yield Input(placeholder=":fleet  :history  :node NAME  :bench NAME  (tab completes)", id="command",
                        suggester=SuggestFromList(self.options, case_sensitive=False))

    def on_mount(self) -> None:
        self.query_one("#command", Input).focus()
        self._show_matches("")

    def _show_matches(self, text: str) -> None:
        lowered = text.lower()
        matches = [o for o in self.options if o.lower().startswith(lowered)] if text else list(self.options)
        shown = matches[:8]
        more = f"\n… {len(matches) - len(shown)} more" if len(matches) > len(shown) else ""
        self.query_one("#command-matches", Static).update(
            Text(printable("\n".join(shown)) + more) if matches else Text("no match", style="dim"))

    @on(Input.Changed, "#command")
    def _changed(self, event: Input.Changed) -> None:
        self._show_matches(event.value)

    @on(Input.Submitted, "#command")
    def _submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_complete(self) -> None:
        """Complete to the first matching command."""
        box = self.query_one("#command", Input)
        box.value = complete(box.value, self.options)
        box.cursor_position = len(box.value)

    def action_close(self) -> None:
        """Close without running anything."""
        self.dismiss(None)
