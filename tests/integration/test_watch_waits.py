"""``watch`` of a node that is not READY yet: the whole sandbox (TPU API with queued resources moving
through their states, a VM started once the node is READY, the simulated docker), through the verb."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from console.cli import main
from sandbox.runner import SANDBOX_IMAGE, Sandbox, serve_args_for


@pytest.fixture
def box(tmp_path: Path):
    sandbox = Sandbox(tmp_path / "sandbox", boot_s=1.0, fast_boot_s=0.5, time_scale=0.1)
    sandbox.start()
    yield sandbox
    sandbox.stop()


def _boot_when_ready(box: Sandbox, name: str, stop: threading.Event) -> threading.Thread:
    """Start the serving container on the VM the sandbox gives ``name`` once it is READY."""
    def run() -> None:
        while not stop.is_set():
            vm = box.vms.get(name)
            if vm is not None:
                box.call(vm.boot_container(serve_args_for("v5litepod-1", 1) or [], image=SANDBOX_IMAGE))
                return
            time.sleep(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_watch_of_a_queued_node_waits_for_ready_then_follows(box: Sandbox, capsys) -> None:
    code = main(["--config", str(box.config_path), "request", "demo-w", "--project", "inference-prod",
                 "--zone", "us-west4-a", "--accelerator-type", "v5litepod-1", "--provisioning-model", "flex-start",
                 "--max-run-duration", "4h", "--yes"])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    stop = threading.Event()
    booter = _boot_when_ready(box, "demo-w", stop)
    try:
        # named by the request's node spec: the node does not exist yet
        code = main(["--config", str(box.config_path), "watch", "demo-w", "--poll-s", "0.05"])
    finally:
        stop.set()
        booter.join(5)
    err = capsys.readouterr().err
    assert code == 0, err
    lines = err.splitlines()
    waits = [line for line in lines if line.startswith("node demo-w ")]
    assert "node demo-w does not exist yet (queued resource demo-w WAITING_FOR_RESOURCES); waiting for capacity, " \
           "then for READY" in waits
    assert any(line.startswith("node demo-w is CREATING (queued resource demo-w ") for line in waits)
    assert waits[-1] == "node demo-w is READY"
    assert len(waits) == len(set(waits))                          # one line per state change, not per poll
    # then it follows the container like any READY node
    assert lines.index("node demo-w is READY") < next(i for i, line in enumerate(lines)
                                                      if line.startswith("connected to "))
    assert "phase: ready" in err and "confirmed: /v1/models" in err


@pytest.mark.parametrize(("name", "said"), [
    ("vllm-spot-gone", "tpu-console: Node vllm-spot-gone is PREEMPTED: it will not become READY on its own; "
                       "not following it."),
    ("vllm-big-i", "tpu-console: Queued resource qr-failed of node vllm-big-i is FAILED: There is no more capacity"),
])
def test_watch_of_a_node_that_will_not_be_ready_says_so_once(box: Sandbox, capsys, name: str, said: str) -> None:
    code = main(["--config", str(box.config_path), "watch", name, "--poll-s", "0.05"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(said) and err.count("not following it") == 1 and len(err.splitlines()) == 1
    assert "Host unreachable" not in err


def test_watch_of_a_terminated_node_while_waiting_stops(box: Sandbox, capsys) -> None:
    world = box.tpu_api.world
    project = world.projects["inference-prod"]
    key = next(k for k in project.nodes if k.endswith("/vllm-new-e"))
    stderr, stop = sys.stderr, threading.Event()

    def flip_once_seen_creating() -> None:
        # not on a timer: under load the first poll can come after any fixed delay
        deadline = time.monotonic() + 30
        while not stop.is_set() and time.monotonic() < deadline:
            if "waiting for READY" in stderr.getvalue():               # type: ignore[attr-defined]
                project.nodes[key]["state"] = "TERMINATED"
                return
            time.sleep(0.02)

    flip = threading.Thread(target=flip_once_seen_creating, daemon=True)
    flip.start()
    code = main(["--config", str(box.config_path), "watch", "vllm-new-e", "--poll-s", "0.05"])
    stop.set()
    flip.join(5)
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.splitlines() == ["node vllm-new-e is CREATING; waiting for READY",
                                "tpu-console: Node vllm-new-e is TERMINATED: it will not become READY on its own; "
                                "not following it."]


def test_watch_of_a_ready_node_without_a_container_says_what_it_waits_for_and_the_hint_works(
        box: Sandbox, capsys, tmp_path: Path) -> None:
    import shlex

    config = ["--config", str(box.config_path), "--db", str(tmp_path / "history.db")]
    assert main([*config, "request", "bare-v5e", "--project", "inference-prod", "--zone", "us-west4-a",
                 "--accelerator-type", "v5litepod-1", "--provisioning-model", "flex-start",
                 "--max-run-duration", "4h", "--yes", "--wait"]) == 0
    capsys.readouterr()
    vm = box.vms["bare-v5e"]
    assert not vm.docker.containers
    hint_command: list[list[str]] = []

    def start_once_watched() -> None:
        # The watch has looked for the container (docker inspect on the VM) and found none: run the
        # hint's own command (read from the same function the verb prints it with).
        deadline = time.monotonic() + 60
        while not any("inspect" in c for c in vm.commands) and time.monotonic() < deadline:
            time.sleep(0.05)
        from console.config import load_config
        from console.flows.startup_watch import no_container_hint

        loaded = load_config(box.config_path)
        node = box.call(_node(box, "bare-v5e"))
        hint = no_container_hint(node, loaded.container.name, image=loaded.container.image,
                                 model="Qwen/Qwen3-0.6B")
        words = shlex.split(hint.split("Start one: ", 1)[1].split(" (a new node", 1)[0])
        hint_command.append(words)
        main([*config, *words[1:], "--set", "max-model-len=4096", "--yes"])

    starter = threading.Thread(target=start_once_watched, daemon=True)
    starter.start()
    code = main([*config, "watch", "bare-v5e", "--poll-s", "0.05"])
    starter.join(30)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "waiting for container vllm: none by that name on the node yet" in err
    assert ("node bare-v5e is READY but runs no container named vllm: this watch waits until one starts. "
            "Start one: tpu-console swap bare-v5e --project inference-prod --zone us-west4-a --image "
            "vllm/vllm-tpu:") in err
    assert err.count("is READY but runs no container") == 1             # said once, not per poll
    assert hint_command and hint_command[0][:3] == ["tpu-console", "swap", "bare-v5e"]
    assert "phase: ready" in err


async def _node(box: Sandbox, name: str):
    from console.config import load_config
    from console.flows.node_lookup import fleet_source_for

    config = load_config(box.config_path)
    with fleet_source_for(config, project="inference-prod", zone="us-west4-a") as source:
        return await source.get_node("inference-prod", "us-west4-a", name)
