"""The startup view: the panel and the log pane fed by corpus logs, and the whole screen against the sandbox."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Static

from console.app import TpuConsoleApp
from console.screens.confirm import ConfirmScreen
from console.screens.startup import StartupScreen
from console.widgets.log_pane import LogPane
from console.widgets.log_view import LogView
from console.widgets.startup_panel import PanelInfo, StartupPanel
from remote.container.tail import TailStatus
from remote.startup import Phase
from remote.vllm_log.reader import StartupReader
from store.errors import StoreError
from tests.sandbox_keys import host_keys_unpublished
from tests.ui.conftest import fleet_node, running_sandbox, services_on, text_of

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "vllm-logs"
READY = "10-tpujax-v6e1-full-boot-ready"
KV_OOM = "33-tpujax-v0291-tpu-kv-label-kv-alloc-oom"
MAXLEN = "05-tpujax-pr223-maxlen-too-large-v5e8"


def read_lines(path: Path) -> list[str]:
    """The log's lines as an SSH tail delivers them (no newline, no trailing CR)."""
    return [line.rstrip("\r") for line in path.read_text(encoding="utf-8", errors="replace").split("\n")]


def expected(name: str, folder: Path = FIXTURES) -> dict[str, Any]:
    return json.loads((folder / f"{name}.json").read_text())["expected"]


class PanelApp(App[None]):
    """Hosts the startup panel and a log view, fed like the startup screen feeds them."""

    def compose(self) -> ComposeResult:
        yield StartupPanel(id="panel")
        yield LogView(5000, id="log")

    def feed(self, lines: list[str], **info: Any) -> PanelInfo:
        reader = StartupReader()
        for line in lines:
            reader.feed_line(line)
        reader.close()
        self.query_one("#log", LogView).write_lines(lines)
        state = reader.state
        panel_info = PanelInfo(state=state, now=(state.last_line_at + timedelta(seconds=5))
                               if state.last_line_at else None, **info)
        self.query_one("#panel", StartupPanel).show(panel_info)
        return panel_info


def panel_text(app: App[Any], section: str) -> str:
    return text_of(app.screen.query_one(f"#panel-{section}", Static), width=68)


async def test_ready_log_shows_every_figure() -> None:
    want = expected(READY)
    app = PanelApp()
    async with app.run_test(size=(160, 60)) as pilot:
        app.feed(read_lines(FIXTURES / f"{READY}.log"),
                 status=TailStatus("connected", container_id="c0ffee", message="following container vllm (c0ffee)"),
                 tunnel_url="http://127.0.0.1:18000", served_models=("google/gemma-4-E2B-it",))
        await pilot.pause()
        hbm = panel_text(app, "hbm")
        for snap, stage in zip(want["hbm_snapshots"], ("worker init", "model loaded", "KV cache"), strict=True):
            row = next(line for line in hbm.splitlines() if line.startswith(stage))
            assert f"{snap['used'][0]:.2f} / {snap['limit'][0]:.2f} GiB" in row and "chip 0" in row
        assert "8.97 / 31.24 GiB" in hbm and "28.76 / 31.24 GiB" in hbm
        kv = panel_text(app, "kv")
        assert f"{want['kv_cache_tokens']:,} tokens" in kv and "1,151,744 tokens" in kv
        assert "35.15x at 32,768 tokens per request" in kv
        compile_ = panel_text(app, "compile")
        # 163 finished + the 36 AOT-skipped steps the warm-up passes compiled, of 199 started
        assert f"{want['compile_steps_finished'] + 36} done (36 compiled in warm-up)" in compile_
        assert "started" not in compile_
        assert "Compiled in 402.27 s (engine init 457.25 s)" in compile_
        assert "ETA" not in compile_
        banner = panel_text(app, "banner")
        assert "✔ READY" in banner and "Local URL http://127.0.0.1:18000" in banner
        assert "curl http://127.0.0.1:18000/v1/models" in banner
        assert "/v1/models answers: google/gemma-4-E2B-it" in banner
        assert "serving on http://0.0.0.0:8000" in banner
        timeline = panel_text(app, "timeline")
        assert timeline.splitlines()[0].split() == ["starting", "22:25:53", "1m27s"]
        assert timeline.splitlines()[-1].split()[0] == "ready"
        assert "● connected: following container vllm (c0ffee)" in panel_text(app, "status")
        facts = " ".join(panel_text(app, "facts").split())
        assert "google/gemma-4-E2B-it · v6e-1 · 1 chip · vLLM 0.26.1rc1.dev256+gf5bb701fa" in facts


