"""The live log pane: a capped line buffer with level colours, filter, search highlight and folding.

:class:`LogBuffer` is the model (no Textual): it keeps at most ``max_lines`` lines (older ones
are counted in :attr:`LogBuffer.dropped`, never silently lost from the count) and the list of
rows to show, updated incrementally as lines arrive:

- **filter**: only lines containing the text (case-insensitive);
- **fold**: consecutive continuation lines (a traceback's frames, a multi-line jax array
  repr) collapse into one ``… N more lines`` row under their head line.

A line is a *continuation* when its message (after vLLM's ``(Proc pid=N) LEVEL MM-DD
HH:MM:SS [file:line]`` envelope, or uvicorn's ``LEVEL:``) is empty or starts with blank space.

:class:`LogView` renders the rows with the Line API (only visible rows are rendered).
"""

from __future__ import annotations

import bisect
import re
from collections import deque
from math import ceil
from typing import NamedTuple

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.content import Content
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.scrollbar import ScrollBar
from textual.strip import Strip

from console.render.plain import log_line_text

#: The envelope before a vLLM message: optional process prefix, then ``LEVEL MM-DD HH:MM:SS
#: [file:line]`` (vLLM V0/V1, tpu-inference) or uvicorn's ``LEVEL:   ``.
_ENVELOPE = re.compile(
    r"(?:\([^()]{1,60}? pid=\d+[^()]{0,40}\) ?)?"
    r"(?:(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: \[[^\]]{0,80}\])? ?"
    r"|(DEBUG|INFO|WARNING|ERROR|CRITICAL):(?=\s))?")
#: Cut lines to this many characters for display, marked ``… +N chars`` (the reader already saw
#: the whole line, the launch's log on disk keeps it, and the last cut ones stay here whole).
MAX_SHOWN_CHARS = 2000
#: Cut lines whose whole text the buffer keeps (to open one whole).
CUT_LINES_KEPT = 16
#: Rendered rows the view keeps (a few screens, for scrolling back). Each is three of Textual's
#: strips with seven caches apiece, all cyclic garbage once dropped: 1,024 rows were ~30,000
#: objects every full collection walked during a flood (see :mod:`console.heap`).
ROWS_CACHED = 200
#: The component class of each level letter drawn in its own colour.
_LEVEL_CLASSES = {"E": "log-view--error", "W": "log-view--warning", "D": "log-view--debug"}


class Entry(NamedTuple):
    """One log line.

    Attributes:
        seq: 0-based number of the line since the view started (never reused).
        text: the line as shown (control characters removed, tabs expanded).
        level: ``E`` (ERROR/CRITICAL), ``W``, ``I``, ``D`` or ``""`` (no envelope).
        cont: the line continues the previous message.
    """

    seq: int
    text: str
    level: str
    cont: bool


def classify(line: str) -> tuple[str, bool]:
    """``(level letter, is continuation)`` of one log line (see the module docstring)."""
    match = _ENVELOPE.match(line)
    level = ""
    rest = line
    if match is not None and match.end():
        word = match[1] or match[2]
        level = "E" if word in ("ERROR", "CRITICAL") else word[0] if word else ""
        rest = line[match.end():]
        if match[2]:
            rest = rest.lstrip()
    return level, (not rest.strip()) or rest[0] in " \t"


