"""The fleet's Workloads table (GKE) and ``w`` on a workload, against the sandbox's GKE stand-ins, with
kubectl's view of the same Deployment as the oracle where it is installed."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from textual.widgets import DataTable, Label

from console.app import TpuConsoleApp
from console.screens.fleet import FleetScreen
from console.screens.workload_startup import WorkloadStartupScreen
from tests.ui.conftest import running_sandbox, services_on


async def until(pilot: Any, predicate: Any, what: str, timeout_s: float = 40.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")


async def test_the_workloads_table_and_its_startup_view(tmp_path: Path) -> None:
    with running_sandbox(tmp_path / "sandbox", boot_s=1.0, fast_boot_s=0.3) as box, \
            services_on(box, tmp_path / "history.db") as services:
        app = TpuConsoleApp(services)
        async with app.run_test(size=(160, 45)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, FleetScreen), "the fleet")
            fleet = app.screen
            table = fleet.query_one("#workloads", DataTable)
            await until(pilot, lambda: table.row_count > 0, "the workloads")
            row = [str(c) for c in table.get_row_at(0)]
            assert row[:5] == ["tpu-serving", "default", "deploy/vllm-llama", row[3], "v6e-flex"]
            label = fleet.query_one("#workloads-title", Label)
            # chips in use once the stand-in's scheduler placed the pod (a refresh every 5 s lists it again)
            await until(pilot, lambda: "v6e-flex 4/4" in str(label.render()), lambda: str(label.render()))
            assert "Workloads 1 (GKE)" in str(label.render()) and "v5e-spot 0/4" in str(label.render())
            if Path(shutil.which("kubectl") or "/usr/bin/kubectl").exists():
                kube = json.loads(subprocess.run(
                    [shutil.which("kubectl") or "/usr/bin/kubectl", "--kubeconfig", str(box.kubeconfig_path), "get",
                     "deploy", "vllm-llama", "-o", "json"], capture_output=True, text=True, timeout=30, check=True).stdout)
                status = kube.get("status", {})
                assert row[3].endswith(f"/{kube['spec']['replicas']}")
                assert row[3].startswith(str(status.get("readyReplicas", 0))) or row[3].startswith("0")
            table.focus()
            await pilot.pause()
            await pilot.press("w")
            await until(pilot, lambda: isinstance(app.screen, WorkloadStartupScreen), "the workload's startup view")
            view = app.screen
            await until(pilot, lambda: view.outcome is not None, lambda: f"the watch's end ({view.events})")
            assert view.outcome.code == 0, view.events
            assert view.outcome.summary["kv_cache_tokens"] > 0
            assert any(e.kind == "ready" for e in view.events)
            # the startup view's own keys on the workload: H its launches, b and m its views, f its forward
            from console.screens.bench import BenchScreen
            from console.screens.history.screen import HistoryScreen
            from console.screens.metrics import MetricsScreen

            for key, kind in (("H", HistoryScreen), ("b", BenchScreen), ("m", MetricsScreen)):
                await pilot.press(key)
                await until(pilot, lambda kind=kind: isinstance(app.screen, kind), kind.__name__)
                opened: Any = app.screen
                assert opened.node.name == "tpu-serving/default/deploy/vllm-llama", key
                assert key == "H" or opened.workload is view.workload
                await pilot.press("escape")
                await until(pilot, lambda: app.screen is view, "back to the startup view")
            await pilot.press("f")                  # (m opened it already: f says it is open, on which pod)
            await until(pilot, lambda: any(n.title == "Forward open" and "-> deploy/vllm-llama pod vllm-llama-" in n.message
                                           for n in app._notifications), "the startup view's forward")
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is fleet, "back to the fleet")
            # the node keys on a workload never act on the node left selected in the Nodes table
            table.focus()
            await pilot.pause()
            assert fleet.selected is None
            await pilot.press("S")                  # a shell is a TPU node's only
            await pilot.pause()
            said = [n.message for n in app._notifications if n.message.startswith("A GKE workload is selected")]
            assert app.screen is fleet and len(said) == 1 and said[0].endswith("select a TPU node to open a shell on.")
            # f: a forward through the API server to the serving pod, listed in the forwards view
            await pilot.press("f")
            key = ("inference-prod", "us-east5", "tpu-serving/default/deploy/vllm-llama")
            await until(pilot, lambda: getattr(services.forwards.get(key), "state", "") == "open", "the forward")
            forward = services.forwards.get(key)
            import httpx

            async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
                models = (await client.get(f"{forward.url}/v1/models")).json()
            assert [m["id"] for m in models["data"]] == ["meta-llama/Llama-3.1-8B-Instruct"]
            await pilot.press("F")
            from console.screens.forwards import ForwardsScreen

            await until(pilot, lambda: isinstance(app.screen, ForwardsScreen), "the forwards view")
            rows = app.screen.query_one("#forwards", DataTable)
            await until(pilot, lambda: rows.row_count == 1, "the forward's row")
            cells = [str(c) for c in rows.get_row_at(0)]
            assert cells[:3] == ["tpu-serving/default/deploy/vllm-llama", forward.url, f"open (pod {forward.pod})"]
            assert cells[4] == "8000"
            # m: the metrics view through that forward; b: the benchmark view, priced by the v6e flex-start pool
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is fleet, "back to the fleet")
            table.focus()
            await pilot.pause()
            await pilot.press("m")
            from console.screens.metrics import MetricsScreen

            await until(pilot, lambda: isinstance(app.screen, MetricsScreen), "the metrics view")
            metrics = app.screen
            await until(pilot, lambda: metrics.samples >= 1, "a /metrics sample", timeout_s=30)
            assert metrics.forward is forward and metrics.node.name == key[2]
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is fleet, "back to the fleet")
            table.focus()
            await pilot.pause()
            await pilot.press("b")
            from console.screens.bench import BenchScreen

            await until(pilot, lambda: isinstance(app.screen, BenchScreen), "the bench view")
            bench = app.screen
            assert bench.pricing is not None and (bench.pricing.generation, bench.pricing.provisioning_model,
                                                  bench.pricing.chips) == ("v6e", "flex-start", 4)
            bench.query_one("#f-kind").value = "smoke"
            await pilot.pause()
            await pilot.press("ctrl+r")
            await until(pilot, lambda: bench.results and not bench.running, "the smoke run", timeout_s=60)
            assert bench.results[0].model == "meta-llama/Llama-3.1-8B-Instruct" and bench.recorded
            # R on a workload with one revision: its rollback view says there is nothing to roll back to
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is fleet, "back to the fleet")
            table.focus()
            await pilot.pause()
            await pilot.press("R")
            from textual.widgets import Static

            from console.screens.workload_swap import WorkloadSwapScreen

            await until(pilot, lambda: isinstance(app.screen, WorkloadSwapScreen), "the rollback view")
            rollback = app.screen

            def plan() -> str:
                found = rollback.query("#workload-swap-plan")
                return str(found.first(Static).render()) if found else ""

            await until(pilot, lambda: "Nothing to roll back to" in plan(), plan)
            assert "deploy/vllm-llama has one revision only" in plan() and rollback.rollback


async def test_s_then_R_then_H_on_a_workload_swap_roll_back_and_list_its_launches(tmp_path: Path) -> None:
    from textual.widgets import Input, Static

    from console.screens.confirm import ConfirmScreen
    from console.screens.workload_swap import WorkloadSwapScreen

    with running_sandbox(tmp_path / "sandbox", boot_s=1.0, fast_boot_s=0.3) as box, \
            services_on(box, tmp_path / "history.db") as services:
        app = TpuConsoleApp(services)
        async with app.run_test(size=(160, 45)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, FleetScreen), "the fleet")
            fleet = app.screen
            table = fleet.query_one("#workloads", DataTable)
            await until(pilot, lambda: table.row_count > 0, "the workloads")
            table.focus()
            await pilot.pause()
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, WorkloadSwapScreen), "the swap view")
            view = app.screen
            view.query_one("#workload-swap-edits", Input).value = "max-model-len=8192"
            await pilot.press("enter")
            await until(pilot, lambda: view.preview is not None, "the preview")
            plan = str(view.query_one("#workload-swap-plan", Static).render())
            assert "--max-model-len=8192" in plan and '"op": "test"' in plan
            await pilot.press("ctrl+s")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirm")
            app.screen.dismiss(True)
            await until(pilot, lambda: view.outcome is not None, "the rollout", timeout_s=60)
            assert view.outcome.patched and view.outcome.rollout.code == 0
            assert view.outcome.rollout.summary["max_model_len"] == 8192
            launch = services.store.get_launch(view.outcome.launch_id)
            assert launch is not None and (launch.workload, launch.outcome, launch.max_model_len) == (
                "deploy/vllm-llama", "ready", 8192)
            # command mode's :rollback deploy/vllm-llama opens the same view as R on the workload: the previous
            # revision's template (the 65536 one), confirmed, followed
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is fleet, "back to the fleet")
            app.run_command("rollback deploy/vllm-llama")
            await until(pilot, lambda: isinstance(app.screen, WorkloadSwapScreen) and app.screen is not view,
                        "the rollback view")
            back = app.screen
            await until(pilot, lambda: back.preview is not None, "the rollback's preview")
            assert back.rollback and not back.query_one("#workload-swap-edits", Input).display
            plan = str(back.query_one("#workload-swap-plan", Static).render())
            assert "restores revision 1" in plan and "--max-model-len=65536" in plan and '"/spec/template"' in plan
            await pilot.press("ctrl+s")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the rollback's confirm")
            app.screen.dismiss(True)
            await until(pilot, lambda: back.outcome is not None, "the rollback's rollout", timeout_s=60)
            assert back.outcome.patched and back.outcome.rollout.code == 0
            assert back.outcome.rollout.summary["max_model_len"] == 65536
            launch = services.store.get_launch(back.outcome.launch_id)
            assert launch is not None and (launch.revision, launch.outcome, launch.max_model_len) == ("3", "ready", 65536)
            # H on the workload: the history with its launches; N: its launches only (the swap and the rollback)
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is fleet, "back to the fleet")
            table.focus()
            await pilot.pause()
            await pilot.press("H")
            from console.screens.history.screen import HistoryScreen

            await until(pilot, lambda: isinstance(app.screen, HistoryScreen), "the history")
            history = app.screen
            assert history.node.name == "tpu-serving/default/deploy/vllm-llama"
            await until(pilot, lambda: history.loads > 0, "the history's launches")
            await pilot.press("N")
            await until(pilot, lambda: history.launch_filter.node == history.node.name and history.loads > 1,
                        "its launches only")
            await until(pilot, lambda: {view.outcome.launch_id, back.outcome.launch_id} <= {x.id for x in history.launches},
                        "the swap's and the rollback's launches")
            assert {x.workload for x in history.launches} == {"deploy/vllm-llama"}