async def test_kv_alloc_oom_log_shows_the_failure_banner() -> None:
    want = expected(KV_OOM)
    app = PanelApp()
    async with app.run_test(size=(160, 60)) as pilot:
        app.feed(read_lines(FIXTURES / f"{KV_OOM}.log"))
        await pilot.pause()
        hbm = panel_text(app, "hbm")
        assert "11.31 / 15.75 GiB" in hbm and "KV cache" not in hbm       # the KV allocation never happened
        kv = panel_text(app, "kv")
        assert f"{want['kv_cache_tokens']:,} tokens" in kv
        assert "2.00x at 8,192 tokens per request" in kv
        assert "38 fit, override asks 64" in kv
        assert f"{want['compile_steps_finished']} done" in panel_text(app, "compile")
        banner = " ".join(panel_text(app, "banner").split())
        assert f"✘ FAILED: {want['failure']}" in banner
        assert "RESOURCE_EXHAUSTED: E0100: RuntimeBufferAllocationFailure" in banner
        assert "--num-gpu-blocks-override 64 asks for more blocks than fit" in banner
        assert "Drop --num-gpu-blocks-override (the engine computed 38 blocks fit)" in banner
        assert panel_text(app, "timeline").splitlines()[-1].split()[:2] == ["failed", "03:53:19"]


async def test_max_model_len_log_shows_the_largest_length_that_fits() -> None:
    want = expected(MAXLEN)["failure_detail"]
    app = PanelApp()
    async with app.run_test(size=(160, 60)) as pilot:
        app.feed(read_lines(FIXTURES / f"{MAXLEN}.log"))
        await pilot.pause()
        banner = " ".join(panel_text(app, "banner").split())
        assert "✘ FAILED: max_model_len_too_large" in banner
        assert f"max-model-len {want['max_seq_len']} tokens does not fit" in banner
        assert f"({want['kv_cache_available_gib']:.2f} GiB left for it)" in banner
        assert f"Use --max-model-len {want['estimated_max_model_len']}" in banner
        assert "no HBM figures in the log yet" in panel_text(app, "hbm")
        assert "not sized yet" in panel_text(app, "kv")
        assert "not started" in panel_text(app, "compile")


async def test_every_corpus_log_renders_its_kv_figure(corpus_dir: Path) -> None:
    app = PanelApp()
    logs = sorted((corpus_dir / "vllm-logs").glob("*.log"))
    assert len(logs) >= 20
    async with app.run_test(size=(160, 60)) as pilot:
        for log in logs:
            want = expected(log.stem, log.parent)
            app.query_one("#log", LogView).clear()
            app.feed(read_lines(log))
            await pilot.pause()
            if want.get("kv_cache_tokens") is not None:
                assert f"{want['kv_cache_tokens']:,} tokens" in panel_text(app, "kv"), log.name
            banner = panel_text(app, "banner")
            if want.get("ready"):
                assert "✔ READY" in banner, log.name
            elif want.get("failure") and want["failure"] != "context_length_exceeded":
                assert f"✘ FAILED: {want['failure']}" in banner, log.name


async def test_log_pane_colours_folds_filters_and_caps() -> None:
    app = PanelApp()
    async with app.run_test(size=(160, 60)) as pilot:
        view = app.query_one("#log", LogView)
        lines = read_lines(FIXTURES / f"{KV_OOM}.log")
        view.write_lines(lines)
        await pilot.pause()
        shown = view.shown_lines()
        folds = [line for line in shown if "more lines (z: unfold)" in line]
        assert folds, "the traceback frames should fold"
        hidden = sum(int(line.split("… ")[1].split()[0]) for line in folds)
        assert len(shown) - len(folds) + hidden == len(lines)     # every line is shown or counted
        exception = next(line for line in shown if "ValueError: RESOURCE_EXHAUSTED" in line)
        index = shown.index(exception)
        assert view.buffer.row_text(index)[1] == "E"               # ERROR lines get the error colour
        view.set_folded(False)
        assert view.shown_lines() == [line for line in lines]
        view.set_filter("resource_exhausted")
        assert view.shown_lines() and all("RESOURCE_EXHAUSTED" in line for line in view.shown_lines())
        view.set_filter("")
        small = LogView(100)
        await app.mount(small)
        small.write_lines([f"INFO 01-01 00:00:00 [x.py:1] line {i}" for i in range(250)])
        assert small.buffer.dropped == 150 and len(small.shown_lines()) == 100
        assert small.shown_lines()[0].endswith("line 150")


# --- the whole screen against the sandbox (TPU API, SSH VM, simulated vLLM, OpenAI server) ---------


@pytest.fixture
def sandbox(tmp_path: Path) -> Any:
    with running_sandbox(tmp_path / "sandbox", boot_s=4.0, fast_boot_s=1.0) as box:
        yield box


@pytest.fixture
def sandbox_services(sandbox: Any, tmp_path: Path) -> Any:
    with services_on(sandbox, tmp_path / "history.db") as services:
        yield services



async def _plan(vm: Any) -> Any:
    return vm.docker.find("vllm").plan


async def _reboot(vm: Any, argv: list[str], boot_s: float) -> Any:
    """Replace the node's container with a fresh one booting in ``boot_s``; returns its plan."""
    vm.boot_s = boot_s
    vm.docker.remove(vm.docker.find("vllm"))
    await vm.boot_container(argv)
    return vm.docker.find("vllm").plan


