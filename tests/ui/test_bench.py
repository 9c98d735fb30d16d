"""The benchmark screen driven by Pilot against the sandbox (real asyncssh, httpx, SQLite)."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from textual.widgets import Checkbox, DataTable, Input, Select, Static

from console.app import TpuConsoleApp
from console.cli import main
from console.config import load_config
from console.screens.bench import BenchScreen
from console.screens.confirm import ConfirmScreen
from console.services import Services
from remote.bench import usd_per_mtok
from remote.models import Node
from store.history import HistoryStore
from tests.sandbox_keys import host_keys_unpublished
from tests.ui.conftest import FROZEN_NOW, text_of

NODE = "vllm-v5e-a"         # v5litepod-4, on-demand; the sandbox serves Llama 3.1 8B, max-model-len 32768


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The whole sandbox (TPU API, SSH VMs, vLLM stand-ins), the v5e node's vLLM ready."""
    from sandbox.runner import Sandbox

    sb = Sandbox(tmp_path_factory.mktemp("sandbox"), boot_s=1.0, fast_boot_s=0.3)
    sb.start()
    url = f"http://127.0.0.1:{sb.vms[NODE].openai_port}/v1/models"
    for _ in range(100):
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    else:
        raise AssertionError("the sandbox vLLM never became ready")
    yield sb
    sb.stop()


@pytest.fixture
def sb_services(sandbox: Any, tmp_path: Path) -> Iterator[Services]:
    """Services built from the sandbox's own config (its SSH key, known hosts, ports), a fresh DB."""
    from console.services import build_services

    config = replace(load_config(str(sandbox.config_path)), refresh_interval_s=3600)
    svc = build_services(config, db_path=tmp_path / "history.db", sandbox=sandbox)
    svc.clock = lambda: FROZEN_NOW
    yield svc
    svc.close()



async def _open_bench(pilot: Any) -> BenchScreen:
    """Wait for the fleet, select the node and press ``b``."""
    from console.screens.fleet import FleetScreen

    for _ in range(200):
        await pilot.pause(0.05)
        screen = pilot.app.screen
        if isinstance(screen, FleetScreen) and screen.snapshot is not None:
            break
    table = screen.query_one("#nodes", DataTable)
    table.move_cursor(row=table.get_row_index(f"node:inference-prod/us-west4-a/{NODE}"))
    await pilot.pause()
    await pilot.press("b")
    await pilot.pause()
    assert isinstance(pilot.app.screen, BenchScreen)
    return pilot.app.screen


async def _fill(pilot: Any, screen: BenchScreen, kind: str, **fields: str) -> None:
    screen.query_one("#f-kind", Select).value = kind
    for name, value in fields.items():
        screen.query_one(f"#f-{name}", Input).value = value
    await pilot.pause()


async def _run_to_end(pilot: Any, screen: BenchScreen, limit_s: float = 60) -> str:
    await pilot.press("ctrl+r")
    await pilot.pause()
    deadline = time.monotonic() + limit_s
    while screen.running and time.monotonic() < deadline:
        await pilot.pause(0.1)
    assert not screen.running, "the benchmark did not finish"
    return text_of(screen.query_one("#bench-status", Static))


def _row(text: str, first_cell: str) -> list[str]:
    """Cells of the table row whose first cell is ``first_cell``."""
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line)[1:-1]]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in:\n{text}")


