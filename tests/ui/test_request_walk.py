"""The article's flow without leaving the TUI, on one whole sandbox (TPU API with its queue states
scaled down 20x, the VM started for the new node, the simulated vLLM): the request form with the
container (a v5e-1 flex-start in us-west4-a, google/gemma-4-E2B-it on vllm/vllm-tpu:v0.30.0 at
max-model-len 8192) -> probe first (available) -> the typed confirm -> the startup view through
the queue to READY, the container started -> swap to 131072 -> READY again, 39.22x then 2.45x.
Also: ``p`` on a waiting request probes it from the form, and read-only mode refuses both doors."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Checkbox, DataTable, Input, Static

from console.app import TpuConsoleApp
from console.screens import request as request_screen
from console.screens.confirm import ConfirmScreen
from console.screens.fleet import FleetScreen
from console.screens.request import RequestScreen
from console.screens.startup import StartupScreen
from console.screens.swap.screen import SwapScreen
from tests.ui.conftest import running_sandbox, services_on, text_of

IMAGE = "vllm/vllm-tpu:v0.30.0"
MODEL = "google/gemma-4-E2B-it"


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with running_sandbox(tmp_path_factory.mktemp("walk") / "sandbox", boot_s=1.0, fast_boot_s=0.3,
                         time_scale=0.05) as sandbox:
        yield sandbox


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe and the startup view poll the sandbox's TPU API every 50 ms (2 s and 5 s by default)."""
    monkeypatch.setattr(request_screen, "PROBE_POLL_S", 0.05)
    monkeypatch.setattr(request_screen, "FOLLOW_POLL_S", 0.05)


async def _until(pilot: Any, cond: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    for _ in range(int(timeout_s / 0.05)):
        value = cond()
        if value:
            return value
        await pilot.pause(0.05)
    screen = pilot.app.screen
    seen = (f"problem {screen.problem!r}, wait {screen.node_wait!r}, log {screen.query_one('#log').shown_lines()[-8:]}"
            if isinstance(screen, StartupScreen) else repr(screen))
    raise AssertionError(f"timed out waiting for {what}: {seen}")


async def _fleet(pilot: Any) -> FleetScreen:
    """The fleet screen once the live fleet is listed (the request and probe wait for it)."""
    return await _until(pilot, lambda: isinstance(pilot.app.screen, FleetScreen) and pilot.app.screen.snapshot
                        is not None and pilot.app.screen.cached_at is None and pilot.app.screen, "the live fleet")


async def _fill(pilot: Any, form: RequestScreen, **values: str) -> None:
    for field_id, value in values.items():
        form.query_one(f"#rq-{field_id}", Input).value = value
    await pilot.pause()


async def test_request_form_to_ready_then_swap_to_131072_without_leaving_the_tui(box: Any, tmp_path: Path) -> None:
    with services_on(box, tmp_path / "history.db") as services:
        app = TpuConsoleApp(services)
        async with app.run_test(size=(160, 45)) as pilot:
            await _fleet(pilot)
            await pilot.press("n")
            form = await _until(pilot, lambda: isinstance(app.screen, RequestScreen) and app.screen, "the form")
            await _fill(pilot, form, name="demo-v5e", zone="us-west4-a", accelerator_type="v5litepod-1",
                        image=IMAGE, model=MODEL, settings="max-model-len=8192")
            form.query_one("#rq-provisioning_model").value = "flex-start"     # type: ignore[attr-defined]
            await pilot.pause()
            assert form.query_one("#rq-start_container", Checkbox).value
            container = text_of(form.query_one("#rq-container", Static), width=400)
            assert "docker run -d --name vllm" in container and f"{IMAGE} vllm serve {MODEL}" in container
            assert "--max-model-len 8192" in container and "compile-cache" in container   # the swap's lint

            # probe first: a spot probe in us-west4-a is granted, and deleted again
            await pilot.press("ctrl+t")
            modal = await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen, "probe confirm")
            assert modal.commands == ["tpu-console probe --project inference-prod --zone us-west4-a "
                                      "--accelerator-type v5litepod-1"]
            await pilot.press("y")
            await _until(pilot, lambda: form.probe_answer is not None or form.probe_problem, "the probe")
            assert form.probe_answer is not None and form.probe_answer.result.verdict == "available"
            assert form.probe_answer.result.deleted
            probe = text_of(form.query_one("#rq-probe", Static), width=400).splitlines()
            # granted: the probe read it PROVISIONING, or already ACTIVE when the sandbox moved first
            assert probe[0] in (f"Capacity available for v5litepod-1 in inference-prod/us-west4-a: spot capacity granted "
                                f"({state})" for state in ("PROVISIONING", "ACTIVE"))
            assert probe[1].startswith("  probe probe-v5e-1-") and probe[1].endswith(" deleted")

            # create: the typed confirm shows the gcloud line and the container's commands
            await pilot.press("ctrl+s")
            modal = await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen, "create confirm")
            assert modal.require_text == "demo-v5e"
            assert modal.commands[0].startswith("gcloud alpha compute tpus queued-resources create demo-v5e")
            assert any(c.startswith("sudo -n docker run -d --name vllm") for c in modal.commands[1:])
            await pilot.press(*"demo-v5e", "enter")

            # the startup view follows the request: the queue, the node, the container's start, the boot
            view = await _until(pilot, lambda: isinstance(app.screen, StartupScreen) and app.screen, "startup view")
            assert (view.node.name, view.node.queued_resource) == ("demo-v5e", "demo-v5e")
            await _until(pilot, lambda: view.watcher is not None and view.watcher.state.ready, "READY", 90)
            state = view.watcher.state
            assert (state.kv_cache_tokens, state.max_concurrency, state.max_concurrency_tokens_per_request) == (
                321_280, 39.22, 8192)
            assert view.container_started and view.node.state == "READY"
            log = "\n".join(view.query_one("#log").shown_lines())   # type: ignore[attr-defined]
            # followed from the queue through the TPU API (which states the first poll saw depends on the
            # sandbox's clock; the READY marker is written only after such a wait), then the container
            assert "──── node demo-v5e is READY ────" in log
            assert f"$ sudo -n docker pull {IMAGE}" in log and "container started" in log
            running = list(box.vms["demo-v5e"].docker.containers.values())
            assert [c.image for c in running] == [IMAGE]

            # swap to max-model-len 131072 from the startup view, then READY again
            await pilot.press("s")
            swap = await _until(pilot, lambda: isinstance(app.screen, SwapScreen) and app.screen.base is not None
                                and app.screen, "the swap form")
            swap.query_one("#f-max-model-len", Input).value = "131072"
            await pilot.pause()
            await pilot.pause()
            await pilot.press("ctrl+s")
            await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "swap confirm")
            await pilot.press("y")
            again = await _until(pilot, lambda: isinstance(app.screen, StartupScreen) and app.screen is not view
                                 and app.screen, "the startup view after the swap")
            await _until(pilot, lambda: again.watcher is not None and again.watcher.state.ready, "READY again", 90)
            state = again.watcher.state
            assert (state.kv_cache_tokens, state.max_concurrency, state.max_concurrency_tokens_per_request) == (
                321_280, 2.45, 131_072)


