"""ContainerSpec: docker inspect parsing, edits and validation, docker run argv, quoting, masking, diff."""

from __future__ import annotations

import copy
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remote.container.spec import ContainerSpec, diff, display_argv, is_secret_name, mask_argv

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "docker-inspect-vllm-tpu.json"
HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
API_KEY = "sk-live-0123456789abcdefXYZ"


@pytest.fixture
def inspect_json() -> list[dict]:
    return json.loads(FIXTURE.read_text())


@pytest.fixture
def spec(inspect_json) -> ContainerSpec:
    return ContainerSpec.from_inspect(inspect_json)


# ---- parsing -----------------------------------------------------------------------------

def test_inspect_parsing_reads_every_field(spec):
    assert spec.name == "vllm"
    assert spec.image == "vllm/vllm-tpu:nightly"
    assert spec.image_digest == "sha256:4c0e7b2f58d1a6f9e3b2c1d0a9f8e7d6c5b4a39281706f5e4d3c2b1a0f9e8d7c"
    assert spec.model == "Qwen/Qwen3-8B"
    assert spec.env == {"HF_TOKEN": HF, "VLLM_USE_V1": "1", "TPU_BACKEND_TYPE": "jax"}  # no PATH, LANG...
    assert spec.volumes == ("/dev/shm:/dev/shm", "/mnt/disks/persist/hf:/data/hf")
    assert spec.network == "host" and spec.privileged is True
    assert spec.shm_size == "16g"
    assert spec.restart_policy == "unless-stopped"
    assert spec.serve_flags == {
        "served-model-name": "qwen3-8b", "max-model-len": "32768", "max-num-batched-tokens": "2048",
        "gpu-memory-utilization": "0.9", "tensor-parallel-size": "8", "enable-auto-tool-choice": None,
        "tool-call-parser": "hermes",
    }
    assert spec.extra_args == ("--download-dir", "/data/hf", "--api-key", API_KEY, "--disable-log-requests")
    assert spec.launcher == ("vllm", "serve") and not spec.launcher_in_entrypoint
    assert spec.ignored == ()


def test_image_inspect_gives_repo_digest_and_drops_image_env(inspect_json):
    image = {"RepoDigests": ["other/repo@sha256:aaa", "vllm/vllm-tpu@sha256:" + "b" * 64],
             "Config": {"Env": ["TPU_BACKEND_TYPE=jax"]}}
    spec = ContainerSpec.from_inspect(inspect_json, image)
    assert spec.image_digest == "vllm/vllm-tpu@sha256:" + "b" * 64
    assert "TPU_BACKEND_TYPE" not in spec.env and spec.env["VLLM_USE_V1"] == "1"
    assert spec.pinned().image == "vllm/vllm-tpu@sha256:" + "b" * 64


def test_model_flag_form_and_equals_spelling(inspect_json):
    cfg = inspect_json[0]["Config"]
    cfg["Cmd"] = ["vllm", "serve", "--model=meta-llama/Llama-3.1-8B", "--max_model_len=4096", "--seed", "-1"]
    spec = ContainerSpec.from_inspect(inspect_json)
    assert spec.model == "meta-llama/Llama-3.1-8B"
    assert spec.serve_flags == {"max-model-len": "4096"}
    assert spec.extra_args == ("--seed", "-1")
    argv = spec.run_argv()
    assert argv[argv.index("vllm/vllm-tpu:nightly"):] == [
        "vllm/vllm-tpu:nightly", "vllm", "serve", "meta-llama/Llama-3.1-8B", "--max-model-len", "4096",
        "--seed", "-1"]


def test_entrypoint_vllm_serve_is_kept_as_entrypoint(inspect_json):
    cfg = inspect_json[0]["Config"]
    cfg["Entrypoint"], cfg["Cmd"] = ["vllm", "serve"], ["google/gemma-3-4b-it", "--max-model-len", "8192"]
    spec = ContainerSpec.from_inspect(inspect_json)
    assert spec.model == "google/gemma-3-4b-it" and spec.launcher_in_entrypoint
    argv = spec.run_argv()
    i = argv.index("--entrypoint")
    assert argv[i + 1] == "vllm"
    assert argv[argv.index("vllm/vllm-tpu:nightly") + 1:] == ["serve", "google/gemma-3-4b-it", "--max-model-len", "8192"]


