"""Secrets never reach the history database: the scrubbing rules, then the raw file bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote.secrets import MASK, is_secret_name, scrub_args, scrub_text, scrub_value
from store.history import HistoryStore

HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123"


@pytest.mark.parametrize("name", [
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "api_key", "DB_PASSWORD", "MYSQL_PASSWD",
    "GOOGLE_APPLICATION_CREDENTIALS", "AUTHORIZATION", "aws_secret_access_key", "--api-key", "--hf-token",
    "VLLM_API_KEY", "apikey", "hftoken", "PGPWD",
])
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", [
    "MAX_TOKENS", "--max-num-batched-tokens", "--tokenizer", "MODEL", "PATH", "--max-model-len",
    "--kv-cache-dtype", "TPU_NAME", "HF_HOME", "prompt_tokens",
])
def test_ordinary_names(name: str) -> None:
    assert not is_secret_name(name)


def test_scrub_args_masks_every_form_and_keeps_the_rest() -> None:
    args = ["vllm", "serve", "Qwen/Qwen3-8B", "--api-key", "s3cret", "--hf-token=" + HF,
            "-e", "HF_TOKEN=" + HF, "--max-num-batched-tokens", "8192", "--tokenizer", "Qwen/Qwen3-8B",
            "--max-model-len", "4096", "--extra", "prefix-" + HF]
    assert scrub_args(args) == [
        "vllm", "serve", "Qwen/Qwen3-8B", "--api-key", MASK, "--hf-token=***",
        "-e", "HF_TOKEN=***", "--max-num-batched-tokens", "8192", "--tokenizer", "Qwen/Qwen3-8B",
        "--max-model-len", "4096", "--extra", "prefix-***"]


def test_scrub_text_in_commands_and_errors() -> None:
    command = (f"docker run -e HF_TOKEN={HF} -e TPU_NAME=vllm-a vllm/vllm-tpu:nightly vllm serve m "
               "--api-key 'two words' --max-model-len 4096")
    assert scrub_text(command) == ("docker run -e HF_TOKEN=*** -e TPU_NAME=vllm-a vllm/vllm-tpu:nightly "
                                   "vllm serve m --api-key '***' --max-model-len 4096")
    error = f"401 Client Error for https://huggingface.co/x (token {HF}); Authorization: Bearer abc.def"
    scrubbed = scrub_text(error)
    assert HF not in scrubbed and "abc.def" not in scrubbed
    assert scrubbed.startswith("401 Client Error for https://huggingface.co/x (token ***)")
    assert scrub_text('{"api_key": "k-123", "n": 3}') == '{"api_key": "***", "n": 3}'
    assert scrub_text("sk-" + "a" * 40 + " and ya29.A0Abc-def") == "*** and ***"
    assert scrub_text("{'password':'pw1'} token=abc TOKEN : xyz") == "{'password':'***'} token=*** TOKEN : ***"
    # image tags and plain prose stay as they are
    for text in ("registry.io/secret-manager:v1", "ghcr.io/acme/api-key-proxy:2.0", "max_tokens=512",
                 "KV cache tokens: 1,234,567", "vllm/vllm-tpu:nightly"):
        assert scrub_text(text) == text


def test_scrub_value_walks_specs() -> None:
    spec = {"image": "vllm/vllm-tpu@sha256:abc",
            "env": {"HF_TOKEN": HF, "TPU_NAME": "a", "EMPTY_KEY": None},
            "Env": ["HF_TOKEN=" + HF, "PATH=/usr/bin"],
            "auth": {"user": "bob", "password": "pw"},
            "ports": [{"container": 8000, "host": 8000}]}
    assert scrub_value(spec) == {
        "image": "vllm/vllm-tpu@sha256:abc",
        "env": {"HF_TOKEN": MASK, "TPU_NAME": "a", "EMPTY_KEY": None},
        "Env": ["HF_TOKEN=***", "PATH=/usr/bin"],
        "auth": {"user": MASK, "password": MASK},          # under a secret key: every string
        "ports": [{"container": 8000, "host": 8000}]}


def _all_bytes(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in db.parent.iterdir() if p.name.startswith(db.name))


def test_no_secret_reaches_the_database_file(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    secrets = [HF, "s3cretApiKeyValue", "hunter2pw", "ghp_" + "Z" * 36, "AIza" + "Q" * 35]
    store = HistoryStore(db)
    launch_id = store.start_launch(
        node="vllm-a", accelerator_type="v6e-8", model="Qwen/Qwen3-8B",
        container_spec={"image": "vllm/vllm-tpu:nightly",
                        "env": {"HF_TOKEN": HF, "VLLM_API_KEY": "s3cretApiKeyValue", "TPU_NAME": "vllm-a"},
                        "volumes": ["/dev/shm:/dev/shm"], "network": "host", "restart_policy": "unless-stopped",
                        "ports": []},
        serve_args=["--api-key", "s3cretApiKeyValue", "--hf-token", HF, "--max-model-len", "4096"],
        notes="password=hunter2pw")
    store.update_launch(launch_id, outcome="failed", failure_kind="HF_AUTH",
                        failure_detail=f"401 Unauthorized: Invalid token {HF}; GITHUB ghp_{'Z' * 36}")
    store.add_benchmark(launch_id, "smoke", {"api_key": "AIza" + "Q" * 35, "streams": 1},
                        {"latency_s": 0.8, "error": f"Bearer {HF}"})
    # Visible while the store is open (WAL file) and after it is closed (main file).
    raw = _all_bytes(db)
    store.close()
    raw += _all_bytes(db)
    assert b"vllm-a" in raw and b"--max-model-len" in raw  # the file is readable as bytes at all
    for secret in secrets:
        assert secret.encode() not in raw, secret
    reopened = HistoryStore(db)
    launch = reopened.get_launch(launch_id)
    reopened.close()
    assert launch is not None
    assert launch.container_spec["env"] == {"HF_TOKEN": MASK, "VLLM_API_KEY": MASK, "TPU_NAME": "vllm-a"}
    assert launch.serve_args == ("--api-key", MASK, "--hf-token", MASK, "--max-model-len", "4096")
    assert launch.failure_detail == "401 Unauthorized: Invalid token ***; GITHUB ***"
    assert launch.notes == "password=***"


def test_figures_under_token_named_keys_are_kept_and_secrets_masked() -> None:
    """A benchmark's ``total_token_throughput`` is a number, not a secret (it was stored as ``***``)."""
    from remote.secrets import scrub_value

    results = {"total_token_throughput": 1141.4, "output_tokens": 512, "token_ok": True,
               "api_key": "sk-abcdefghijklmnopqrstu", "hf_token": ["hf_abcdefghijklmnop"], "auth": {"x": 1}}
    scrubbed = scrub_value(results)
    assert scrubbed["total_token_throughput"] == 1141.4 and scrubbed["output_tokens"] == 512
    assert scrubbed["token_ok"] is True and scrubbed["auth"] == {"x": 1}
    assert scrubbed["api_key"] == "***" and scrubbed["hf_token"] == "***"


