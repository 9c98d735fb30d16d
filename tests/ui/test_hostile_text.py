"""Hostile text from the TPU API in the TUI (Pilot): the fleet rows, the detail pane, problems."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.widgets import DataTable, Static

from console.app import TpuConsoleApp
from console.config import Config, ProjectConfig
from console.screens.fleet import FleetScreen
from console.services import Services
from console.widgets.log_pane import LogPane
from console.widgets.startup_panel import PanelInfo, StartupPanel
from remote.vllm_log.reader import StartupReader
from tests.hostile import HOSTILE, HOSTILE_NAME, SHOWN, SHOWN_NAME, assert_clean, hostile_world
from tests.ui.conftest import FROZEN_NOW, detail_settled, running_sandbox, text_of


@pytest.fixture
def hostile_services(tmp_path: Path):
    from remote.tpu.api import FleetSource
    from sandbox.tpu_server import SandboxTpuApi

    server = SandboxTpuApi(hostile_world(FROZEN_NOW))
    endpoint = server.start()
    projects = (ProjectConfig("inference-prod"),)
    config = Config(projects=projects, api_endpoint=endpoint, refresh_interval_s=3600)
    svc = Services(config=config, fleet=FleetSource(projects, api_endpoint=endpoint, timeout_s=10),
                   db_path=tmp_path / "history.db", clock=lambda: FROZEN_NOW)
    yield svc
    svc.close()
    server.stop()


async def _loaded(pilot: Any) -> FleetScreen:
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, FleetScreen) and screen.snapshot is not None
    return screen


def _cells(table: DataTable, column: str) -> list[str]:
    return [str(table.get_cell(row, column)) for row in table.rows]


async def test_fleet_rows_and_detail_show_hostile_fields_literally(hostile_services: Services) -> None:
    app = TpuConsoleApp(hostile_services)
    async with app.run_test(size=(400, 50)) as pilot:     # wide enough for every (long, hostile) column
        screen = await _loaded(pilot)
        nodes = screen.query_one("#nodes", DataTable)
        names = _cells(nodes, "NAME")
        assert SHOWN_NAME not in names and HOSTILE_NAME not in names     # GCP's name rule: not a row...
        problems = text_of(screen.query_one("#problems", Static), width=400)
        assert_clean(problems)
        assert f"'{SHOWN_NAME}' is not a node name" in problems          # ... but one unreadable line
        row = names.index("vllm-v5e-a")
        assert _cells(nodes, "RUNTIME")[row] == SHOWN
        qrs = screen.query_one("#qrs", DataTable)
        failures = dict(zip(_cells(qrs, "NAME"), _cells(qrs, "FAILURE"), strict=True))
        assert failures["qr-failed"] == SHOWN
        nodes.focus()
        nodes.move_cursor(row=row)                      # selecting the row used to raise MarkupError
        await pilot.pause()
        await detail_settled(pilot, screen)
        detail = text_of(screen.query_one("#detail-body", Static), width=400)
        assert_clean(detail)
        assert f"health_description {SHOWN}" in " ".join(detail.split())
        assert f"runtime_version    {SHOWN}" in detail or f"runtime_version {SHOWN}" in " ".join(detail.split())
        assert isinstance(pilot.app.screen, FleetScreen)      # no error screen, still running


async def test_the_filter_takes_markup_literally(hostile_services: Services) -> None:
    app = TpuConsoleApp(hostile_services)
    async with app.run_test(size=(220, 50)) as pilot:
        screen = await _loaded(pilot)
        await pilot.press("slash", *"[/x]")
        await pilot.pause()
        nodes = screen.query_one("#nodes", DataTable)
        assert _cells(nodes, "NAME") == ["vllm-v5e-a"]          # only its fields contain "[/x]"
        assert "· filter: [/x]" in str(screen.query_one("#nodes-title").render())
        assert isinstance(pilot.app.screen, FleetScreen)


def test_toasts_never_parse_markup() -> None:
    """The app's one notify: markup and controls in a message are shown literally."""
    import asyncio

    async def run() -> None:
        services = Services(config=Config(projects=(), refresh_interval_s=3600), fleet=_NoFleet(),
                            db_path=Path("/nonexistent/h.db"), clock=lambda: FROZEN_NOW)
        app = TpuConsoleApp(services)
        async with app.run_test() as pilot:
            app.notify(HOSTILE, title=HOSTILE, markup=True)
            await pilot.pause()
            (toast,) = list(app._notifications)
            assert (toast.message, toast.title, toast.markup) == (SHOWN, SHOWN, False)

    asyncio.run(run())


class _NoFleet:
    async def list_fleet(self) -> Any:
        from remote.models import FleetSnapshot

        return FleetSnapshot(fetched_at=FROZEN_NOW)


# --- the startup view: its panel and log view fed a hostile container log --------------------


