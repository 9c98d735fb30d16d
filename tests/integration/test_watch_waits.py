"""``watch`` of a node that is not READY yet: the whole sandbox (TPU API with queued resources moving
through their states, a VM started once the node is READY, the simulated docker), through the verb."""

from __future__ import annotations

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
    flip = threading.Timer(0.3, lambda: project.nodes[key].__setitem__("state", "TERMINATED"))
    flip.start()
    code = main(["--config", str(box.config_path), "watch", "vllm-new-e", "--poll-s", "0.05"])
    flip.cancel()
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.splitlines() == ["node vllm-new-e is CREATING; waiting for READY",
                                "tpu-console: Node vllm-new-e is TERMINATED: it will not become READY on its own; "
                                "not following it."]
