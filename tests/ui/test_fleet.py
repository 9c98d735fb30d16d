"""The Fleet view driven by Pilot against the sandbox TPU API (real google-cloud-tpu client)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from textual.widgets import DataTable, Input, Label, Static

from console.app import TpuConsoleApp
from console.screens.fleet import FleetScreen
from console.services import Services
from tests.ui.conftest import detail_settled, text_of


async def _loaded(pilot: Any) -> FleetScreen:
    await pilot.pause()                          # the fleet screen mounts and starts its first refresh
    await pilot.app.workers.wait_for_complete()  # ... which is one worker
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, FleetScreen) and screen.snapshot is not None, "the fleet never loaded"
    return screen


def _column(table: DataTable, name: str) -> list[str]:
    return [str(table.get_cell(row, name)) for row in table.rows]


async def test_fleet_lists_every_project_and_the_403_problem(services: Services) -> None:
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _loaded(pilot)
        nodes = screen.query_one("#nodes", DataTable)
        names = _column(nodes, "NAME")
        assert "vllm-flex-b" in names and "research-v5e-1" in names
        assert len(names) == 10
        flex_row = names.index("vllm-flex-b")
        assert str(nodes.get_cell_at((flex_row, 3))) == "flex-start"
        # frozen clock: terminationTimestamp is now + 2 h
        assert str(nodes.get_cell_at((flex_row, 4))) == "2:00:00"
        problems = text_of(screen.query_one("#problems", Static))
        assert "denied-project (HTTP 403): Permission 'tpu.nodes.list' denied" in problems
        assert "research-sandbox/europe-west4-a" in problems
        qrs = screen.query_one("#qrs", DataTable)
        states = dict(zip(_column(qrs, "NAME"), _column(qrs, "STATE"), strict=True))
        assert states["qr-flex-wait"] == "WAITING_FOR_RESOURCES"
        assert states["qr-flex-done"] == "SUSPENDED by SERVICE"       # as `nodes` says it
        assert states["qr-failed"] == "FAILED"


async def test_filter_narrows_rows_and_escape_clears(services: Services) -> None:
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _loaded(pilot)
        await pilot.press("slash")
        assert screen.query_one("#filter", Input).has_focus
        await pilot.press(*"flex")
        await pilot.pause()
        nodes = screen.query_one("#nodes", DataTable)
        assert _column(nodes, "NAME") == ["vllm-flex-b"]
        qr_names = _column(screen.query_one("#qrs", DataTable), "NAME")
        assert sorted(qr_names) == ["qr-flex-b", "qr-flex-done", "qr-flex-wait"]
        await pilot.press("enter", "escape")
        await pilot.pause()
        assert len(_column(nodes, "NAME")) == 10


async def test_a_filter_typed_fast_gets_every_key_and_esc_gives_the_table_back(services: Services) -> None:
    """``/spot`` as a terminal delivers it when typed fast or pasted (posted at once): every letter lands in
    the filter (``s`` is the swap key on the table) and ``Esc`` right after clears it and focuses the table."""
    from textual import events

    async with TpuConsoleApp(services).run_test(size=(160, 45)) as pilot:
        screen = await _loaded(pilot)
        for key, char in [("slash", "/"), *((c, c) for c in "spot")]:
            pilot.app.post_message(events.Key(key, char))
        box = screen.query_one("#filter", Input)
        for _ in range(50):
            await pilot.pause(0.02)
            if box.value == "spot":
                break
        assert pilot.app.screen is screen and box.value == "spot"       # no swap form opened
        assert sorted(_column(screen.query_one("#nodes", DataTable), "NAME")) == ["vllm-spot-c", "vllm-spot-gone"]
        for key, char in [("escape", None), ("slash", "/"), ("x", "x")]:
            pilot.app.post_message(events.Key(key, char))
        for _ in range(50):
            await pilot.pause(0.02)
            if box.value == "x":
                break
        assert box.value == "x" and box.has_focus                      # Esc closed it, / opened it again
        pilot.app.post_message(events.Key("escape", None))
        await pilot.pause(0.1)
        assert not box.display and screen.query_one("#nodes", DataTable).has_focus


async def test_selection_fills_detail_and_raw_json_toggles(services: Services) -> None:
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _loaded(pilot)
        nodes = screen.query_one("#nodes", DataTable)
        row = _column(nodes, "NAME").index("vllm-flex-b")
        nodes.move_cursor(row=row)
        await pilot.pause()
        assert screen.selected_node is not None and screen.selected_node.name == "vllm-flex-b"
        await detail_settled(pilot, screen)
        detail = screen.query_one("#detail-body", Static)
        text = text_of(detail)
        assert "termination_time" in text and "2026-11-30T14:00:00Z" in text
        await pilot.press("j")
        raw = text_of(detail)
        assert '"terminationTimestamp"' in raw and '"4711000000000000002"' in raw


async def test_the_detail_pane_follows_a_still_cursor_at_once_and_a_moving_one_once_it_settles(
        services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pane update lays the screen out: a cursor moved row after row (a held key) draws the pane once,
    DETAIL_SETTLE_S after its last move; a cursor that had been still draws it at once. (The settle time is
    made 1 s here so that a loaded machine's pauses between the test's moves stay within it.)"""
    from console.screens import fleet as fleet_module

    monkeypatch.setattr(fleet_module, "DETAIL_SETTLE_S", 1.0)
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _loaded(pilot)
        nodes = screen.query_one("#nodes", DataTable)
        names = _column(nodes, "NAME")
        await detail_settled(pilot, screen)
        screen._cursor_moved_at -= 10.0                           # still for longer than DETAIL_SETTLE_S
        nodes.move_cursor(row=names.index("vllm-flex-b"))
        await pilot.pause()
        assert screen._detail_timer is None and text_of(screen.query_one("#detail-body", Static)).startswith(
            "Node vllm-flex-b")
        nodes.move_cursor(row=names.index("vllm-v5e-a"))          # moved again at once: the pane waits
        await pilot.pause()
        assert screen._detail_timer is not None
        assert text_of(screen.query_one("#detail-body", Static)).startswith("Node vllm-flex-b")
        await detail_settled(pilot, screen)
        assert text_of(screen.query_one("#detail-body", Static)).startswith("Node vllm-v5e-a")


