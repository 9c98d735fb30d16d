"""The forwards view: every forward to vLLM the console holds (``F``, or ``:forwards``).

One row per forward of the app's :class:`console.flows.forwards.ForwardRegistry`: the node, the
local URL, the state (``open``, ``open, target down: Connection refused`` while the node refuses the
forward's port (the container behind it is gone), ``reconnecting (attempt N): REASON``, ``failed:
REASON``) and the TCP connections accepted on its local port (``12 (3 failed)``: those the node
refused). Forwards outlive the screen that opened them (the
startup view, or ``f`` on a fleet row); this is where they are closed.

Keys (ids in brackets): ``x`` close the selected forward [forward_close] (no confirm: closing a
tunnel loses nothing; the toast says the port is free), ``y`` copy its URL (OSC 52)
[forward_copy], ``escape`` back [back].
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from console.flows.forwards import Forward
from console.render.plain import plain, row
from console.screens.base import ConsoleScreen
from console.widgets.footer import ConsoleFooter
from console.widgets.header import ConsoleHeader

if TYPE_CHECKING:
    from console.flows.workload_forward import WorkloadForward
    from remote.models import Node

#: The columns of the forwards table.
COLUMNS = ("NODE", "LOCAL URL", "STATE", "CONNECTIONS", "REMOTE PORT")
#: Seconds between two refreshes of the states (reconnect attempts change them).
REFRESH_S = 0.5

_STATE_STYLE = {"open": "green", "reconnecting": "yellow", "failed": "bold red", "opening": "dim"}


class ForwardsScreen(ConsoleScreen):
    """The list of the console's forwards, with close and copy URL."""

    BINDINGS = [
        Binding("x", "close_forward", "Close forward", id="forward_close"),
        Binding("y", "copy_url", "Copy URL", id="forward_copy"),
        Binding("escape", "back", "Back", id="back"),
    ]

    def __init__(self, node: Node | None = None) -> None:
        super().__init__()
        self.node = node                # the node it was opened for (its row is selected), or None
        self._shown: list[tuple[Any, ...]] = []
        self._keys: list[tuple[str, str, str]] = []

    def compose(self) -> ComposeResult:
        yield ConsoleHeader()
        yield Static("", id="forwards-empty")
        yield DataTable(id="forwards", cursor_type="row", zebra_stripes=True)
        yield ConsoleFooter()

    def on_mount(self) -> None:
        table = self.query_one("#forwards", DataTable)
        table.add_columns(*COLUMNS)
        self._show_rows()
        if self.node is not None and self.node.key in self._keys:
            table.move_cursor(row=self._keys.index(self.node.key))
        table.focus()
        self.set_interval(REFRESH_S, self._show_rows)

    def _show_rows(self) -> None:
        forwards = self.services.forwards.forwards
        shown = [(key, f.describe(), f.connections, f.failed_connections) for key, f in forwards.items()]
        if shown == self._shown:
            return
        self._shown = shown
        table = self.query_one("#forwards", DataTable)
        cursor = table.cursor_row
        table.clear()
        self._keys = list(forwards)
        for key, forward in forwards.items():
            style = "bold red" if forward.target_down is not None else _STATE_STYLE.get(forward.state, "")
            failed = f" ({forward.failed_connections} failed)" if forward.failed_connections else ""
            table.add_row(*row(forward.node_name, forward.url, plain(forward.describe(), style=style),
                               f"{forward.connections}{failed}", str(forward.container_port)), key="/".join(key))
        if self._keys:
            table.move_cursor(row=min(cursor, len(self._keys) - 1))
        empty = self.query_one("#forwards-empty", Static)
        empty.update("No forwards. Open one with f on a READY fleet row, or from a node's startup view once "
                     "it is ready." if not self._keys else
                     f"{len(self._keys)} forward{'s' if len(self._keys) != 1 else ''}: they stay open when "
                     "you leave a view; x closes one.")
        self.sub_title = f"forwards · {len(self.services.forwards.live())} open"

    def selected_forward(self) -> tuple[tuple[str, str, str], Forward | WorkloadForward] | None:
        """The selected row's ``(node key, forward)``, or ``None`` when the list is empty."""
        table = self.query_one("#forwards", DataTable)
        if not self._keys:
            return None
        key = self._keys[min(table.cursor_row, len(self._keys) - 1)]
        forward = self.services.forwards.get(key)
        return (key, forward) if forward is not None else None

    def action_close_forward(self) -> None:
        """Close the selected forward (its local port is free after; the node keeps the port number)."""
        selected = self.selected_forward()
        if selected is None:
            self.app.notify("No forward to close.", severity="warning")
            return
        key, forward = selected
        self.services.forwards.close(key)
        self.app.notify(f"Closed the forward {forward.url} -> {forward.node_name} port {forward.container_port}; "
                        f"nothing else changed (the node keeps port {forward.local_port} if reopened).",
                        title="Forward closed")
        self._show_rows()

    def action_copy_url(self) -> None:
        """Copy the selected forward's URL (the OpenAI base URL) to the clipboard (OSC 52)."""
        selected = self.selected_forward()
        if selected is None:
            self.app.notify("No forward to copy.", severity="warning")
            return
        self.copy(f"the forward's URL {selected[1].url}", selected[1].url)

    def action_back(self) -> None:
        """Go back to the view underneath."""
        self.app.pop_screen()
