"""The console's header outlives its title widget: a title change while a view is being removed is no error."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets._header import HeaderTitle

from console.widgets.header import ConsoleHeader


class _HeaderApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ConsoleHeader()


async def test_a_title_change_after_the_title_widget_is_gone_is_skipped() -> None:
    """Textual's Header watcher raised NoMatches into the app (seen as a failed run under load, when a
    forward's title change met a view being switched away); both watchers of ours skip instead."""
    app = _HeaderApp()
    async with app.run_test() as pilot:
        header = app.query_one(ConsoleHeader)
        app.title = "before"
        await pilot.pause()
        assert str(header.query_one(HeaderTitle).render()).startswith("before")
        await header.query_one(HeaderTitle).remove()
        app.title = "⇄ vllm-v5e-a localhost:8091"
        app.sub_title = "after"
        await pilot.pause()
    assert app._exception is None