async def test_refresh_does_not_overlap(services: Services) -> None:
    calls = 0
    in_flight = 0
    most_in_flight = 0
    inner = services.fleet

    class Slow:
        """The real lister, held 0.3 s per call, counting how many calls overlap."""

        async def list_fleet(self):  # type: ignore[no-untyped-def]
            nonlocal calls, in_flight, most_in_flight
            calls += 1
            in_flight += 1
            most_in_flight = max(most_in_flight, in_flight)
            try:
                await asyncio.sleep(0.3)
                return await inner.list_fleet()
            finally:
                in_flight -= 1

        def close(self) -> None:
            inner.close()

    services.fleet = Slow()
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        await _loaded(pilot)
        await app.workers.wait_for_complete()
        before = calls
        await pilot.press("r", "r", "r")  # three presses while the first refresh is still in flight
        await app.workers.wait_for_complete()
        assert calls - before == 1       # the second and third press found one in flight
        assert most_in_flight == 1       # never two at once, the first load included
        assert app.screen._refreshing is False  # type: ignore[attr-defined]


async def test_help_lists_bindings_with_ids(services: Services) -> None:
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        await _loaded(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        text = "\n".join(text_of(w) for w in app.screen.query(Static))
        for needle in ("refresh", "raw_json", "watch", "swap", "bench", "history", "Quit"):
            assert needle in text
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen)


async def test_refresh_failure_is_a_sentence_on_screen(services: Services) -> None:
    from remote.errors import CredentialsError

    class NoCredentials:
        async def list_fleet(self):  # type: ignore[no-untyped-def]
            raise CredentialsError("no Application Default Credentials found; run "
                                   "`gcloud auth application-default login`")

        def close(self) -> None:
            pass

    services.fleet.close()
    services.fleet = NoCredentials()
    app = TpuConsoleApp(services)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.screen.sub_title == "refresh failed"
        text = text_of(app.screen.query_one("#problems", Static))
        assert "refresh failed: No Google credentials: no Application Default Credentials found" in text
        assert "Traceback" not in text
        title = str(app.screen.query_one("#nodes-title", Label).render())
        assert "loading" not in title and title == "Nodes · not listed: the refresh failed (r retries)"
        assert "Loading" not in text_of(app.screen.query_one("#detail-body", Static))


