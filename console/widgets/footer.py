"""The console's footer: Textual's, cut to the width with ``?`` (help) and ``q`` (quit) always kept.

Textual's :class:`~textual.widgets.Footer` lays every key in a row that scrolls sideways: past the
width the last keys (the app's ``?`` and ``q``) fall off, and a cut key's first cell showed through
beside the docked ``^p palette`` (``^p paletteD``). Here the keys that do not fit are left out
before layout, from the screen's last one back, ``?`` and ``q`` never, and a ``…`` says that ``?``
lists them all; the row then never overflows, so nothing shows beside the palette key.

Textual's footer recomposes after every focus change (the screen publishes "bindings updated" twice
for each), whether or not the keys it shows changed: a new row of keys, restyled, 60-800 ms of the
loop beside a log flood (``benches/bench_startup_ui.py --huge``), so a ``/`` that focuses the log
filter stalled the keys after it. This one recomposes only when what it shows would change: the
shown bindings (key, description, action, enabled), its width and the compact style.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey, FooterLabel

if TYPE_CHECKING:
    from textual.screen import Screen

#: Actions a footer never drops (the app's help and quit).
KEPT_ACTIONS = frozenset({"help", "app.help", "quit", "app.quit"})
#: The label standing for the keys left out (``?`` lists every key).
MORE = "… "


def key_width(key: FooterKey, *, compact: bool) -> int:
    """Cells ``key`` takes in the row: key, description, padding and margin as Textual's CSS sets them
    (compact: ``k Desc`` + 1 margin; else `` k `` + ``Desc ``); the palette key adds its border and
    padding (:class:`ConsoleFooter` gives it a right padding instead of the compact keys' right margin, so it
    reaches the edge: Textual's compact margin left the last cell to whatever scrolled beneath it)."""
    if not key.description:
        return len(key.key_display) + (1 if compact else 0)
    text = len(key.key_display) + 1 + len(key.description)
    if key.has_class("-command-palette"):
        return text + (2 if compact else 4)      # border-left, padding-right (non-compact: the key's padding)
    return text + (1 if compact else 2)          # compact: margin-right; else the key's padding 0 1


def fit_keys(keys: list[FooterKey], width: int, *, compact: bool) -> tuple[list[FooterKey], bool]:
    """The keys kept in ``width`` cells (order kept): every one when they fit, else the kept actions
    (:data:`KEPT_ACTIONS`), the palette key and as many of the others, first first, as fit beside the
    :data:`MORE` label. Returns ``(keys, cut)``."""
    widths = [key_width(k, compact=compact) for k in keys]
    if sum(widths) <= width:
        return keys, False
    pinned = {i for i, k in enumerate(keys) if k.action in KEPT_ACTIONS or k.has_class("-command-palette")}
    budget = width - sum(widths[i] for i in pinned) - len(MORE) - 1
    kept = set(pinned)
    for i, w in enumerate(widths):
        if i in pinned:
            continue
        if w > budget:
            break
        kept.add(i)
        budget -= w
    return [k for i, k in enumerate(keys) if i in kept], True


class ConsoleFooter(Footer):
    """Textual's footer whose keys never overflow its width (see the module docstring)."""

    DEFAULT_CSS = """
    ConsoleFooter.-compact FooterKey.-command-palette { margin-right: 0; padding-right: 1; }
    """

    _shown: tuple[object, ...] | None = None

    def shown_signature(self) -> tuple[object, ...]:
        """What the row shows: the width, the compact style and each shown binding's key,
        description, action and whether it is enabled (the palette key's too)."""
        active = self.screen.active_bindings.values()
        keys = tuple((b.key, b.description, b.action, enabled, b.group is not None)
                     for (_, b, enabled, _tooltip) in active if b.show or b.key == self.app.COMMAND_PALETTE_BINDING)
        return (self.size.width or self.app.size.width, self.compact, self.show_command_palette, keys)

    def bindings_changed(self, screen: Screen) -> None:
        """Recompose (Textual's) only when the shown keys changed; a focus change that keeps
        them (the log filter's box) costs nothing."""
        if self._shown is not None and screen is self.screen and self.is_attached \
                and self.shown_signature() == self._shown:
            self._bindings_ready = True
            return
        super().bindings_changed(screen)

    def compose(self) -> ComposeResult:
        if self._bindings_ready and self.is_attached:
            self._shown = self.shown_signature()
        widgets = list(super().compose())
        if any(not isinstance(w, FooterKey) for w in widgets):   # binding groups: leave Textual's layout
            yield from widgets
            return
        keys = [w for w in widgets if isinstance(w, FooterKey)]
        width = self.size.width or self.app.size.width
        kept, cut = fit_keys(keys, width - 1, compact=self.compact)    # one cell spare
        yield from _with_more(kept, cut)

    def on_resize(self) -> None:
        """A new width: lay the keys out again."""
        self.call_after_refresh(self.recompose)

    def watch_compact(self) -> None:
        """The compact style changes every key's width."""
        if self.is_attached:
            self.call_after_refresh(self.recompose)


def _with_more(keys: list[FooterKey], cut: bool) -> Iterable[Widget]:
    """``keys`` with the :data:`MORE` label before the first kept action (``?``) when some were cut."""
    placed = False
    for key in keys:
        if cut and not placed and (key.action in KEPT_ACTIONS or key.has_class("-command-palette")):
            yield FooterLabel(MORE)
            placed = True
        yield key
    if cut and not placed:
        yield FooterLabel(MORE)
