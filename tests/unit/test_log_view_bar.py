"""The log view's scrollbar thumb: ``thumb_eighths`` mirrors the arithmetic of Textual's own
scrollbar, so a bar whose thumb did not move can skip its repaint and draw the same."""

from __future__ import annotations

from math import ceil

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.segment import Segment
from textual.scrollbar import ScrollBarRender

from console.widgets.log_view import thumb_eighths


def drawn(cells: int, virtual: int, window: int, position: float) -> list[Segment]:
    """What Textual draws for a vertical bar of ``cells`` cells with these reactives (as
    ``ScrollBar._render_bar`` hands them to ``ScrollBarRender.render_bar``)."""
    position = int(position * 8) / 8                                   # ScrollBar.validate_position
    segments = ScrollBarRender.render_bar(size=cells, virtual_size=ceil(virtual),
                                          window_size=ceil(window if window < virtual else 0), position=position)
    return list(segments.segments)


states = st.tuples(st.integers(1, 60), st.integers(0, 6000), st.integers(0, 120))


@settings(max_examples=400, deadline=None)
@given(states, st.integers(0, 6000), st.integers(-3, 3), st.integers(-3, 3))
def test_the_same_thumb_is_drawn_the_same(state: tuple[int, int, int], at: int, more_rows: int, moved: int) -> None:
    """Two bars a few rows apart (a flood's writes): when their thumbs are the same in eighths,
    Textual draws them alike; when Textual draws them differently, their thumbs differ."""
    cells, virtual, window = state
    position = min(at, max(0, virtual - window))
    other = (cells, max(0, virtual + more_rows), window, max(0, min(position + moved, virtual + more_rows - window)))
    one = (cells, virtual, window, position)
    if thumb_eighths(*one) == thumb_eighths(*other):
        assert drawn(*one) == drawn(*other)
    else:
        assert drawn(*one) != drawn(*other)


def test_thumb_positions() -> None:
    assert thumb_eighths(48, 500, 48, 452) == (int((48 - 48 * 48 / 500) * 8), int((48 - 48 * 48 / 500) * 8) + 37)
    assert thumb_eighths(48, 500, 48, 0) == (0, 37)                      # at the top
    assert thumb_eighths(48, 40, 48, 0) is None                          # everything fits: no thumb
    assert thumb_eighths(48, 500, 0, 0) is None