async def test_throughput_sweep_end_to_end(sandbox: Any, sb_services: Services) -> None:
    # The node's current launch (by container id) and a newer one of another container:
    # the benchmark must attach to the one that is running.
    vm = sandbox.vms[NODE]
    container_id = next(iter(vm.docker.containers.values())).id
    with HistoryStore(sb_services.db_path) as store:
        current = store.start_launch(node=NODE, container_id=container_id, accelerator_type="v5litepod-4")
        store.start_launch(node=NODE, container_id="f" * 64, accelerator_type="v5litepod-4")
    app = TpuConsoleApp(sb_services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open_bench(pilot)
        await _fill(pilot, screen, "throughput", streams="1,4", prompt_tokens="64", output_tokens="16",
                    requests="4")
        status = await _run_to_end(pilot, screen)
        assert status.startswith("Done after") and "recorded in the history (2 rows)" in status
        progress = text_of(screen.query_one("#bench-progress", Static))
        assert "4 streams (level 2 of 2)" in progress and "4/4 requests" in progress
        text = text_of(screen.query_one("#results-body", Static), width=220)
    assert [r.concurrency for r in screen.results] == [1, 4]
    price = sb_services.config.prices["v5e"]["on-demand"]
    assert "$1.20 per chip-hour x 4 chips = $4.80/h (v5e, on-demand)" in text
    for result in screen.results:
        m = result.metrics
        assert (m.completed, m.failed, m.total_output_tokens) == (4, 0, 64)
        assert m.output_throughput > 0 and m.ttft.mean_ms > 0
        cells = _row(text, str(result.concurrency))
        assert cells[1:3] == ["4", "0"]
        assert cells[5] == f"{result.mean_output_tokens:,.1f}" == "16.0"        # mean output per request
        assert cells[7] == f"{m.output_throughput:,.0f}" and float(cells[7].replace(",", "")) > 0
        assert cells[-1] == f"{usd_per_mtok(price, 4, m.output_throughput):.3f}"
    with HistoryStore(sb_services.db_path) as store:
        rows = store.benchmarks_for(current)
    rows = sorted(rows, key=lambda b: b.id)
    assert [(b.kind, b.concurrency) for b in rows] == [("throughput", 1), ("throughput", 4)]
    for b, result in zip(rows, screen.results, strict=True):
        assert b.price_per_hour_usd == pytest.approx(4 * price)
        assert b.output_tokens_per_s == pytest.approx(result.metrics.output_throughput)
        assert b.usd_per_mtok == pytest.approx(usd_per_mtok(price, 4, result.metrics.output_throughput))
        assert b.params["streams"] == [1, 4] and b.params["output_tokens"] == 16
        assert b.results["completed"] == 4


async def test_longctx_over_max_model_len_shows_the_servers_400(sandbox: Any, sb_services: Services) -> None:
    app = TpuConsoleApp(sb_services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open_bench(pilot)
        await _fill(pilot, screen, "longctx", depths="0.5", context_tokens="2000")
        screen.query_one("#f-over_limit", Checkbox).value = True
        status = await _run_to_end(pilot, screen)
        raw = text_of(screen.query_one("#results-body", Static), width=200)
    assert status.startswith("Done after")
    (result,) = screen.results
    found, over = result.probes
    assert found.found and found.error is None and over.status_code == 400
    cells = _row(raw, "0.50")                     # the first 0.50 row: the probe that fit
    assert cells[2] == "yes" and cells[5] == found.answer and found.passphrase in cells[5]
    text = " ".join(raw.split())
    assert "│ 0.50 │ ~33,792 │ refused │ - │ - │ HTTP 400: This model's maximum context length" in text
    assert "HTTP 400: This model's maximum context length is 32768 tokens. However, you requested" in text
    assert "max-model-len 32,768" in text
    with sqlite3.connect(sb_services.db_path) as db:
        # A fresh history: the running container becomes an observed launch the result attaches to.
        launches = db.execute("SELECT id, node, origin, container_id FROM launches").fetchall()
        assert len(launches) == 1 and launches[0][1:3] == ("vllm-v5e-a", "observed") and launches[0][3]
        assert db.execute("SELECT kind, launch_id, usd_per_mtok FROM benchmarks").fetchall() == [
            ("longctx", launches[0][0], None)]


async def test_unknown_host_key_is_asked_once_with_its_fingerprint(sandbox: Any, sb_services: Services) -> None:
    import asyncssh

    known = sandbox.known_hosts_path
    saved = known.read_text()
    alias = "tpu.4711000000000000001-0"
    known.write_text("".join(line + "\n" for line in saved.splitlines() if not line.startswith(alias + " ")))
    fingerprint = asyncssh.import_public_key(sandbox.vms[NODE].host_public_key).get_fingerprint("sha256")
    served_before = len(sandbox.vms[NODE].openai_server.stats.served)     # the module's earlier tests
    unpublished = host_keys_unpublished(sandbox, NODE)
    unpublished.__enter__()                               # else the published key is pinned: no question
    try:
        app = TpuConsoleApp(sb_services)
        async with app.run_test(size=(200, 50)) as pilot:
            screen = await _open_bench(pilot)
            await _fill(pilot, screen, "smoke")
            await pilot.press("ctrl+r")
            for _ in range(100):
                await pilot.pause(0.05)
                if isinstance(app.screen, ConfirmScreen):
                    break
            modal = app.screen
            assert isinstance(modal, ConfirmScreen)
            assert fingerprint in modal.message and alias in modal.message
            await pilot.press("y")
            deadline = time.monotonic() + 30
            while screen.running and time.monotonic() < deadline:
                await pilot.pause(0.1)
            text = text_of(screen.query_one("#results-body", Static))
            assert "served model" in text and "meta-llama/Llama-3.1-8B-Instruct" in text
            # the node's container runs without --enable-auto-tool-choice: read from its flags
            assert "tool calling" in text and "FAIL" not in text
            assert "not enabled (start with --enable-auto-tool-choice --tool-call-parser ...)" in text
            served = sandbox.vms[NODE].openai_server.stats.served[served_before:]
            assert served and all(r.status == 200 for r in served)       # the tool request was not sent
            # recorded under gcloud's plain alias (no published key to suffix it with)
            assert [line.split()[0] for line in known.read_text().splitlines() if line.startswith(alias)] == [alias]
            await _run_to_end(pilot, screen)                  # accepted once: no second question
            assert isinstance(app.screen, BenchScreen)
    finally:
        unpublished.__exit__(None, None, None)
        known.write_text(saved)


async def test_unreachable_node_is_one_sentence(sandbox: Any, sb_services: Services) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    config = sb_services.config
    sb_services.config = replace(config, ssh=replace(config.ssh, hosts={NODE: f"127.0.0.1:{closed}"}))
    app = TpuConsoleApp(sb_services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open_bench(pilot)
        status = await _run_to_end(pilot, screen)
        shown = "\n".join(text_of(w) for w in screen.query(Static))
    assert status.startswith(f"Host unreachable: Cannot reach node {NODE} (127.0.0.1:{closed})")
    assert len(status.strip().splitlines()) == 1 and "Traceback" not in shown
    assert screen.results == []


async def test_no_vllm_behind_the_forward_is_one_sentence(sandbox: Any, sb_services: Services) -> None:
    config = sb_services.config
    sb_services.config = replace(config, container=replace(config.container, port=8999))  # nothing listens
    app = TpuConsoleApp(sb_services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open_bench(pilot)
        await _fill(pilot, screen, "smoke")
        status = await _run_to_end(pilot, screen)
    assert status.startswith("vLLM server unreachable: Could not reach the vLLM server at http://127.0.0.1:")
    assert len(status.strip().splitlines()) == 1 and screen.results == []


async def test_escape_asks_before_cancelling_and_keeps_finished_levels(sandbox: Any, sb_services: Services) -> None:
    app = TpuConsoleApp(sb_services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open_bench(pilot)
        await _fill(pilot, screen, "throughput", streams="2,1", prompt_tokens="32", output_tokens="8",
                    requests="", duration_s="5")
        # While a benchmark runs the process is busy: a bare pilot.pause() waits up to 1 s for
        # idle CPU, so these waits are short sleeps.
        await pilot.press("ctrl+r")
        await pilot.press("escape")                 # asks first; "n" keeps it running
        await pilot.pause(0.05)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await pilot.pause(0.05)
        assert isinstance(app.screen, BenchScreen) and screen.running
        deadline = time.monotonic() + 20
        while not screen.results and time.monotonic() < deadline:   # level 1 (5 s) ends, level 2 starts
            await pilot.pause(0.02)
        assert [r.concurrency for r in screen.results] == [2]
        await pilot.press("escape")
        await pilot.pause(0.05)
        await pilot.press("y")
        deadline = time.monotonic() + 10
        while screen.running and time.monotonic() < deadline:
            await pilot.pause(0.05)
        status = text_of(screen.query_one("#bench-status", Static))
        assert status.startswith("Cancelled after") and "1 result, recorded in the history (1 row)" in status
        assert [r.concurrency for r in screen.results] == [2]
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, BenchScreen)


def test_verb_on_a_node_shares_the_flow_and_records(sandbox: Any, tmp_path: Path, capsys: Any) -> None:
    db_path = tmp_path / "verb.db"
    container_id = next(iter(sandbox.vms[NODE].docker.containers.values())).id
    with HistoryStore(db_path) as store:
        launch = store.start_launch(node=NODE, container_id=container_id, accelerator_type="v5litepod-4")
    code = main(["--config", str(sandbox.config_path), "--db", str(db_path), "bench", NODE, "--kind", "throughput",
                 "--streams", "2", "--prompt-tokens", "32", "--output-tokens", "8", "--requests", "2", "--json"])
    assert code == 0
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert (result["concurrency"], result["completed"], result["total_output_tokens"]) == (2, 2, 16)
    assert result["usd_per_mtok"] == pytest.approx(usd_per_mtok(1.20, 4, result["output_throughput"]))
    with HistoryStore(db_path) as store:
        (row,) = store.benchmarks_for(launch)
    assert (row.kind, row.concurrency, row.price_per_hour_usd) == ("throughput", 2, pytest.approx(4.80))
    assert row.usd_per_mtok == pytest.approx(result["usd_per_mtok"])


# --- without the sandbox: the form -------------------------------------------------------------------


def _plain_node() -> Node:
    return Node(project="inference-prod", zone="us-west4-a", name=NODE, state="READY",
                accelerator_type="v5litepod-4", node_id="4711000000000000001")


async def test_form_validation_shows_the_reason_beside_the_field(services: Services) -> None:
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = BenchScreen(_plain_node())
        await app.push_screen(screen)
        await pilot.pause()
        await _fill(pilot, screen, "throughput", streams="a,b")
        assert text_of(screen.query_one("#why-streams", Static)).strip() == \
            "expected comma-separated integers, got 'a,b'"
        assert screen.query_one("#f-streams", Input).has_class("-invalid")
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert not screen.running and screen._params is None
        await _fill(pilot, screen, "throughput", streams="1,4", requests="3", duration_s="2")
        assert text_of(screen.query_one("#why-streams", Static)).strip() == ""
        assert "not both" in text_of(screen.query_one("#why-duration_s", Static))
        await _fill(pilot, screen, "throughput", requests="", duration_s="0")
        assert "positive" in text_of(screen.query_one("#why-duration_s", Static))
        await _fill(pilot, screen, "longctx", depths="0.5,1.5")
        assert "within 0.0-1.0" in text_of(screen.query_one("#why-depths", Static))
        assert screen.read_params() is None
        await _fill(pilot, screen, "longctx", depths="0.2, 0.8", context_tokens="9000")
        params = screen.read_params()
        assert params is not None and (params.depths, params.context_tokens) == ((0.2, 0.8), 9000)


async def test_bindings_have_ids_in_help(services: Services) -> None:
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = BenchScreen(_plain_node())
        await app.push_screen(screen)
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        text = "\n".join(text_of(w) for w in app.screen.query(Static))
        assert "bench_run" in text and "bench_back" in text and "ctrl+r" in text
        titles = [c.title for c in app.get_system_commands(screen)]
        assert "Run (ctrl+r)" in titles