async def _until(pilot: Any, predicate: Any, timeout_s: float = 30.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return
        await pilot.pause(0.05)
    screen = pilot.app.screen
    raise AssertionError(f"timed out waiting for the startup view: {getattr(screen, 'panel_info', lambda: screen)()}")


class StartupApp(TpuConsoleApp):
    """The console opened straight on a node's startup view (no fleet polling underneath)."""

    CSS_PATH = str(Path(__file__).resolve().parents[2] / "console" / "app.tcss")

    def __init__(self, services: Any, node: Any, **screen_options: Any) -> None:
        super().__init__(services)
        self.node = node
        self.screen_options = screen_options

    def on_mount(self, event: Any) -> None:
        event.prevent_default()                               # not the fleet screen underneath
        self.push_screen(StartupScreen(self.node, **self.screen_options))


async def _open(pilot: Any) -> StartupScreen:
    await _until(pilot, lambda: isinstance(pilot.app.screen, StartupScreen) and pilot.app.screen.query("#log"))
    return pilot.app.screen  # type: ignore[return-value]


async def test_booting_node_ends_ready_with_a_usable_tunnel(sandbox: Any, sandbox_services: Any) -> None:
    import httpx

    vm = sandbox.vms["vllm-flex-b"]
    plan = sandbox.call(_plan(vm))
    app = StartupApp(sandbox_services, await fleet_node(sandbox_services, "vllm-flex-b"))
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        await _until(pilot, lambda: screen.served_models is not None)
        await pilot.pause(PANEL_WAIT_S)
        url = screen.forward.url
        assert url is not None and url.startswith("http://127.0.0.1:")
        await pilot.press("y")                              # copy the URL (OSC 52) with a toast
        await pilot.pause()
        assert app.clipboard == url
        assert any(n.message.startswith(f"Copied the forward's URL {url}") for n in app._notifications)
        banner = panel_text(app, "banner")
        assert "✔ READY" in banner and f"Local URL {url}" in banner
        assert f"/v1/models answers: {plan.served_model_name or plan.model}" in banner
        async with httpx.AsyncClient() as client:           # the operator's curl, through the tunnel
            answer = await client.get(f"{url}/v1/models")
        assert answer.status_code == 200 and answer.json()["data"][0]["id"] == (plan.served_model_name or plan.model)
        assert f"{plan.kv_cache_tokens:,} tokens" in panel_text(app, "kv")
        assert f"{plan.max_concurrency:.2f}x at {plan.max_model_len:,} tokens per request" in panel_text(app, "kv")
        deferred = sum("AOT lower skipped" in line for _, line in plan.lines)
        assert f"{plan.compile_steps + deferred} done ({deferred} compiled in warm-up)" in panel_text(app, "compile")
        assert f"{plan.hbm_after_kv_gib:.2f} / {plan.hbm_limit_gib:.2f} GiB" in panel_text(app, "hbm")
        view = screen.query_one("#log", LogView)
        assert view.buffer.total == len(plan.lines)
        launch = sandbox_services.store.list_launches(node="vllm-flex-b")[0]
        assert (launch.outcome, launch.origin, launch.kv_cache_tokens) == ("ready", "observed", plan.kv_cache_tokens)
        assert launch.max_concurrency == plan.max_concurrency and launch.compile_seconds == plan.compile_seconds
        assert launch.hbm[-1]["used_gib"] == [plan.hbm_after_kv_gib] * plan.chips
        assert launch.ready_at is not None and set(launch.phase_durations) >= {"loading_weights", "compiling"}
        assert launch.container_id == screen.watcher.container_id
        # after ready the serving panel reads /metrics through the same tunnel
        serving = screen.query_one("#panel-serving")
        await _until(pilot, lambda: serving.display and "requests" in text_of(serving.query_one("#serving-figures")))
        figures = text_of(serving.query_one("#serving-figures"))
        assert "0 running · 0 waiting" in figures and f"of {plan.kv_cache_tokens:,} tokens" in figures
        assert "note:" not in figures             # the server's KV cache size is the log's
        # /metrics is the authority after ready: the headline says so, and the history keeps what it said
        await _until(pilot, lambda: "(/metrics)" in panel_text(app, "kv"))
        assert f"{plan.kv_cache_tokens:,} tokens (/metrics)" in panel_text(app, "kv")
        await _until(pilot, lambda: sandbox_services.store.get_launch(launch.id).metrics_kv_cache_tokens is not None)
        served = sandbox_services.store.get_launch(launch.id)
        assert (served.metrics_kv_cache_tokens, served.metrics_engines) == (plan.kv_cache_tokens, 1)
        assert served.metrics_max_concurrency == pytest.approx(plan.max_concurrency, abs=0.01)
        # ... and the sandbox's /metrics states the utilization its own log printed (0.92 here, not 0.9)
        assert served.metrics_gpu_memory_utilization == plan.gpu_memory_utilization == 0.92
        # the launch was written off the UI loop: the recorder's store belongs to the history thread
        # (sqlite3 refuses a connection used from another thread than the one that opened it)
        assert screen.recorder is not None and screen.recorder.store is not sandbox_services.store
        with pytest.raises(StoreError, match="thread"):
            screen.recorder.store.get_launch(launch.id)


PANEL_WAIT_S = 0.4


async def test_dropped_connection_mid_boot_loses_no_line(sandbox: Any, sandbox_services: Any) -> None:
    from sandbox.runner import serve_args_for

    vm = sandbox.vms["vllm-flex-b"]
    node = await fleet_node(sandbox_services, "vllm-flex-b")
    plan = sandbox.call(_reboot(vm, serve_args_for(node.accelerator_type, node.chips), boot_s=5.0))
    app = StartupApp(sandbox_services, node)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        view = screen.query_one("#log", LogView)
        await _until(pilot, lambda: view.buffer.total > 20)
        assert not screen.watcher.state.ready
        sandbox._loop.call_soon_threadsafe(vm.drop_connections)
        await _until(pilot, lambda: screen.served_models is not None)
        await pilot.pause(PANEL_WAIT_S)
        shown = [e.text for e in view.buffer.entries]
        markers = [text for text in shown if text.startswith("──── ")]   # the console's own lines
        assert [text for text in shown if text not in markers] == [line for _, line in plan.lines]
        assert markers[0].startswith("──── connection lost (last line ")
        assert markers[-1].startswith("──── resumed following container vllm: ") and "caught up" in markers[-1]
        assert any("--since" in command for command in vm.commands)     # it resumed, not restarted
        assert "✔ READY" in panel_text(app, "banner")


async def test_unknown_host_key_asks_and_records_it_once_accepted(sandbox: Any, sandbox_services: Any) -> None:
    import asyncssh


    sandbox.known_hosts_path.write_text("")
    fingerprint = asyncssh.import_public_key(sandbox.vms["vllm-v5e-a"].host_public_key).get_fingerprint("sha256")
    app = StartupApp(sandbox_services, await fleet_node(sandbox_services, "vllm-v5e-a"))
    with host_keys_unpublished(sandbox, "vllm-v5e-a"):
        async with app.run_test(size=(200, 50)) as pilot:
            await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.query("#confirm-no"))
            message = text_of(app.screen.query_one("#confirm-message", Static), width=400)
            assert fingerprint in message and str(sandbox.known_hosts_path) in message
            await pilot.press("n")                                # refuse: no connection, one sentence
            screen = await _open(pilot)
            await _until(pilot, lambda: screen.problem is not None)
            await pilot.pause(PANEL_WAIT_S)
            status = " ".join(panel_text(app, "status").split())
            assert f"presented the unknown host key {fingerprint}" in status and "was not accepted" in status
            assert sandbox.known_hosts_path.read_text() == ""
            await pilot.press("r")                                # reconnect, accept this time
            await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.query("#confirm-no"))
            await pilot.press("y")
            await _until(pilot, lambda: screen.watcher is not None and screen.watcher.status is not None
                         and screen.watcher.status.kind == "connected")
            assert sandbox.known_hosts_path.read_text().split()[1:] == \
                sandbox.vms["vllm-v5e-a"].host_public_key.split()[:2]


