"""Roll back a node's container: the swap preview and confirm, for the spec the last swap replaced."""

from __future__ import annotations

from textual.binding import Binding

from console.flows.history_access import HistoryAccess
from console.flows.swap_case import SwapCase
from console.screens.swap.screen import SwapScreen


class RollbackScreen(SwapScreen):
    """The swap preview and confirm for the spec the last swap on ``node`` replaced.

    The use case (:class:`console.flows.swap_case.SwapCase` in ``rollback`` mode) takes the spec
    from ``services.previous_specs`` (this session) or, after a restart, from the history (the
    launch the running container replaced, else the newest other launch of the node; masked secrets
    are taken from the running container), and says so when there is nothing to roll back to.
    """

    MODE = "rollback"
    BINDINGS = [Binding("ctrl+s", "swap_confirm", "Roll back…", id="swap_confirm")]

    def make_case(self, history: HistoryAccess) -> SwapCase:
        """The rollback use case (raises ``ReadOnlyRefused`` in read-only mode)."""
        services = self.services
        return SwapCase(self.node, services.config, services.config.container, history, mode="rollback",
                        previous=services.previous_specs.get(self.node.key), actions=services.actions,
                        clock=services.clock)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """No "Rollback" key here: this is the rollback view."""
        if action == "rollback":
            return False
        return super().check_action(action, parameters)