class LogBuffer:
    """Capped lines plus the rows to show (see the module docstring).

    Args:
        max_lines: lines kept; the oldest go first.

    Attributes:
        rows: ``(seq, n)`` per shown row: ``n == 0`` is the line ``seq``; ``n > 0`` is a fold
            row standing for ``n`` continuation lines starting at ``seq``.
        dropped: lines pushed out by the cap so far.
        total: lines appended so far.
    """

    def __init__(self, max_lines: int = 5000) -> None:
        self.max_lines = max_lines
        self.entries: deque[Entry] = deque(maxlen=max_lines)
        self.rows: list[tuple[int, int]] = []
        self.dropped = 0
        self.total = 0
        self.folded = True
        self.filter_text = ""
        self.max_width = 0
        #: ``(seq, whole text)`` of the last :data:`CUT_LINES_KEPT` lines cut for display.
        self.cut_lines: deque[tuple[int, str]] = deque(maxlen=CUT_LINES_KEPT)
        self._run = 0                    # continuation lines at the end of ``rows`` (fold mode)
        self._run_first = 0
        self._last_level = ""

    def entry(self, seq: int) -> Entry:
        """The entry numbered ``seq`` (must still be kept)."""
        return self.entries[seq - self.entries[0].seq]

    def append(self, lines: list[str], *, masked: bool = False) -> None:
        """Add lines (each without its newline) and update :attr:`rows`.

        ``masked``: the lines went through :func:`console.render.plain.log_line_text` already
        (e.g. on the startup watch's line thread), so they are not cleaned and masked again here.
        """
        needle = self.filter_text.lower()
        for raw in lines:
            text = raw if masked else log_line_text(raw)
            if len(text) > MAX_SHOWN_CHARS:
                self.cut_lines.append((self.total, text))
                text = f"{text[:MAX_SHOWN_CHARS]}… +{len(text) - MAX_SHOWN_CHARS} chars"
            level, cont = classify(text)
            if cont and not level:
                level = self._last_level      # a bare traceback line: its message's level
            elif not cont:
                self._last_level = level
            entry = Entry(self.total, text, level, cont)
            self.total += 1
            if len(self.entries) == self.max_lines:
                self.dropped += 1
            self.entries.append(entry)
            if len(text) > self.max_width:
                self.max_width = len(text)
            if needle:
                if needle in text.lower():
                    self.rows.append((entry.seq, 0))
            else:
                self._add_row(entry)
        self._prune()

    def skip(self, count: int) -> None:
        """Count ``count`` lines that arrived but were never shown (a burst larger than the cap).

        They are newer than every line kept, so those go too (counted in :attr:`dropped`): the
        kept lines stay one unbroken stretch of the log, the newest.
        """
        if count <= 0:
            return
        self.total += count
        self.dropped += count + len(self.entries)
        self.entries.clear()
        self.rows = []
        self._run = 0

    def _add_row(self, entry: Entry) -> None:
        if not (self.folded and entry.cont):
            self._run = 0
            self.rows.append((entry.seq, 0))
            return
        self._run += 1
        if self._run == 1:
            self._run_first = entry.seq
            self.rows.append((entry.seq, 0))
        else:
            self.rows[-1] = (self._run_first, self._run)

    def _prune(self) -> None:
        if not self.entries or not self.rows or self.rows[0][0] >= self.entries[0].seq:
            return
        first = self.entries[0].seq
        cut = bisect.bisect_left(self.rows, (first, 0))
        if cut and self.rows[cut - 1][1] and self.rows[cut - 1][0] + self.rows[cut - 1][1] > first:
            seq, n = self.rows[cut - 1]      # a fold row partly dropped: keep its kept part
            self.rows[cut - 1] = (first, seq + n - first)
            cut -= 1
        del self.rows[:cut]

    def rebuild(self) -> None:
        """Recompute :attr:`rows` after the filter or the fold mode changed."""
        self.rows = []
        self._run = 0
        needle = self.filter_text.lower()
        for entry in self.entries:
            if needle:
                if needle in entry.text.lower():
                    self.rows.append((entry.seq, 0))
            else:
                self._add_row(entry)

    def row_text(self, index: int) -> tuple[str, str, bool]:
        """``(text, level, is fold row)`` of shown row ``index``."""
        seq, n = self.rows[index]
        if n:
            return f"    … {n} more lines (z: unfold)", "", True
        entry = self.entry(seq)
        return entry.text, entry.level, False

    def last_cut_line(self, up_to_row: int | None = None) -> str | None:
        """The whole text of the last cut line kept, at or before shown row ``up_to_row``
        (``None``: the last one), or ``None``."""
        limit = None
        if up_to_row is not None and self.rows:
            seq, n = self.rows[max(0, min(up_to_row, len(self.rows) - 1))]
            limit = seq + n
        for seq, text in reversed(self.cut_lines):
            if limit is None or seq <= limit:
                return text
        return None

    def clear(self) -> None:
        """Forget every line (counts restart)."""
        self.cut_lines.clear()
        self.entries.clear()
        self.rows = []
        self.dropped = self.total = self.max_width = self._run = 0


