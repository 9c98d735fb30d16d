"""Narrow terminals (80x24, 100x30): the startup view stacks, footers keep ``?`` and ``q`` and never
overflow, cut lists say "+N more", raw JSON folds at the pane's edge."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text
from textual.widgets import Static
from textual.widgets._footer import FooterKey

from console.app import TpuConsoleApp
from console.render.fit import fit_items
from console.screens.fleet import FleetScreen
from console.screens.startup import StartupScreen
from console.services import Services
from console.widgets.footer import ConsoleFooter
from tests.ui.conftest import fleet_node, text_of


async def _fleet(pilot: Any) -> FleetScreen:
    for _ in range(200):
        await pilot.pause(0.02)
        screen = pilot.app.screen
        if isinstance(screen, FleetScreen) and screen.snapshot is not None and screen.cached_at is None:
            await pilot.pause()
            return screen
    raise AssertionError("the fleet never loaded")


def _footer_fits(screen: Any) -> list[str]:
    """The footer's keys, after checking none lies under the palette key or past the edge."""
    footer = screen.query_one(ConsoleFooter)
    keys = list(footer.query(FooterKey))
    palette = next(k for k in keys if k.has_class("-command-palette"))
    assert footer.virtual_size.width <= footer.size.width, "the footer's row overflows (stale cells)"
    for key in keys:
        if key is not palette:
            assert key.region.right <= palette.region.x, f"{key.key_display} lies under the palette key"
    assert palette.region.right == screen.size.width
    return [k.key_display for k in keys]


async def test_fleet_footer_keeps_help_and_quit_and_never_overflows(services: Services) -> None:
    for size in ((80, 24), (100, 30), (160, 45)):
        async with TpuConsoleApp(services).run_test(size=size) as pilot:
            screen = await _fleet(pilot)
            await pilot.pause()
            shown = _footer_fits(screen)
            assert "?" in shown and "q" in shown, size
            assert shown[:2] == ["r", "/"], size                      # the screen's first keys first


async def test_the_inactive_queued_resource_lines_that_do_not_fit_are_named(services: Services) -> None:
    async with TpuConsoleApp(services).run_test(size=(80, 24)) as pilot:
        screen = await _fleet(pilot)
        text = text_of(screen.query_one("#problems", Static), width=78)
        assert "⚠ denied-project (HTTP 403)" in text
        assert "+2 more: ⚑ inference-prod/asia-northeast1-b, ⚑ inference-prod/us-east5-a" in text
        await pilot.resize_terminal(100, 30)
        await pilot.pause()
        text = text_of(screen.query_one("#problems", Static), width=98)
        assert "tpu-console delete qr-failed --project=inference-prod --zone=asia-northeast1-b" in text
        assert text.rstrip().endswith("+1 more: ⚑ inference-prod/us-east5-a")
        await pilot.resize_terminal(200, 50)
        await pilot.pause()
        text = text_of(screen.query_one("#problems", Static), width=198)
        assert "more:" not in text and "qr-flex-done --project=inference-prod --zone=us-east5-a" in text


def test_fit_items_counts_wrapped_rows_and_names_what_is_cut() -> None:
    console = Console(width=200)
    items = [("a", [Text("x" * 30)]), ("b", [Text("y" * 10), Text("z")]), ("c", [Text("w")])]
    assert fit_items(items, console, 40, 6).plain.splitlines() == ["x" * 30, "y" * 10, "z", "w"]
    assert fit_items(items, console, 20, 4).plain.splitlines() == ["x" * 30, "+2 more: b, c"]  # x: 2 rows
    assert fit_items(items, console, 20, 1).plain == "+3 more: a, b, c"


async def test_startup_view_stacks_the_panel_over_the_log_below_110_columns(services: Services) -> None:
    async with TpuConsoleApp(services).run_test(size=(80, 24)) as pilot:
        await _fleet(pilot)
        pilot.app.open_feature("startup", await fleet_node(services, "vllm-new-e"))   # CREATING: waits, no SSH
        for _ in range(100):
            await pilot.pause(0.02)
            if isinstance(pilot.app.screen, StartupScreen):
                break
        screen = pilot.app.screen
        assert isinstance(screen, StartupScreen)
        await pilot.pause()
        panel, log = screen.query_one("#startup-panel").region, screen.query_one("#log-pane").region
        assert log.width >= 40 and log.width == 80 and panel.width == 80
        assert panel.bottom <= log.y                                       # the panel above the log
        assert _footer_fits(screen)[-3:] == ["?", "q", "^p"]
        await pilot.resize_terminal(160, 45)
        await pilot.pause()
        await pilot.pause()
        panel, log = screen.query_one("#startup-panel").region, screen.query_one("#log-pane").region
        assert panel.y == log.y and panel.right <= log.x and log.width == 160 - 70  # side by side again


