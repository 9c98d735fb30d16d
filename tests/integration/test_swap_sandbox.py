"""Hot swap against the sandbox: real asyncssh client, the sandbox VM's SSH server and simulated docker.

Covers a swap, a rollback, a failed pull (unknown image), hostile values reaching docker as one
argument each, and - through the ``swap`` verb and the sandbox TPU API - the guarantee that no
step of a swap asks the TPU API to delete, stop, reset or recreate anything.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import asyncssh
import pytest

from remote.container.docker import docker_image_inspect, docker_inspect
from remote.container.spec import ContainerSpec
from remote.container.swap import execute_swap, plan_swap, rollback_plan, ssh_runner
from remote.ssh import SshTarget, connect
from sandbox.vm import SandboxVm
from store.history import HistoryStore

V5E_ARGS = ["Qwen/Qwen3-8B", "--max-model-len", "32768", "--gpu-memory-utilization", "0.90",
            "--tensor-parallel-size", "4", "--max-num-batched-tokens", "2048"]
ALIAS = "tpu.4711000000000000001-0"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def vm_conn(tmp_path: Path):
    """A v5e sandbox VM serving ``vllm/vllm-tpu:v0.29.1`` and an SSH connection to it."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    vm = SandboxVm(node_name="vllm-v5e-a", accelerator_type="v5litepod-4", authorized_client_key=key.export_public_key().decode(),
                   boot_s=0.5)
    port = await vm.start()
    known = tmp_path / "known_hosts"
    known.write_text(vm.known_hosts_line(ALIAS))
    await vm.boot_container(V5E_ARGS, image="vllm/vllm-tpu:v0.29.1", env=["HF_TOKEN=hf_SecretSecret123456"])
    target = SshTarget(host="127.0.0.1", port=port, user="operator", private_key=None, known_hosts=known,
                       host_key_alias=ALIAS, connect_timeout_s=5, client_keys=(key,), node_name="vllm-v5e-a")
    conn = await connect(target)
    try:
        yield vm, conn
    finally:
        conn.close()
        await conn.wait_closed()
        await vm.stop()


async def read_spec(conn) -> tuple[ContainerSpec, dict]:
    inspect = await docker_inspect(conn, "vllm")
    assert inspect is not None
    image = await docker_image_inspect(conn, inspect["Config"]["Image"])
    return ContainerSpec.from_inspect(inspect, image), inspect