class LogView(ScrollView, can_focus=True):
    """Line-API view of a :class:`LogBuffer`: ERROR red, WARNING yellow, DEBUG dim, matches highlighted.

    Args:
        max_lines: the buffer's line cap.
    """

    COMPONENT_CLASSES = {"log-view--error", "log-view--warning", "log-view--debug", "log-view--match",
                         "log-view--fold"}
    DEFAULT_CSS = """
    LogView { background: $surface; color: $text; overflow: scroll; }
    LogView:focus { background-tint: $foreground 5%; }
    LogView > .log-view--error { color: $error; }
    LogView > .log-view--warning { color: $warning; }
    LogView > .log-view--debug { color: $text-muted; }
    LogView > .log-view--match { background: $accent 60%; color: $text; text-style: bold; }
    LogView > .log-view--fold { color: $text-muted; text-style: italic; }
    """

    def __init__(self, max_lines: int = 5000, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.buffer = LogBuffer(max_lines)
        self.follow = True
        self.search_text = ""
        self._cache: LRUCache[tuple[int, int, int], Strip] = LRUCache(ROWS_CACHED)
        self._frame_style: Style | None = None
        self._level_styles: dict[str, Style] = {}       # level letter -> row style, for one frame
        self._title_shown: Content | None = None

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()
        self._level_styles.clear()

    def set_title(self, title: Content) -> None:
        """Put ``title`` on the view's top border, repainting that row only.

        Textual's ``border_title`` setter repaints every row (~10 ms of a frame beside a flood,
        for each key that changes the title: follow, fold, filter); the rows are unchanged, so
        only the border's row is marked dirty. Without a top border it is the plain setter.
        """
        if title == self._title_shown:
            return
        self._title_shown = title
        if not self.is_mounted or self.styles.border_top[0] in ("", "none"):
            self.border_title = title
            return
        # what Textual's setter stores (``widget._BorderTitle``), then the border row (y=-1 in
        # content coordinates) is the only region refreshed
        self._border_title = self.render_str(title).expand_tabs(4).split()[0]
        self.refresh(Region(0, -1, self.outer_size.width, 1))

    # --- input -------------------------------------------------------------------------

    def write_lines(self, lines: list[str], skipped: int = 0, *, masked: bool = False, show: bool = True) -> None:
        """Append lines (after ``skipped`` older ones that are only counted); scrolls to the end when following.

        A line with CR redraws (tqdm, ``docker run -t``) shows its last state, as a terminal would.
        ``masked``: they went through :func:`~console.render.plain.log_line_text` already.
        ``show=False``: only into the buffer; :meth:`show_rows` sizes, scrolls and repaints the view
        once after several writes (the log pane's drain writes in steps).
        """
        if skipped:
            self.buffer.skip(skipped)
        self.buffer.append(lines, masked=masked)
        if show:
            self._resize()

    def show_rows(self) -> None:
        """Size the view to the buffer's rows, scroll to the end when following, repaint."""
        self._resize()

    def _resize(self) -> None:
        size = Size(self.buffer.max_width, len(self.buffer.rows))
        if size == self.virtual_size:
            pass
        elif self.styles.overflow_x == "scroll" and self.styles.overflow_y == "scroll" and self.container_size:
            # Textual's ``virtual_size`` reactive re-lays out the whole screen on every change
            # (~40-90 ms with the panel beside it, per pane write during a flood); with both
            # scrollbars always shown the pane's layout cannot change, so only the scrollbars
            # and the scroll limits are updated (what a layout would do for this widget).
            width_before = self.virtual_size.width
            self.set_reactive(LogView.virtual_size, size)
            if size.width == width_before:
                # only lines were added: the vertical bar alone (Textual's update repaints both
                # bars, ~3 ms a bar per pane write), and only when its thumb moves
                window_rows = self.container_size.height - self.scrollbar_size_horizontal
                at_end = max(0, size.height - window_rows) if self.follow else None   # where scroll_end goes
                set_bar(self.vertical_scrollbar, virtual=size.height, window=window_rows, position=at_end)
                self.scroll_y = self.validate_scroll_y(self.scroll_y)
            else:
                self._scroll_update(size)
        else:
            self.virtual_size = size
        if self.follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.refresh()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        """Textual's (the rows repaint when the top row changes), but the vertical bar repaints
        only when its thumb moves (following a flood it stays at the bottom)."""
        if self.show_vertical_scrollbar:
            set_bar(self.vertical_scrollbar, position=new_value)
        if round(old_value) != round(new_value):
            self.refresh(self.size.region)

    def set_follow(self, follow: bool) -> None:
        """Follow new lines (scroll to the end) or stay put."""
        self.follow = follow
        if follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def set_filter(self, text: str) -> None:
        """Show only lines containing ``text`` (case-insensitive); ``""`` shows every line."""
        self.buffer.filter_text = text
        self.buffer.rebuild()
        self._cache.clear()
        self._resize()

    def set_search(self, text: str) -> None:
        """Highlight ``text`` (case-insensitive) wherever it appears."""
        self.search_text = text
        self._cache.clear()
        self.refresh()

    def set_folded(self, folded: bool) -> None:
        """Collapse (or expand) runs of continuation lines."""
        self.buffer.folded = folded
        self.buffer.rebuild()
        self._cache.clear()
        self._resize()

    def next_match(self) -> bool:
        """Scroll to the next shown row (after the top one) containing the search text; wraps."""
        needle = self.search_text.lower()
        rows = self.buffer.rows
        if not needle or not rows:
            return False
        start = int(self.scroll_offset.y)
        for step in range(1, len(rows) + 1):
            index = (start + step) % len(rows)
            if needle in self.buffer.row_text(index)[0].lower():
                self.set_follow(False)
                self.scroll_to(y=index, animate=False, immediate=True)
                return True
        return False

    def clear(self) -> None:
        """Forget every line."""
        self.buffer.clear()
        self._cache.clear()
        self._resize()

    # --- rendering ---------------------------------------------------------------------

    def shown_lines(self) -> list[str]:
        """Text of every shown row (tests, copy)."""
        return [self.buffer.row_text(i)[0] for i in range(len(self.buffer.rows))]

    def render_lines(self, crop: Region) -> list[Strip]:
        # the widget's style, computed once per frame (``rich_style`` walks the DOM: ~0.3 ms a row)
        self._frame_style = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._frame_style = None
            self._level_styles.clear()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        rich_style = self._frame_style or self.rich_style
        if index >= len(self.buffer.rows):
            return Strip.blank(width, rich_style)
        seq, n = self.buffer.rows[index]
        if not n and not self.search_text and not self.buffer.filter_text:
            entry = self.buffer.entry(seq)
            if entry.text and entry.text.isascii():     # one cell a character: no Rich text needed
                return self._plain_row(entry, index, scroll_x, width, rich_style)
        # only the characters up to the window's right edge are rendered (a 2,000-character line
        # costs ~0.5 ms whole); every character is at least one cell, so the window is full
        limit = scroll_x + width
        key = (seq, n, limit)
        strip = self._cache.get(key)
        if strip is None:
            strip = self._render_row(index, rich_style, limit)
            self._cache[key] = strip
        return strip.crop_extend(scroll_x, scroll_x + width, rich_style).apply_offsets(scroll_x, index)

    def _plain_row(self, entry: Entry, index: int, scroll_x: int, width: int, base: Style) -> Strip:
        """Row ``index`` (an ASCII line, no highlight) as the general path draws it (Rich text,
        ``crop_extend``, ``apply_offsets``: the same segments, a test holds it) with less work:
        during a flood every row on screen is a new line at each write (the view's part of a
        frame in ``bench_log_pane_frames``: ~2.4 -> ~1.6 ms of the loop's CPU)."""
        visible = entry.text[scroll_x:scroll_x + width]
        style = self._level_styles.get(entry.level)
        if style is None:
            name = _LEVEL_CLASSES.get(entry.level)
            style = base + self.get_component_rich_style(name) if name else base
            self._level_styles[entry.level] = style
        segments = []
        if visible:
            segments.append(Segment(visible, style + Style.from_meta({"offset": (scroll_x, index)})))
        if len(visible) < width:
            pad_meta = Style.from_meta({"offset": (scroll_x + len(visible), index)})
            segments.append(Segment(" " * (width - len(visible)), base + pad_meta))
        return Strip(segments, width)

    def _render_row(self, index: int, base: Style, limit: int) -> Strip:
        text, level, fold = self.buffer.row_text(index)
        # a match that crosses the right edge is still found (and its visible part highlighted)
        line = Text(text[:limit + len(self.search_text) + len(self.buffer.filter_text)], no_wrap=True, end="")
        line.stylize(base)
        if fold:
            line.stylize(self.get_component_rich_style("log-view--fold"))
        elif level in _LEVEL_CLASSES:
            line.stylize(self.get_component_rich_style(_LEVEL_CLASSES[level]))
        for needle in {self.search_text.lower(), self.buffer.filter_text.lower()}:
            if needle:
                _highlight(line, needle, self.get_component_rich_style("log-view--match"))
        return Strip(line.render(self.app.console), line.cell_len)


def thumb_eighths(bar_cells: int, virtual: float, window: float, position: float) -> tuple[int, int] | None:
    """Where a scrollbar's thumb is drawn: ``(start, end)`` in eighths of a cell along a bar of
    ``bar_cells`` cells, or ``None`` for no thumb; the arithmetic of Textual's
    ``ScrollBar._render_bar`` and ``ScrollBarRender.render_bar`` (``virtual``/``window``: the
    bar's ``window_virtual_size``/``window_size``, rows; ``position``: its ``position``, a row)."""
    virtual_rows = ceil(virtual)
    window_rows = ceil(window if window < virtual else 0)
    if not (window_rows and bar_cells and virtual_rows and bar_cells != virtual_rows):
        return None
    thumb_cells = max(1, window_rows / (virtual_rows / bar_cells))
    start = int((bar_cells - thumb_cells) * (position / (virtual_rows - window_rows)) * 8)
    return start, start + ceil(thumb_cells * 8)


def set_bar(bar: ScrollBar, *, virtual: float | None = None, window: float | None = None,
            position: float | None = None) -> None:
    """Set a vertical scrollbar's reactives (``None``: unchanged), repainting the bar only when
    its thumb moves: each repaint is ~1-3 ms of a frame, and a flood followed at the bottom
    changes the numbers at every write, not the thumb."""
    new_virtual = bar.window_virtual_size if virtual is None else int(virtual)
    new_window = bar.window_size if window is None else int(window)
    new_position = bar.position if position is None else bar.validate_position(position)
    cells = bar.size.height
    same = (cells > 0 and not bar.grabbed
            and thumb_eighths(cells, new_virtual, new_window, new_position)
            == thumb_eighths(cells, bar.window_virtual_size, bar.window_size, bar.position))
    for name, value in (("window_virtual_size", new_virtual), ("window_size", new_window),
                        ("position", new_position)):
        if same:
            bar.set_reactive(getattr(ScrollBar, name), value)
        else:
            setattr(bar, name, value)


def _highlight(line: Text, needle: str, style: Style) -> None:
    """Stylize every case-insensitive occurrence of ``needle`` (lower case) in ``line``."""
    lowered = line.plain.lower()
    start = lowered.find(needle)
    while start >= 0:
        line.stylize(style, start, start + len(needle))
        start = lowered.find(needle, start + len(needle))

