"""``request --image/--model/--set``: from a queued-resource request to a serving container, on the
whole sandbox (TPU API with its states scaled down 20x, a VM started for the node once READY, the
simulated docker), through the verb, the swap machinery and the history."""

from __future__ import annotations

import json
from pathlib import Path

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
        assert [(launch.model, launch.accelerator_type) for launch in launches] == [("Qwen/Qwen3-0.6B", "v5litepod-1")]
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