def test_python_api_server_form(inspect_json):
    cfg = inspect_json[0]["Config"]
    cfg["Entrypoint"] = ["/workspace/entrypoint.sh"]
    cfg["Cmd"] = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "Qwen/Qwen2.5-7B",
                  "--tensor-parallel-size", "4", "--port", "8001"]
    spec = ContainerSpec.from_inspect(inspect_json)
    assert spec.model == "Qwen/Qwen2.5-7B" and spec.serve_flags == {"tensor-parallel-size": "4"}
    assert spec.launcher == ("python3", "-m", "vllm.entrypoints.openai.api_server")
    assert not spec.launcher_in_entrypoint   # the wrapper entrypoint stays the image's
    tail = spec.run_argv()[spec.run_argv().index("vllm/vllm-tpu:nightly"):]
    assert tail == ["vllm/vllm-tpu:nightly", "python3", "-m", "vllm.entrypoints.openai.api_server",
                    "--model", "Qwen/Qwen2.5-7B", "--tensor-parallel-size", "4", "--port", "8001"]


def test_shell_wrapped_command(inspect_json):
    cfg = inspect_json[0]["Config"]
    cfg["Entrypoint"], cfg["Cmd"] = ["/bin/sh", "-c"], ["vllm serve 'org/model name' --max-model-len 2048"]
    spec = ContainerSpec.from_inspect(inspect_json)
    assert spec.model == "org/model name" and spec.serve_flags == {"max-model-len": "2048"}


def test_mounts_ports_and_dropped_settings(inspect_json):
    c = inspect_json[0]
    c["HostConfig"].update({
        "NetworkMode": "bridge", "PortBindings": {"8000/tcp": [{"HostIp": "", "HostPort": "8080"}]},
        "Mounts": [{"Type": "bind", "Source": "/srv/cache", "Target": "/cache", "ReadOnly": True},
                   {"Type": "tmpfs", "Target": "/scratch"}],
        "CapAdd": ["SYS_ADMIN"], "ShmSize": 67108864, "RestartPolicy": {"Name": "no"}, "Privileged": False,
    })
    spec = ContainerSpec.from_inspect(c)
    assert spec.ports == ("8080:8000",) and spec.network == "bridge"
    assert spec.volumes[-1] == "/srv/cache:/cache:ro"
    assert spec.shm_size is None and spec.privileged is False and spec.restart_policy == "no"
    assert spec.ignored == ("--cap-add SYS_ADMIN", "--mount type=tmpfs target=/scratch")


def test_not_a_vllm_container_is_refused(inspect_json):
    inspect_json[0]["Config"]["Cmd"] = ["python3", "train.py"]
    with pytest.raises(ValueError, match="does not run a vLLM server"):
        ContainerSpec.from_inspect(inspect_json)
    with pytest.raises(ValueError, match="no Config"):
        ContainerSpec.from_inspect({"Id": "x"})
    inspect_json[0]["Config"]["Cmd"] = ["vllm", "serve", "--max-model-len", "1"]
    with pytest.raises(ValueError, match="names no model"):
        ContainerSpec.from_inspect(inspect_json)


def test_from_template_resolves_env_references():
    spec = ContainerSpec.from_template(name="vllm", image="vllm/vllm-tpu:v0.11.1", model="Qwen/Qwen3-8B",
                                       args=["--max-model-len", "4096"], env={"HF_TOKEN": "$HF_TOKEN", "A": "b"},
                                       environ={"HF_TOKEN": HF})
    assert spec.env == {"HF_TOKEN": HF, "A": "b"} and spec.serve_flags == {"max-model-len": "4096"}
    assert spec.run_argv()[:7] == ["docker", "run", "-d", "--name", "vllm", "--restart", "unless-stopped"]
    with pytest.raises(ValueError, match=r"refers to \$HF_TOKEN"):
        ContainerSpec.from_template(name="vllm", image="x/y:1", model="m", env={"HF_TOKEN": "${HF_TOKEN}"},
                                    environ={})


# ---- edits -------------------------------------------------------------------------------

