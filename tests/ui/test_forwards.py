"""Forwards that outlive the screen that opened them: the startup view and the fleet against the sandbox
(TPU API, SSH VMs through asyncssh, the OpenAI-compatible server), curl-ed with httpx on their ports."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from console.app import TpuConsoleApp
from console.flows.forwards import STABLE_PORTS, ForwardRegistry, stable_port
from console.screens.fleet import FleetScreen
from console.screens.forwards import ForwardsScreen
from tests.ui.conftest import fleet_node, running_sandbox, services_on, text_of
from tests.ui.test_startup import StartupApp


@pytest.fixture
def sandbox(tmp_path: Path) -> Any:
    with running_sandbox(tmp_path / "sandbox", boot_s=1.0, fast_boot_s=0.3) as box:
        yield box


@pytest.fixture
def sandbox_services(sandbox: Any, tmp_path: Path) -> Any:
    with services_on(sandbox, tmp_path / "history.db") as services:
        yield services


async def until(pilot: Any, predicate: Any, what: str, timeout_s: float = 30.0) -> None:
    """Poll ``predicate`` between Pilot pauses until it holds, or fail after ``timeout_s`` (saying the
    notifications shown meanwhile)."""
    seen: list[str] = []
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return
        seen += [f"{n.title}: {n.message}" for n in pilot.app._notifications if f"{n.title}: {n.message}" not in seen]
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what}; notifications: {seen}")


async def models_status(url: str) -> int:
    """``GET URL/v1/models``'s status, 0 when nothing answers."""
    try:
        async with httpx.AsyncClient(timeout=3, trust_env=False) as client:
            return (await client.get(f"{url}/v1/models")).status_code
    except httpx.HTTPError:
        return 0


def header_text(app: Any) -> str:
    """What the top screen's header shows (the app's title where the screen has no header)."""
    from textual.widgets import Header

    headers = app.screen.query(Header)
    return str(headers.first().format_title()) if headers else app.title


async def test_a_forward_opened_in_the_startup_view_outlives_it_and_closes_from_the_list(
        sandbox: Any, sandbox_services: Any) -> None:
    node = await fleet_node(sandbox_services, "vllm-flex-b")
    app = StartupApp(sandbox_services, node)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = app.screen
        await until(pilot, lambda: getattr(screen, "served_models", None) is not None, "the startup view's probe")
        forward = screen.forward
        port = sandbox_services.forwards.port_for("vllm-flex-b", sandbox_services.config.forward)
        assert forward.url == f"http://127.0.0.1:{port}" and port in STABLE_PORTS
        assert "⇄ vllm-flex-b localhost:" + str(port) in header_text(app)
        await pilot.press("escape")                           # leave the startup view
        await pilot.pause()
        assert app.screen is not screen
        assert await models_status(forward.url) == 200        # the forward still answers on its port
        assert "⇄ vllm-flex-b localhost:" + str(port) in header_text(app)
        await pilot.press("F")                                # the forwards view
        await until(pilot, lambda: isinstance(app.screen, ForwardsScreen), "the forwards view")
        table = app.screen.query_one("#forwards")
        cells = [str(c) for c in table.get_row_at(0)]
        assert cells[:3] == ["vllm-flex-b", forward.url, "open"] and int(cells[3]) >= 2   # probe + metrics + curl
        await pilot.press("y")
        assert app.clipboard == forward.url
        await pilot.press("x")                                # close: no confirm, a toast says it
        await pilot.pause()
        assert "Closed the forward " + forward.url in list(app._notifications)[-1].message
        assert sandbox_services.forwards.forwards == {} and table.row_count == 0
        assert await models_status(forward.url) == 0          # the port is free
        assert "⇄" not in header_text(app)
        assert "No forwards." in text_of(app.screen.query_one("#forwards-empty"))


