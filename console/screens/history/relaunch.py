"""Relaunch a recorded launch: the swap form, on its node, starting from that launch's spec.

Like the rollback view, the node is still read over SSH so the diff and the commands are
taken against what runs now. The history stored secrets masked: a masked env value is
taken from the running container when it has the same variable; otherwise it stays
``***`` and the form refuses to swap until the operator types it again.
"""

from __future__ import annotations

from collections.abc import Iterable

from console.flows import swap as swap_flow
from console.flows.history_access import HistoryAccess
from console.flows.swap_case import SwapCase
from console.render.history_detail import masked_secrets
from console.screens.swap.screen import SwapScreen
from remote.container.spec import MASK, ContainerSpec
from remote.models import Node
from store.records import Launch


def find_node(nodes: Iterable[Node], launch: Launch) -> Node | None:
    """The fleet node ``launch`` ran on: same project, zone and name; for a launch recorded
    without project or zone, the one node of that name. ``None`` when it is gone."""
    nodes = list(nodes)
    node = next((n for n in nodes if n.key == (launch.project, launch.zone, launch.node)), None)
    if node is None and (launch.project is None or launch.zone is None):
        same = [n for n in nodes if n.name == launch.node]
        node = same[0] if len(same) == 1 else None
    return node


class RelaunchScreen(SwapScreen):
    """The swap form of ``node`` filled with ``launch``'s container spec.

    Args:
        node: the node the launch ran on (resolved from the fleet).
        launch: the recorded launch (its ``container_spec`` and ``serve_args``).

    Raises:
        ValueError: the launch recorded no usable container spec (checked up front).
    """

    def __init__(self, node: Node, launch: Launch) -> None:
        super().__init__(node)
        self.launch = launch
        swap_flow.spec_from_launch(launch, None)  # a sentence now rather than after connecting

    def make_case(self, history: HistoryAccess) -> SwapCase:
        """The relaunch use case (raises ``ReadOnlyRefused`` in read-only mode)."""
        services = self.services
        return SwapCase(self.node, services.config, services.config.container, history, mode="relaunch",
                        launch=self.launch, actions=services.actions, clock=services.clock)

    def _ready(self, spec: ContainerSpec) -> None:
        if masked_secrets(self.launch) and "Secrets were masked" not in self.note:
            self.note += " Secrets were masked in the history: type any still shown as ***."
        super()._ready(spec)
        # A value still masked is not a secret we know: drop it so the form asks for it.
        known: dict[str, str] = self.secrets
        self.secrets = {k: v for k, v in known.items() if v != MASK}
        if self.secrets != known:
            self.recompute()