def test_with_changes_edits_flags_env_volumes_and_image(spec):
    new = spec.with_changes({"max-model-len": "131072", "--max_num_seqs": "64", "kv-cache-dtype": "auto",
                             "enable-auto-tool-choice": "false", "env.VLLM_USE_V1": None,
                             "env.VLLM_XLA_CACHE_PATH": "/xla", "volume:/xla": "/mnt/disks/persist/xla",
                             "volume:/data/hf": None, "download-dir": "/xla/hf"}, image="vllm/vllm-tpu:v0.11.1")
    assert new.serve_flags["max-model-len"] == "131072" and new.serve_flags["max-num-seqs"] == "64"
    assert "enable-auto-tool-choice" not in new.serve_flags
    assert new.env == {"HF_TOKEN": HF, "TPU_BACKEND_TYPE": "jax", "VLLM_XLA_CACHE_PATH": "/xla"}
    assert new.volumes == ("/dev/shm:/dev/shm", "/mnt/disks/persist/xla:/xla")
    assert new.extra_args == ("--api-key", API_KEY, "--disable-log-requests", "--download-dir", "/xla/hf")
    assert new.image == "vllm/vllm-tpu:v0.11.1"
    assert spec.serve_flags["max-model-len"] == "32768"  # the original is untouched
    assert new.flag("download-dir") == "/xla/hf" and new.flag("disable-log-requests") == "true"


@pytest.mark.parametrize(("key", "value", "reason"), [
    ("max-model-len", "abc", r"max-model-len must be a positive integer \(tokens\), got 'abc'"),
    ("max-model-len", "0", "positive integer"),
    ("max-model-len", "-5", "positive integer"),
    ("tensor-parallel-size", "2.5", "tensor-parallel-size must be a positive integer"),
    ("gpu-memory-utilization", "1.5", r"fraction in \(0, 1\], got '1.5'"),
    ("gpu-memory-utilization", "0", "fraction"),
    ("gpu-memory-utilization", "nan", "fraction"),
    ("kv-cache-dtype", "int3", "kv-cache-dtype must be one of"),
    ("quantization", "0.95", r"quantization must be a quantization method name .*got '0.95'"),
    ("quantization", "Fp 8", "quantization method name"),
    ("dtype", "bf16", r"dtype must be one of auto, half, float16, bfloat16, float, float32, got 'bf16'"),
    ("max-num-seqs", "0", "max-num-seqs must be a positive integer"),
    ("max-num-batched-tokens", "1e4", r"max-num-batched-tokens must be a positive integer \(tokens\)"),
    ("block-size", "-16", r"block-size must be a positive integer \(tokens\), got '-16'"),
    ("num-gpu-blocks-override", "many", "positive integer"),
    ("swap-space", "-4", r"swap-space must be a number >= 0 \(GiB\)"),
    ("seed", "x", "seed must be an integer >= 0"),
    ("image", "vllm tpu; rm -rf /", "not a valid image reference"),
    ("model", "--trust-remote-code", "model id or path"),
    ("name", "a b", "not a valid docker name"),
    ("env.1BAD", "x", "env name"),
    ("volume:relative", "/x", "absolute container path"),
    ("enable-auto-tool-choice", "maybe", "switch"),
    ("model", None, "cannot be removed"),
    ("Bad Key!", "1", "unknown setting"),
])
def test_invalid_values_are_refused_with_the_reason(spec, key, value, reason):
    with pytest.raises(ValueError, match=reason):
        spec.with_changes({key: value})


@pytest.mark.parametrize(("key", "value"), [
    ("quantization", "fp8"), ("quantization", "compressed-tensors"), ("quantization", "tpu_int8"),
    ("dtype", "bfloat16"), ("block-size", "256"), ("swap-space", "0"), ("seed", "0"),
    ("kv-cache-dtype", "fp8_e5m2"), ("max-num-seqs", "256"),
])
def test_valid_typed_values_are_kept(spec, key, value):
    assert spec.with_changes({key: value}).flag(key) == value


# ---- argv, quoting, masking ----------------------------------------------------------------

HOSTILE = ["; rm -rf /", "a'b\"c", "$(touch /tmp/pwned)", "`touch /tmp/pwned`", "x\ny", "&& reboot", "| cat",
           "--flag-looking", "'; echo hi; '", "\\", "$HOME", "*", "é ü 中"]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_round_trip_through_shlex(spec, value):
    new = spec.with_changes({"served-model-name": value, "env.NOTE": value, "extra-thing": value})
    argv = ["sudo", "-n", *new.run_argv()]
    assert shlex.split(shlex.join(argv)) == argv
    assert f"NOTE={value}" in argv
    if value.startswith("-"):
        assert f"--served-model-name={value}" in argv   # never read as a flag by vLLM
    else:
        assert argv[argv.index("--served-model-name") + 1] == value


