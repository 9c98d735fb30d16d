"""The log pane alone: filter and search through its box, the border title, closing the box."""

from __future__ import annotations

from typing import Any

from textual.app import App, ComposeResult

from console.widgets.log_pane import SEARCH_PLACEHOLDER, LogPane

LINES = [f"INFO 01-02 03:04:{i % 60:02} [core.py:1] step {i}" for i in range(200)] + [
    "ERROR 01-02 03:05:00 [core.py:9] RuntimeError: out of HBM"]


class PaneApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LogPane(100, id="log-pane")

    def on_mount(self) -> None:
        pane = self.query_one(LogPane)
        pane.view.write_lines(LINES)
        pane.update_title()


async def test_filter_search_and_close() -> None:
    app = PaneApp()
    async with app.run_test(size=(120, 30)) as pilot:
        pane = app.query_one(LogPane)
        view, box = pane.view, pane.box
        assert not box.display
        assert view.border_title == "Log · 201 lines · 101 oldest not shown (cap 100) · following"
        pane.open_input(search=False)
        await pilot.press(*"hbm")
        assert box.has_focus and view.shown_lines() == [LINES[-1]]
        assert view.border_title.endswith("· filter: hbm (1 shown)")
        await pilot.press(*["backspace"] * 3, "enter")       # an empty box closes on Enter
        assert not box.display and view.has_focus and len(view.shown_lines()) == 100
        pane.open_input(search=True)
        assert box.placeholder == SEARCH_PLACEHOLDER and box.value == ""
        await pilot.press(*"step 150", "enter")              # Enter jumps to the match and stops following
        assert view.search_text == "step 150" and not view.follow and box.display
        assert view.border_title.endswith("paused (f follows) · search: step 150")
        assert pane.close_input() is True and not box.display and view.has_focus
        await pilot.pause()
        assert view.buffer.filter_text == "" and pane.close_input() is False


async def test_a_redrawn_line_shows_its_last_state() -> None:
    app = PaneApp()
    async with app.run_test(size=(120, 30)):
        view = app.query_one(LogPane).view
        view.write_lines(["(EngineCore pid=7) \rLoading shards:   0% | 0/2\rLoading shards: 100% | 2/2"])
        assert view.shown_lines()[-1] == "Loading shards: 100% | 2/2"


class BorderedPaneApp(PaneApp):
    """The pane with the startup view's top border, where the title is drawn."""

    CSS = "#log { border-top: solid $primary 40%; }"


def screen_text(app: App[Any]) -> str:
    """The text on screen now (the screenshot's SVG text, unescaped)."""
    import html
    import re

    return "\n".join(html.unescape(t).replace("\xa0", " ") for t in re.findall(r">([^<]*)</text>", app.export_screenshot()))


async def test_a_title_change_is_drawn_and_repaints_only_the_border_row() -> None:
    app = BorderedPaneApp()
    async with app.run_test(size=(120, 30)) as pilot:
        pane = app.query_one(LogPane)
        view = pane.view
        await pilot.pause()
        rows: list[int] = []
        render_line = view.render_line

        def counted(y: int) -> Any:
            rows.append(y)
            return render_line(y)

        view.render_line = counted  # type: ignore[method-assign]
        pane.toggle_follow()
        await pilot.pause()
        assert rows == [], rows                   # no log row drawn again: the border row alone
        assert "paused (f follows)" in screen_text(app)      # on screen, not only in the attribute
        assert view.border_title is not None and view.border_title.endswith("paused (f follows)")
        pane.toggle_follow()
        await pilot.pause()
        assert "· following" in screen_text(app) and "paused" not in screen_text(app)


class RoomyPaneApp(BorderedPaneApp):
    """The bordered pane with room for 1,000 lines (its 201 lines all kept)."""

    def compose(self) -> ComposeResult:
        yield LogPane(1000, id="log-pane")


