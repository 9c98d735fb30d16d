"""Actions in flight, so that quitting asks first and says what state each node is left in.

A use case that changes a node (a swap, a rollback, a request being submitted, a delete) registers
itself here while its remote steps run and keeps :attr:`RunningAction.state` up to date with one
sentence about the node ("the old container is removed: no container runs on vllm-flex-b until
docker run finishes"). The console's quit asks while :meth:`RunningActions.active` is not empty;
a confirmed quit calls :meth:`RunningActions.abandon_all`, which lets each action record that it
was interrupted (the history then says so instead of a launch that never ends).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class RunningAction:
    """One action in flight.

    Attributes:
        what: ``swap on vllm-flex-b``.
        state: the node's state now, one sentence.
        on_abandon: called once when the console quits while the action runs (records the interruption).
    """

    what: str
    state: str
    on_abandon: Callable[[], None] | None = None


@dataclass
class RunningActions:
    """The console's actions in flight (one per use case run)."""

    _active: list[RunningAction] = field(default_factory=list)

    def begin(self, what: str, state: str, on_abandon: Callable[[], None] | None = None) -> RunningAction:
        """Register an action; :meth:`end` it when its last remote step returned."""
        action = RunningAction(what, state, on_abandon)
        self._active.append(action)
        return action

    def end(self, action: RunningAction) -> None:
        """The action finished (or failed): quitting no longer asks about it."""
        if action in self._active:
            self._active.remove(action)

    def active(self) -> list[RunningAction]:
        """The actions in flight, oldest first."""
        return list(self._active)

    def describe(self) -> list[str]:
        """``swap on vllm-flex-b: <state>`` for each action in flight."""
        return [f"{a.what}: {a.state}" for a in self._active]

    def abandon_all(self) -> None:
        """The console quits anyway: each action records that it was interrupted (once)."""
        for action in self.active():
            callback, action.on_abandon = action.on_abandon, None
            if callback is not None:
                callback()
            self.end(action)


@contextmanager
def tracked(actions: RunningActions | None, what: str, state: str,
            on_abandon: Callable[[], None] | None = None) -> Iterator[RunningAction | None]:
    """``with tracked(actions, "delete of qr-x", "the delete call runs"):`` registers the action for
    the block (nothing without ``actions``) and ends it however the block ends."""
    action = actions.begin(what, state, on_abandon) if actions is not None else None
    try:
        yield action
    finally:
        if action is not None and actions is not None:
            actions.end(action)