class _StartupParts(App[None]):
    """The startup screen's panel and log pane, fed like the screen feeds them."""

    def compose(self) -> ComposeResult:
        yield StartupPanel(id="panel")
        yield LogPane(5000, id="log-pane")

    def feed(self, lines: list[str], **info: Any) -> None:
        reader = StartupReader()
        for line in lines:
            reader.feed_line(line)
        reader.close()
        pane = self.query_one(LogPane)
        pane.view.write_lines(lines)
        pane.update_title()
        self.query_one("#panel", StartupPanel).show(PanelInfo(state=reader.state, **info))


def _hostile_log() -> list[str]:
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-logs"   # a copy of the corpus file
    text = (fixtures / "15-tpujax-maxtext3574-v5e-tp4-config-crash.log").read_text()
    line = HOSTILE.replace("\n", " ")
    return text.replace("ValueError: Resource axis", f"ValueError: {line} --api-key sk-{'a' * 20} axis").splitlines()


async def test_startup_panel_and_log_view_show_a_hostile_log_literally() -> None:
    app = _StartupParts()
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(_hostile_log(), problem=HOSTILE, served_models=(HOSTILE,), tunnel_note=HOSTILE)
        await pilot.pause()
        banner = text_of(app.query_one("#panel-banner", Static), width=400)
        assert_clean(banner)
        evidence = next(line for line in banner.splitlines() if line.startswith("Evidence "))
        # the reader drops the ANSI sequences; NUL goes, the markup stays, the key is masked
        assert evidence.rstrip() == "Evidence (EngineCore_DP0 pid=1356450) ERROR 04-04 21:50:30 [core.py:1111] " \
            "ValueError: [/x][link=http://e.x]L[/link] forged! --api-key *** axis: attn_dp of PartitionSpec(" \
            "'data', None, ('model', 'attn_dp')) is not found in mesh: ('data', 'model')."
        status = text_of(app.query_one("#panel-status", Static), width=400)
        assert status.strip() == f"✘ {SHOWN}"
        view = app.query_one(LogPane).view
        shown = [line for line in view.shown_lines() if "ValueError: [/x]" in line]
        # the log view drops whole escape sequences (the log's colours), like the reader
        assert len(shown) == 1 and shown[0].endswith("ValueError: [/x][link=http://e.x]L[/link] forged! "
                                                     "--api-key *** axis: attn_dp of PartitionSpec("
                                                     "'data', None, ('model', 'attn_dp')) is not found in mesh: "
                                                     "('data', 'model').")
        assert all(line.isprintable() for line in view.shown_lines())


async def test_the_log_view_keeps_a_line_a_line() -> None:
    app = _StartupParts()
    async with app.run_test(size=(200, 50)) as pilot:
        view = app.query_one(LogPane).view
        view.write_lines([f"INFO 01-02 03:04:05 [x.py:1] {HOSTILE}\x9b2J\x1b]8;;http://e.x\x1b\\link"])
        await pilot.pause()
        # whole escape sequences go (as the reader drops them), then every other control byte
        assert view.shown_lines() == ["INFO 01-02 03:04:05 [x.py:1] [/x][link=http://e.x]L[/link]\\nforged!2Jlink"]


# --- the swap view and its confirm dialog, for a container with hostile values ----------------


@pytest.fixture
def sandbox(tmp_path: Path) -> Any:
    with running_sandbox(tmp_path / "sandbox", boot_s=0.5, fast_boot_s=0.3) as box:
        yield box


#: What the swap form accepts to edit (it refuses NUL, and a newline in an env line, with a reason).
EDITABLE = HOSTILE.replace("\x00", "")


async def _boot_hostile(vm: Any) -> None:
    vm.docker.remove(vm.docker.find("vllm"))
    await vm.boot_container(["Qwen/Qwen3-0.6B", "--served-model-name", EDITABLE],
                            env=[f"NOTE={EDITABLE.replace(chr(10), ' ')}"])


async def _until(pilot: Any, cond: Any, what: str, timeout_s: float = 20.0) -> Any:
    for _ in range(int(timeout_s / 0.05)):
        value = cond()
        if value:
            return value
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_swap_view_and_confirm_show_one_printable_line_per_command(sandbox: Any) -> None:
    from console.config import load_config
    from console.screens.confirm import ConfirmScreen
    from console.screens.swap.screen import SwapScreen
    from console.services import build_services

    sandbox.call(_boot_hostile(sandbox.vms["vllm-v5e-a"]))
    app = TpuConsoleApp(build_services(load_config(str(sandbox.config_path)), db_path=sandbox.db_path))
    async with app.run_test(size=(220, 60)) as pilot:
        fleet = await _until(pilot, lambda: isinstance(app.screen, FleetScreen) and app.screen.snapshot
                             and app.screen, "the fleet")
        table = fleet.query_one("#nodes", DataTable)
        table.move_cursor(row=_cells(table, "NAME").index("vllm-v5e-a"))
        await pilot.pause()
        await pilot.press("s")
        screen = await _until(pilot, lambda: type(app.screen) is SwapScreen and app.screen.base is not None
                              and app.screen, "the swap view")
        from textual.widgets import Input

        screen.query_one("#f-max-model-len", Input).value = "16384"
        await pilot.pause()
        assert screen.plan is not None, screen.problem
        await pilot.pause()
        quoted = "'[/x][link=http://e.x]L[/link]]52;c;QQ==[2J\\nforged!'"     # the newline: one line
        commands = text_of(screen.query_one("#swap-commands", Static), width=600)
        assert_clean(commands)
        lines = commands.rstrip("\n").splitlines()
        assert len(lines) == len(screen.plan.commands)             # no value added a line
        (run,) = [line for line in lines if "docker run" in line]
        assert f"--served-model-name {quoted}" in run
        assert "-e 'NOTE=[/x][link=http://e.x]L[/link]]52;c;QQ==[2J forged!'" in run
        await pilot.press("ctrl+s")
        modal = await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen, "the confirm")
        shown = text_of(modal.query_one("#confirm-commands", Static), width=600)
        assert_clean(shown)
        assert shown.rstrip("\n").splitlines() == lines
        message = text_of(modal.query_one("#confirm-message", Static), width=600)
        assert_clean(message)
        await pilot.press("n")
        assert isinstance(app.screen, SwapScreen)


