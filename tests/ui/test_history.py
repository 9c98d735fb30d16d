"""The history pane driven by Pilot: a real SQLite history written through HistoryStore,
the fleet from the sandbox TPU API (real google-cloud-tpu client)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Input, Static

from console.app import TpuConsoleApp
from console.flows import swap as swap_flow
from console.flows.history_query import parse_filter
from console.screens.fleet import FleetScreen
from console.screens.history.compare import CompareScreen, FlagChange
from console.screens.history.export import ExportScreen
from console.screens.history.screen import HistoryScreen
from console.services import Services
from remote.container.spec import ContainerSpec
from tests.ui.conftest import text_of
from tests.ui.history_seed import HF_TOKEN, LLAMA, seed_history


@pytest.fixture
def seeded(services: Services) -> Services:
    seed_history(services.db_path)
    return services


async def _until(pilot: Any, check: Any, what: str) -> None:
    for _ in range(200):
        await pilot.pause(0.02)
        if check():
            return
    raise AssertionError(f"timed out waiting for {what}")


async def _open(pilot: Any, node: Any = None) -> HistoryScreen:
    pilot.app.open_feature("history", node)
    await _until(pilot, lambda: isinstance(pilot.app.screen, HistoryScreen) and pilot.app.screen.benches_loaded,
                 "the history pane")
    return pilot.app.screen


def _ids(screen: HistoryScreen) -> list[int]:
    table = screen.query_one("#launches", DataTable)
    return [int(str(table.get_cell(row, "id")).lstrip("◆")) for row in table.rows]


def _column(screen: HistoryScreen, key: str) -> list[str]:
    table = screen.query_one("#launches", DataTable)
    return [str(table.get_cell(row, key)) for row in table.rows]


async def _select(pilot: Any, screen: HistoryScreen, launch_id: int) -> None:
    table = screen.query_one("#launches", DataTable)
    table.focus()
    table.move_cursor(row=table.get_row_index(str(launch_id)))
    await pilot.pause()
    assert screen.selected is not None and screen.selected.id == launch_id


async def _filter(pilot: Any, screen: HistoryScreen, line: str) -> None:
    loads = screen.loads
    await pilot.press("slash")
    box = screen.query_one("#history-filter", Input)
    box.value = line
    await pilot.press("enter")
    await _until(pilot, lambda: screen.loads > loads and screen.benches_loaded, f"filter {line!r}")


def _notes(app: Any) -> list[str]:
    return [n.message for n in app._notifications]


async def test_launches_newest_first_with_figures_and_key_flags(seeded: Services) -> None:
    async with TpuConsoleApp(seeded).run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        assert _ids(screen) == [6, 5, 4, 3, 2, 1]
        assert _column(screen, "outcome") == ["interrupted", "ready", "interrupted", "ready", "failed", "replaced"]
        assert _column(screen, "node")[:3] == ["vllm-flex-b", "vllm-old-z", "vllm-flex-b"]
        row = _ids(screen).index(3)
        assert [_column(screen, k)[row] for k in ("ready", "kv", "conc", "len", "gpu_mem", "tp")] == \
            ["8m00s", "824,320", "100.6", "8,192", "0.90", "4"]
        assert _column(screen, "failure")[_ids(screen).index(2)] == "RESOURCE_EXHAUSTED"
        assert "6 launches · newest first" in text_of(screen.query_one("#history-status", Static))


async def _history_from_the_fleet(pilot: Any, node_name: str) -> HistoryScreen:
    await _until(pilot, lambda: isinstance(pilot.app.screen, FleetScreen) and pilot.app.screen.snapshot,
                 "the fleet")
    fleet = pilot.app.screen
    nodes = fleet.query_one("#nodes", DataTable)
    names = [str(nodes.get_cell(r, "NAME")) for r in nodes.rows]
    nodes.move_cursor(row=names.index(node_name))
    await pilot.pause()
    await pilot.press("H")
    await _until(pilot, lambda: isinstance(pilot.app.screen, HistoryScreen) and pilot.app.screen.benches_loaded,
                 "the history pane")
    return pilot.app.screen


async def test_opened_from_a_node_lists_every_launch_with_the_nodes_newest_selected(seeded: Services) -> None:
    async with TpuConsoleApp(seeded).run_test(size=(200, 50)) as pilot:
        screen = await _history_from_the_fleet(pilot, "vllm-v5e-a")
        assert screen.query_one("#history-filter", Input).value == ""
        assert _ids(screen) == [6, 5, 4, 3, 2, 1]                  # every launch: the filter is opt-in
        assert screen.selected is not None and screen.selected.id == 3   # vllm-v5e-a's newest
        status = text_of(screen.query_one("#history-status", Static))
        assert "6 launches" in status and "N: vllm-v5e-a's launches only" in status
        loads = screen.loads
        await pilot.press("N")                                      # opt in: this node only
        await _until(pilot, lambda: screen.loads > loads and screen.benches_loaded, "the node's launches")
        assert _ids(screen) == [3, 2, 1]
        assert screen.query_one("#history-filter", Input).value == "node:vllm-v5e-a"
        assert "filter node=vllm-v5e-a" in text_of(screen.query_one("#history-status", Static))
        loads = screen.loads
        await pilot.press("N")                                      # again: every launch
        await _until(pilot, lambda: screen.loads > loads and screen.benches_loaded, "every launch")
        assert _ids(screen) == [6, 5, 4, 3, 2, 1]


async def test_opened_from_a_node_without_launches_says_so(seeded: Services) -> None:
    async with TpuConsoleApp(seeded).run_test(size=(200, 50)) as pilot:
        screen = await _history_from_the_fleet(pilot, "vllm-new-e")   # the first row, CREATING
        assert _ids(screen) == [6, 5, 4, 3, 2, 1]
        assert screen.selected is not None and screen.selected.id == 6
        assert "no launch of vllm-new-e in this list" in text_of(screen.query_one("#history-status", Static))


async def test_filter_terms_words_and_a_bad_key(seeded: Services) -> None:
    async with TpuConsoleApp(seeded).run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        await _filter(pilot, screen, "outcome:failed")
        assert _ids(screen) == [2]
        await _filter(pilot, screen, "node:vllm-v5e-a fp8")
        assert _ids(screen) == [3]
        await _filter(pilot, screen, "model:Qwen3-8B accelerator:v6e-8")
        assert _ids(screen) == [4]
        await _filter(pilot, screen, "llama 0.95 4")  # several words: all must match
        assert _ids(screen) == [2]
        await _filter(pilot, screen, "limit:2")
        assert _ids(screen) == [6, 5]
        assert "the 2 newest" in text_of(screen.query_one("#history-status", Static))
        await pilot.press("slash")
        screen.query_one("#history-filter", Input).value = "colour:red"
        await pilot.press("enter")
        await pilot.pause()
        status = text_of(screen.query_one("#history-status", Static))
        assert "unknown filter key 'colour'" in status and "previous filter" in status
        assert _ids(screen) == [6, 5]  # nothing lost


async def test_detail_shows_spec_timeline_figures_and_benchmarks(seeded: Services) -> None:
    async with TpuConsoleApp(seeded).run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        await _select(pilot, screen, 1)
        text = text_of(screen.query_one("#launch-detail-body", Static), width=140)
        assert "Launch 1 replaced" in text
        assert "ready          2026-11-29 09:06:40" in text and "time to ready  6m40s" in text
        assert "compile 4m50s" in text and "XLA compile    290.0 s" in text
        assert "412,160 tokens" in text and "HBM after weights   7.10 of 15.75 GiB per chip ×4" in text
        assert "env HF_TOKEN          ***" in text and HF_TOKEN not in text
        assert f"serve args            {LLAMA} --max-model-len 4096 --gpu-memory-utilization 0.90" in text
        assert "16 streams · 1,210.0 out tok/s · TTFT 180.0 ms · TPOT 13.1 ms" in text and "0.275" in text
        assert "1 stream · 92.0 out tok/s" in text and "answered in 0.41 s · tool call ok" in text
        await _select(pilot, screen, 2)
        text = text_of(screen.query_one("#launch-detail-body", Static), width=140)
        assert "RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm" in text
        assert "none recorded" in text


async def test_plot_shows_tokens_per_second_by_concurrency_and_cycles(seeded: Services) -> None:
    async with TpuConsoleApp(seeded).run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        plot = text_of(screen.query_one("#bench-plot", Static))
        lines = plot.splitlines()
        assert "Output tokens/s by concurrency" in lines[0]
        assert "1 stream" in lines[1] and "16 streams" in lines[1]
        row = next(x for x in lines if " 3 v5litepod-4 " in x)
        assert "88.0" in row and "790.0" in row
        assert [x.lstrip("▶ ").split()[0] for x in lines[2:]] == ["5", "3", "1"]  # launches with throughput runs
        await _select(pilot, screen, 3)
        assert "▶ 3 v5litepod-4" in text_of(screen.query_one("#bench-plot", Static))
        await pilot.press("p")
        plot = text_of(screen.query_one("#bench-plot", Static))
        assert "TTFT median (ms) by concurrency" in plot and "240.0" in plot


async def test_compare_marked_and_selected_shows_flag_and_figure_diff(seeded: Services) -> None:
    async with TpuConsoleApp(seeded).run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        await _select(pilot, screen, 3)
        await pilot.press("m")
        assert str(screen.query_one("#launches", DataTable).get_cell("3", "id")) == "◆3"
        await _select(pilot, screen, 1)
        await pilot.press("c")
        await _until(pilot, lambda: isinstance(pilot.app.screen, CompareScreen), "the compare view")
        compare = pilot.app.screen
        assert (compare.a.id, compare.b.id) == (1, 3)  # older launch is A
        assert compare.flag_rows == [
            FlagChange("image", "vllm/vllm-tpu:v0.11.1", "vllm/vllm-tpu:v0.12.0", "changed"),
            FlagChange("--max-model-len", "4096", "8192", "changed"),
            FlagChange("--kv-cache-dtype", None, "fp8", "added"),
        ]
        figures = {r.figure: r for r in compare.figure_rows}
        assert (figures["KV cache (tokens)"].delta, figures["KV cache (tokens)"].verdict) == (412_160, "better")
        assert figures["XLA compile (s)"].delta == 82.0 and figures["XLA compile (s)"].verdict == "worse"
        assert figures["time to ready (s)"].a == 400.0 and figures["time to ready (s)"].b == 480.0
        tok = figures["out tok/s @16 streams"]
        assert (tok.a, tok.b, tok.verdict) == (1210.0, 790.0, "worse")
        assert figures["$/Mtok @16 streams"].b == 0.422
        shown = text_of(compare.query_one("#figure-diff", Static), width=160)
        row = next(x for x in shown.splitlines() if "out tok/s @16 streams" in x)
        assert "1,210.0" in row and "790.0" in row and "-420.0" in row and "-34.7%" in row and "worse" in row
        assert "kv-cache-dtype" in text_of(compare.query_one("#flag-diff", Static), width=160)
        await pilot.press("x")
        swapped = {r.figure: r for r in compare.figure_rows}
        assert compare.a.id == 3 and swapped["out tok/s @16 streams"].a == 790.0
        await pilot.press("escape")
        assert pilot.app.screen is screen


async def test_compare_without_a_mark_uses_the_launch_it_replaced(seeded: Services) -> None:
    async with TpuConsoleApp(seeded).run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        await _select(pilot, screen, 4)
        await pilot.press("c")
        await pilot.pause()
        assert "Mark a launch with m, select another, then press c." in _notes(pilot.app)
        await _select(pilot, screen, 3)
        await pilot.press("c")
        await _until(pilot, lambda: isinstance(pilot.app.screen, CompareScreen), "the compare view")
        compare = pilot.app.screen
        assert (compare.a.id, compare.b.id) == (2, 3)
        assert FlagChange("--max-model-len", "32768", "8192", "changed") in compare.flag_rows


async def test_relaunch_opens_the_swap_form_with_the_launch_spec(seeded: Services) -> None:
    from console.screens.history.relaunch import RelaunchScreen
    from console.screens.swap.screen import SwapScreen

    async with TpuConsoleApp(seeded).run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        await _select(pilot, screen, 3)
        await pilot.press("L")
        await _until(pilot, lambda: isinstance(pilot.app.screen, SwapScreen), "the swap form")
        swap = pilot.app.screen
        assert isinstance(swap, RelaunchScreen) and swap.launch.id == 3
        assert swap.node.key == ("inference-prod", "us-west4-a", "vllm-v5e-a")
        assert any("Secrets were masked when launch 3 was stored (HF_TOKEN)" in n for n in _notes(pilot.app))
        # What the form starts from: the launch's flags, the running container's real secret.
        running = ContainerSpec(name="vllm", image="vllm/vllm-tpu:v0.12.0", model=LLAMA,
                                env={"HF_TOKEN": "hf_live_value_123456"})
        target, _note = swap.case.base_for(swap_flow.RunningSpec(running, {"Id": "d" * 64}))
        assert target is not None and target.image == "vllm/vllm-tpu:v0.12.0"
        assert target.flag("max-model-len") == "8192" and target.flag("kv-cache-dtype") == "fp8"
        assert target.env["HF_TOKEN"] == "hf_live_value_123456"


async def test_the_list_is_read_again_when_a_relaunch_returns(seeded: Services) -> None:
    """A relaunch records its launch while the swap form is on top; back in the pane it is listed
    (no ``r`` needed), and the selection stays where it was."""
    from console.screens.history.relaunch import RelaunchScreen
    from store.history import HistoryStore

    async with TpuConsoleApp(seeded).run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        await _select(pilot, screen, 3)
        await pilot.press("L")
        await _until(pilot, lambda: isinstance(pilot.app.screen, RelaunchScreen), "the swap form")
        with HistoryStore(seeded.db_path) as store:   # what the swap records when it runs
            new_id = store.start_launch(node="vllm-v5e-a", project="inference-prod", zone="us-west4-a",
                                        accelerator_type="v5litepod-4", outcome="unwatched",
                                        requested_at="2026-11-30T11:59:00Z", replaced_launch_id=3)
        loads = screen.loads
        pilot.app.pop_screen()
        await _until(pilot, lambda: screen.loads > loads, "the list read again")
        assert _ids(screen)[0] == new_id and screen.selected is not None and screen.selected.id == 3


async def test_relaunch_says_when_the_node_is_gone_or_no_spec_was_recorded(seeded: Services) -> None:
    async with TpuConsoleApp(seeded).run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        await _select(pilot, screen, 5)
        await pilot.press("L")
        await _until(pilot, lambda: any("no longer in the fleet" in n for n in _notes(pilot.app)), "the sentence")
        assert ("Node vllm-old-z (inference-prod/us-east5-a) is no longer in the fleet, so launch 5 cannot be "
                "relaunched there.") in _notes(pilot.app)
        await _select(pilot, screen, 6)
        await pilot.press("L")
        await pilot.pause()
        assert "Launch 6 recorded no container spec, so it cannot be relaunched." in _notes(pilot.app)
        assert pilot.app.screen is screen


async def _export(pilot: Any, screen: HistoryScreen, name: str) -> ExportScreen:
    await pilot.press("e")
    await _until(pilot, lambda: isinstance(pilot.app.screen, ExportScreen), "the export modal")
    modal = pilot.app.screen
    assert modal.query_one("#export-path", Input).value == "tpu-console-history-20261130-120000.json"
    modal.query_one("#export-path", Input).value = name
    await pilot.press("enter")
    return modal


async def test_export_writes_the_filtered_rows_as_json_and_csv(seeded: Services, tmp_path: Path) -> None:
    async with TpuConsoleApp(seeded).run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        await _filter(pilot, screen, "node:vllm-v5e-a")
        target = tmp_path / "v5e.json"
        await _export(pilot, screen, str(target))
        await _until(pilot, lambda: any(n.title == "Exported" for n in pilot.app._notifications), "the export")
        data = json.loads(target.read_text())
        assert [x["id"] for x in data] == [3, 2, 1]
        assert [b["kind"] for b in data[2]["benchmarks"]] == ["smoke", "throughput", "throughput"]
        assert data[0]["container_spec"]["env"]["HF_TOKEN"] == "***"
        assert HF_TOKEN not in target.read_text()
        assert any("3 launches as JSON" in n and str(target) in n for n in _notes(pilot.app))

        await _export(pilot, screen, str(tmp_path / "v5e.csv"))
        await _until(pilot, lambda: (tmp_path / "v5e.csv").exists(), "the CSV file")
        await _until(pilot, lambda: sum(n.title == "Exported" for n in pilot.app._notifications) == 2, "the notice")
        rows = list(csv.DictReader((tmp_path / "v5e.csv").open()))
        assert [(r["id"], r["outcome"], r["failure_kind"]) for r in rows] == \
            [("3", "ready", ""), ("2", "failed", "RESOURCE_EXHAUSTED"), ("1", "replaced", "")]

        modal = await _export(pilot, screen, str(target))  # exists: refused, nothing overwritten
        await pilot.pause()
        assert pilot.app.screen is modal
        assert "already exists" in text_of(modal.query_one("#export-error", Static))
        assert [x["id"] for x in json.loads(target.read_text())] == [3, 2, 1]
        modal.query_one("#export-path", Input).value = str(tmp_path / "v5e.txt")
        await pilot.press("enter")
        assert "end the name in .json or .csv" in text_of(modal.query_one("#export-error", Static))
        await pilot.press("escape")
        assert pilot.app.screen is screen


async def test_bindings_have_ids_and_reach_the_command_palette(seeded: Services) -> None:
    async with TpuConsoleApp(seeded).run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        ids = {b.id for b in screen.BINDINGS}
        assert {"filter", "history_mark", "history_compare", "history_relaunch", "history_export"} <= ids
        titles = [c.title for c in pilot.app.get_system_commands(screen)]
        assert "Relaunch (L)" in titles and "Compare (c)" in titles and "Export (e)" in titles


async def test_an_unreadable_database_is_a_sentence(services: Services) -> None:
    services.db_path.write_bytes(b"not a database, just bytes" * 100)
    async with TpuConsoleApp(services).run_test(size=(200, 50)) as pilot:
        pilot.app.open_feature("history", None)
        await _until(pilot, lambda: isinstance(pilot.app.screen, HistoryScreen) and pilot.app.screen.problem,
                     "the problem")
        status = text_of(pilot.app.screen.query_one("#history-status", Static))
        assert status.startswith("The history cannot be read: ") and "history.db" in status
        assert _ids(pilot.app.screen) == []


def test_plot_bars_and_newest_run_per_concurrency() -> None:
    from console.widgets.bench_plot import METRICS, bar, series
    from store.records import BenchmarkRecord, Launch

    assert bar(1.0, 4) == "████" and bar(0.5, 4) == "██  " and bar(0.0, 3) == "   "
    assert bar(0.53, 4) == "██▏ "  # 0.53 * 32 eighths = 17 -> two cells and one eighth
    launch = Launch(id=7, node="n", requested_at="2026-11-30T00:00:00Z")
    runs = [BenchmarkRecord(id=i, launch_id=7, kind="throughput", started_at=f"2026-11-30T0{i}:00:00Z",
                            concurrency=16, output_tokens_per_s=tok) for i, tok in ((1, 900.0), (2, 1100.0))]
    smoke = BenchmarkRecord(id=3, launch_id=7, kind="smoke", started_at="2026-11-30T03:00:00Z", concurrency=16,
                            output_tokens_per_s=5.0)
    chosen, levels, points = series([launch], {7: [*runs, smoke]}, METRICS[0])
    assert [x.id for x in chosen] == [7] and levels == [16] and points == {(7, 16): 1100.0}


def test_parse_filter_terms() -> None:
    flt = parse_filter('node:vllm-v5e-a outcome:FAILED acc:v6e-8 model:"Qwen/Qwen3-8B" fp8 Tool')
    assert (flt.node, flt.outcome, flt.accelerator_type, flt.model, flt.words) == \
        ("vllm-v5e-a", "failed", "v6e-8", "Qwen/Qwen3-8B", ("fp8", "tool"))
    assert parse_filter("vllm/vllm-tpu:nightly").words == ("vllm/vllm-tpu:nightly",)  # an image tag is a word
    for bad, message in (("outcome:ok", "not an outcome"), ("node:", "needs a value"), ("limit:0", "limit:0"),
                         ("zone:x", "unknown filter key 'zone'")):
        with pytest.raises(ValueError, match=message):
            parse_filter(bad)


def test_plot_fits_its_width_whole() -> None:
    """Four concurrencies in the half of a 160-column screen: every value whole, no "…"; narrower
    drops the highest concurrencies (and says so) rather than cutting them."""
    from io import StringIO

    from rich.console import Console

    from console.widgets.bench_plot import METRICS, render_plot
    from store.records import BenchmarkRecord, Launch

    launch = Launch(id=3, node="n", requested_at="2026-11-30T00:00:00Z", accelerator_type="v5litepod-4",
                    model="meta-llama/Llama-3.1-8B-Instruct")
    runs = [BenchmarkRecord(id=i, launch_id=3, kind="throughput", started_at=f"2026-11-30T0{i}:00:00Z",
                            concurrency=c, output_tokens_per_s=tok)
            for i, (c, tok) in enumerate(((1, 88.0), (4, 330.5), (16, 1210.0), (64, 2400.25)), start=1)]

    def text(width: int) -> str:
        console = Console(file=StringIO(), width=width, color_system=None)
        console.print(render_plot([launch], {3: runs}, METRICS[0], width=width))
        return console.file.getvalue()  # type: ignore[attr-defined]

    wide = text(77)
    assert "…" not in wide and all(v in wide for v in ("88.0", "330.5", "1,210.0", "2,400.2"))
    assert "64 streams" in wide and "3 v5litepod-4 L" in wide
    narrow = text(50)
    assert "…" not in narrow and "88.0" in narrow and "2,400.2" not in narrow
    assert "more concurrencies: widen the terminal" in narrow


async def test_detail_names_the_launchs_log_file(seeded: Services) -> None:
    from console.flows.launch_log import log_opener

    launch = seeded.store.get_launch(1)
    assert launch is not None and launch.container_id
    async with TpuConsoleApp(seeded).run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        await _select(pilot, screen, 1)
        text = text_of(screen.query_one("#launch-detail-body", Static), width=300)
        assert "full log: none kept on disk" in text
        log = log_opener(seeded.config.logs.folder, launch.node, 2, max_mib=1, keep=1)(launch.container_id)
        log.write(["a line"])
        log.close()
        await _select(pilot, screen, 2)
        await _select(pilot, screen, 1)
        text = text_of(screen.query_one("#launch-detail-body", Static), width=300)
        assert f"full log: {log.path}" in text
