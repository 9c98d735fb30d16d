"""The workload startup view (``w`` on the Workloads table) on a multi-host LeaderWorkerSet: the node startup
view's panel (HBM per chip, the slice's HBM summed over the pods, KV cache, compile) fed by the group watch,
and the pods panel (one row per pod of group 0, what Kubernetes says of each); an LWS that cannot schedule
shows Pending / Unschedulable and the FailedScheduling event in its rows. Against the sandbox's GKE as
``--demo`` starts it (``gke_multi_host``), with kubectl as the oracle for the pods."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Static

from console.app import TpuConsoleApp
from console.screens.fleet import FleetScreen
from console.screens.workload_startup import POD_COLUMNS, WorkloadStartupScreen
from console.widgets.startup_panel import StartupPanel
from remote.gke.models import Workload
from tests.ui.conftest import services_on, text_of

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Any]:
    from sandbox.runner import Sandbox

    sandbox = Sandbox(tmp_path / "sandbox", boot_s=1.0, fast_boot_s=0.3, gke_boot_s=3.0, gke_create_s=0.3,
                      gke_multi_host=True)
    sandbox.start()
    try:
        yield sandbox
    finally:
        sandbox.stop()


async def until(pilot: Any, predicate: Any, what: Any, timeout_s: float = 60.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")


def _rows(view: WorkloadStartupScreen) -> list[dict[str, str]]:
    table = view.query_one("#workload-pods", DataTable)
    return [dict(zip(POD_COLUMNS, (str(c) for c in table.get_row_at(i)), strict=True)) for i in range(table.row_count)]


def _kubectl_json(box: Any, *args: str) -> Any:
    done = subprocess.run([KUBECTL, "--kubeconfig", str(box.kubeconfig_path), *args, "-o", "json"],
                          capture_output=True, text=True, timeout=30, check=True)
    return json.loads(done.stdout)


async def test_w_on_a_leader_worker_set_shows_the_panel_and_one_row_per_pod(
        box: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    from console.cli import main

    # a watch recorded in the history first: the view's compile ETA is that boot's compile time
    argv = ["--config", str(box.config_path), "watch", "lws/vllm-multi", "--json", "--poll-s", "0.1"]
    assert await asyncio.to_thread(main, argv) == 0
    recorded = json.loads(capsys.readouterr().out)
    with services_on(box, box.db_path) as services:
        app = TpuConsoleApp(services)
        async with app.run_test(size=(160, 45)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, FleetScreen), "the fleet")
            table = app.screen.query_one("#workloads", DataTable)
            await until(pilot, lambda: table.row_count >= 2, "the workloads")
            refs = [str(table.get_row_at(i)[2]) for i in range(table.row_count)]
            table.focus()
            table.move_cursor(row=refs.index("lws/vllm-multi"))
            await pilot.pause()
            await pilot.press("w")
            await until(pilot, lambda: isinstance(app.screen, WorkloadStartupScreen), "the startup view")
            view = app.screen
            assert isinstance(view, WorkloadStartupScreen)
            await until(pilot, lambda: view.outcome is not None, lambda: f"the verdict ({view.events[-3:]})")
            assert view.outcome.code == 0, view.events
            summary = view.outcome.summary
            await until(pilot, lambda: [r["log"] for r in _rows(view)] == ["ready"] * 4, lambda: _rows(view))
            if Path(KUBECTL).exists():                         # the rows are the pods kubectl lists
                pods = _kubectl_json(box, "get", "pods", "-l", "leaderworkerset.sigs.k8s.io/name=vllm-multi")["items"]
                assert sorted((r["pod"], r["node"]) for r in _rows(view)) == sorted(
                    (p["metadata"]["name"], p["spec"]["nodeName"]) for p in pods)
            assert [r["pod"] for r in _rows(view)] == ["vllm-multi-0", "vllm-multi-0-1", "vllm-multi-0-2",
                                                       "vllm-multi-0-3"]
            panel = view.query_one("#workload-panel", StartupPanel)
            await until(pilot, lambda: panel.info.state.ready, "the panel's ready")
            slice_text = text_of(panel.query_one("#panel-slice", Static))
            assert "4 workers" in slice_text and "KV cache:" in slice_text and "over 16 chips (4 of 4 workers)" in slice_text
            assert (panel.info.history_known, panel.info.compile_eta_s) == (True, recorded["compile_seconds"])
            kv_text = text_of(panel.query_one("#panel-kv", Static))
            assert f"{summary['kv_cache_tokens']:,} tokens" in kv_text
            assert "Max concurrency" in kv_text
            await pilot.press("escape")


async def test_a_group_that_cannot_schedule_says_why_in_its_rows(box: Any, tmp_path: Path) -> None:
    if not Path(KUBECTL).exists():
        pytest.skip("kubectl is not installed (it creates the unschedulable LeaderWorkerSet)")
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "gke-lws.json"
    manifest = json.loads(fixture.read_text())
    manifest["metadata"]["name"] = "vllm-big"
    manifest["spec"]["leaderWorkerTemplate"]["size"] = 2
    container = manifest["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    container["resources"]["limits"]["google.com/tpu"] = "8"            # more chips than any node has
    path = tmp_path / "vllm-big.json"
    path.write_text(json.dumps(manifest))
    subprocess.run([KUBECTL, "--kubeconfig", str(box.kubeconfig_path), "create", "--validate=false", "-f", str(path)],
                   capture_output=True, text=True, timeout=30, check=True)
    with services_on(box, tmp_path / "history.db") as services:
        app = TpuConsoleApp(services)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, FleetScreen), "the fleet")
            lws = Workload("", "", "tpu-serving", "default", "LeaderWorkerSet", "vllm-big", size=2)
            await app.push_screen(WorkloadStartupScreen(lws, services.config))
            view = app.screen
            assert isinstance(view, WorkloadStartupScreen)

            def unschedulable() -> bool:
                rows = _rows(view)
                return len(rows) == 2 and all(r["Kubernetes"].startswith("Pending: Unschedulable: 0/6 nodes")
                                              and "FailedScheduling" in r["Kubernetes says"] for r in rows)

            await until(pilot, unschedulable, lambda: _rows(view))
            assert [r["pod"] for r in _rows(view)] == ["vllm-big-0", "vllm-big-0-1"]
            assert all(r["Ready"] == "not Ready" and r["log"] == "-" for r in _rows(view))
            assert "Insufficient google.com/tpu" in _rows(view)[0]["Kubernetes says"]
            assert view.has_class("-stacked")                  # 100 columns: the panel over the pods
