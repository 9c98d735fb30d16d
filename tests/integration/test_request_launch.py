"""``request --image/--model/--set``: from a queued-resource request to a serving container, on the
whole sandbox (TPU API with its states scaled down 20x, a VM started for the node once READY, the
simulated docker), through the verb, the swap machinery and the history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.cli import main
from console.config import load_config
from console.flows.history_store import open_history
from sandbox.runner import Sandbox


def test_request_with_an_image_runs_the_container_once_the_node_is_ready(tmp_path: Path, capsys) -> None:
    box = Sandbox(tmp_path / "sandbox", boot_s=1.0, fast_boot_s=0.3, time_scale=0.05)
    box.start()
    try:
        db = tmp_path / "history.db"
        code = main(["--config", str(box.config_path), "--db", str(db), "request", "demo-v5e",
                     "--project", "inference-prod", "--zone", "us-west4-a", "--accelerator-type", "v5litepod-1",
                     "--provisioning-model", "flex-start", "--max-run-duration", "4h",
                     "--image", "vllm/vllm-tpu:v0.29.1", "--model", "Qwen/Qwen3-0.6B", "--set", "max-model-len=8192",
                     "--yes", "--json"])
        out = json.loads(capsys.readouterr().out)
        assert code == 0, out
        assert out["queued_resource"]["state"] == "ACTIVE" and out["node"]["state"] == "READY"
        assert out["container"]["started"] is True
        # the VM the sandbox started for the new node runs exactly that container
        boxes = list(box.vms["demo-v5e"].docker.containers.values())
        assert len(boxes) == 1
        assert boxes[0].image == "vllm/vllm-tpu:v0.29.1"
        assert "Qwen/Qwen3-0.6B" in boxes[0].command and "8192" in boxes[0].command
        assert boxes[0].id.startswith(out["container"]["container_id"][:12])
        # the config now reaches it (the sandbox rewrote [ssh.hosts]), and the launch is in the history
        assert "demo-v5e" in load_config(box.config_path).ssh.hosts
        store = open_history(None, db)
        try:
            launches = store.list_launches(node="demo-v5e")
        finally:
            store.close()
        assert [(launch.model, launch.accelerator_type, launch.outcome) for launch in launches] == [
            ("Qwen/Qwen3-0.6B", "v5litepod-1", "unwatched")]
    finally:
        box.stop()


def test_a_bad_container_setting_is_refused_before_anything_is_created(tmp_path: Path, capsys) -> None:
    config = tmp_path / "config.toml"
    config.write_text('api_endpoint = "http://127.0.0.1:9"\n[[projects]]\nid = "inference-prod"\n')
    code = main(["--config", str(config), "request", "x1", "--project", "inference-prod", "--zone", "us-west4-a",
                 "--accelerator-type", "v5litepod-1", "--provisioning-model", "spot", "--set", "no-equals-sign",
                 "--yes"])
    assert code == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_deleting_the_queued_resource_stops_its_vm_and_the_node_leaves_the_fleet(tmp_path: Path, capsys) -> None:
    import socket
    import time

    box = Sandbox(tmp_path / "sandbox", boot_s=1.0, fast_boot_s=0.3, time_scale=0.05)
    box.start()
    try:
        config = ["--config", str(box.config_path), "--db", str(tmp_path / "history.db")]
        where = ["--project", "inference-prod", "--zone", "us-west4-a"]
        assert main([*config, "request", "demo-v5e", *where, "--accelerator-type", "v5litepod-1",
                     "--provisioning-model", "flex-start", "--max-run-duration", "4h",
                     "--image", "vllm/vllm-tpu:v0.29.1", "--model", "Qwen/Qwen3-0.6B", "--yes"]) == 0
        vm = box.vms["demo-v5e"]
        container = next(iter(vm.docker.containers.values()))
        port = vm.ssh_port
        socket.create_connection(("127.0.0.1", port), timeout=5).close()      # it listens
        capsys.readouterr()
        assert main([*config, "delete", "demo-v5e", *where, "--yes", "--force"]) == 0
        capsys.readouterr()
        # The VM stopped when the delete began: no SSH server, its container ended, no host entry.
        assert "demo-v5e" not in box.vms
        assert container.removed.is_set()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        assert "demo-v5e" not in load_config(box.config_path).ssh.hosts
        # The node leaves the fleet once the deletion completes (poll with a generous deadline).
        deadline = time.monotonic() + 30
        while True:
            main([*config, "nodes", "--json"])        # exits 1: the demo fleet has a denied project
            names = {n["name"] for n in json.loads(capsys.readouterr().out)["nodes"]}
            if "demo-v5e" not in names or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert "demo-v5e" not in names
        # The other VMs still serve.
        assert "vllm-v5e-a" in box.vms
    finally:
        box.stop()


def test_a_dry_run_with_a_container_shows_the_swaps_lint_and_commands(tmp_path: Path, capsys) -> None:
    """The same lint as swap, on the node the request creates (a v5e-1: the compile-cache warning and
    its fix as --set items; a 0.97 utilization above the v5e's known ceiling), and the exact
    docker commands; nothing is created (the API endpoint is not even reachable)."""
    config = tmp_path / "config.toml"
    config.write_text('api_endpoint = "http://127.0.0.1:9"\n[[projects]]\nid = "inference-prod"\n')
    argv = ["--config", str(config), "--db", str(tmp_path / "h.db"), "request", "demo-v5e", "--project",
            "inference-prod", "--zone", "us-west4-a", "--accelerator-type", "v5litepod-1", "--provisioning-model",
            "flex-start", "--max-run-duration", "4h", "--image", "vllm/vllm-tpu:v0.30.0", "--model",
            "google/gemma-4-E2B-it", "--set", "max-model-len=8192", "--set", "gpu-memory-utilization=0.97",
            "--dry-run"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    start = out.index("Container, started once READY:")
    lint = [line.split(":")[0].split() for line in out[start + 1:] if not line.strip()[0].isdigit()
            and line != "Dry run: nothing was created."]
    assert ["WARNING", "hbm-utilization"] in lint and ["WARNING", "compile-cache"] in lint
    assert any("[fix: --set env.VLLM_XLA_CACHE_PATH=" in line for line in out)
    assert out[-2].startswith("  3. sudo -n docker run -d --name vllm") and out[-2].endswith(
        "vllm/vllm-tpu:v0.30.0 vllm serve google/gemma-4-E2B-it --max-model-len 8192 --gpu-memory-utilization 0.97")
    assert main([*argv, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["container_plan"]
    assert plan["old"] is None and plan["commands"][0] == "sudo -n docker pull vllm/vllm-tpu:v0.30.0"
    assert {f["rule_id"] for f in plan["lint"]} >= {"hbm-utilization", "compile-cache"}