def test_a_real_shell_sees_exactly_the_argv_and_runs_nothing_else(spec, tmp_path):
    marker = tmp_path / "pwned"
    payloads = [f"; touch {marker}", f"$(touch {marker})", f"`touch {marker}`", f"x\ntouch {marker}",
                f"' ; touch {marker} ; '", f"&& touch {marker}"]
    changes = {f"env.P{i}": p for i, p in enumerate(payloads)} | {"served-model-name": payloads[0]}
    argv = spec.with_changes(changes).run_argv()
    echo = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]
    out = subprocess.run(["/bin/sh", "-c", shlex.join(echo + argv)], capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == argv
    assert not marker.exists()


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=40))
def test_any_value_round_trips(value):
    spec = ContainerSpec.from_template(name="vllm", image="vllm/vllm-tpu:v1", model="m/m")
    argv = spec.with_changes({"served-model-name": value, "env.X": value}).run_argv()
    assert shlex.split(shlex.join(argv)) == argv


def test_nul_is_refused(spec):
    with pytest.raises(ValueError, match="NUL"):
        spec.with_changes({"served-model-name": "a\x00b"})


def test_display_command_masks_secrets(spec):
    shown = spec.display_command()
    assert HF not in shown and API_KEY not in shown
    assert "-e 'HF_TOKEN=***'" in shown and "--api-key '***'" in shown
    assert "--max-num-batched-tokens 2048" in shown and "-e VLLM_USE_V1=1" in shown
    real = spec.run_argv()
    assert f"HF_TOKEN={HF}" in real and API_KEY in real   # execution gets the real values


def test_mask_argv_forms():
    assert mask_argv(["--hf-token=abc123", "--api-key", "k3y", "-e", "DB_PASSWORD=pw", "--max-num-batched-tokens",
                      "8192", "--tokenizer", "t", "note hf_abcdefghijkl"]) == [
        "--hf-token=***", "--api-key", "***", "-e", "DB_PASSWORD=***", "--max-num-batched-tokens", "8192",
        "--tokenizer", "t", "note ***"]
    assert display_argv(["-e", "OPENAI_API_KEY=x y"]) == "-e 'OPENAI_API_KEY=***'"
    assert is_secret_name("HUGGING_FACE_HUB_TOKEN") and not is_secret_name("MAX_TOKENS")


def test_mask_text_and_to_dict_hide_secret_values(spec):
    assert spec.mask_text(f"error: bad token {HF} and key {API_KEY}") == "error: bad token *** and key ***"
    data = spec.to_dict()
    assert data["env"]["HF_TOKEN"] == "***" and API_KEY not in json.dumps(data)
    assert spec.to_dict(mask=False)["env"]["HF_TOKEN"] == HF


# ---- diff --------------------------------------------------------------------------------

def test_diff_lists_changed_fields_masked(spec):
    new = spec.with_changes({"max-model-len": "131072", "env.HF_TOKEN": "hf_NEWtoken1234567890",
                             "env.VLLM_XLA_CACHE_PATH": "/xla", "tool-call-parser": None})
    assert diff(spec, new) == [
        ("--max-model-len", "32768", "131072"),
        ("--tool-call-parser", "hermes", None),
        ("env.HF_TOKEN", "***", "*** (changed)"),
        ("env.VLLM_XLA_CACHE_PATH", None, "/xla"),
    ]
    assert diff(spec, spec) == []
    added = dict((k, v) for k, _, v in diff(None, spec))
    assert added["image"] == "vllm/vllm-tpu:nightly" and added["env.HF_TOKEN"] == "***"


def test_restart_policy_is_normalized_by_an_edit(inspect_json):
    inspect_json[0]["HostConfig"]["RestartPolicy"] = {"Name": "no"}
    spec = ContainerSpec.from_inspect(copy.deepcopy(inspect_json))
    new = spec.with_changes({})
    assert ("restart", "no", "unless-stopped") in diff(spec, new)
    assert new.run_argv()[5:7] == ["--restart", "unless-stopped"]