async def test_changed_host_key_is_refused_with_the_reason(sandbox: Any, sandbox_services: Any) -> None:
    import asyncssh

    node = await fleet_node(sandbox_services, "vllm-v5e-a")
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    sandbox.known_hosts_path.write_text(f"tpu.{node.node_id}-0 {other}\n")
    app = StartupApp(sandbox_services, node)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        await _until(pilot, lambda: screen.problem is not None)
        await pilot.pause(PANEL_WAIT_S)
        status = " ".join(panel_text(app, "status").split())
        assert "differs from the one recorded" in status and "line 1" in status
        assert screen.watcher is None or screen.watcher.lines_received == 0


async def test_bindings_have_ids_and_reach_the_palette(sandbox: Any, sandbox_services: Any) -> None:
    app = StartupApp(sandbox_services, await fleet_node(sandbox_services, "vllm-v5e-a"))
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        ids = {b.id for b in screen.BINDINGS}                 # type: ignore[union-attr]
        assert {"log_follow", "log_filter", "log_fold", "worker", "rollback", "swap", "back"} <= ids
        titles = [c.title for c in app.get_system_commands(screen)]
        assert "Follow (f)" in titles and "Roll back (R)" in titles
        view = screen.query_one("#log", LogView)
        await pilot.press("f")
        assert view.follow is False and "paused" in view.border_title
        await pilot.press("W")                                # single-host: stays on worker 0
        assert screen.worker == 0
        await pilot.press("slash")
        screen.query_one("#log-filter").value = "zzz-no-match"
        await pilot.press("enter")
        assert view.shown_lines() == [] and "filter: zzz-no-match (0 shown)" in view.border_title
        await pilot.press("escape")                           # clears the filter, stays on the screen
        assert app.screen is screen and view.buffer.filter_text == ""
        await pilot.press("escape")
        assert app.screen is not screen


