"""A confirm modal that shows exactly what will run, before anything destructive runs.

:class:`ConfirmScreen` dismisses with ``True`` (confirmed) or ``False``. Commands are shown
as given (callers pass masked command lines) and never interpreted as markup. With
``require_text`` the confirm button stays disabled until the operator types that text
(used when the lint found errors: the operator types the node name to go ahead).
:func:`host_key_question` builds the one question every screen asks about an unknown SSH host key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from console.render.plain import plain, printable

if TYPE_CHECKING:
    from remote.ssh import SshTarget


class ConfirmScreen(ModalScreen[bool]):
    """Ask before a destructive action, showing the exact commands.

    Args:
        title: one line, e.g. ``Replace the container on vllm-v5e-a?``.
        message: what happens, in a sentence or two.
        commands: command lines to show, numbered, in order (already masked).
        confirm_label: the confirm button's label (``Swap``, ``Roll back``, ``Accept``).
        cancel_label: the cancel button's label (``Cancel``, ``Refuse``, ``Keep running``).
        require_text: text the operator must type before confirming, or ``None``.
    """

    DEFAULT_CSS = """
    ConfirmScreen {
        align: center middle;
    }
    #confirm-box {
        width: 90%;
        max-width: 140;
        height: auto;
        max-height: 90%;
        background: $surface;
        border: thick $error 70%;
        padding: 1 2;
    }
    #confirm-title {
        text-style: bold;
        color: $text-error;
        width: 100%;
        margin-bottom: 1;
    }
    #confirm-commands {
        background: $panel;
        padding: 0 1;
        margin: 1 0;
        height: auto;
    }
    #confirm-typed {
        margin-bottom: 1;
    }
    #confirm-wrong {
        color: $text-error;
        text-style: bold;
        display: none;
    }
    #confirm-buttons {
        height: auto;
        align-horizontal: right;
    }
    #confirm-buttons Button {
        margin-left: 2;
    }
    """

    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="confirm_cancel"),
        Binding("n", "cancel", "No", show=False),
        Binding("y", "confirm", "Yes", id="confirm_yes"),
    ]

    def __init__(self, title: str, message: str, commands: Sequence[str] = (), *,
                 confirm_label: str = "Confirm", cancel_label: str = "Cancel",
                 require_text: str | None = None) -> None:
        super().__init__()
        self.title_text = title
        self.message = message
        self.commands = list(commands)
        self.confirm_label = confirm_label
        self.cancel_label = cancel_label
        self.require_text = require_text

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="confirm-box"):   # a short terminal scrolls it; the focused box stays in view
            yield Label(plain(self.title_text), id="confirm-title")
            # the callers compose the message's lines; the values in them are printable already
            yield Static(Text(printable(self.message, keep_newlines=True)), id="confirm-message")
            if self.commands:
                from console.render.swap_preview import numbered  # (asyncssh: not before the first frame)

                yield Static(numbered(self.commands), id="confirm-commands")
            if self.require_text:
                yield Input(placeholder=printable(f"type {self.require_text} to go ahead"), id="confirm-typed")
                yield Static("", id="confirm-wrong")
            with Horizontal(id="confirm-buttons"):
                # with a name to type, y and n are letters of the name: Enter confirms, Escape cancels
                typed = self.require_text is not None
                yield Button(f"{self.cancel_label} ({'esc' if typed else 'n'})", id="confirm-no")
                yield Button(f"{self.confirm_label} ({'enter' if typed else 'y'})", id="confirm-yes",
                             variant="error", disabled=typed)

    def on_mount(self) -> None:
        if self.require_text:
            self.query_one("#confirm-typed", Input).focus()
        else:
            self.query_one("#confirm-no", Button).focus()

    @property
    def allowed(self) -> bool:
        """Whether confirming is allowed now (the required text, if any, was typed)."""
        if self.require_text is None:
            return True
        return self.query_one("#confirm-typed", Input).value.strip() == self.require_text

    @on(Input.Changed, "#confirm-typed")
    def _typed(self) -> None:
        self.query_one("#confirm-yes", Button).disabled = not self.allowed
        self.query_one("#confirm-wrong", Static).display = False

    @on(Input.Submitted, "#confirm-typed")
    def _typed_enter(self) -> None:
        self.action_confirm()

    @on(Button.Pressed, "#confirm-yes")
    def _yes(self) -> None:
        self.action_confirm()

    @on(Button.Pressed, "#confirm-no")
    def _no(self) -> None:
        self.action_cancel()

    def action_confirm(self) -> None:
        """Confirm (only once the required text was typed)."""
        if self.allowed:
            self.dismiss(True)
        else:
            self.app.bell()
            if self.require_text is not None:
                typed = self.query_one("#confirm-typed", Input).value.strip()
                said = (f"✗ {typed!r} is not {self.require_text}: type the name exactly to go ahead, Escape cancels."
                        if typed else f"✗ Type {self.require_text} to go ahead, Escape cancels.")
                wrong = self.query_one("#confirm-wrong", Static)
                wrong.update(Text(printable(said)))
                wrong.display = True
                self.notify(printable(said), severity="warning", markup=False)

    def action_cancel(self) -> None:
        """Close without doing anything."""
        self.dismiss(False)


def host_key_question(target: SshTarget, fingerprint: str) -> ConfirmScreen:
    """The modal asking whether to trust a host key seen for the first time.

    Args:
        target: the ``remote.ssh.SshTarget`` connected to (its label, known-hosts alias and file).
        fingerprint: the key's ``SHA256:...`` fingerprint.

    Returns:
        A :class:`ConfirmScreen`: ``True`` accepts the key once (it is recorded in the known-hosts
        file), ``False`` refuses and does not connect.
    """
    return ConfirmScreen(
        "Unknown host key",
        printable(f"{target.label} presented an unknown host key {fingerprint} (host key alias "
                  f"{target.known_hosts_name}). Accept it once to record it in {target.known_hosts} and "
                  f"connect; refusing does not connect."),
        confirm_label="Accept", cancel_label="Refuse")
