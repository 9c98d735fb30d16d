"""The first frame before the first refresh: the cached fleet (marked cached) or "loading fleet…", then the
live refresh replaces it; keys that need the services before they exist say "starting…"."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

from textual.widgets import DataTable

from console.app import STARTING_MESSAGE, TpuConsoleApp
from console.flows.fleet_cache import FleetCache
from console.screens.error import ErrorScreen
from console.screens.fleet import FleetScreen
from console.services import Services
from remote.models import FleetSnapshot
from remote.printable import printable
from tests.ui.conftest import FROZEN_NOW

HOSTILE = "[red]cached[/red]\x1b[2J-node"


class HeldLister:
    """The real fleet source, held until :meth:`release` (the first refresh "in flight")."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.released = asyncio.Event()
        self.calls = 0

    def release(self) -> None:
        self.released.set()

    async def list_fleet(self) -> FleetSnapshot:
        self.calls += 1
        await self.released.wait()
        return await self.inner.list_fleet()


async def _until(pilot: Any, condition: Any, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.05)


def _names(screen: FleetScreen) -> list[str]:
    table = screen.query_one("#nodes", DataTable)
    return [str(table.get_cell(row, "NAME")) for row in table.rows]


async def _cached_fleet(services: Services, path: Path) -> tuple[FleetCache, FleetSnapshot]:
    """A cache holding the live fleet plus one node the live fleet does not have (hostile name)."""
    live = await services.fleet.list_fleet()
    extra = dataclasses.replace(live.nodes[0], name=HOSTILE)
    cache = FleetCache(path, "test")
    cache.save(FleetSnapshot(live.nodes + (extra,), live.queued_resources, live.problems),
               FROZEN_NOW.replace(hour=11, minute=22, second=33))
    return cache, live


async def test_the_cached_fleet_shows_before_the_first_refresh_and_the_live_one_replaces_it(
        services: Services, tmp_path: Path) -> None:
    cache, live = await _cached_fleet(services, tmp_path / "fleet-cache.json")
    held = HeldLister(services.fleet)
    services.fleet = held
    services.fleet_cache = cache
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        await _until(pilot, lambda: held.calls == 1, "the first refresh to start")
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        names = _names(screen)
        assert printable(HOSTILE) in names and len(names) == len(live.nodes) + 1   # literal, no markup
        assert screen.cached_at is not None
        assert "cached 11:22:33Z" in screen.sub_title and "refreshed" not in screen.sub_title
        await pilot.press("s")                      # a swap on the cache is refused, with a reason
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)
        assert any("cache of 11:22:33Z" in n.message for n in app._notifications)

        held.release()
        await _until(pilot, lambda: screen.cached_at is None, "the live refresh")
        await pilot.pause()
        assert sorted(_names(screen)) == sorted(n.name for n in live.nodes)
        assert "refreshed" in screen.sub_title and "cached" not in screen.sub_title
        rewritten = cache.load()
        assert rewritten is not None and rewritten.saved_at == FROZEN_NOW
        assert [n.name for n in rewritten.snapshot.nodes] == [n.name for n in live.nodes]


async def test_the_cache_is_written_by_the_first_listing_then_only_when_changed_and_due(
        services: Services, tmp_path: Path, monkeypatch: Any) -> None:
    """Each write is a JSON dump of the whole fleet holding the GIL: the first live listing is written, a
    listing that changed nothing never, a changed one once CACHE_SAVE_EVERY_S has passed since the last."""
    from console.screens import fleet as fleet_screen

    saved: list[int] = []

    class CountedCache(FleetCache):
        def save(self, snapshot: FleetSnapshot, now: Any = None) -> None:
            super().save(snapshot, now)
            saved.append(len(snapshot.nodes))

    cache = CountedCache(tmp_path / "fleet-cache.json", "test")
    services.fleet_cache = cache
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        await _until(pilot, lambda: isinstance(app.screen, FleetScreen) and app.screen.snapshot is not None
                     and saved == [len(app.screen.snapshot.nodes)], "the first listing written")
        screen = app.screen
        assert isinstance(screen, FleetScreen) and screen.snapshot is not None
        first = screen.snapshot
        same = FleetSnapshot(first.nodes, first.queued_resources, first.problems)
        fewer = FleetSnapshot(first.nodes[1:], first.queued_resources, first.problems)
        await screen._save_cache(same)              # nothing changed
        await screen._save_cache(fewer)             # changed, but within CACHE_SAVE_EVERY_S of the last write
        assert saved == [len(first.nodes)]
        monkeypatch.setattr(fleet_screen, "CACHE_SAVE_EVERY_S", 0.0)
        await screen._save_cache(same)              # due, but still the same fleet
        await screen._save_cache(fewer)
        assert saved == [len(first.nodes), len(first.nodes) - 1]


