"""The fleet view on a generated fleet of 300 nodes (sandbox.fleet_data.scale_world) through the
real google-cloud-tpu client: a refresh updates cells in place (cursor, scroll and rows kept), and
the serving sampler samples a bounded number of nodes at a time, the rows on screen first."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static

from console.app import TpuConsoleApp
from console.config import Config, ProjectConfig
from console.flows import serving
from console.flows.serving import ServingSample
from console.screens.fleet import FleetScreen
from console.services import Services
from console.widgets.fleet_table import FleetTable
from tests.ui.conftest import FROZEN_NOW, detail_settled, text_of

NODES, PROJECTS = 300, 5


@pytest.fixture
def scale() -> Iterator[tuple[Any, Any]]:
    """The sandbox TPU API serving the generated fleet, and its world (edited by the tests)."""
    from sandbox.fleet_data import scale_world
    from sandbox.tpu_server import SandboxTpuApi

    world = scale_world(NODES, PROJECTS, FROZEN_NOW)
    server = SandboxTpuApi(world, page_size=100)
    server.start()
    yield server, world
    server.stop()


@pytest.fixture
def scale_services(scale: tuple[Any, Any], tmp_path: Path) -> Iterator[Services]:
    from remote.tpu.api import FleetSource

    server, _ = scale
    projects = tuple(ProjectConfig(f"scale-{p:02d}") for p in range(PROJECTS))
    config = Config(projects=projects, api_endpoint=server.endpoint, refresh_interval_s=3600)
    fleet = FleetSource(projects, api_endpoint=server.endpoint, timeout_s=10)
    services = Services(config=config, fleet=fleet, db_path=tmp_path / "history.db", clock=lambda: FROZEN_NOW)
    yield services
    services.close()


async def _until(pilot: Any, predicate: Any, what: str) -> None:
    for _ in range(300):
        if predicate():
            return
        await pilot.pause(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def _fleet_listed(pilot: Any, app: TpuConsoleApp) -> tuple[FleetScreen, FleetTable]:
    """The fleet screen once its first listing is shown, and its nodes table."""
    await _until(pilot, lambda: isinstance(app.screen, FleetScreen) and app.screen.snapshot is not None,
                 "the fleet")
    screen = app.screen
    assert isinstance(screen, FleetScreen)
    return screen, screen.query_one("#nodes", FleetTable)


class HeldSampler:
    """A sampler whose samples wait until the test lets them go; records which nodes it started."""

    started: list[str] = []
    release = asyncio.Event()

    def __init__(self, node: Any) -> None:
        self.node = node

    async def sample(self) -> ServingSample:
        HeldSampler.started.append(self.node.name)
        await HeldSampler.release.wait()
        return ServingSample("ready", model="m")

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


async def test_a_refresh_updates_changed_cells_in_place(scale: tuple[Any, Any], scale_services: Services) -> None:
    _, world = scale
    app = TpuConsoleApp(scale_services)
    async with app.run_test(size=(160, 40)) as pilot:
        screen, table = await _fleet_listed(pilot, app)
        assert table.row_count == NODES
        table.move_cursor(row=150, animate=False)
        await pilot.pause()
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        scroll_y, row = table.scroll_y, table.rows[key]
        assert scroll_y > 0 and screen._selected_key == key.value
        name = key.value.rsplit("/", 1)[-1]
        line_y = table.get_row_index(key) - int(table.scroll_y) + table.header_height
        assert "REPAIRING" not in table.render_line(line_y).text      # drawn (and cached) before the change
        with world.lock:                      # the selected node starts repairing
            project = world.projects[key.value.split("/")[0].removeprefix("node:")]
            node_json = next(n for n in project.nodes.values() if n["name"].endswith("/" + name))
            node_json["state"] = "REPAIRING"
        screen.action_refresh_fleet()
        await _until(pilot, lambda: str(table.get_cell(key, "STATE")) == "REPAIRING", "the refresh")
        assert table.rows[key] is row                         # updated in place, not laid anew
        assert "REPAIRING" in table.render_line(line_y).text      # and drawn anew, not from the render caches
        assert table.coordinate_to_cell_key(table.cursor_coordinate).row_key == key
        assert table.scroll_y == scroll_y and screen._selected_key == key.value


async def test_the_sampler_samples_a_bounded_number_the_rows_on_screen_first(
        scale_services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    HeldSampler.started = []
    HeldSampler.release = asyncio.Event()
    monkeypatch.setattr(serving, "SAMPLE_CONCURRENCY", 4)
    scale_services.serving_sampler = HeldSampler
    app = TpuConsoleApp(scale_services)
    async with app.run_test(size=(160, 40)) as pilot:
        screen, table = await _fleet_listed(pilot, app)
        table.move_cursor(row=200, animate=False)            # other rows on screen now
        await _until(pilot, lambda: len(HeldSampler.started) == 4, "the first samples")
        await pilot.pause(0.3)
        assert len(HeldSampler.started) == 4                 # never more than the bound at once
        HeldSampler.release.set()
        await _until(pilot, lambda: len(HeldSampler.started) >= 8, "the next samples")
        on_screen = [k.rsplit("/", 1)[-1] for k in table.visible_row_keys()
                     if screen._by_key[k].state == "READY"]
        assert HeldSampler.started[4:8] == on_screen[:4]    # the rows on screen first, top to bottom


class RepeatingSampler:
    """A sampler that says the same each time (a node serving as before), each sample stamped anew."""

    count = 0

    def __init__(self, node: Any) -> None:
        self.node = node

    async def sample(self) -> ServingSample:
        from datetime import timedelta

        RepeatingSampler.count += 1
        return ServingSample("ready", model="m", tokens_per_s=12.0, running=1, waiting=0,
                             sampled_at=FROZEN_NOW + timedelta(seconds=RepeatingSampler.count))

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


async def test_a_sample_that_shows_what_the_row_shows_changes_no_row_and_the_detail_says_when(
        scale_services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    RepeatingSampler.count = 0
    monkeypatch.setattr(serving, "SAMPLE_INTERVAL_S", 0.05)
    scale_services.serving_sampler = RepeatingSampler
    app = TpuConsoleApp(scale_services)
    async with app.run_test(size=(160, 40)) as pilot:
        screen, table = await _fleet_listed(pilot, app)
        key = next(k for k in table.visible_row_keys() if screen._by_key[k].state == "READY")
        table.move_cursor(row=table.get_row_index(key), animate=False)
        await _until(pilot, lambda: screen.serving[key].serving == "ready", "the first sample")
        await _until(pilot, lambda: str(table.get_cell(key, "SERVING")) == "ready", "the row drawn")
        version, row = screen._serving_version, screen._row_cache["nodes"][key][2]
        first = screen.serving[key].sampled_at
        await _until(pilot, lambda: screen.serving[key].sampled_at != first, "a second sample")
        screen._render_tables()
        assert screen._serving_version == version             # no row to draw again
        assert screen._row_cache["nodes"][key][2] is row       # the row as built, not built anew
        await detail_settled(pilot, screen)
        stamp = screen.serving[key].sampled_at            # read with the pane, no await between
        detail = text_of(screen.query_one("#detail-body", Static))
        assert stamp is not None and stamp != first
        assert stamp.strftime("%H:%M:%S UTC") in detail       # the detail pane says when it was sampled


class HeldLister:
    """The real fleet source, held until the test releases it (the first live listing "in flight")."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.released = asyncio.Event()

    async def list_fleet(self) -> Any:
        await self.released.wait()
        return await self.inner.list_fleet()

    def close(self) -> None:
        self.inner.close()