async def test_the_same_port_answers_again_after_the_connection_drops(sandbox: Any, sandbox_services: Any) -> None:
    vm = sandbox.vms["vllm-flex-b"]
    node = await fleet_node(sandbox_services, "vllm-flex-b")
    app = StartupApp(sandbox_services, node)
    states: list[str] = []
    async with app.run_test(size=(160, 45)) as pilot:
        screen = app.screen
        await until(pilot, lambda: getattr(screen, "served_models", None) is not None, "the startup view's probe")
        forward = screen.forward
        url = forward.url
        sandbox_services.forwards.subscribe(lambda: states.append(forward.describe()))
        sandbox._loop.call_soon_threadsafe(vm.drop_connections)
        await until(pilot, lambda: "reconnecting (attempt 1)" in states, "the drop to be noticed")
        await until(pilot, lambda: forward.state == "open", "the forward to re-open", timeout_s=20)
        assert forward.url == url and await models_status(url) == 200
        # the startup view opened again (another screen) takes the same forward, on the same port
        await pilot.press("escape")
        app.open_feature("startup", node)
        await until(pilot, lambda: getattr(app.screen, "served_models", None) is not None, "the second probe")
        assert app.screen.forward is forward and len(sandbox_services.forwards.forwards) == 1


class FleetApp(TpuConsoleApp):
    CSS_PATH = str(Path(__file__).resolve().parents[2] / "console" / "app.tcss")


async def test_f_on_a_ready_fleet_row_opens_a_forward_and_refuses_a_node_without_the_container(
        sandbox: Any, sandbox_services: Any) -> None:
    app = FleetApp(sandbox_services)
    async with app.run_test(size=(160, 45)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, FleetScreen) and app.screen.snapshot is not None,
                    "the fleet")
        fleet = app.screen
        fleet.select_node(next(n for n in fleet.snapshot.nodes if n.name == "vllm-v5e-a"))
        await pilot.press("f")
        await until(pilot, lambda: any(n.title == "Forward open" for n in app._notifications), "the forward")
        forward = next(iter(sandbox_services.forwards.forwards.values()))
        # its stable port, or the next free one (another test process may hold it); the choice itself is
        # test_ports_come_from_the_config_else_stay_stable_per_node_and_skip_a_taken_one's
        assert forward.node_name == "vllm-v5e-a" and forward.local_port in STABLE_PORTS
        assert await models_status(forward.url) == 200
        # a READY node whose container is gone: refused with the reason, listed as failed
        vm = sandbox.vms["vllm-flex-b"]

        async def remove() -> None:
            vm.docker.remove(vm.docker.find("vllm"))

        sandbox.call(remove())
        fleet.select_node(next(n for n in fleet.snapshot.nodes if n.name == "vllm-flex-b"))
        await pilot.press("f")
        await until(pilot, lambda: any(n.title == "No forward to vllm-flex-b" for n in app._notifications),
                    "the refusal")
        toast = next(n for n in app._notifications if n.title == "No forward to vllm-flex-b")
        assert "has no container 'vllm'" in toast.message
        await pilot.press("colon")
        await pilot.press(*"forwards", "enter")
        await until(pilot, lambda: isinstance(app.screen, ForwardsScreen), "the forwards view from :forwards")
        rows = [[str(c) for c in app.screen.query_one("#forwards").get_row_at(i)] for i in range(2)]
        assert rows[0][:3] == ["vllm-v5e-a", forward.url, "open"]
        assert rows[1][0] == "vllm-flex-b" and rows[1][2].startswith("failed: vllm-flex-b has no container")


def test_ports_come_from_the_config_else_stay_stable_per_node_and_skip_a_taken_one() -> None:
    import socket

    from console.config import ForwardConfig

    registry = ForwardRegistry()
    assert stable_port("vllm-flex-b") == stable_port("vllm-flex-b") in STABLE_PORTS
    assert registry.port_for("a", ForwardConfig(port=9100, ports={"b": 9200})) == 9100
    assert registry.port_for("b", ForwardConfig(port=9100, ports={"b": 9200})) == 9200
    # [forward] port is a's now: another node gets its stable port, not the same one
    assert registry.port_for("c", ForwardConfig(port=9100)) != 9100
    assert registry.port_for("a", ForwardConfig()) == 9100                  # a node keeps its port
    with socket.socket() as taken:                                          # something else listens there
        taken.bind(("127.0.0.1", stable_port("d")))
        taken.listen()
        port = ForwardRegistry().port_for("d", ForwardConfig())
    assert port != stable_port("d") and port in STABLE_PORTS


# --- the fleet's serving columns ----------------------------------------------------------------


def node_cells(app: Any, name: str) -> dict[str, str]:
    """The fleet's shown cells of node ``name``, by column label."""
    table = app.screen.query_one("#nodes")
    key = next(k for k in table.rows if k.value.endswith(f"/{name}"))
    labels = [c.label.plain for c in table.columns.values()]
    return dict(zip(labels, (str(c) for c in table.get_row(key)), strict=True))