def _shown_columns(table: DataTable) -> list[str]:
    return [str(c.value) for c in table.columns]


async def test_columns_by_priority_and_the_detail_pane_follow_the_width(services: Services) -> None:
    async with TpuConsoleApp(services).run_test(size=(100, 30)) as pilot:
        screen = await _loaded(pilot)
        nodes = screen.query_one("#nodes", DataTable)
        assert not screen.query_one("#detail").display        # below 120 columns: hidden by itself
        assert _shown_columns(nodes)[:5] == ["NAME", "STATE", "ACCELERATOR", "PROVISIONING", "TIME LEFT"]
        assert "ZONE" not in _shown_columns(nodes)
        # every shown column is whole: as wide as its widest cell
        assert all(col.get_render_width(nodes) >= col.content_width for col in nodes.columns.values())
        assert sum(col.get_render_width(nodes) for col in nodes.columns.values()) <= 98
        await pilot.press("i")                                  # shown on demand: fewer columns fit
        await pilot.pause()
        assert screen.query_one("#detail").display
        assert len(_shown_columns(nodes)) < 6 and _shown_columns(nodes)[0] == "NAME"
        await pilot.press("i")
        await pilot.pause()
        assert not screen.query_one("#detail").display
        await pilot.resize_terminal(250, 50)                    # wide: the pane stays as asked (hidden)
        await pilot.pause()
        assert "ZONE" in _shown_columns(nodes) and "AGE" in _shown_columns(nodes)


async def test_sort_cycles_reverses_and_survives_a_refresh(services: Services) -> None:
    async with TpuConsoleApp(services).run_test(size=(160, 45)) as pilot:
        screen = await _loaded(pilot)
        nodes = screen.query_one("#nodes", DataTable)
        api_order = _column(nodes, "NAME")
        await pilot.press("o")                                  # NAME ascending
        await pilot.pause()
        assert _column(nodes, "NAME") == sorted(api_order)
        await pilot.press("O")
        await pilot.pause()
        assert _column(nodes, "NAME") == sorted(api_order, reverse=True)
        await pilot.press("o", "o")                             # STATE, then ACCELERATOR (descending kept)
        await pilot.pause()
        accelerators = _column(nodes, "ACCELERATOR")
        assert accelerators[:2] == ["v6e-8", "v6e-8"] and accelerators[-1] == "v5litepod-1"
        assert accelerators.index("v5litepod-16") < accelerators.index("v5litepod-4")  # by number
        assert "sorted by ACCELERATOR descending" in str(screen.query_one("#nodes-title").render())
        screen.action_refresh_fleet()
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        assert _column(nodes, "ACCELERATOR") == accelerators
        qrs = screen.query_one("#qrs", DataTable)
        qrs.focus()
        await pilot.press("o")                                  # the focused table's own sort
        await pilot.pause()
        assert _column(qrs, "NAME") == sorted(_column(qrs, "NAME"))
        assert _column(nodes, "ACCELERATOR") == accelerators


async def test_command_mode_jumps_to_views_and_nodes_with_completion(services: Services) -> None:
    from console.screens.bench import BenchScreen
    from console.screens.command import CommandScreen
    from console.screens.history.screen import HistoryScreen

    async with TpuConsoleApp(services).run_test(size=(160, 45)) as pilot:
        screen = await _loaded(pilot)
        titles = [c.title for c in pilot.app.get_system_commands(screen)]
        assert "Command mode (:)" in titles
        assert titles.count("Help: all keys") == 1 and "Keys" not in titles   # one help entry, not Textual's too
        await pilot.press("colon", *"be", "tab")               # tab completes to the first READY node's bench
        await pilot.pause()
        assert isinstance(pilot.app.screen, CommandScreen)
        box = pilot.app.screen.query_one("#command", Input)
        assert box.value == "bench batch-preempt-f"             # not vllm-new-e (CREATING), the first row
        box.value = ""
        await pilot.press(*"bench vllm-v5e-a", "enter")
        await pilot.pause()
        assert isinstance(pilot.app.screen, BenchScreen) and pilot.app.screen.node.name == "vllm-v5e-a"
        await pilot.press("colon", *"history", "enter")         # from any view
        await pilot.pause()
        assert isinstance(pilot.app.screen, HistoryScreen)
        await pilot.press("colon", *"node vllm-flex-b", "enter")  # back to the fleet, on that row
        await pilot.pause()
        assert pilot.app.screen is screen and screen.selected is not None
        assert screen.selected.name == "vllm-flex-b"
        await pilot.press("colon", *"swap no-such-node", "enter")
        await pilot.pause()
        assert pilot.app.screen is screen
        assert any("No node named 'no-such-node'" in n.message for n in pilot.app._notifications)
        await pilot.press("colon", "escape")
        await pilot.pause()
        assert pilot.app.screen is screen