async def test_a_large_cached_fleet_draws_a_screenful_first_then_adds_the_rest_below(
        scale_services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from console.flows.fleet_cache import FleetCache
    from console.screens import fleet

    monkeypatch.setattr(fleet, "FIRST_ROWS", 40)
    monkeypatch.setattr(fleet, "CHUNK_ROWS", 50)
    listed = await scale_services.fleet.list_fleet()
    cache = FleetCache(tmp_path / "fleet-cache.json", "test")
    cache.save(listed)
    held = HeldLister(scale_services.fleet)
    scale_services.fleet = held
    scale_services.fleet_cache = cache
    shown: list[tuple[int, int]] = []
    original = FleetScreen.show_snapshot

    def recording(self: FleetScreen, snapshot: Any, **kwargs: Any) -> None:
        original(self, snapshot, **kwargs)
        shown.append((len(snapshot.nodes), self.query_one("#nodes", FleetTable).row_count))

    monkeypatch.setattr(FleetScreen, "show_snapshot", recording)
    app = TpuConsoleApp(scale_services, fleet_cache=cache)
    async with app.run_test(size=(160, 40)) as pilot:
        await _until(pilot, lambda: bool(shown), "the first frame")
        assert shown[0] == (40, 40)                           # the first frame: a screenful of the cache
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        table = screen.query_one("#nodes", FleetTable)
        first_rows = {key: table.rows[key] for key in list(table.rows)[:40]}
        await _until(pilot, lambda: table.row_count == NODES, "the rest of the cache")
        assert shown[-1] == (NODES, NODES) and screen.cached_at is not None     # still the cache
        assert [k.value for k in table.rows] == [f"node:{'/'.join(n.key)}" for n in listed.nodes]
        assert all(table.rows[key] is row for key, row in first_rows.items())  # added below, not laid anew
        held.released.set()
        await _until(pilot, lambda: screen.cached_at is None, "the live listing")
        assert table.row_count == NODES


async def test_quitting_the_console_kills_its_lister_process(scale: tuple[Any, Any], tmp_path: Path) -> None:
    from remote.tpu.lister_process import ProcessFleetSource

    server, _ = scale
    projects = tuple(ProjectConfig(f"scale-{p:02d}") for p in range(PROJECTS))
    config = Config(projects=projects, api_endpoint=server.endpoint, refresh_interval_s=3600)
    fleet = ProcessFleetSource(projects, api_endpoint=server.endpoint, timeout_s=10)
    services = Services(config=config, fleet=fleet, db_path=tmp_path / "history.db", clock=lambda: FROZEN_NOW)
    app = TpuConsoleApp(services)
    async with app.run_test(size=(160, 40)) as pilot:
        await _until(pilot, lambda: isinstance(app.screen, FleetScreen) and app.screen.cached_at is None
                     and app.screen.snapshot is not None, "the live fleet")
        screen = app.screen
        assert isinstance(screen, FleetScreen) and screen.snapshot is not None
        assert len(screen.snapshot.nodes) == NODES
        assert not [p for p in screen.snapshot.problems if p.project == "tpu-console"]  # listed by the child
        child = fleet.child
        assert child is not None and child.poll() is None
        await pilot.press("q")
    for _ in range(500):                        # killed, not waited for: reaped by a daemon thread
        if child.poll() is not None:
            break
        await asyncio.sleep(0.02)
    assert child.poll() == -9
    services.close()