async def test_a_corrupt_cache_is_ignored_with_no_traceback(services: Services, tmp_path: Path) -> None:
    path = tmp_path / "fleet-cache.json"
    path.write_bytes(b'{"version": 1, "source": "test", "saved_at": "2026-11-30T11:00:00+00:00", "nodes": [{')
    held = HeldLister(services.fleet)
    services.fleet = held
    services.fleet_cache = FleetCache(path, "test")
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        await _until(pilot, lambda: held.calls == 1, "the first refresh to start")
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        assert screen.snapshot is None and screen.sub_title == "loading fleet…"
        assert _names(screen) == []
        held.release()
        await _until(pilot, lambda: screen.snapshot is not None, "the live refresh")
        assert not any(isinstance(s, ErrorScreen) for s in app.screen_stack)
        assert "vllm-flex-b" in _names(screen)
    assert FleetCache(path, "test").load() is not None      # the live fleet replaced the corrupt file


async def test_keys_before_the_services_exist_say_starting(services: Services, tmp_path: Path) -> None:
    cache, _ = await _cached_fleet(services, tmp_path / "fleet-cache.json")
    services.fleet_cache = cache
    may_start = threading.Event()

    def start() -> Services:              # the sandbox / TPU client being built, on the worker thread
        assert may_start.wait(30), "the test never let the services start"
        return services

    app = TpuConsoleApp(start=start, fleet_cache=cache)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, FleetScreen) and not app.ready
        assert "vllm-flex-b" in _names(screen) and screen.cached_at is not None
        said: list[str] = []                            # (a notice lasts 3 s: under load the first may be gone)
        notify = app.notify
        app.notify = lambda message, *a, **k: (said.append(message), notify(message, *a, **k))[1]  # type: ignore
        await pilot.press("H")                          # history needs the store
        await pilot.press("colon", *"history", "enter")  # so does :history
        await pilot.press("r", "f", "F")                # refresh, forward, the forwards view
        await _until(pilot, lambda: said.count(STARTING_MESSAGE) >= 5, "five 'starting' notices")
        assert app.screen is screen
        assert said.count(STARTING_MESSAGE) == 5
        await pilot.press("colon", *"node vllm-flex-b", "enter")   # the cache is enough to jump to a node
        await pilot.pause()
        assert screen.selected_node is not None and screen.selected_node.name == "vllm-flex-b"

        may_start.set()
        await _until(pilot, lambda: app.ready, "the services")
        await _until(pilot, lambda: screen.cached_at is None, "the live refresh")
        await pilot.press("H")
        await _until(pilot, lambda: type(app.screen).__name__ == "HistoryScreen", "the history view")
        assert not any(isinstance(s, ErrorScreen) for s in app.screen_stack)


async def _error_screen_of_a_start(error: Exception) -> tuple[ErrorScreen, bool]:
    """The error screen a start raising ``error`` shows, and whether it has a traceback pane."""
    def start() -> Services:
        raise error

    app = TpuConsoleApp(start=start)
    async with app.run_test(size=(120, 40)) as pilot:
        await _until(pilot, lambda: isinstance(app.screen, ErrorScreen) and bool(app.screen.query("#error-advice")),
                     "the error screen, composed")   # pushed is not yet composed: its panes come at its mount
        shown = app.screen
        assert isinstance(shown, ErrorScreen)
        return shown, bool(shown.query("#error-traceback"))


async def test_a_start_that_fails_for_a_known_reason_says_it_in_one_sentence() -> None:
    """The history database unusable (or the sandbox's ports, its config): the reason and what to do,
    no traceback; a start that fails for no known reason (a bug) still shows its traceback."""
    from store import StoreError

    shown, pane = await _error_screen_of_a_start(
        StoreError("the history database /tmp/h.db is not an SQLite database (file is not a database)"))
    assert shown.error_title == ("The console could not start: the history database /tmp/h.db is not an "
                                 "SQLite database (file is not a database)")
    assert not pane and "Traceback" not in shown.traceback_text
    assert "start tpu-console again" in shown.advice

    shown, pane = await _error_screen_of_a_start(KeyError("oops"))
    assert pane and "Traceback" in shown.traceback_text and "bug" in shown.advice