async def test_a_creating_node_is_waited_for_and_a_preempted_one_said_once(sandbox: Any, sandbox_services: Any) -> None:
    project = sandbox.tpu_api.world.projects["inference-prod"]
    key = next(k for k in project.nodes if k.endswith("/vllm-new-e"))
    app = StartupApp(sandbox_services, await fleet_node(sandbox_services, "vllm-new-e"), poll_s=0.05)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        view = screen.query_one("#log", LogView)
        await _until(pilot, lambda: view.buffer.total >= 1)
        await pilot.pause(0.3)                                 # several polls: still one line
        assert [e.text for e in view.buffer.entries] == ["──── node vllm-new-e is CREATING; waiting for READY ────"]
        assert screen.problem is None
        await _until(pilot, lambda: "waiting for the node" in panel_text(app, "status"))
        assert "node vllm-new-e is CREATING; waiting for READY" in " ".join(panel_text(app, "status").split())
        project.nodes[key]["state"] = "PREEMPTED"
        await _until(pilot, lambda: screen.problem is not None)
        assert screen.problem == ("Node vllm-new-e is PREEMPTED: it will not become READY on its own; "
                                  "not following it.")
        toast = list(app._notifications)[-1]
        assert (toast.title, toast.message) == ("Node not ready", screen.problem)   # the title said once
        await _until(pilot, lambda: panel_text(app, "status").startswith("✘ Node vllm-new-e is PREEMPTED"))


async def test_an_unreachable_node_is_said_once_with_its_title_in_the_toast(sandbox: Any, sandbox_services: Any) -> None:
    sandbox.call(sandbox.vms["vllm-ondemand-g"].stop())
    app = StartupApp(sandbox_services, await fleet_node(sandbox_services, "vllm-ondemand-g"))
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        await _until(pilot, lambda: screen.problem is not None
                     and any(n.title == "Host unreachable" for n in app._notifications))
        toasts = [n for n in app._notifications if n.title == "Host unreachable"]
        assert len(toasts) == 1                                  # said once (other toasts may come and go)
        toast = toasts[0]
        assert toast.message.startswith("Cannot reach node vllm-ondemand-g (127.0.0.1:")   # not "Host unreachable: ..."
        assert screen.problem == toast.message


async def test_a_replacing_container_gets_a_gap_marker_a_fresh_state_and_its_own_launch(
        sandbox: Any, sandbox_services: Any) -> None:
    import re

    from sandbox.runner import serve_args_for

    vm = sandbox.vms["vllm-flex-b"]
    node = await fleet_node(sandbox_services, "vllm-flex-b")
    sandbox.call(_reboot(vm, serve_args_for(node.accelerator_type, node.chips), boot_s=6.0))
    app = StartupApp(sandbox_services, node)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        view = screen.query_one("#log", LogView)
        await _until(pilot, lambda: view.buffer.total > 10)
        first_id = screen.watcher.container_id
        second = sandbox.call(_reboot(vm, ["Qwen/Qwen3-0.6B", "--max-model-len", "4096",
                                           "--tensor-parallel-size", "8"], boot_s=1.0))
        await _until(pilot, lambda: screen.watcher.state.ready)
        new_id = screen.watcher.container_id
        markers = [e.text for e in view.buffer.entries if "replaced by" in e.text]
        assert len(markers) == 1 and re.fullmatch(
            rf"──── container {first_id[:12]} replaced by {new_id[:12]} \(noticed at \d\d:\d\d:\d\d UTC\); "
            rf"{first_id[:12]}'s output after its last line read \(\d\d:\d\d:\d\d UTC\) was not seen ────",
            markers[0]), markers
        assert screen.watcher.state.lines_read == len(second.lines)       # a fresh reader
        await _until(pilot, lambda: {launch.container_id: launch.outcome for launch in
                                     sandbox_services.store.list_launches(node="vllm-flex-b")}
                     == {first_id: "replaced", new_id: "ready"})


async def _remove_container(vm: Any) -> None:
    vm.docker.remove(vm.docker.find("vllm"))


async def test_a_ready_node_without_a_container_says_what_the_view_waits_for(sandbox: Any,
                                                                             sandbox_services: Any) -> None:
    vm = sandbox.vms["vllm-flex-b"]
    sandbox.call(_remove_container(vm))
    node = await fleet_node(sandbox_services, "vllm-flex-b")
    app = StartupApp(sandbox_services, node)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        view = screen.query_one("#log", LogView)
        await _until(pilot, lambda: any("runs no container" in e.text for e in view.buffer.entries))
        hints = [e.text for e in view.buffer.entries if "runs no container" in e.text]
        assert hints == [
            "──── node vllm-flex-b is READY but runs no container named vllm: this watch waits until one starts. "
            "Start one: tpu-console swap vllm-flex-b --project inference-prod --zone us-east5-a --image "
            f"{sandbox_services.config.container.image} --set model={sandbox_services.config.container.model} "
            "(a new node can run one at once: tpu-console request ... --image IMAGE --model MODEL). ────"]


