"""The startup screen's log pane: a :class:`LogView` with its filter/search box and a title line.

The box (``#log-filter``) stays hidden until :meth:`LogPane.open_input` shows it; typing filters
the lines (or, in search mode, highlights the text), Enter jumps to the next match and closes
an empty box. The pane's border title says what is shown: lines, lines past the cap, follow,
filter, search and fold state, and whether lines are cut at the pane's edge (``←``/``→`` scroll).
The screen owns the keys and calls these methods.

Flood control lives here, as toolong keeps it in its log view: the screen hands each batch of
lines to :meth:`LogPane.queue_lines` (on the loop, already cleaned and masked) and the pane writes
them to the view at most every :data:`DRAIN_INTERVAL_S` (:data:`FLOOD_DRAIN_INTERVAL_S` during a
flood), for at most :data:`DRAIN_BUDGET_S` per write; lines beyond the view's cap are counted, not
kept, so a burst the screen cannot draw in time costs no memory and no key latency, and during a
flood a write starts from the newest :data:`FLOOD_WRITE_LINES` lines (the older ones counted), so
the pane is at most one write behind the log.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from textual import events, on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.widgets import Input

from console.render.format import count as fmt_count
from console.render.plain import log_line_text
from console.widgets.log_view import LogView
from remote.printable import printable

FILTER_PLACEHOLDER = "filter: lines containing this text (Esc clears)"
SEARCH_PLACEHOLDER = "search: highlight this text, Enter/n jumps to the next match (Esc clears)"

#: Longest the pane takes writing queued lines in one go (then a frame and keys come first).
DRAIN_BUDGET_S = 0.010
#: Shortest time between two writes to the view (the rest of a burst waits, coalesced).
DRAIN_INTERVAL_S = 0.1
#: Lines written to the view per step of a drain (the budget is checked between steps).
DRAIN_STEP_LINES = 100
#: A drain that finds at least this many lines waiting (shown or only counted) means a flood: the next
#: write waits :data:`FLOOD_DRAIN_INTERVAL_S`, so the pane costs ~4 frames a second, not 10
#: (each ~20-25 ms of the loop beside a 20,000 lines/s burst, whose lines nobody reads live).
FLOOD_DRAIN_LINES = 500
#: Shortest time between two writes to the view during a flood.
FLOOD_DRAIN_INTERVAL_S = 0.25
#: The screen's actions whose keys open the box (the startup view's ``/`` and ``ctrl+f``).
OPEN_ACTIONS = frozenset({"filter", "search"})
#: During a flood a write starts from the newest this many lines waiting; the older ones are counted,
#: not kept (the launch's log on disk has them): the pane shows the log's newest lines within one
#: write, not after working through a backlog of :attr:`LogPane.max_lines` lines at one budget a write
#: (the last line of a 60,000-line burst with 250 KB lines was counted 2-4 s after it was printed).
FLOOD_WRITE_LINES = 500


class LogPane(Vertical):
    """The filter/search box (``#log-filter``) above the log (``#log``).

    Args:
        max_lines: lines the log keeps (older lines are counted, not shown).
        id: the widget id.
    """

    class LinesArrived(Message):
        """Lines are waiting in the pane's queue (one message in flight at a time)."""

    def __init__(self, max_lines: int, *, id: str | None = None,
                 on_written: Callable[[], None] | None = None) -> None:
        super().__init__(id=id)
        self.max_lines = max_lines
        self.search_mode = False
        #: called after each write of queued lines to the view (the screen's panel may change)
        self.on_written = on_written
        self._pending: list[str] = []
        self._skipped = 0
        self._draining = False
        self._drained_at = 0.0
        self._drain_interval_s = DRAIN_INTERVAL_S

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

    # --- flood control -------------------------------------------------------------------

    @property
    def waiting(self) -> int:
        """Lines queued and not written to the view yet (kept or only counted)."""
        return len(self._pending) + self._skipped

    def queue_lines(self, lines: list[str]) -> None:
        """Queue lines (cleaned and masked already, e.g. on a watch's line thread) for the view.

        Only one :class:`LinesArrived` is in flight; beyond the view's cap the oldest queued
        lines are counted, not kept.
        """
        notify = not self._pending and not self._skipped and not self._draining
        self._pending.extend(lines)
        over = len(self._pending) - self.max_lines
        if over > 0:
            del self._pending[:over]
            self._skipped += over
        if notify:
            self.post_message(self.LinesArrived())

    def queue_marker(self, text: str) -> None:
        """A line of the console's own (a gap, a wait), in order with the queued lines (cleaned here)."""
        self.queue_lines([log_line_text(text)])

    def clear(self) -> None:
        """Forget every line, shown or queued."""
        self._pending, self._skipped = [], 0
        self.view.clear()

    @on(LinesArrived)
    def _lines_arrived(self, event: LinesArrived) -> None:
        event.stop()
        wait = self._drained_at + self._drain_interval_s - time.monotonic()
        if wait > 0:
            self._draining = True          # no new message: the timer writes what comes meanwhile
            self.set_timer(wait, self._drain)
        else:
            self._drain()

    def _drain(self) -> None:
        """Write queued lines to the view for at most :data:`DRAIN_BUDGET_S`, at most once per
        :data:`DRAIN_INTERVAL_S` (one view refresh per write; :data:`FLOOD_DRAIN_INTERVAL_S` after
        a drain that found :data:`FLOOD_DRAIN_LINES` or more waiting): during a flood the loop
        stays free for keys and frames, and the lines beyond the view's cap are only counted."""
        self._drained_at = time.monotonic()
        view = self.view
        deadline = time.perf_counter() + DRAIN_BUDGET_S
        waiting = self.waiting
        over = len(self._pending) - FLOOD_WRITE_LINES
        if over > 0 and waiting >= FLOOD_DRAIN_LINES:       # a flood: its newest lines first
            del self._pending[:over]
            self._skipped += over
        while self._pending or self._skipped:
            lines, skipped = self._pending[:DRAIN_STEP_LINES], self._skipped
            del self._pending[:DRAIN_STEP_LINES]
            self._skipped = 0
            view.write_lines(lines, skipped, masked=True, show=False)   # cleaned and masked before they were queued
            if time.perf_counter() > deadline:
                break
        view.show_rows()                                     # one resize, scroll and repaint per write
        self._drain_interval_s = FLOOD_DRAIN_INTERVAL_S if waiting >= FLOOD_DRAIN_LINES else DRAIN_INTERVAL_S
        self._draining = bool(self._pending)
        if self._draining:
            self.set_timer(self._drain_interval_s, self._drain)
        self.update_title()
        if self.on_written is not None:
            self.on_written()

    # --- title and keys ----------------------------------------------------------------

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
        self._focus_now(box)

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
        self._focus_now(self.view)
        return True

    def on_key(self, event: events.Key) -> None:
        """Keys that reach the log (while it has the focus), in the order they were typed.

        During a flood the keys a person types arrive together, and each goes to the widget
        focused when it arrived: the log. Textual runs a screen's binding only once the key has
        bubbled up to the app, after the keys behind it reached this pane, and checks it against
        the widget focused *then*: ``/foo`` opened the box after ``f o o`` had gone by (``f``
        toggling follow), and the box, focused with the box hidden again, swallowed the next
        ``/``, so the next Esc left the view. So the screen's filter and search keys open the box
        here, at once, and the printable keys (and backspace) that reach the log while the box is
        open are typed into it; Esc and Enter go on to the screen as before.
        """
        box = self.box
        active = self.screen.active_bindings.get(event.key)
        if not box.display and active is not None and active.binding.action in OPEN_ACTIONS:
            event.stop()
            event.prevent_default()
            self.open_input(search=active.binding.action == "search")
        elif box.display and self.screen.focused is box:
            if event.is_printable and event.character is not None:
                event.stop()
                event.prevent_default()
                box.insert_text_at_cursor(event.character)
            elif event.key == "backspace":
                event.stop()
                event.prevent_default()
                box.action_delete_left()

    def _focus_now(self, widget: Input | LogView) -> None:
        """Focus ``widget`` before the next key is handled. Textual's ``focus()`` only queues the
        change behind the keys already waiting: during a flood a fast ``/ k v Esc`` left the focus
        on the hidden box after the keys, so the next ``/`` was typed into it and the next Esc
        left the view."""
        self.screen.set_focus(widget)

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
        self._focus_now(view)
        self.update_title()
