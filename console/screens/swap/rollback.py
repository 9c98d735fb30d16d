"""Roll back a node's container: the swap preview and confirm, for the spec the last swap replaced."""

from __future__ import annotations

from textual.binding import Binding

from console.flows import swap as swap_flow
from console.screens.swap.screen import SwapScreen
from remote.container.spec import ContainerSpec
from store.errors import StoreError


class RollbackScreen(SwapScreen):
    """The swap preview and confirm for the spec the last swap on ``node`` replaced.

    The spec comes from ``services.previous_specs`` (this session) or, after a restart, from
    the history (the launch the running container replaced, else the newest other launch of
    the node; masked secrets are taken from the running container). Says so when there is
    nothing to roll back to.
    """

    MODE = "rollback"
    BINDINGS = [Binding("ctrl+s", "swap_confirm", "Roll back…", id="swap_confirm")]

    async def _target_spec(self, current: swap_flow.RunningSpec) -> ContainerSpec | None:
        previous = self.services.previous_specs.get(self.node.key)
        source = "the spec this session's last swap replaced"
        if previous is None:
            found = None
            try:
                found = swap_flow.previous_from_history(self._store(), self.node, current)
            except StoreError as exc:   # an unreadable history means nothing to roll back to
                self.app.notify(f"History unreadable: {exc}", severity="warning")
            if found is not None:
                previous, launch = found
                source = f"launch {launch.id} from the history ({launch.requested_at[:16].replace('T', ' ')} UTC)"
        if previous is None:
            self._show_problem(f"Nothing to roll back to on {self.node.name}: no swap was made on it in this "
                               "session and the history has no earlier launch of it with a container spec.")
            return None
        self.note = f"Rolling back to {source}."
        return previous.pinned()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """No "Rollback" key here: this is the rollback view."""
        return action != "rollback"
