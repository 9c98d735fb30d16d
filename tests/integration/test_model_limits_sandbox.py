"""The served model's limits read through the container (``docker exec ls|cat``) on a sandbox VM.

Real asyncssh against the sandbox VM's SSH server; the simulated docker answers from the container's
Hugging Face cache (``sandbox.hf_cache``), laid out as the real hub cache is.
"""

from __future__ import annotations

from pathlib import Path

import asyncssh
import pytest

from remote.container.model_config import read_model_limits
from remote.ssh import SshTarget, connect
from sandbox.vm import SandboxVm

ALIAS = "tpu.4711000000000000001-0"


@pytest.fixture
async def v6e_vm(tmp_path: Path):
    """A v6e-4 sandbox VM and an SSH connection; the test boots the container it needs."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    vm = SandboxVm(node_name="vllm-gemma", accelerator_type="v6e-4", authorized_client_key=key.export_public_key().decode(),
                   boot_s=5.0)
    port = await vm.start()
    known = tmp_path / "known_hosts"
    known.write_text(vm.known_hosts_line(ALIAS))
    target = SshTarget(host="127.0.0.1", port=port, user="operator", private_key=None, known_hosts=known,
                       host_key_alias=ALIAS, connect_timeout_s=5, client_keys=(key,), node_name="vllm-gemma")
    conn = await connect(target)
    try:
        yield vm, conn
    finally:
        conn.close()
        await conn.wait_closed()
        await vm.stop()


@pytest.mark.parametrize(("model", "limit", "rope"), [
    ("google/gemma-3-27b-it", 131072, "linear"),              # Gemma 3: the 128K is already rope-scaled
    ("meta-llama/Llama-3.1-8B-Instruct", 131072, "llama3"),    # llama3 rope: not multiplied again
    ("Qwen/Qwen3-8B", 40960, None),
])
async def test_the_model_config_is_read_from_the_containers_hf_cache(v6e_vm, model, limit, rope):
    vm, conn = v6e_vm
    await vm.boot_container([model, "--max-model-len", "4096", "-tp", "4"], image="vllm/vllm-tpu:v0.29.1")
    limits = await read_model_limits(conn, "vllm", model, {})
    assert limits is not None
    assert (limits.max_model_len_tokens, limits.rope_type) == (limit, rope)
    assert limits.source.startswith("/root/.cache/huggingface/hub/models--" + model.replace("/", "--") + "/snapshots/")
    assert limits.source.endswith("/config.json")


async def test_hf_home_moves_the_cache_and_other_models_are_not_there(v6e_vm):
    vm, conn = v6e_vm
    await vm.boot_container(["google/gemma-3-27b-it", "-tp", "4"], image="vllm/vllm-tpu:v0.29.1",
                            env=["HF_HOME=/models/hf"])
    assert await read_model_limits(conn, "vllm", "google/gemma-3-27b-it", {}) is None      # not at the default
    moved = await read_model_limits(conn, "vllm", "google/gemma-3-27b-it", {"HF_HOME": "/models/hf"})
    assert moved is not None and moved.source.startswith("/models/hf/hub/")
    assert await read_model_limits(conn, "vllm", "Qwen/Qwen3-8B", {"HF_HOME": "/models/hf"}) is None
    assert await read_model_limits(conn, "no-such-container", "google/gemma-3-27b-it", {}) is None