def test_parse_command() -> None:
    import pytest

    from console.screens.command import Command, candidates, complete, cycle, parse_command
    from remote.models import Node

    names = ["vllm-flex-b", "vllm-v5e-a"]
    nodes = [Node("p", "z", name, "READY", "v6e-8") for name in names]
    assert parse_command(":History", nodes) == Command("history")
    assert parse_command("vllm-flex-b", nodes) == Command("node", "vllm-flex-b")
    assert parse_command("watch vllm-v5e-a", nodes) == Command("startup", "vllm-v5e-a")
    assert parse_command("history vllm-v5e-a", nodes) == Command("history", "vllm-v5e-a")
    for bad, message in (("bogus", "Unknown command"), ("bench", "one node name"), ("swap x", "No node named")):
        with pytest.raises(ValueError, match=message):
            parse_command(bad, nodes)
    assert complete("no", ["node vllm-flex-b", "node vllm-v5e-a"]) == "node vllm-flex-b"
    assert complete("zz", ["node a"]) == "zz"
    options = ["node a", "node b", "bench a", "node c"]
    assert cycle("no", "node a", options) == "node b"
    assert cycle("no", "node c", options) == "node a"          # wraps round
    assert cycle("zz", "zz", options) == "zz"
    # Actions only where they can run: a CREATING node can be watched, not swapped or benchmarked;
    # a PREEMPTED one has no startup to watch; read-only mode offers no swap or rollback.
    fleet = [Node("p", "z", "up", "READY", "v6e-8"), Node("p", "z", "new", "CREATING", "v6e-8"),
             Node("p", "z", "gone", "PREEMPTED", "v6e-8")]
    offered = candidates(fleet)
    assert {"swap up", "bench up", "rollback up", "startup up", "startup new", "node gone", "history gone"} \
        <= set(offered)
    assert not {"swap new", "bench new", "rollback new", "swap gone", "startup gone"} & set(offered)
    assert not any(o.startswith(("swap ", "rollback ", "request")) for o in candidates(fleet, readonly=True))
    assert "bench up" in candidates(fleet, readonly=True)
    with pytest.raises(ValueError, match="swap needs a READY node: new is CREATING"):
        parse_command("swap new", fleet)
    with pytest.raises(ValueError, match="gone is PREEMPTED: it will not be READY"):
        parse_command("startup gone", fleet)
    with pytest.raises(ValueError, match="read-only"):
        parse_command("rollback up", fleet, readonly=True)


async def test_command_mode_lists_one_match_per_line_and_tab_cycles(services: Services) -> None:
    from console.screens.command import CommandScreen

    async with TpuConsoleApp(services).run_test(size=(160, 45)) as pilot:
        await _loaded(pilot)
        await pilot.press("colon", *"swap ")
        await pilot.pause()
        command = pilot.app.screen
        assert isinstance(command, CommandScreen)
        listed = text_of(command.query_one("#command-matches", Static)).splitlines()
        assert "\\n" not in "".join(listed)
        assert listed == ["swap batch-preempt-f", "swap vllm-spot-c", "swap vllm-flex-b", "swap vllm-ondemand-g",
                          "swap vllm-reserved-d", "swap vllm-v5e-16", "swap vllm-v5e-a", "swap research-v5e-1"]
        box = command.query_one("#command", Input)
        seen = []
        for _ in range(9):
            await pilot.press("tab")
            seen.append(box.value)
        assert seen == [*listed, listed[0]]                     # every READY node in turn, then round again
        assert text_of(command.query_one("#command-matches", Static)).splitlines() == listed
        await pilot.press("backspace", *"x")                    # an edit ends the cycle: matches follow the text
        await pilot.pause()
        assert text_of(command.query_one("#command-matches", Static)).strip() == "no match"