async def test_a_slice_is_followed_on_every_worker_with_prefixed_lines_and_summed_hbm(
        sandbox: Any, sandbox_services: Any) -> None:
    vms = sandbox.workers["vllm-v5e-16"]
    plans = [sandbox.call(_plan(vm)) for vm in vms]
    node = await fleet_node(sandbox_services, "vllm-v5e-16")
    app = StartupApp(sandbox_services, node)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        view = screen.query_one("#log", LogView)
        total = sum(len(p.lines) for p in plans)
        await _until(pilot, lambda: view.buffer.total >= total and screen.watcher.state.ready)
        await pilot.pause(PANEL_WAIT_S)
        texts = [e.text for e in view.buffer.entries]
        for worker, plan in enumerate(plans):              # every worker's own lines, prefixed
            mine = [t.split("| ", 1)[1] for t in texts if t.startswith(f"w{worker}| ")]
            assert mine == [line for _, line in plan.lines]
        assert "all 4 workers" in screen.sub_title
        sliced = panel_text(app, "slice")
        weights, limit = plans[0].weights_gib, plans[0].hbm_limit_gib
        assert "4 workers" in sliced
        assert f"model loaded: {16 * weights:.2f} / {16 * limit:.2f} GiB over 16 chips (4 of 4 workers)" in sliced
        await pilot.press("W")                               # worker 0 alone: no prefixes, no slice
        await _until(pilot, lambda: screen.worker == 0 and screen.watcher is not None
                     and screen.watcher.state.ready and view.buffer.total == len(plans[0].lines))
        await pilot.pause(PANEL_WAIT_S)
        assert not any(e.text.startswith("w0| ") for e in view.buffer.entries)
        assert "worker 0 of 4" in screen.sub_title and not screen.query_one("#panel-slice").display


async def test_a_changed_host_key_on_one_worker_refuses_that_worker_only(sandbox: Any, sandbox_services: Any) -> None:
    """Worker 1's key changed: worker 1 is refused (a marker and a toast), workers 0, 2 and 3 are followed to READY."""
    import asyncssh

    vms = sandbox.workers["vllm-v5e-16"]
    plans = [sandbox.call(_plan(vm)) for vm in vms]
    node = await fleet_node(sandbox_services, "vllm-v5e-16")
    alias = f"tpu.{node.node_id}-1"
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    lines = sandbox.known_hosts_path.read_text().splitlines()
    assert any(line.startswith(f"{alias} ") for line in lines)
    sandbox.known_hosts_path.write_text("".join(f"{alias} {impostor}\n" if line.startswith(f"{alias} ")
                                                else f"{line}\n" for line in lines))
    app = StartupApp(sandbox_services, node)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        view = screen.query_one("#log", LogView)
        followed = [0, 2, 3]
        total = sum(len(plans[w].lines) for w in followed)
        await _until(pilot, lambda: screen.panel_info().state.ready
                     and sum(1 for e in view.buffer.entries if not e.text.startswith("────")) >= total)
        texts = [e.text for e in view.buffer.entries]
        for worker in followed:
            assert [t.split("| ", 1)[1] for t in texts if t.startswith(f"w{worker}| ")] \
                == [line for _, line in plans[worker].lines]
        assert not any(t.startswith("w1| ") for t in texts)
        refused = [t for t in texts if t.startswith("──── w1| not followed: ")]
        assert len(refused) == 1 and f"known_hosts -R {alias}` and connect again. ────" in refused[0], refused
        assert any(n.title == "Host key changed" and n.message.startswith("Worker 1 is not followed (the others are): ")
                   for n in app._notifications)
        assert screen.problem is None and sorted(screen.slice_watch.followed) == followed
        assert screen.slice_watch.refused.keys() == {1}


async def test_one_worker_past_0_alone_ends_ready_from_worker_0s_log(sandbox: Any, sandbox_services: Any) -> None:
    """Worker 2 alone: its lines only, and READY (with the forward and /v1/models) when worker 0's log says so."""
    vms = sandbox.workers["vllm-v5e-16"]
    plans = [sandbox.call(_plan(vm)) for vm in vms]
    node = await fleet_node(sandbox_services, "vllm-v5e-16")
    app = StartupApp(sandbox_services, node, worker=2)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        await _until(pilot, lambda: screen.served_models is not None)
        await pilot.pause(PANEL_WAIT_S)
        view = screen.query_one("#log", LogView)
        assert [e.text for e in view.buffer.entries if not e.text.startswith("────")] \
            == [line for _, line in plans[2].lines]                          # worker 2's lines, not worker 0's
        assert not screen.watcher.state.ready                        # its own log never says it
        assert screen.ready_watcher is not None and screen.ready_watcher.state.ready
        assert screen.ready_watcher.target.port == vms[0].ssh_port and screen.watcher.target.port == vms[2].ssh_port
        assert screen.panel_info().state.phase is Phase.READY
        assert "✔ READY" in panel_text(app, "banner") and "worker 2 of 4" in screen.sub_title
        assert screen.served_models == (plans[0].served_model_name or plans[0].model,)