async def test_serving_columns_come_from_metrics_and_a_slow_node_never_delays_the_table(
        sandbox: Any, sandbox_services: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The table is drawn while a node that accepts TCP but never answers (a blackholed VM) is
    still being sampled; the others fill in from /metrics (model, ready, queue, tok/s under load);
    the slow one says unreachable once its sample times out; a node whose container went away
    says so."""
    import socket
    from dataclasses import replace

    from console.flows import serving

    monkeypatch.setattr(serving, "SAMPLE_INTERVAL_S", 0.5)
    monkeypatch.setattr(serving, "SAMPLE_TIMEOUT_S", 4.5)  # under the SSH connect timeout (5 s)
    silent = socket.socket()                     # accepts connections, never sends an SSH banner
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    ssh = sandbox_services.config.ssh
    hosts = {**ssh.hosts, "vllm-reserved-d": f"127.0.0.1:{silent.getsockname()[1]}"}
    sandbox_services.config = replace(sandbox_services.config, ssh=replace(ssh, hosts=hosts))
    vm = sandbox.vms["vllm-v5e-a"]
    plan = vm.docker.find("vllm").plan
    gone = sandbox.vms["vllm-ondemand-g"]

    async def remove() -> None:
        gone.docker.remove(gone.docker.find("vllm"))

    sandbox.call(remove())
    app = FleetApp(sandbox_services)
    try:
        async with app.run_test(size=(200, 45)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, FleetScreen) and app.screen.snapshot is not None,
                        "the fleet")
            assert node_cells(app, "vllm-reserved-d")["SERVING"] == "…"      # the table did not wait for it
            await until(pilot, lambda: node_cells(app, "vllm-v5e-a")["SERVING"] == "ready", "vllm-v5e-a's sample")
            cells = node_cells(app, "vllm-v5e-a")
            assert cells["MODEL"] == (plan.served_model_name or plan.model).rsplit("/", 1)[-1]
            assert cells["QUEUE"] == "0"
            assert node_cells(app, "vllm-reserved-d")["SERVING"] == "…"      # still sampling the silent one
            assert node_cells(app, "vllm-spot-gone")["SERVING"] == "-"        # PREEMPTED: not sampled
            await until(pilot, lambda: node_cells(app, "vllm-ondemand-g")["SERVING"] == "no container",
                        "the node without its container")
            # load: completions straight to the node's server; the next samples see tokens generated
            async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
                base = f"http://127.0.0.1:{vm.openai_port}"
                model = plan.served_model_name or plan.model
                for _ in range(3):
                    answer = await client.post(f"{base}/v1/completions",
                                               json={"model": model, "prompt": "hello", "max_tokens": 64})
                    assert answer.status_code == 200
            await until(pilot, lambda: node_cells(app, "vllm-v5e-a")["TOK/S"] not in ("-", "0.0"),
                        "tok/s from the generation counter")
            assert float(node_cells(app, "vllm-v5e-a")["TOK/S"].replace(",", "")) > 0
            await until(pilot, lambda: node_cells(app, "vllm-reserved-d")["SERVING"] == "unreachable",
                        "the silent node's timeout")
            fleet = app.screen
            assert fleet.serving[next(k for k in fleet.serving if k.endswith("/vllm-reserved-d"))].reason == \
                "no answer within 4.5 s"
    finally:
        silent.close()


def test_a_watched_boot_says_how_far_it_is() -> None:
    from dataclasses import replace

    from console.flows.serving import watched_serving
    from remote.startup import Phase, PhaseMark, StartupState

    marks = tuple(PhaseMark(phase, None, n) for n, phase in enumerate((Phase.STARTING, Phase.LOADING_WEIGHTS,
                                                                       Phase.COMPILING), start=1))
    state = StartupState(phase=Phase.COMPILING, timeline=marks)
    assert watched_serving(state) == ("booting 60%", "compiling")
    assert watched_serving(replace(state, ready=True, phase=Phase.READY)) == ("ready", None)


async def test_two_opens_at_once_share_one_forward_and_a_close_while_opening_is_said(
        sandbox: Any, sandbox_services: Any) -> None:
    import asyncio

    from console.flows.ssh_target import resolve_target
    from remote.errors import RemoteError

    config = sandbox_services.config
    node = await fleet_node(sandbox_services, "vllm-v5e-a")
    target = await resolve_target(node, config, 0, sandbox_services.fleet)
    registry = ForwardRegistry()
    try:
        first, second = await asyncio.gather(
            *(registry.open(node, target, container_port=config.container.port, config=config.forward)
              for _ in range(2)))
        assert first is second and first.state == "open" and first.connections == 0
        for _ in range(200):                     # the node's vLLM may still be booting in a fresh sandbox
            if await models_status(first.url) == 200:
                break
            await asyncio.sleep(0.05)
        assert await models_status(first.url) == 200 and len(registry.forwards) == 1
        registry.close(node.key)
        opening = asyncio.ensure_future(registry.open(node, target, container_port=config.container.port,
                                                      config=config.forward))
        await asyncio.sleep(0)                   # the open has started (its task is connecting)
        waiter = asyncio.ensure_future(registry.open(node, target, container_port=config.container.port,
                                                     config=config.forward))
        await asyncio.sleep(0)
        registry.close(node.key)
        for caller in (opening, waiter):
            with pytest.raises(RemoteError, match="closed while it opened"):
                await asyncio.wait_for(caller, 10)
    finally:
        registry.close_all()


class ForwardsApp(FleetApp):
    """The console opened straight on the forwards view (no fleet polling and sampling underneath)."""

    def on_mount(self, event: Any) -> None:
        event.prevent_default()
        self.push_screen(ForwardsScreen())


async def test_a_forward_whose_container_is_removed_says_target_down_then_back(
        sandbox: Any, sandbox_services: Any) -> None:
    """The node refuses the forward's port once its container is gone (curl: "Empty reply from
    server"): the failed connections are counted and the forward says "target down" in the forwards
    view and the header, and says it is back once a new container answers."""
    from console.flows.ssh_target import resolve_target
    from sandbox.runner import serve_args_for

    config = sandbox_services.config
    vm = sandbox.vms["vllm-v5e-a"]
    app = ForwardsApp(sandbox_services)
    async with app.run_test(size=(160, 45)) as pilot:
        node = await fleet_node(sandbox_services, "vllm-v5e-a")
        target = await resolve_target(node, config, 0, sandbox_services.fleet)
        forward = await sandbox_services.forwards.open(node, target, container_port=config.container.port,
                                                       config=config.forward)
        said: list[str] = []
        forward.on_change = lambda sentence: (said.append(sentence), sandbox_services.forwards._changed())
        await until(pilot, lambda: isinstance(app.screen, ForwardsScreen), "the forwards view")

        async def remove() -> None:
            vm.docker.remove(vm.docker.find("vllm"))

        sandbox.call(remove())
        assert [await models_status(forward.url) for _ in range(3)] == [0, 0, 0]    # the empty replies
        assert (forward.failed_connections, forward.target_down) == (3, "Connection refused")
        assert forward.state == "open" and forward.describe() == "open, target down: Connection refused"
        assert f"⇄ vllm-v5e-a localhost:{forward.local_port} (target down)" in header_text(app)
        table = app.screen.query_one("#forwards")
        await until(pilot, lambda: table.row_count > 0 and str(table.get_row_at(0)[3]).endswith("(3 failed)"),
                    "the row's count")
        assert [str(c) for c in table.get_row_at(0)][2:4] == ["open, target down: Connection refused",
                                                             f"{forward.connections} (3 failed)"]
        assert [s for s in said if s.startswith("target")] == [
            f"target down: vllm-v5e-a refused port 8000 for a connection to {forward.url} (Connection refused): "
            "the container behind the forward may be gone; the tunnel stays open"]

        async def boot() -> None:
            vm.boot_s = 0.3
            await vm.boot_container(serve_args_for(node.accelerator_type, node.chips) or [])

        sandbox.call(boot())
        for _ in range(200):                      # refused until the new container's server is ready
            if await models_status(forward.url) == 200:
                break
            await pilot.pause(0.05)
        assert forward.target_down is None and forward.describe() == "open"
        assert f"⇄ vllm-v5e-a localhost:{forward.local_port} —" in header_text(app)
        back = [s for s in said if s.startswith("target back")]
        assert len(back) == 1 and re.fullmatch(
            rf"target back: vllm-v5e-a port 8000 answers {forward.url} again \((\d+) connections failed while it "
            r"was down\)", back[0])
        assert forward.failed_connections >= 3          # kept over the forward's life