async def test_y_copies_the_selected_rows_json(services: Services) -> None:
    import json

    async with TpuConsoleApp(services).run_test(size=(160, 45)) as pilot:
        screen = await _loaded(pilot)
        nodes = screen.query_one("#nodes", DataTable)
        nodes.move_cursor(row=_column(nodes, "NAME").index("vllm-flex-b"))
        await pilot.press("y")
        await pilot.pause()
        copied = json.loads(pilot.app.clipboard)
        assert (copied["name"], copied["provisioning_model"], copied["time_left_s"]) == \
            ("vllm-flex-b", "flex-start", 7200.0)
        assert any(n.message.startswith("Copied the JSON of vllm-flex-b") for n in pilot.app._notifications)
        qrs = screen.query_one("#qrs", DataTable)
        qrs.focus()
        qrs.move_cursor(row=_column(qrs, "NAME").index("qr-failed"))
        await pilot.press("y")
        await pilot.pause()
        assert json.loads(pilot.app.clipboard)["state"] == "FAILED"


async def test_the_new_bindings_are_remappable(services: Services) -> None:
    import dataclasses

    services.config = dataclasses.replace(services.config, keys={"sort": "S", "command": "ctrl+k"})
    async with TpuConsoleApp(services).run_test(size=(160, 45)) as pilot:
        screen = await _loaded(pilot)
        nodes = screen.query_one("#nodes", DataTable)
        await pilot.press("S")
        await pilot.pause()
        assert screen.sort_by["nodes"] == ("NAME", False)
        assert _column(nodes, "NAME") == sorted(_column(nodes, "NAME"))
        await pilot.press("ctrl+k", *"history", "enter")
        await pilot.pause()
        from console.screens.history.screen import HistoryScreen
        assert isinstance(pilot.app.screen, HistoryScreen)


async def test_command_mode_keeps_the_keys_typed_right_after_the_colon(services: Services) -> None:
    """Keys as a terminal delivers them when typed fast (or pasted by tmux): posted at once, without
    waiting for the command box to open; every one lands in the box, in order, and enter runs it."""
    from textual import events

    async with TpuConsoleApp(services).run_test(size=(160, 45)) as pilot:
        screen = await _loaded(pilot)
        for _ in range(2):                       # the first time (the box's module imported then) and again
            for key, char in [("colon", ":"), *((c, c) for c in "node vllm-flex-b"), ("enter", None)]:
                pilot.app.post_message(events.Key(key, char))
            for _ in range(50):
                await pilot.pause(0.02)
                if pilot.app.screen is screen and screen.selected is not None \
                        and screen.selected.name == "vllm-flex-b":
                    break
            assert pilot.app.screen is screen
            assert screen.selected is not None and screen.selected.name == "vllm-flex-b"
            screen.query_one("#nodes", DataTable).move_cursor(row=0)
            await pilot.pause()
            assert screen.selected is not None and screen.selected.name != "vllm-flex-b"


async def test_columns_stay_put_when_samples_and_data_change(services: Services) -> None:
    """Serving samples arriving (a long model name, 'unreachable', a 5-digit rate), then a filter and a
    refresh: the columns shown are the same each time (MODEL used to give way to PROJECT)."""
    from console.flows.serving import ServingSample
    from console.screens.fleet import node_row_key

    for size in ((160, 45), (130, 40)):
        async with TpuConsoleApp(services).run_test(size=size) as pilot:
            screen = await _loaded(pilot)
            nodes = screen.query_one("#nodes", DataTable)
            before = _shown_columns(nodes)
            ready = [n for n in screen.snapshot.nodes if n.state == "READY"]
            for i, node in enumerate(ready):
                screen.serving[node_row_key(node)] = ServingSample(
                    "unreachable" if i % 2 else "ready", model="meta-llama/Llama-3.1-8B-Instruct",
                    tokens_per_s=12_345.0, running=3, waiting=1)
            screen._render_tables()
            await pilot.pause()
            assert _shown_columns(nodes) == before, size
            if "MODEL" in before:
                assert "Llama-3.1-8B-Instruct" in _column(nodes, "MODEL")
            await pilot.press("slash", *"flex", "enter")
            await pilot.pause()
            assert _shown_columns(nodes) == before, size
            screen.serving.clear()
            screen.action_refresh_fleet()
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
            assert _shown_columns(nodes) == before, size