async def test_raw_json_folds_long_values_at_the_pane_edge(services: Services) -> None:
    async with TpuConsoleApp(services).run_test(size=(80, 24)) as pilot:
        screen = await _fleet(pilot)
        await pilot.press("i", "j")
        await pilot.pause()
        body = screen.query_one("#detail-body", Static)
        width = body.content_region.width
        shown = text_of(body, width=width)
        assert max(len(line) for line in shown.splitlines()) <= width
        joined = "".join(line.strip() for line in shown.splitlines())
        assert '"projects/inference-prod/locations/asia-northeast1-b/nodes/vllm-new-e"' in joined
        assert "long values fold at the pane's edge" in " ".join(shown.split())


async def test_checked_and_unchecked_boxes_differ_by_more_than_colour() -> None:
    from textual.app import App, ComposeResult

    from console.widgets.check_box import MarkedCheckbox

    class Boxes(App[None]):
        def compose(self) -> ComposeResult:
            yield MarkedCheckbox("--enable-auto-tool-choice", id="off")
            yield MarkedCheckbox("on", True, id="on")

    app = Boxes()
    async with app.run_test(size=(60, 5)) as pilot:
        off, on = app.query_one("#off", MarkedCheckbox), app.query_one("#on", MarkedCheckbox)
        assert str(off.render()).startswith("▐ ▌") and str(on.render()).startswith("▐✓▌")
        await pilot.click("#off")
        await pilot.pause()
        assert off.value and str(off.render()).startswith("▐✓▌")


async def test_serving_figures_are_never_shown_without_the_serving_column(services: Services) -> None:
    """At 80 columns SERVING does not fit after TIME LEFT: TOK/S and QUEUE go with it (a rate beside no
    serving state was shown there); at 100 the three show together."""
    from textual.widgets import DataTable

    shown: dict[int, list[str]] = {}
    for size in ((80, 24), (100, 30)):
        async with TpuConsoleApp(services).run_test(size=size) as pilot:
            screen = await _fleet(pilot)
            shown[size[0]] = [str(c.label) for c in screen.query_one("#nodes", DataTable).columns.values()]
    assert shown[80][:5] == ["NAME", "STATE", "ACCELERATOR", "PROVISIONING", "TIME LEFT"]
    assert not {"SERVING", "TOK/S", "QUEUE", "MODEL"} & set(shown[80])
    assert shown[100][:8] == ["NAME", "STATE", "ACCELERATOR", "PROVISIONING", "TIME LEFT", "SERVING", "TOK/S", "QUEUE"], shown


def test_a_column_that_needs_another_is_hidden_with_it() -> None:
    from console.render.columns import fit_columns

    widths = [10, 10, 13, 8, 7, 9]           # NAME, STATE, SERVING, TOK/S, QUEUE, HEALTH
    assert fit_columns(widths, 30) == [0, 1, 3]                             # the sliver TOK/S alone: the bug
    assert fit_columns(widths, 30, needs={3: 2, 4: 2}) == [0, 1, 5]         # hidden with SERVING; HEALTH fits
    assert fit_columns(widths, 57, needs={3: 2, 4: 2}) == [0, 1, 2, 3, 4, 5]


async def test_request_form_stacks_its_preview_under_the_fields_below_110_columns(services: Services) -> None:
    from console.screens.request import RequestScreen

    for size, stacked in (((80, 24), True), ((160, 45), False)):
        async with TpuConsoleApp(services).run_test(size=size) as pilot:
            await _fleet(pilot)
            await pilot.press("n")
            await pilot.pause()
            form = pilot.app.screen
            assert isinstance(form, RequestScreen)
            fields, preview = form.query_one("#request-form"), form.query_one("#request-preview")
            assert form.has_class("-stacked") is stacked, size
            if stacked:     # each the full width, the preview under the fields
                assert fields.size.width == preview.size.width == 78 and preview.region.y > fields.region.y
            else:
                assert preview.region.x > fields.region.x and preview.size.width >= 80
            _footer_fits(form)


async def test_a_tall_confirm_keeps_the_typed_box_and_its_buttons_on_an_80x24_screen(services: Services) -> None:
    """The request's confirm (the gcloud line and three docker commands) is taller than 24 rows: the box
    scrolls, and the name to type and the buttons are on screen (they were cut off below it)."""
    from textual.widgets import Input

    from console.screens.confirm import ConfirmScreen
    from console.screens.request import RequestScreen

    async with TpuConsoleApp(services).run_test(size=(80, 24)) as pilot:
        await _fleet(pilot)
        await pilot.press("n")
        await pilot.pause()
        form = pilot.app.screen
        assert isinstance(form, RequestScreen)
        for field_id, value in (("name", "demo-v5e"), ("zone", "us-west4-a"), ("accelerator_type", "v5litepod-1")):
            form.query_one(f"#rq-{field_id}", Input).value = value
        await pilot.pause()
        await pilot.press("ctrl+s")
        await pilot.pause()
        modal = pilot.app.screen
        assert isinstance(modal, ConfirmScreen) and len(modal.commands) == 4
        await pilot.press(*"demo-v5e")
        await pilot.pause()
        typed, yes = modal.query_one("#confirm-typed", Input), modal.query_one("#confirm-yes")
        assert typed.has_focus and typed.value == "demo-v5e"
        assert typed.region.y >= 0 and typed.region.bottom <= 24 and yes.region.bottom <= 24
