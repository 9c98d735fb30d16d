"""The console's policy, in one place for every door (keys, palette, command mode, relaunch, CLI verbs).

Read-only mode (``--readonly`` or ``readonly = true``) refuses every action that changes the fleet,
whatever door it comes through: each use-case object in ``console.flows`` calls
:func:`refuse_in_readonly` when it is made and again right before its first remote step, so a
screen or a verb that forgot to check cannot act. The screens also hide the keys (and say why
when one is pressed); the verbs exit 1 with :func:`readonly_sentence`.
"""

from __future__ import annotations

from typing import Protocol

#: Every action that changes the fleet (the use cases' names; the keys and verbs map onto them).
FLEET_CHANGING_ACTIONS = frozenset({"swap", "rollback", "relaunch", "request", "delete", "probe"})


class HasReadonly(Protocol):
    """What the policy reads of the config (``console.config.Config``)."""

    @property
    def readonly(self) -> bool: ...


class ReadOnlyRefused(Exception):
    """A fleet-changing action asked for in read-only mode; ``str()`` is the sentence to show.

    Attributes:
        action: the refused action (one of :data:`FLEET_CHANGING_ACTIONS`).
    """

    def __init__(self, action: str, where: str) -> None:
        self.action = action
        super().__init__(readonly_sentence(action, where))


def readonly_sentence(action: str, where: str = "the config") -> str:
    """``swap changes the fleet and read-only mode is on (...); nothing was changed.``"""
    return (f"{action} changes the fleet and read-only mode is on (--readonly or readonly = true in "
            f"{where}); nothing was changed.")


def refuse_in_readonly(config: HasReadonly, action: str, *, where: str = "the config") -> None:
    """Raise :class:`ReadOnlyRefused` when ``config.readonly`` and ``action`` changes the fleet.

    Raises:
        ReadOnlyRefused: read-only mode is on and ``action`` is in :data:`FLEET_CHANGING_ACTIONS`.
        ValueError: ``action`` is not a known action (a programming error).
    """
    if action not in FLEET_CHANGING_ACTIONS:
        raise ValueError(f"unknown fleet-changing action {action!r}")
    if config.readonly:
        raise ReadOnlyRefused(action, where)