async def test_swap_replaces_the_container_and_rollback_restores_it(vm_conn):
    vm, conn = vm_conn
    old, before = await read_spec(conn)
    assert old.model == "Qwen/Qwen3-8B" and old.serve_flags["max-model-len"] == "32768"
    assert old.env == {"HF_TOKEN": "hf_SecretSecret123456"}          # the image's PATH is left out
    assert old.image_digest.startswith("vllm/vllm-tpu@sha256:")

    new = old.with_changes({"max-model-len": "131072", "served-model-name": "qwen"}, image="vllm/vllm-tpu:v0.11.1")
    plan = plan_swap(old, new)
    result = await execute_swap(ssh_runner(conn, label="vllm-v5e-a"), plan)
    assert result.ok, result.error
    sent = vm.commands[-3:]
    after = await docker_inspect(conn, "vllm")
    assert after["Id"] == result.container_id != before["Id"]
    assert after["Config"]["Image"] == "vllm/vllm-tpu:v0.11.1"
    assert after["Config"]["Cmd"] == ["vllm", "serve", *new.serve_args()]
    assert after["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert "HF_TOKEN=hf_SecretSecret123456" in after["Config"]["Env"]
    assert [shlex.split(c)[:4] for c in sent] == [["sudo", "-n", "docker", "pull"], ["sudo", "-n", "docker", "rm"],
                                                  ["sudo", "-n", "docker", "run"]]
    assert shlex.split(sent[2]) == list(plan.steps[2].argv)

    back = rollback_plan(result.rollback_spec, new)
    assert back.steps[0].argv[-1] == old.image_digest                  # pinned to the image that ran
    again = await execute_swap(ssh_runner(conn), back)
    assert again.ok, again.error
    restored = await docker_inspect(conn, "vllm")
    assert restored["Config"]["Cmd"] == before["Config"]["Cmd"]
    assert restored["Config"]["Image"] == old.image_digest


async def test_failed_pull_keeps_the_old_container_serving(vm_conn):
    vm, conn = vm_conn
    old, before = await read_spec(conn)
    result = await execute_swap(ssh_runner(conn), plan_swap(old, old.with_changes(image="vllm/vllm-tpu:no-such-tag")))
    assert not result.ok and result.failed_step.kind == "pull"
    assert "manifest unknown" in result.error and not result.old_container_removed
    still = await docker_inspect(conn, "vllm")
    assert still["Id"] == before["Id"] and still["State"]["Running"]
    assert not any(" rm " in c or " run " in c for c in vm.commands if "docker" in c)


async def test_hostile_values_reach_docker_as_single_arguments(vm_conn):
    vm, conn = vm_conn
    old, _ = await read_spec(conn)
    hostile = "x; touch /tmp/pwned && echo $(id) `id` 'q' \"d\"\nnext line"
    new = old.with_changes({"served-model-name": hostile, "env.NOTE": hostile})
    result = await execute_swap(ssh_runner(conn), plan_swap(old, new))
    assert result.ok, result.error
    after = await docker_inspect(conn, "vllm")
    cmd = after["Config"]["Cmd"]
    assert cmd[cmd.index("--served-model-name") + 1] == hostile
    assert f"NOTE={hostile}" in after["Config"]["Env"]
    # the VM's shell saw exactly one command per step: nothing was split off and run on its own
    assert not any(c.startswith(("touch", "echo", "next")) for c in vm.commands)


# ---- the whole verb against the full sandbox (TPU API + VMs) ------------------------------------

DESTRUCTIVE = (":stop", ":reset", ":start", ":delete", "/queuedResources")


@pytest.fixture
def demo_node(tmp_path: Path):
    """The sandbox TPU API (demo fleet) plus an SSH VM for ``vllm-v5e-a`` on a background loop,
    and a config file pointing at both. Yields ``(config path, api server, vm)``."""
    import asyncio
    import threading

    from remote.models import utc_now
    from sandbox.fleet_data import default_world
    from sandbox.tpu_server import SandboxTpuApi

    api = SandboxTpuApi(default_world(utc_now()))
    endpoint = api.start()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    key = asyncssh.generate_private_key("ssh-ed25519")
    (tmp_path / "id").write_bytes(key.export_private_key())
    (tmp_path / "id").chmod(0o600)
    vm = SandboxVm(node_name="vllm-v5e-a", accelerator_type="v5litepod-4",
                   authorized_client_key=key.export_public_key().decode(), boot_s=0.5)
    port = asyncio.run_coroutine_threadsafe(vm.start(), loop).result(10)
    asyncio.run_coroutine_threadsafe(vm.boot_container(V5E_ARGS, image="vllm/vllm-tpu:v0.29.1"), loop).result(10)
    (tmp_path / "known_hosts").write_text(vm.known_hosts_line(ALIAS))
    config = tmp_path / "config.toml"
    config.write_text(f"""api_endpoint = "{endpoint}"
request_timeout_s = 10
[[projects]]
id = "inference-prod"
[ssh]
user = "operator"
private_key = "{tmp_path / 'id'}"
known_hosts = "{tmp_path / 'known_hosts'}"
connect_timeout_s = 5
[ssh.hosts]
"vllm-v5e-a" = "127.0.0.1:{port}"
[container]
name = "vllm"
""")
    try:
        yield config, api, vm
    finally:
        asyncio.run_coroutine_threadsafe(vm.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
        api.stop()


def test_swap_verb_never_asks_the_tpu_api_to_touch_the_node(demo_node, tmp_path: Path, capsys):
    from console.cli import main
    from store.history import HistoryStore

    config, api, vm = demo_node
    db = tmp_path / "history.db"
    base = ["--config", str(config), "--db", str(db), "swap", "vllm-v5e-a"]
    assert main([*base, "--set", "max-model-len=abc", "--yes"]) == 2           # refused before anything runs
    assert "max-model-len must be a positive integer" in capsys.readouterr().err
    assert vm.commands == [] and api.requests == []
    assert main([*base, "--set", "max-model-len=16384", "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "--max-model-len: 32768 -> 16384" in dry and "1. sudo -n docker pull vllm/vllm-tpu:v0.29.1" in dry
    assert not any(" rm " in c or " run " in c for c in vm.commands)          # the dry run changed nothing
    code = main([*base, "--set", "max-model-len=16384", "--set", "gpu-memory-utilization=0.95",
                 "--set", "speculative-thing=1", "--yes"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "WARNING hbm-utilization" in out and "WARNING unknown-flag" in out and "Swapped" in out
    assert main(["--config", str(config), "swap", "no-such-node", "--dry-run"]) == 2
    assert main([*base, "--image", "vllm/vllm-tpu:no-such-tag", "--yes"]) == 1    # failed pull
    err = capsys.readouterr().err
    assert "manifest unknown" in err and "still serving" in err
    requests = list(api.requests)
    running = vm.docker.find("vllm").inspect(0)

    assert requests, "the verb resolved the node through the TPU API"
    assert all(method == "GET" or (method == "POST" and path.split("?")[0].endswith(":getGuestAttributes"))
               for method, path in requests), requests
    assert not any(method != "GET" and any(d in path for d in DESTRUCTIVE) for method, path in requests)
    cmd = running["Config"]["Cmd"]
    assert cmd[cmd.index("--max-model-len") + 1] == "16384"
    with HistoryStore(db) as store:
        failed, launch, replaced = store.list_launches(node="vllm-v5e-a")
    # the failed pull was recorded before it ran, and failed; what it would have replaced still serves
    assert (failed.outcome, failed.failure_kind, failed.replaced_launch_id) == ("failed", "docker pull failed", launch.id)
    assert "manifest unknown" in failed.failure_detail and launch.outcome == "unwatched"
    assert launch.container_id == running["Id"] and launch.origin == "console"
    # the container it replaced, unknown to the history, is kept so a later rollback finds it (as the screen does)
    assert replaced.origin == "observed" and replaced.outcome == "replaced" and launch.replaced_launch_id == replaced.id
    assert launch.accelerator_type == "v5litepod-4" and "--max-model-len" in launch.serve_args


def test_lint_errors_fail_the_dry_run_and_refuse_the_swap_unless_forced(demo_node, tmp_path: Path, capsys):
    from console.cli import main

    config, _api, vm = demo_node
    base = ["--config", str(config), "--db", str(tmp_path / "history.db"), "swap", "vllm-v5e-a"]
    bad = ["--set", "tensor-parallel-size=3"]                       # 3 does not divide the 4 chips
    assert main([*base, *bad, "--dry-run"]) == 1
    out = capsys.readouterr().out
    assert "ERROR   tp-chips" in out and "1 lint error (tp-chips)" in out and "without --force" in out
    assert main([*base, *bad, "--yes"]) == 1
    out = capsys.readouterr().out
    assert "Refused: 1 lint error (tp-chips); apply the fixes shown or pass --force" in out
    assert not any(" rm " in c or " run " in c or " pull " in c for c in vm.commands)
    assert main([*base, "--set", "max-model-len=8192"]) == 1       # no --yes and stdin is not a terminal
    assert "no terminal to confirm on; pass --yes" in capsys.readouterr().out
    assert not any(" rm " in c or " run " in c for c in vm.commands)
    assert main([*base, *bad, "--yes", "--force"]) == 0             # forced: it runs (vLLM will refuse it)
    swapped = capsys.readouterr().out
    assert "Swapped" in swapped
    hint = swapped.split("Follow it (and record its outcome) with: ", 1)[1].splitlines()[0]
    assert shlex.split(hint)[:2] == ["tpu-console", "watch"] and shlex.join(shlex.split(hint)) == hint   # shlex.join
    cmd = vm.docker.find("vllm").inspect(0)["Config"]["Cmd"]
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "3"


def test_dry_run_errors_on_a_max_model_len_above_the_models_config(demo_node, tmp_path: Path, capsys):
    """The node serves Qwen/Qwen3-8B (max_position_embeddings 40960 in the container's config.json)."""
    from console.cli import main
    from store.history import HistoryStore

    config, _api, vm = demo_node
    db = tmp_path / "history.db"
    base = ["--config", str(config), "--db", str(db), "swap", "vllm-v5e-a"]
    assert main([*base, "--set", "max-model-len=65536", "--dry-run"]) == 1
    out = capsys.readouterr().out
    assert "ERROR   max-model-len-model: max-model-len 65536 is above the model's maximum of 40960 tokens" in out
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in out and "[fix: max-model-len=40960]" in out
    assert any(" exec vllm cat /root/.cache/huggingface/hub/models--Qwen--Qwen3-8B/snapshots/" in c
               for c in vm.commands)
    with HistoryStore(db) as store:                       # remembered for the model
        limit, source = store.model_limit("Qwen/Qwen3-8B")
    assert limit == 40960 and source.endswith("/config.json")
    assert main([*base, "--set", "max-model-len=40960", "--dry-run"]) == 0
    assert "max-model-len-model" not in capsys.readouterr().out


def _swap_in_its_own_process(config: Path, db: Path, *sets: str) -> subprocess.CompletedProcess[str]:
    """``tpu-console swap --yes`` as an operator's script runs it: a process that records the
    launch ``running`` and exits (so the history's writer of that launch is gone)."""
    argv = ["--config", str(config), "--db", str(db), "swap", "vllm-v5e-a", *[a for s in sets for a in ("--set", s)],
            "--yes"]
    return subprocess.run([sys.executable, "-c", "import sys; from console.cli import main; sys.exit(main())",
                           *argv], cwd=ROOT, capture_output=True, text=True, timeout=60)


def _history_json(capsys, config: Path, db: Path) -> list[dict]:
    from console.cli import main

    capsys.readouterr()
    assert main(["--config", str(config), "--db", str(db), "history", "--json", "--node", "vllm-v5e-a"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_swap_then_watch_ends_ready_in_the_history(demo_node, tmp_path: Path, capsys):
    from console.cli import main

    config, _api, vm = demo_node
    db = tmp_path / "history.db"
    swapped = _swap_in_its_own_process(config, db, "max-model-len=16384")
    assert swapped.returncode == 0, swapped.stderr
    new_id = vm.docker.find("vllm").inspect(0)["Id"]
    # The swap exited after docker run: its launch says so (not "interrupted", not "running").
    assert _history_json(capsys, config, db)[0]["outcome"] == "unwatched"
    assert main(["--config", str(config), "--db", str(db), "watch", "vllm-v5e-a"]) == 0
    launch, replaced = _history_json(capsys, config, db)
    # the swap's launch, completed by the watch that saw the boot end (not a new observed one)
    assert (launch["origin"], launch["container_id"], launch["outcome"]) == ("console", new_id, "ready")
    assert launch["replaced_launch_id"] == replaced["id"] and replaced["outcome"] == "replaced"
    assert launch["kv_cache_tokens"] > 0 and launch["compile_seconds"] > 0 and launch["hbm"]
    assert launch["requested_at"] <= launch["started_at"] <= launch["ready_at"]
    assert launch["image_digest"].startswith("vllm/vllm-tpu@sha256:") and len(launch["image_digest"]) == 85
    assert replaced["image_digest"].startswith("vllm/vllm-tpu@sha256:")
    # the container it replaced was requested when that container started, before the swap
    assert replaced["requested_at"] < launch["requested_at"]


def test_cli_swap_then_watch_of_a_failing_boot_ends_failed_with_its_kind(demo_node, tmp_path: Path, capsys):
    from console.cli import main

    config, _api, _vm = demo_node
    db = tmp_path / "history.db"
    assert _swap_in_its_own_process(config, db, "gpu-memory-utilization=0.95").returncode == 0
    assert main(["--config", str(config), "--db", str(db), "watch", "vllm-v5e-a", "--json"]) == 1
    launch = _history_json(capsys, config, db)[0]
    assert (launch["origin"], launch["outcome"], launch["failure_kind"]) == ("console", "failed",
                                                                             "hbm_oom_after_compile")
    assert launch["failed_at"] and launch["failure_detail"]


def test_a_watch_of_a_container_nobody_recorded_is_observed_from_its_start(demo_node, tmp_path: Path, capsys):
    from console.cli import main

    config, _api, vm = demo_node
    db = tmp_path / "history.db"
    running = vm.docker.find("vllm").inspect(0)
    assert main(["--config", str(config), "--db", str(db), "watch", "vllm-v5e-a"]) == 0
    (launch,) = _history_json(capsys, config, db)
    assert (launch["origin"], launch["container_id"], launch["outcome"]) == ("observed", running["Id"], "ready")
    assert launch["requested_at"][:19] == running["Created"][:19]
    assert launch["requested_at"] <= launch["started_at"] <= launch["ready_at"]


def test_swap_json_then_rollback_verb_returns_to_the_replaced_spec(demo_node, tmp_path: Path, capsys):
    from console.cli import main

    config, _api, vm = demo_node
    db = tmp_path / "history.db"
    base = ["--config", str(config), "--db", str(db)]
    first = vm.docker.find("vllm").inspect(0)
    assert main([*base, "rollback", "vllm-a"]) == 2                             # no such node
    assert main([*base, "rollback", "vllm-v5e-a", "--dry-run"]) == 1            # nothing recorded yet
    assert "Nothing to roll back to on vllm-v5e-a" in capsys.readouterr().err

    assert main([*base, "swap", "vllm-v5e-a", "--set", "max-model-len=16384", "--yes", "--json"]) == 0
    swapped = json.loads(capsys.readouterr().out)     # only the JSON on stdout
    assert {"field": "--max-model-len", "old": "32768", "new": "16384"} in swapped["plan"]["changes"]
    assert swapped["plan"]["commands"][0] == "sudo -n docker pull vllm/vllm-tpu:v0.29.1"
    assert swapped["confirmed"] and swapped["outcome"]["ok"] and swapped["outcome"]["failed_step"] is None
    assert swapped["outcome"]["container_id"] == vm.docker.find("vllm").inspect(0)["Id"]
    assert swapped["outcome"]["image_digest"].startswith("vllm/vllm-tpu@sha256:")

    sent = len(vm.commands)
    assert main([*base, "rollback", "vllm-v5e-a", "--dry-run", "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert not any(" rm " in c or " run " in c for c in vm.commands[sent:])
    with HistoryStore(db) as store:
        launch = store.get_launch(swapped["outcome"]["launch_id"])
    assert dry["rollback_to_launch_id"] == launch.replaced_launch_id and dry["outcome"] is None
    assert {"field": "--max-model-len", "old": "16384", "new": "32768"} in dry["plan"]["changes"]

    assert main([*base, "rollback", "vllm-v5e-a", "--yes"]) == 0
    assert "Rolling back to launch" in capsys.readouterr().out
    back = vm.docker.find("vllm").inspect(0)
    assert back["Config"]["Cmd"] == first["Config"]["Cmd"]
    assert back["Config"]["Image"].startswith("vllm/vllm-tpu@sha256:")           # pinned to what ran
    with HistoryStore(db) as store:
        newest = store.list_launches(node="vllm-v5e-a", limit=1)[0]
    assert newest.container_id == back["Id"] and newest.replaced_launch_id == launch.id
    # What the verb saw: the container started; nobody followed its boot (a later watch completes it).
    assert newest.outcome == "unwatched"