def test_values_nested_under_a_secret_key_are_masked_at_any_depth() -> None:
    """A dict, set or list held under a secret key hides every string in it (``{'api_key': {'value': 'X'}}`` showed X)."""
    value = {"api_key": {"value": "sk-nested-secret-1", "meta": {"deeper": ["sk-nested-secret-2"], "n": 3}},
             "hf_token": {"hf_set_secret_3"}, "password": ("p4ss-word",), "client_secret": b"raw-bytes-secret",
             "labels": {"team-a", "token=tok-in-a-set"}, "env": {"HF_TOKEN": {"hf_env_secret_4"}},
             "args": [{"api_key": ["sk-list-secret-5"]}]}
    scrubbed = scrub_value(value)
    text = repr(scrubbed)
    for secret in ("sk-nested-secret-1", "sk-nested-secret-2", "hf_set_secret_3", "p4ss-word", "raw-bytes-secret",
                   "tok-in-a-set", "hf_env_secret_4", "sk-list-secret-5"):
        assert secret not in text, secret
    assert scrubbed["api_key"] == {"value": MASK, "meta": {"deeper": MASK, "n": 3}}
    assert scrubbed["hf_token"] == MASK and scrubbed["password"] == MASK and scrubbed["client_secret"] == MASK
    assert scrubbed["labels"] == ["team-a", "token=***"]          # a set elsewhere: scrubbed like a list
    assert scrubbed["env"] == {"HF_TOKEN": MASK} and scrubbed["args"] == [{"api_key": MASK}]