async def test_lines_written_move_the_vertical_bar_and_the_end_with_them() -> None:
    app = RoomyPaneApp()
    async with app.run_test(size=(120, 30)) as pilot:
        view = app.query_one(LogPane).view
        await pilot.pause()
        width, rows = view.virtual_size.width, len(LINES)
        view.write_lines([f"INFO 01-02 03:06:00 [core.py:1] more {i}" for i in range(30)])   # no wider line
        await pilot.pause()
        assert view.virtual_size.width == width and view.virtual_size.height == len(view.buffer.rows) == rows + 30
        bar = view.vertical_scrollbar
        assert bar.window_virtual_size == rows + 30 and bar.window_size == view.container_size.height - 1
        assert view.scroll_y == view.max_scroll_y == rows + 30 - (view.container_size.height - 1)    # followed
        assert view.shown_lines()[-1].endswith("more 29")


async def test_the_title_says_when_lines_are_cut_at_the_edge_and_how_to_scroll() -> None:
    app = PaneApp()
    async with app.run_test(size=(120, 30)) as pilot:
        pane = app.query_one(LogPane)
        assert "cut at the edge" not in str(pane.view.border_title)     # 40-character lines fit in 120
        pane.view.write_lines(["INFO " + "x" * 300])
        pane.update_title()
        await pilot.pause()
        assert str(pane.view.border_title).endswith("· long lines cut at the edge: ←/→ scroll")
        await pilot.resize_terminal(400, 30)                            # wide enough again: no hint
        await pilot.pause()
        await pilot.pause()
        assert "cut at the edge" not in str(pane.view.border_title)


async def test_queued_lines_are_written_in_order_and_a_burst_past_the_cap_is_counted_not_kept() -> None:
    """The pane's own flood control: the screen only hands it lines (and markers, in order)."""
    class QueueApp(App[None]):
        def compose(self) -> ComposeResult:
            yield LogPane(100, id="log-pane", on_written=lambda: written.append(pane_of(self).view.buffer.total))

    def pane_of(app: App[None]) -> LogPane:
        return app.query_one(LogPane)

    written: list[int] = []
    app = QueueApp()
    async with app.run_test(size=(120, 30)) as pilot:
        pane = pane_of(app)
        pane.queue_lines(LINES[:3])
        pane.queue_marker("──── connection lost\x1b[2J ────")
        assert pane.waiting == 4 and pane.view.buffer.total == 0          # written on the pane's turn, not now
        for _ in range(200):
            if not pane.waiting:
                break
            await pilot.pause(0.01)
        assert pane.view.shown_lines() == [*LINES[:3], "──── connection lost ────"]   # the marker cleaned
        assert written == [4]
        pane.queue_lines(LINES * 2)                                       # 402 lines past a cap of 100
        assert pane.waiting == 402 and len(pane._pending) == 100
        for _ in range(200):
            if not pane.waiting:
                break
            await pilot.pause(0.02)
        buffer = pane.view.buffer
        assert buffer.total == 4 + 402 and buffer.dropped == 4 + 302 and len(buffer.entries) == 100
        assert pane.view.shown_lines()[-1] == LINES[-1]
        assert "406 lines · 306 oldest not shown (cap 100)" in str(pane.view.border_title)
        pane.queue_lines(LINES[:5])
        pane.clear()
        assert pane.waiting == 0 and pane.view.buffer.total == 0


