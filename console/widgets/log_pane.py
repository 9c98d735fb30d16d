"""The startup screen's log pane: a :class:`LogView` with its filter/search box and a title line.

The box (``#log-filter``) stays hidden until :meth:`LogPane.open_input` shows it; typing filters
the lines (or, in search mode, highlights the text), Enter jumps to the next match and closes
an empty box. The pane's border title says what is shown: lines, lines past the cap, follow,
filter, search and fold state, and whether lines are cut at the pane's edge (``←``/``→`` scroll). The screen owns the keys and calls these methods.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Input

from console.render.format import count as fmt_count
from console.widgets.log_view import LogView
from remote.printable import printable

FILTER_PLACEHOLDER = "filter: lines containing this text (Esc clears)"
SEARCH_PLACEHOLDER = "search: highlight this text, Enter/n jumps to the next match (Esc clears)"


class LogPane(Vertical):
    """The filter/search box (``#log-filter``) above the log (``#log``).

    Args:
        max_lines: lines the log keeps (older lines are counted, not shown).
        id: the widget id.
    """

    def __init__(self, max_lines: int, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.max_lines = max_lines
        self.search_mode = False

    def compose(self) -> ComposeResult:
        box = Input(placeholder=FILTER_PLACEHOLDER, id="log-filter")
        box.display = False
        yield box
        yield LogView(self.max_lines, id="log")

    @property
    def view(self) -> LogView:
        """The log."""
        return self.query_one("#log", LogView)

    @property
    def box(self) -> Input:
        """The filter/search box."""
        return self.query_one("#log-filter", Input)

    def update_title(self) -> None:
        """``Log · N lines · ... · following · filter: x (M shown) · search: y`` on the log's border."""
        view = self.view
        buf = view.buffer
        parts = [fmt_count(buf.total, "line")]
        if buf.dropped:
            parts.append(f"{buf.dropped:,} oldest not shown (cap {buf.max_lines:,})")
        parts.append("following" if view.follow else "paused (f follows)")
        if buf.filter_text:
            parts.append(f"filter: {buf.filter_text} ({len(buf.rows):,} shown)")
        if view.search_text:
            parts.append(f"search: {view.search_text}")
        if not buf.folded:
            parts.append("unfolded")
        if buf.max_width > view.scrollable_content_region.width > 0:
            parts.append("long lines cut at the edge: ←/→ scroll")
        view.set_title(Content(printable("Log · " + " · ".join(parts))))     # typed text: never markup

    def on_resize(self) -> None:
        """A new width may cut lines that fitted (or the other way round): the title says so."""
        self.update_title()

    def toggle_follow(self) -> None:
        """Follow new lines, or stop scrolling to read."""
        self.view.set_follow(not self.view.follow)
        self.update_title()

    def toggle_fold(self) -> None:
        """Collapse or expand runs of continuation lines (tracebacks, array dumps)."""
        self.view.set_folded(not self.view.buffer.folded)
        self.update_title()

    def open_input(self, search: bool) -> None:
        """Show the box with the current filter (or search) text and focus it."""
        self.search_mode = search
        box = self.box
        box.placeholder = SEARCH_PLACEHOLDER if search else FILTER_PLACEHOLDER
        box.value = self.view.search_text if search else self.view.buffer.filter_text
        box.display = True
        box.focus()

    def next_match(self) -> bool:
        """Scroll to the next line with the search text; ``False`` when there is none."""
        found = self.view.next_match()
        self.update_title()
        return found

    def close_input(self) -> bool:
        """Clear and hide the box if it is shown (``True``), else do nothing (``False``)."""
        box = self.box
        if not box.display:
            return False
        box.value = ""
        box.display = False
        self.view.focus()
        return True

    @on(Input.Changed, "#log-filter")
    def _input_changed(self, event: Input.Changed) -> None:
        if self.search_mode:
            self.view.set_search(event.value)
        else:
            self.view.set_filter(event.value)
        self.update_title()

    @on(Input.Submitted, "#log-filter")
    def _input_submitted(self, event: Input.Submitted) -> None:
        view = self.view
        if self.search_mode and event.value:
            view.next_match()
        if not event.value:
            event.input.display = False
        view.focus()
        self.update_title()
