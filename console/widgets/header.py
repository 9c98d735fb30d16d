"""The console's header: Textual's, whose title watcher survives its screen being removed.

Every ``Header`` watches the app's title. When a view is replaced (``switch_screen``: the startup view
of a node reopened after a swap) and the title changes while the old view is being removed (a forward
opens: ``⇄ vllm-v5e-a localhost:8091``), the old header's watcher ran with its title widget already
gone and raised ``NoMatches`` into the app (Textual catches only ``NoScreen`` there). A header that is
being removed has nothing to show: it skips the update.
"""

from __future__ import annotations

from textual.css.query import NoMatches
from textual.dom import NoScreen
from textual.events import Mount
from textual.widget import Widget
from textual.widgets import Header
from textual.widgets._header import HeaderTitle


class ConsoleHeader(Header):
    """``Header`` whose title update is skipped once the header is being removed."""

    def _on_mount(self, event: Mount) -> None:
        # Textual calls every class's _on_mount along the MRO: Header's own would register its failing
        # watcher beside this one. prevent_default stops the walk here; Widget's step is done by hand.
        event.prevent_default()
        Widget._on_mount(self, event)

        async def set_title() -> None:
            try:
                self.query_one(HeaderTitle).update(self.format_title())
            except (NoMatches, NoScreen):      # the view it belonged to is going away
                pass

        self.watch(self.app, "title", set_title)
        self.watch(self.app, "sub_title", set_title)
        self.watch(self.screen, "title", set_title)
        self.watch(self.screen, "sub_title", set_title)
