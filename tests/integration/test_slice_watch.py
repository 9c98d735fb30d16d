"""The slice watch (:class:`console.flows.slice_watch.SliceWatch`) driven through the sandbox's SSH VMs:
the 4 workers of ``vllm-v5e-16``, each its own SSH server, host key and simulated docker, reached by
the real asyncssh client with the targets the console resolves (TPU API, guest attributes, known hosts)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from console.config import Config, load_config
from console.flows.launch_recorder import LaunchRecorder
from console.flows.launch_sink import RecorderSink
from console.flows.slice_watch import SliceEvent, SliceWatch, WorkerTarget
from console.flows.ssh_login import LoginResolver
from console.flows.ssh_target import pinned_target
from console.verbs.watch import find_node
from remote.models import Node
from remote.ssh import HostKeyChanged
from sandbox.runner import Sandbox
from sandbox.vm import SandboxVm
from store.history import HistoryStore

SLICE = "vllm-v5e-16"


@pytest.fixture
def box(tmp_path: Path):
    sandbox = Sandbox(tmp_path / "sandbox", boot_s=3.0, fast_boot_s=1.0)
    sandbox.start()
    yield sandbox
    sandbox.stop()


async def _slice_targets(box: Sandbox) -> tuple[Config, Node, list[WorkerTarget]]:
    """Every worker's target, as ``watch`` resolves them (no host-key question: unknown is refused)."""
    found = await find_node(load_config(box.config_path), SLICE, project=None, zone=None, worker=None)
    assert not isinstance(found, str), found
    node, attributes, config = found
    logins = LoginResolver(config)
    try:
        login = await logins.login(node)
    finally:
        logins.close()
    return config, node, [WorkerTarget(w, pinned_target(node, config.ssh, w, published, login=login))
                          for w, published in sorted(attributes.items())]


def _change_host_key(box: Sandbox, alias: str) -> None:
    """Record another key under ``alias`` (as after a node was recreated, or a man in the middle)."""
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    lines = box.known_hosts_path.read_text().splitlines()
    assert any(line.startswith(f"{alias} ") for line in lines)
    box.known_hosts_path.write_text("".join(f"{alias} {impostor}\n" if line.startswith(f"{alias} ") else f"{line}\n"
                                            for line in lines))


async def _plans(vms: list[SandboxVm]) -> list[Any]:
    return [vm.docker.find("vllm").plan for vm in vms]


async def _replace(vm: SandboxVm, argv: list[str]) -> None:
    vm.docker.remove(vm.docker.find("vllm"))
    await vm.boot_container(argv)


async def _cut_after_with(vm: SandboxVm, lines: int, cut: Any) -> None:
    vm.docker.cut_after_followed_lines(lines, cut)


async def test_a_refused_host_key_on_one_worker_refuses_that_worker_only(box: Sandbox, tmp_path: Path) -> None:
    vms = box.workers[SLICE]
    plans = box.call(_plans(vms))
    config, node, targets = await _slice_targets(box)
    _change_host_key(box, targets[2].target.known_hosts_name)
    store = HistoryStore(tmp_path / "history.db")
    events: list[SliceEvent] = []
    watch = SliceWatch(targets, container=config.container.name, sink=RecorderSink(LaunchRecorder(store, node)),
                       on_event=events.append)
    try:
        outcome = await watch.run(probe=False)
        launches = store.list_launches(node=SLICE)
    finally:
        store.close()
    refused = [e for e in events if e.kind == "refused"]
    assert [(e.worker, type(e.error)) for e in refused] == [(2, HostKeyChanged)]
    assert refused[0].line(True).startswith("w2| tpu-console: ")
    assert refused[0].text.endswith("Worker 2 is not followed; the others are.")
    assert sorted(e.worker for e in events if e.kind == "connected") == [0, 1, 3]
    assert any(e.text == f"following 3 workers of {SLICE} (not worker 2: host key refused)" for e in events)
    assert list(watch.followed) == [0, 1, 3] and list(watch.refused) == [2]
    # the others were followed to the end: ready, and the summary says which worker was not followed
    assert outcome.code == 0 and outcome.summary is not None
    summary = outcome.summary
    assert summary["ready"] is True and summary["workers"] == 4 and summary["refused_workers"] == [2]
    assert summary["worker_lines_read"] == [len(plans[0].lines), len(plans[1].lines), 0, len(plans[3].lines)]
    kv = {item["stage"]: item for item in summary["slice_hbm"]}["kv_cache"]
    assert (kv["workers"], kv["chips"]) == (3, 12)                          # summed over the 3 followed
    assert kv["used_gib"] == round(12 * plans[0].hbm_after_kv_gib, 2)
    assert [launch.outcome for launch in launches] == ["ready"]               # worker 0's container's launch