# --- the history pane: recorded values from hostile launches ----------------------------------


async def test_history_pane_and_detail_show_recorded_values_literally(hostile_services: Services) -> None:
    from console.screens.history.screen import HistoryScreen
    from store.history import HistoryStore

    with HistoryStore(hostile_services.db_path) as store:
        launch = store.start_launch(node=HOSTILE_NAME, accelerator_type="v6e-8", model=HOSTILE,
                                    serve_args=["--served-model-name", HOSTILE], requested_at="2026-05-01T10:00:00Z")
        store.update_launch(launch, outcome="failed", failure_kind="config_error", failure_detail=HOSTILE)
        store.add_benchmark(launch, "smoke", {"model": HOSTILE}, {"error": HOSTILE})
    app = TpuConsoleApp(hostile_services)
    async with app.run_test(size=(220, 60)) as pilot:
        await _loaded(pilot)
        app.open_feature("history", None)
        screen = await _until(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen.benches_loaded
                              and app.screen, "the history pane")
        table = screen.query_one("#launches", DataTable)
        table.focus()
        table.move_cursor(row=0)
        await pilot.pause()
        await pilot.pause()
        cells = [text_of(type("W", (), {"content": table.get_cell_at((0, c))})(), width=400).strip()
                 for c in range(len(table.columns))]
        assert_clean(" ".join(cells))
        assert SHOWN_NAME in cells
        detail = text_of(screen.query_one("#launch-detail-body", Static), width=600)
        assert_clean(detail)
        assert f"failure config_error: {SHOWN}" in detail
        assert f"{SHOWN_NAME} · v6e-8 · {SHOWN}" in detail
        assert isinstance(app.screen, HistoryScreen)


# --- the bench view: a server whose served model name and key check are hostile/strict -------


async def test_bench_view_shows_a_hostile_served_model_name_literally(sandbox: Any) -> None:
    import time

    import httpx
    from textual.widgets import Select

    from console.config import load_config
    from console.screens.bench import BenchScreen
    from console.services import build_services

    vm = sandbox.vms["vllm-v5e-a"]

    async def boot() -> None:
        vm.docker.remove(vm.docker.find("vllm"))
        await vm.boot_container(["Qwen/Qwen3-0.6B", "--served-model-name", "[/x][link=http://e.x]L[/link]\x1b[2J",
                                 "--api-key", "k-4711-secret", "--enable-auto-tool-choice",
                                 "--tool-call-parser", "hermes"])

    sandbox.call(boot())
    for _ in range(400):                                    # the new container's vLLM is ready
        try:
            if httpx.get(f"http://127.0.0.1:{vm.openai_port}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    app = TpuConsoleApp(build_services(load_config(str(sandbox.config_path)), db_path=sandbox.db_path))
    async with app.run_test(size=(200, 50)) as pilot:
        fleet = await _until(pilot, lambda: isinstance(app.screen, FleetScreen) and app.screen.snapshot
                             and app.screen, "the fleet")
        table = fleet.query_one("#nodes", DataTable)
        table.move_cursor(row=_cells(table, "NAME").index("vllm-v5e-a"))
        await pilot.pause()
        await pilot.press("b")
        screen = await _until(pilot, lambda: isinstance(app.screen, BenchScreen) and app.screen, "the bench view")
        screen.query_one("#f-kind", Select).value = "smoke"
        await pilot.pause()
        await pilot.press("ctrl+r")
        await pilot.pause()
        await _until(pilot, lambda: not screen.running, "the smoke run", timeout_s=60)
        results = text_of(screen.query_one("#results-body", Static), width=300)
        assert_clean(results)
        flat = " ".join(results.split())
        assert "Smoke: [/x][link=http://e.x]L[/link][2J on vllm-v5e-a (v5litepod-4, on-demand)" in flat   # literal
        assert "served model │ [/x][link=http://e.x]L[/link][2J" in flat
        assert "PASS" in flat          # the container's --api-key was sent, its tool flags read
        assert b"k-4711-secret" not in sandbox.db_path.read_bytes()
