"""The base of the console's full screens: typed access to the app and one route for worker failures.

Every full screen of the console derives from :class:`ConsoleScreen`. Its workers catch only
the project's own errors (``remote.errors.RemoteError``, ``store.StoreError``) and turn them
into sentences; anything else a worker raises is a bug, and reaches
:meth:`console.app.TpuConsoleApp.report_unexpected` here, which logs its traceback and shows
it in an error screen, never a crash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import events
from textual.binding import Binding
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer
from textual.worker import Worker, WorkerState

from console.services import Services

if TYPE_CHECKING:
    from console.app import TpuConsoleApp
    from remote.models import Node, QueuedResource


#: Below this many columns the footer is compact (no padding around each key), so more keys fit.
COMPACT_FOOTER_BELOW = 120


class ConsoleScreen(Screen[None]):
    """A full screen of tpu-console (fleet, startup watch, swap, benchmark, history).

    ``READONLY_ACTIONS`` maps the screen's actions that change the fleet to the policy's action
    (:data:`console.flows.policy.FLEET_CHANGING_ACTIONS`): in read-only mode they are hidden (footer,
    palette, help) and a press of their key says why instead of doing nothing. The use cases refuse
    them too, so a door that forgets this still cannot act.
    """

    READONLY_ACTIONS: dict[str, str] = {}

    #: Tab and shift+tab move the focus as the key arrives. As an ordinary binding, the key first went
    #: to the focused field's queue and bubbled back, and the keys typed right after it (a fast typist,
    #: a paste through tmux) reached the field being left: "demo<tab>v6e-1" put "v" in the wrong field.
    BINDINGS = [
        Binding("tab", "app.focus_next", "Next field", show=False, priority=True, id="focus_next"),
        Binding("shift+tab", "app.focus_previous", "Previous field", show=False, priority=True,
                id="focus_previous"),
    ]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Read-only mode hides (and refuses) the actions in ``READONLY_ACTIONS``."""
        return not (action in self.READONLY_ACTIONS and self.console.readonly)

    async def on_key(self, event: events.Key) -> None:
        """A key of a hidden read-only action says why it does nothing (the policy's sentence)."""
        if not self.console.readonly or not self.READONLY_ACTIONS:
            return
        for binding in self._bindings.key_to_bindings.get(event.key, ()):
            action = self.READONLY_ACTIONS.get(binding.action)
            if action is not None:
                event.stop()
                event.prevent_default()
                self.console.refuse_readonly(action)
                return

    def on_resize(self, event: events.Resize) -> None:
        """A laptop-sized terminal gets the compact footer (``COMPACT_FOOTER_BELOW``)."""
        for footer in self.query(Footer):
            footer.compact = event.size.width < COMPACT_FOOTER_BELOW

    @property
    def console(self) -> TpuConsoleApp:
        """The running :class:`~console.app.TpuConsoleApp`.

        Raises:
            TypeError: the screen runs in some other app (a programming error).
        """
        from console.app import TpuConsoleApp

        app = self.app
        if not isinstance(app, TpuConsoleApp):
            raise TypeError(f"{type(self).__name__} needs a TpuConsoleApp, not {type(app).__name__}")
        return app

    @property
    def services(self) -> Services:
        """The app's collaborators (config, fleet source, history, clock)."""
        return self.console.services

    def open_feature(self, name: str, node: Node | QueuedResource | None) -> None:
        """Open the view ``name`` (``startup``, ``swap``, ``rollback``, ``bench``, ``history``) for ``node``."""
        self.console.open_feature(name, node)

    def copy(self, what: str, text: str) -> None:
        """Copy ``text`` to the terminal's clipboard (OSC 52, :meth:`textual.app.App.copy_to_clipboard`)
        and say in a toast what was copied (``what``: "the row's JSON", "the commands"...)."""
        self.app.copy_to_clipboard(text)
        self.app.notify(f"Copied {what} ({len(text)} characters) to the clipboard (OSC 52).", title="Copied")

    async def ask(self, question: ModalScreen[bool]) -> bool:
        """Show a yes/no modal (a confirm, a host-key question) from a worker and wait for the answer."""
        answer: bool | None = await self.app.push_screen_wait(question)
        return bool(answer)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A worker that raised something other than the project's errors: the app reports it."""
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            self.console.report_unexpected(event.worker.name or "worker", event.worker.error)