async def test_a_restart_on_one_worker_gets_its_marker_and_a_fresh_boot_section(box: Sandbox) -> None:
    vms = box.workers[SLICE]
    vms[0].boot_s = 6.0                                                     # worker 0 still booting meanwhile
    box.call(_replace(vms[0], ["meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "4"]))
    restarted = vms[1].docker.find("vllm")
    worker_lines = [line for _, line in restarted.plan.lines]

    def restart() -> None:                # on the sandbox loop, after worker 1's 2nd followed line
        vms[1].docker.restart(restarted, restarted.plan)

    box.call(_cut_after_with(vms[1], 2, restart))
    config, _node, targets = await _slice_targets(box)
    events: list[SliceEvent] = []
    watch = SliceWatch(targets, container=config.container.name, on_event=events.append)
    outcome = await watch.run(probe=False)
    assert outcome.code == 0 and outcome.summary is not None
    markers = [e for e in events if e.kind == "restarted"]
    assert [e.worker for e in markers] == [1]
    assert re.fullmatch(r"w1\| container vllm restarted \(restart 1\) at \d\d:\d\d:\d\d UTC; a fresh boot follows",
                        markers[0].line(True))
    assert watch.watches[1].restarts[-1].restart_count == 1
    assert outcome.summary["worker_lines_read"][1] == len(worker_lines)     # the new boot's lines alone
    assert outcome.summary["ready"] is True and outcome.summary["failure_worker"] is None


async def test_the_summary_sums_hbm_over_every_worker(box: Sandbox) -> None:
    vms = box.workers[SLICE]
    plans = box.call(_plans(vms))
    config, _node, targets = await _slice_targets(box)
    lines: dict[int, int] = {}

    def count(worker: int, batch: list[Any]) -> None:
        lines[worker] = lines.get(worker, 0) + len(batch)

    watch = SliceWatch(targets, container=config.container.name, on_lines=count)
    outcome = await watch.run(probe=False)
    assert outcome.code == 0 and outcome.summary is not None
    summary = outcome.summary
    weights, after_kv, limit = plans[0].weights_gib, plans[0].hbm_after_kv_gib, plans[0].hbm_limit_gib
    by_stage = {item["stage"]: item for item in summary["slice_hbm"]}
    assert by_stage["model_loaded"] == {"stage": "model_loaded", "used_gib": round(16 * weights, 2),
                                        "limit_gib": round(16 * limit, 2), "chips": 16, "workers": 4}
    assert by_stage["kv_cache"]["used_gib"] == round(16 * after_kv, 2)
    assert summary["worker_hbm_used_gib"] == [[after_kv] * 4] * 4         # per chip stays per chip
    assert "refused_workers" not in summary and summary["kv_cache_tokens"] == plans[0].kv_cache_tokens
    assert [(h.stage, h.used_gib, h.workers) for h in watch.slice_hbm()][-1] == ("kv_cache", round(16 * after_kv, 2), 4)
    assert watch.state.ready and lines == {w: len(p.lines) for w, p in enumerate(plans)}   # every line handed on

