"""Queued resources in the console, driven by Pilot against the sandbox TPU API (real client):
the inactive-quota banners, the delete key (typed confirm; never an ACTIVE one), the request
form (same flow as the verb) and read-only mode."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from typing import Any

from textual.widgets import Button, DataTable, Input, Static

from console.app import TpuConsoleApp
from console.screens.confirm import ConfirmScreen
from console.screens.fleet import FleetScreen
from console.screens.request import RequestScreen
from console.services import Services
from tests.ui.conftest import text_of


async def _loaded(pilot: Any) -> FleetScreen:
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, FleetScreen) and screen.snapshot is not None, "the fleet never loaded"
    return screen


async def _select_qr(pilot: Any, screen: FleetScreen, name: str) -> None:
    table = screen.query_one("#qrs", DataTable)
    table.focus()
    await pilot.pause()
    names = [str(table.get_cell(row, "NAME")) for row in table.rows]
    table.move_cursor(row=names.index(name), animate=False)
    await pilot.pause()
    assert screen.selected is not None and screen.selected.name == name
    for _ in range(100):     # a cursor that moved again within DETAIL_SETTLE_S draws the pane once it settles
        if name in text_of(screen.query_one("#detail-body", Static), width=120):
            return
        await pilot.pause(0.02)
    raise AssertionError(f"the detail pane never showed {name}")


async def _qr_names(services: Services) -> set[str]:
    return {q.name for q in (await services.fleet.list_fleet()).queued_resources}


async def test_banner_per_zone_with_the_exact_delete_commands(services: Services) -> None:
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _loaded(pilot)
        text = text_of(screen.query_one("#problems", Static))
        assert "⚑ 1 inactive queued resource may hold quota in inference-prod/us-east5-a" in text
        assert "tpu-console delete qr-flex-done --project=inference-prod --zone=us-east5-a" in text
        assert "⚑ 1 inactive queued resource may hold quota in inference-prod/asia-northeast1-b" in text
        assert "tpu-console delete qr-failed --project=inference-prod --zone=asia-northeast1-b" in text
        assert "qr-flex-wait" not in text and "qr-flex-b " not in text      # waiting / active: not inactive


async def test_delete_key_asks_for_the_typed_name_then_deletes(services: Services) -> None:
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _loaded(pilot)
        await _select_qr(pilot, screen, "qr-flex-done")
        await pilot.press("d")
        await pilot.pause()
        modal = app.screen
        assert isinstance(modal, ConfirmScreen) and modal.require_text == "qr-flex-done"
        assert "Flex-start cost so far: $43.20" in modal.message           # 4 h x 8 chips x $1.35
        # the gcloud line, as the request's confirm shows its create line; the CLI's line in the text
        assert modal.commands == ["gcloud alpha compute tpus queued-resources delete qr-flex-done "
                                  "--project=inference-prod --zone=us-east5-a"]
        assert "The same from the CLI: tpu-console delete qr-flex-done --project=inference-prod" in modal.message
        await pilot.press(*"qr-flex")
        assert modal.query_one("#confirm-yes", Button).disabled             # a prefix is not the name
        await pilot.press("enter")                                          # a wrong name is said, in the modal
        await pilot.pause()
        wrong = modal.query_one("#confirm-wrong", Static)
        assert app.screen is modal and wrong.display
        assert text_of(wrong).strip() == ("✗ 'qr-flex' is not qr-flex-done: type the name exactly to go ahead, "
                                          "Escape cancels.")
        await pilot.press(*"-done")
        assert not wrong.display                                            # typing again clears it
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        await app.workers.wait_for_complete()
        assert "qr-flex-done" not in await _qr_names(services)
        assert isinstance(app.screen, FleetScreen)
        assert {q.name for q in screen.snapshot.queued_resources} == await _qr_names(services)


async def test_delete_key_cancelled_deletes_nothing(services: Services) -> None:
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _loaded(pilot)
        await _select_qr(pilot, screen, "qr-failed")
        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("escape")
        await app.workers.wait_for_complete()
        assert "qr-failed" in await _qr_names(services)


async def test_delete_key_never_offers_an_active_queued_resource(services: Services) -> None:
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _loaded(pilot)
        await _select_qr(pilot, screen, "qr-flex-b")
        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)                         # no confirm at all
        messages = [n.message for n in app._notifications]
        assert any("--force" in m and "qr-flex-b is ACTIVE" in m for m in messages)
        assert "qr-flex-b" in await _qr_names(services)


async def test_request_form_previews_confirms_and_the_fleet_lists_it(services: Services) -> None:
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _loaded(pilot)
        await pilot.press("n")
        await pilot.pause()
        form = app.screen
        assert isinstance(form, RequestScreen)
        form.query_one("#rq-name", Input).value = "demo-v5e"
        form.query_one("#rq-zone", Input).value = "us-west4-a"
        form.query_one("#rq-accelerator_type", Input).value = "v5litepod-1"
        form.query_one("#rq-valid_until", Input).value = "1h"
        await pilot.pause()
        shown = text_of(form.query_one("#rq-call", Static), width=400)
        assert (f"POST {services.config.api_endpoint}/v2alpha1/projects/inference-prod/locations/us-west4-a/"
                "queuedResources?queuedResourceId=demo-v5e") in shown
        assert '"provisioningModel": "FLEX_START"' in shown and '"maxRunDuration": "14400s"' in shown
        assert ("gcloud alpha compute tpus queued-resources create demo-v5e --node-id=demo-v5e "
                "--project=inference-prod --zone=us-west4-a --accelerator-type=v5litepod-1 "
                "--runtime-version=v2-alpha-tpuv5-lite --provisioning-model=flex-start --max-run-duration=4h "
                "--valid-until-duration=1h") in shown
        await pilot.press("ctrl+s")
        await pilot.pause()
        modal = app.screen
        assert isinstance(modal, ConfirmScreen) and modal.require_text == "demo-v5e"
        assert any(c.startswith("sudo -n docker run -d --name vllm") for c in modal.commands)  # the container
        await pilot.press(*"demo-v5e", "enter")
        from console.screens.startup import StartupScreen

        for _ in range(200):                      # the startup view follows the request from the queue
            await pilot.pause(0.02)
            if isinstance(app.screen, StartupScreen) and app.screen.node_wait:
                break
        view = app.screen
        assert isinstance(view, StartupScreen) and view.request is not None
        assert (view.node.name, view.node.queued_resource, view.node.accelerator_type) == (
            "demo-v5e", "demo-v5e", "v5litepod-1")
        assert "demo-v5e" in await _qr_names(services)
        await pilot.press("escape")
        for _ in range(3):
            await app.workers.wait_for_complete()
            await pilot.pause()
        assert app.screen is screen
        listed = {q.name: q for q in screen.snapshot.queued_resources}
        assert listed["demo-v5e"].provisioning_model == "flex-start"


async def test_request_form_says_what_is_wrong_and_creates_nothing(services: Services) -> None:
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        await _loaded(pilot)
        await pilot.press("n")
        await pilot.pause()
        form = app.screen
        assert isinstance(form, RequestScreen)
        form.query_one("#rq-name", Input).value = "Bad_Name"
        form.query_one("#rq-zone", Input).value = "us-west4-a"
        form.query_one("#rq-accelerator_type", Input).value = "v5litepod-1"
        await pilot.pause()
        assert "Not ready: queued resource name 'Bad_Name'" in text_of(form.query_one("#rq-preview", Static))
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.screen is form                                           # no confirm
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen)
        assert "Bad_Name" not in await _qr_names(services)


async def test_readonly_hides_every_mutating_key(services: Services) -> None:
    services.config = dataclasses.replace(services.config, readonly=True)
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _loaded(pilot)
        for action in ("swap", "rollback", "request", "delete_qr"):
            assert screen.check_action(action, ()) is False
        assert screen.check_action("refresh_fleet", ()) is True
        shown_keys = {b.binding.key for b in screen.active_bindings.values()}
        assert shown_keys.isdisjoint({"s", "R", "n", "d"}) and "r" in shown_keys
        text = text_of(screen.query_one("#problems", Static))
        assert "may hold quota" in text and "tpu-console delete" not in text
        await _select_qr(pilot, screen, "qr-flex-done")
        await pilot.press("d", "n")
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)
        palette = [c.title for c in app.get_system_commands(screen)]
        assert not any(t.startswith(("Swap", "Request", "Delete QR", "Roll back")) for t in palette)
        assert "qr-flex-done" in await _qr_names(services)
        # A stuck request still says what to try, without the commands that would create resources.
        await _select_qr(pilot, screen, "qr-flex-wait")
        await app.workers.wait_for_complete()
        await pilot.pause()
        detail = " ".join(text_of(screen.query_one("#detail-body", Static), width=120).split())
        assert "What to try (read-only: the commands are hidden)" in detail
        assert "(asia-northeast1-b, v6e-4, flex-start)" in detail and "tpu-console probe" not in detail


async def test_a_stuck_request_shows_what_to_try_in_the_detail_pane(services: Services) -> None:
    app = TpuConsoleApp(services)
    async with app.run_test(size=(220, 60)) as pilot:
        screen = await _loaded(pilot)
        await _select_qr(pilot, screen, "qr-flex-wait")     # flex-start v6e-8, WAITING_FOR_RESOURCES
        await app.workers.wait_for_complete()                # the zones' accelerator types, listed once
        await pilot.pause()
        text = " ".join(text_of(screen.query_one("#detail-body", Static), width=120).split())
        assert "What to try" in text and "listing the zones" not in text
        assert ("a spot probe fails fast with the reason: it tells a stockout from missing quota, which both "
                "wait like this tpu-console probe --project inference-prod --zone asia-northeast1-b "
                "--accelerator-type v6e-8") in text
        assert "tpu-console probe --project inference-prod --zone asia-northeast1-b --accelerator-type v6e-4" in text
        assert "europe-west4-a offers v6e-8 tpu-console probe --project inference-prod --zone europe-west4-a" in text
        assert set(screen.offered_types) == {"inference-prod"}
        # An ACTIVE request is not stuck: no advice.
        await _select_qr(pilot, screen, "qr-flex-b")
        assert "What to try" not in text_of(screen.query_one("#detail-body", Static), width=120)


async def test_a_suspended_flex_start_request_reads_the_same_in_nodes_and_the_fleet(
        services: Services, tpu_endpoint: str, tmp_path: Any, capsys: Any, monkeypatch: Any) -> None:
    from console.cli import main

    monkeypatch.setenv("COLUMNS", "250")
    config = tmp_path / "config.toml"
    config.write_text('[[projects]]\nid = "inference-prod"\n')
    await asyncio.to_thread(main, ["--config", str(config), "nodes", "--api-endpoint", tpu_endpoint])  # own loop
    line = next(x for x in capsys.readouterr().out.splitlines() if "qr-flex-done" in x)
    cli_cells = re.split(r"\s{2,}", line.strip())           # the plain table: columns two spaces apart
    assert "SUSPENDED by SERVICE" in cli_cells and "ended" in cli_cells and "0m" not in cli_cells
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _loaded(pilot)
        qrs = screen.query_one("#qrs", DataTable)
        row = next(r for r in qrs.rows if str(qrs.get_cell(r, "NAME")) == "qr-flex-done")
        assert (str(qrs.get_cell(row, "STATE")), str(qrs.get_cell(row, "TIME LEFT"))) == ("SUSPENDED by SERVICE", "ended")


async def test_w_on_a_queued_resource_follows_its_node_from_the_queue(services: Services) -> None:
    """``w`` on a waiting request opens the startup view of the node it creates, waiting for capacity
    (the node does not exist yet); on a FAILED one it says why it does not follow."""
    from console.screens.startup import StartupScreen

    app = TpuConsoleApp(services)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await _loaded(pilot)
        await _select_qr(pilot, screen, "qr-flex-wait")
        await pilot.press("w")
        for _ in range(200):
            await pilot.pause(0.02)
            if isinstance(app.screen, StartupScreen) and app.screen.node_wait:
                break
        view = app.screen
        assert isinstance(view, StartupScreen)
        assert (view.node.name, view.node.queued_resource) == ("vllm-flex-h", "qr-flex-wait")
        assert view.node_wait == ("node vllm-flex-h does not exist yet (queued resource qr-flex-wait "
                                  "WAITING_FOR_RESOURCES); waiting for capacity, then for READY")
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is screen
        await _select_qr(pilot, screen, "qr-failed")
        await pilot.press("w")
        await pilot.pause()
        assert app.screen is screen
        assert any("Queued resource qr-failed of node" in n.message and "is FAILED" in n.message
                   for n in app._notifications)


async def test_a_waited_for_node_that_turns_out_a_slice_is_followed_on_every_worker(services: Services) -> None:
    """The node a request creates is known only by name until READY: once it is, a slice's workers are
    all followed (the stand-in had none, so the view had started on worker 0)."""
    from console.screens.startup import StartupScreen
    from remote.models import Node

    stand_in = Node(project="inference-prod", zone="us-west4-a", name="vllm-v5e-16", state="CREATING",
                    accelerator_type="v5litepod-16", queued_resource=None)
    app = TpuConsoleApp(services)
    async with app.run_test(size=(160, 45)) as pilot:
        await _loaded(pilot)
        view = StartupScreen(stand_in, poll_s=0.05)
        assert view.worker == 0
        app.push_screen(view)
        for _ in range(200):
            await pilot.pause(0.02)
            if view.node.state == "READY":
                break
        assert len(view.node.workers) == 4 and view.worker is None
        assert "all 4 workers" in view.sub_title


async def test_request_form_pins_the_image_to_the_digest_the_history_recorded(services: Services) -> None:
    """The config's image is a tag (vllm/vllm-tpu:latest); the history recorded its digest at a launch,
    so the form starts on that digest and says so, until another image is typed."""
    digest = "vllm/vllm-tpu@sha256:" + "ab" * 32
    services.store.start_launch(node="vllm-flex-b", project="inference-prod", zone="us-east5-a",
                                accelerator_type="v6e-8", provisioning_model="flex-start", model="Qwen/Qwen3-8B",
                                image="vllm/vllm-tpu:latest", image_digest=digest,
                                requested_at="2026-11-29T09:00:00Z", outcome="ready")
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        await _loaded(pilot)
        await pilot.press("n")
        await pilot.pause()
        form = app.screen
        assert isinstance(form, RequestScreen)
        assert form.query_one("#rq-image", Input).value == digest
        await _fill_request(pilot, form)
        note = "image pinned to the digest the history recorded for vllm/vllm-tpu:latest"
        container = text_of(form.query_one("#rq-container", Static), width=400)
        assert note in container and f"docker pull {digest}" in container
        form.query_one("#rq-image", Input).value = "vllm/vllm-tpu:v0.30.0"
        await pilot.pause()
        container = text_of(form.query_one("#rq-container", Static), width=400)
        assert note not in container and "docker pull vllm/vllm-tpu:v0.30.0" in container


async def _fill_request(pilot: Any, form: RequestScreen) -> None:
    form.query_one("#rq-name", Input).value = "demo-v5e"
    form.query_one("#rq-zone", Input).value = "us-west4-a"
    form.query_one("#rq-accelerator_type", Input).value = "v5litepod-1"
    await pilot.pause()