async def test_a_failure_on_another_worker_fails_the_boot_in_the_panel(sandbox: Any, sandbox_services: Any) -> None:
    vms = sandbox.workers["vllm-v5e-16"]
    sandbox.call(_reboot(vms[0], ["meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "4"], boot_s=30.0))
    sandbox.call(_reboot(vms[3], ["meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "3"], boot_s=1.0))
    node = await fleet_node(sandbox_services, "vllm-v5e-16")
    app = StartupApp(sandbox_services, node)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        await _until(pilot, lambda: screen.panel_info().state.failure is not None)
        state = screen.panel_info().state
        assert state.phase is Phase.FAILED and not state.ready
        assert state.failure.message.startswith("worker 3: ValueError: Number of devices 4 must be divisible")
        await pilot.pause(PANEL_WAIT_S)
        assert "On worker 3: " in panel_text(app, "banner")


async def _restart(vm: Any, argv: list[str], boot_s: float) -> Any:
    from sandbox.engine import plan_startup

    plan = plan_startup(argv, vm.accelerator_type, boot_s=boot_s)
    vm.docker.restart(vm.docker.find("vllm"), plan)
    return plan


async def test_a_restart_in_place_gets_a_marker_and_a_fresh_boot_section(sandbox: Any, sandbox_services: Any) -> None:
    import re

    from sandbox.runner import serve_args_for

    vm = sandbox.vms["vllm-flex-b"]
    node = await fleet_node(sandbox_services, "vllm-flex-b")
    argv = serve_args_for(node.accelerator_type, node.chips) or []
    sandbox.call(_reboot(vm, argv, boot_s=6.0))
    app = StartupApp(sandbox_services, node)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        view = screen.query_one("#log", LogView)
        await _until(pilot, lambda: view.buffer.total > 10)
        container_id = screen.watcher.container_id
        second = sandbox.call(_restart(vm, argv, boot_s=1.0))
        await _until(pilot, lambda: screen.watcher.restarts and screen.watcher.state.ready)
        markers = [e.text for e in view.buffer.entries if "restarted" in e.text]
        assert len(markers) == 1 and re.fullmatch(
            r"──── container vllm restarted \(restart 1\) at \d\d:\d\d:\d\d UTC; a fresh boot follows ────",
            markers[0]), markers
        assert screen.watcher.container_id == container_id                       # same container
        assert screen.watcher.state.lines_read == len(second.lines)       # a fresh boot section
        await _until(pilot, lambda: [(l.restart_count, l.outcome) for l in
                                     sandbox_services.store.list_launches(node="vllm-flex-b")
                                     if l.container_id == container_id] == [(1, "ready")])


async def test_a_long_line_is_cut_in_the_pane_kept_whole_on_disk_and_opened_whole(
        sandbox: Any, sandbox_services: Any) -> None:
    """A 50,000-character line with markup shows "… +48000 chars" in the pane, is whole in the
    launch's log on disk and in the ``e`` modal (markup literal), and ``y``/``p`` copy it and the
    log's path with OSC 52; a long line with control bytes stays literal on disk, cleaned on screen."""
    import dataclasses
    import os

    from console.screens.long_line import LongLineScreen

    vm = sandbox.vms["vllm-flex-b"]
    node = await fleet_node(sandbox_services, "vllm-flex-b")
    plan = sandbox.call(_reboot(vm, ["Qwen/Qwen3-0.6B", "--max-model-len", "4096"], boot_s=3.0))
    head, tail = "INFO 12-01 10:00:00 [core.py:1] [bold]x[/bold] ", " [/link] the end"
    long_line = head + "y" * (50_000 - len(head) - len(tail)) + tail
    hostile = "INFO 12-01 10:00:01 [core.py:2] \x1b[2J\x07[red]z" + "z" * 2500
    box = vm.docker.find("vllm")
    box.plan = dataclasses.replace(plan, lines=((0.1, hostile), (0.2, long_line)) + tuple(plan.lines))
    box.line_ns = [box.started_ns + int(offset * 1e9) for offset, _ in box.plan.lines]
    box.texts = [text for _, text in box.plan.lines]        # what docker logs prints (per run)
    app = StartupApp(sandbox_services, node)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        view = screen.query_one("#log", LogView)
        await _until(pilot, lambda: screen.watcher is not None and screen.watcher.state.ready)
        await _until(pilot, lambda: any("+48000 chars" in t for t in view.shown_lines()))
        shown = view.shown_lines()
        assert long_line[:2000] + "… +48000 chars" in shown
        cleaned = hostile.replace("\x1b[2J", "").replace("\x07", "")              # ESC [2J and BEL gone
        assert cleaned[:2000] + f"… +{len(cleaned) - 2000} chars" in shown
        log = screen.watcher.log
        assert log is not None and log.path.is_relative_to(Path(os.environ["XDG_STATE_HOME"]))
        on_disk = log.path.read_text(encoding="utf-8").split("\n")
        assert long_line in on_disk and hostile in on_disk      # whole, as the container printed them
        # every line received is on disk once (the line thread writes a batch before the loop counts it)
        await _until(pilot, lambda: len(log.path.read_text(encoding="utf-8").split("\n")) - 1
                     == screen.watcher.lines_received)
        copied: list[str] = []
        app.copy_to_clipboard = copied.append  # type: ignore[method-assign]
        await pilot.press("e")
        await _until(pilot, lambda: isinstance(app.screen, LongLineScreen))
        modal = app.screen
        assert isinstance(modal, LongLineScreen) and modal.text == long_line
        assert modal.query_one("#line-text").render().plain.replace("\n", "") == long_line   # markup literal
        await pilot.press("y", "p")
        assert copied == [long_line, str(log.path)]
        await pilot.press("escape")
        await _until(pilot, lambda: isinstance(app.screen, StartupScreen))


async def test_a_flood_is_written_to_the_pane_at_most_four_times_a_second_and_every_line_counted(
        sandbox: Any, sandbox_services: Any) -> None:
    from console.widgets import log_pane
    from sandbox.runner import serve_args_for

    vm = sandbox.vms["vllm-flex-b"]
    node = await fleet_node(sandbox_services, "vllm-flex-b")
    vm.burst_lines_per_s, vm.burst_s = 20000, 1.5
    plan = sandbox.call(_reboot(vm, serve_args_for(node.accelerator_type, node.chips), boot_s=1.0))
    app = StartupApp(sandbox_services, node)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        drains: list[tuple[float, int]] = []        # (when, lines waiting) of each pane write
        pane = screen.query_one(LogPane)              # the pane keeps the flood control, the screen hands it lines
        drain = pane._drain

        def timed_drain() -> None:
            drains.append((time.monotonic(), pane.waiting))
            drain()

        pane._drain = timed_drain  # type: ignore[method-assign]
        view = screen.query_one("#log", LogView)
        await _until(pilot, lambda: view.buffer.total >= len(plan.lines), timeout_s=60)
        assert screen.watcher.lines_received == len(plan.lines)
        flood = [(a, b) for a, b in zip(drains, drains[1:]) if a[1] >= log_pane.FLOOD_DRAIN_LINES]
        assert len(flood) >= 3, drains                  # the burst was seen as a flood
        gaps = [b[0] - a[0] for a, b in flood]
        assert min(gaps) >= log_pane.FLOOD_DRAIN_INTERVAL_S * 0.95, gaps


async def test_keys_typed_faster_than_a_flooded_view_answers_open_and_close_the_filter(
        sandbox: Any, sandbox_services: Any) -> None:
    """During a flood the keys a person types arrive together, ahead of the loop: ``/ f k v Esc`` must
    open the filter, type ``fkv`` into it (``f`` is not the follow key there) and close it, so the
    next ``/`` opens it again and the ``Esc`` after it closes the filter, not the startup view."""
    from textual import events

    from sandbox.runner import serve_args_for

    vm = sandbox.vms["vllm-flex-b"]
    node = await fleet_node(sandbox_services, "vllm-flex-b")
    vm.burst_lines_per_s, vm.burst_s = 20000, 1.0
    sandbox.call(_reboot(vm, serve_args_for(node.accelerator_type, node.chips), boot_s=1.0))
    app = StartupApp(sandbox_services, node)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open(pilot)
        pane = screen.query_one(LogPane)
        await _until(pilot, lambda: pane.view.buffer.total > 1000)           # the flood is on
        typed: list[str] = []
        box_input = pane.box
        original = box_input.insert_text_at_cursor

        def insert(text: str) -> None:
            typed.append(text)
            original(text)

        box_input.insert_text_at_cursor = insert  # type: ignore[method-assign]
        following = pane.view.follow
        for key, char in (("slash", "/"), ("f", "f"), ("k", "k"), ("v", "v"), ("escape", None)):
            app._driver.send_message(events.Key(key, char))                 # one burst, as from the terminal
        await _until(pilot, lambda: len(typed) == 3 and not pane.box.display, timeout_s=15)
        await pilot.pause()
        assert typed == ["f", "k", "v"] and pane.view.follow == following   # typed into the box: no follow toggle
        assert app.screen is screen and screen.focused is pane.view and pane.view.buffer.filter_text == ""
        await pilot.press("slash")
        assert pane.box.display and screen.focused is pane.box               # the filter opened
        await pilot.press("escape")
        assert app.screen is screen and not pane.box.display                 # it closed; the view stays