async def test_a_flood_followed_at_the_bottom_does_not_repaint_the_vertical_bar_until_its_thumb_moves() -> None:
    """Each flood write (written in steps of 100 lines) leaves the newest 500 lines and the thumb
    at the bottom: the bar's numbers follow the view, its drawing is not redone (~1-3 ms of a
    frame beside a flood); a scroll that moves the thumb draws it again."""
    app = RoomyPaneApp()
    async with app.run_test(size=(120, 30)) as pilot:
        pane = app.query_one(LogPane)
        view = pane.view
        bar = view.vertical_scrollbar
        await pilot.pause()
        painted: list[tuple[int, float]] = []
        render = bar.render

        def counted() -> Any:
            painted.append((bar.window_virtual_size, bar.position))
            return render()

        bar.render = counted  # type: ignore[method-assign]
        for flood in range(4):
            if flood == 1:
                painted.clear()             # the first flood takes the view from 201 rows to 500
            pane.queue_lines([f"INFO 01-02 03:07:00 [core.py:1] flood {flood} line {i}" for i in range(600)])
            for _ in range(200):
                if not pane.waiting:
                    break
                await pilot.pause(0.02)
            await pilot.pause()
            rows = len(view.buffer.rows)
            assert rows == 500 and view.shown_lines()[-1] == f"INFO 01-02 03:07:00 [core.py:1] flood {flood} line 599"
            assert view.scroll_y == view.max_scroll_y == rows - bar.window_size          # followed
            assert (bar.window_virtual_size, bar.position) == (rows, view.scroll_y)      # the bar's numbers kept
        assert painted == []
        view.set_follow(False)
        view.scroll_home(animate=False, immediate=True)
        await pilot.pause()
        assert painted == [(500, 0)]                                                     # the thumb moved up


async def test_lines_that_do_not_move_the_thumb_update_the_bar_without_drawing_it() -> None:
    """Following 900 rows the thumb is one cell at the bottom: two more lines change the bar's
    numbers, not its drawing, so it is not drawn again; its numbers are the view's."""
    app = RoomyPaneApp()
    async with app.run_test(size=(120, 30)) as pilot:
        view = app.query_one(LogPane).view
        bar = view.vertical_scrollbar
        view.write_lines([f"INFO 01-02 03:08:00 [core.py:1] more {i}" for i in range(700)])
        await pilot.pause()
        painted: list[int] = []
        render = bar.render

        def counted() -> Any:
            painted.append(bar.window_virtual_size)
            return render()

        bar.render = counted  # type: ignore[method-assign]
        view.write_lines(["INFO 01-02 03:09:00 [core.py:1] one", "INFO 01-02 03:09:00 [core.py:1] two"])
        await pilot.pause()
        assert (bar.window_virtual_size, bar.position) == (903, view.scroll_y) and view.scroll_y == view.max_scroll_y
        assert painted == []
        view.write_lines([f"INFO 01-02 03:10:00 [core.py:1] x {i}" for i in range(90)])   # 993 rows: cap 1000
        view.scroll_to(y=300, animate=False, immediate=True)                               # the thumb moves
        await pilot.pause()
        assert painted == [993]


async def test_plain_rows_are_drawn_as_the_rich_path_draws_them() -> None:
    """ASCII rows without a highlight skip Rich text (a flood redraws every row at each write):
    the segments, styles and selection offsets are those of the general path, which a search
    that matches nothing takes, at every horizontal scroll (inside, across and past the lines)."""
    lines = ["INFO 01-02 03:04:05 [core.py:1] info line", "WARNING 01-02 03:04:05 [core.py:1] careful",
             "ERROR 01-02 03:04:05 [core.py:1] RuntimeError: boom", "DEBUG 01-02 03:04:05 [x.py:1] detail",
             "   continuation of the error", "", "INFO " + "y" * 300, "plain [bold]not markup[/bold] text"]

    class RowsApp(App[None]):
        def compose(self) -> ComposeResult:
            yield LogPane(100, id="log-pane")

    app = RowsApp()
    async with app.run_test(size=(120, 30)) as pilot:
        view = app.query_one(LogPane).view
        view.set_folded(False)
        view.write_lines(lines)
        await pilot.pause()
        for scroll_x in (0, 9, 150, 400):
            view.scroll_to(x=scroll_x, y=0, animate=False, immediate=True)
            await pilot.pause()
            fast = [list(view.render_line(y)) for y in range(len(lines) + 1)]
            view.set_search("never in any line")
            general = [list(view.render_line(y)) for y in range(len(lines) + 1)]
            view.set_search("")
            assert fast == general, scroll_x
            assert sum(len(segment.text) for segment in fast[6]) == view.size.width
            if scroll_x == 0:                                            # the levels keep their colours
                assert len({row[0].style.color for row in fast[:4]}) == 4