async def test_p_on_a_waiting_request_probes_its_type_from_the_form(box: Any, tmp_path: Path) -> None:
    with services_on(box, tmp_path / "history.db") as services:
        app = TpuConsoleApp(services)
        async with app.run_test(size=(160, 45)) as pilot:
            fleet = await _fleet(pilot)
            assert "Probe (p)" in [c.title for c in app.get_system_commands(fleet)]      # in the palette too
            table = fleet.query_one("#qrs", DataTable)
            table.focus()
            await pilot.pause()
            names = [str(table.get_cell(row, "NAME")) for row in table.rows]
            table.move_cursor(row=names.index("qr-flex-b"), animate=False)         # ACTIVE: nothing to probe
            await pilot.pause()
            await pilot.press("p")
            await pilot.pause()
            assert app.screen is fleet and any(n.message.startswith("Select a WAITING_FOR_RESOURCES or FAILED")
                                               for n in app._notifications)
            table.move_cursor(row=names.index("qr-flex-wait"), animate=False)      # v6e-8, asia-northeast1-b
            await pilot.pause()
            await pilot.press("p")
            modal = await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen, "probe confirm")
            assert modal.commands == ["tpu-console probe --project inference-prod --zone asia-northeast1-b "
                                      "--accelerator-type v6e-8"]
            await pilot.press("y")
            form = await _until(pilot, lambda: isinstance(app.screen, RequestScreen) and app.screen, "the form")
            await _until(pilot, lambda: form.probe_answer is not None or form.probe_problem, "the probe")
            assert form.probe_answer is not None and form.probe_answer.result.verdict == "quota"
            shown = text_of(form.query_one("#rq-probe", Static), width=400)
            assert "\\n" not in shown and "  What to try" in shown.splitlines()     # one line each
            text = " ".join(shown.split())
            assert "Capacity quota for v6e-8 in inference-prod/asia-northeast1-b" in text and "What to try" in text
            assert "tpu-console probe --project inference-prod --zone europe-west4-a" in text     # offers v6e-8
            # The form is prefilled from the request: its zone, type and provisioning model.
            assert (form.value("zone"), form.value("accelerator_type"), form.value("provisioning_model")) == (
                "asia-northeast1-b", "v6e-8", "flex-start")


async def test_readonly_refuses_the_request_and_the_probe_at_every_door(box: Any, tmp_path: Path) -> None:
    with services_on(box, tmp_path / "history.db") as services:
        services.config = dataclasses.replace(services.config, readonly=True)
        app = TpuConsoleApp(services)
        async with app.run_test(size=(160, 45)) as pilot:
            fleet = await _fleet(pilot)
            assert fleet.check_action("probe", ()) is False and fleet.check_action("request", ()) is False
            palette = [c.title for c in app.get_system_commands(fleet)]
            assert not any(t.startswith(("Probe", "Request")) for t in palette)
            await pilot.press("p", "n")
            await pilot.pause()
            assert app.screen is fleet
            messages = [n.message for n in app._notifications]
            assert any(m.startswith("probe changes the fleet and read-only mode is on") for m in messages)
            assert any(m.startswith("request changes the fleet and read-only mode is on") for m in messages)
