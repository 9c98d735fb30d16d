"""A checkbox whose two states differ by more than colour: ``▐✓▌`` checked, ``▐ ▌`` not.

Textual's :class:`~textual.widgets.Checkbox` draws an ``X`` in both states and tells them apart by
colour only, which a colour-blind operator, a monochrome terminal or a text capture cannot read.
"""

from __future__ import annotations

from textual.widgets import Checkbox

CHECKED = "✓"
UNCHECKED = " "


class MarkedCheckbox(Checkbox):
    """:class:`~textual.widgets.Checkbox` with a mark only when checked (its messages are Checkbox's)."""

    def __init__(self, label: str = "", value: bool = False, *, id: str | None = None) -> None:
        super().__init__(label, value, id=id)
        self.BUTTON_INNER = CHECKED if value else UNCHECKED

    def watch_value(self) -> None:
        """The mark follows the value (Textual's watcher sets the ``-on`` class and repaints)."""
        self.BUTTON_INNER = CHECKED if self.value else UNCHECKED
        super().watch_value()
