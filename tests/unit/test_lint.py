"""Swap lint: each rule fires on the case it is for, stays quiet otherwise, and its fix applies."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from remote.container.lint import DEFAULT_BOOT_S, HOST_XLA_CACHE_DIR, Finding, lint
from remote.container.spec import ContainerSpec

CACHE = "/root/.cache/vllm/xla_cache"
DIGEST = "vllm/vllm-tpu@sha256:" + "c" * 64


def make(*args: str, image: str = "vllm/vllm-tpu:v0.11.1", env=None, volumes=(f"{HOST_XLA_CACHE_DIR}:{CACHE}",)):
    """A clean spec (pinned tag, compile cache mounted) plus ``args``."""
    return ContainerSpec.from_template(name="vllm", image=image, model="Qwen/Qwen3-8B", args=list(args),
                                       env=env or {}, volumes=volumes)


def rules(findings: list[Finding]) -> list[str]:
    return [f.rule_id for f in findings]


def only(findings: list[Finding], rule_id: str) -> Finding:
    [found] = [f for f in findings if f.rule_id == rule_id]
    return found


def test_a_clean_spec_has_no_findings():
    spec = make("--max-model-len", "8192", "--gpu-memory-utilization", "0.9", "--tensor-parallel-size", "8")
    assert lint(spec, accelerator_type="v6e-8", time_left_s=3 * 3600, last_kv_cache_tokens=500_000,
                model_max_len=40960, predicted_boot_s=600, running_image_digest=DIGEST) == []


@pytest.mark.parametrize("accel", ["v5litepod-8", "v6e-8"])
def test_hbm_utilization_above_092_on_v5e_v6e(accel):
    spec = make("--gpu-memory-utilization", "0.95")
    f = only(lint(spec, accelerator_type=accel), "hbm-utilization")
    assert f.severity == "warning" and f.fix == {"gpu-memory-utilization": "0.92"}
    assert "0.95" in f.message
    assert ("RESOURCE_EXHAUSTED" in f.message) == accel.startswith("v5")
    fixed = spec.with_changes(f.fix)
    assert "hbm-utilization" not in rules(lint(fixed, accelerator_type=accel))


def test_hbm_utilization_quiet_at_092():
    assert "hbm-utilization" not in rules(lint(make("--gpu-memory-utilization", "0.92"), accelerator_type="v5litepod-4"))


@pytest.mark.parametrize(("accel", "left_gib"), [("v5p-8", "4.75"), ("tpu7x-8", "9.60"), ("v4-8", "1.60")])
def test_hbm_utilization_without_a_known_ceiling_says_not_checked(accel, left_gib):
    f = only(lint(make("--gpu-memory-utilization", "0.95"), accelerator_type=accel), "hbm-utilization")
    assert f.severity == "info" and "not checked" in f.message and f"{left_gib} GiB" in f.message
    assert f.fix == {"gpu-memory-utilization": "0.92"}
    assert "hbm-utilization" not in rules(lint(make("--gpu-memory-utilization", "0.9"), accelerator_type=accel))


@pytest.mark.parametrize("accel", ["v9z-8", None, ""])
def test_unknown_generation_says_not_checked(accel):
    spec = make("--gpu-memory-utilization", "0.99", "--kv-cache-dtype", "fp8")
    f = only(lint(spec, accelerator_type=accel), "generation")
    assert f.severity == "info" and "not checked" in f.message
    assert "hbm-utilization" not in rules(lint(spec, accelerator_type=accel))


def test_fp8_kv_cache_without_native_fp8():
    spec = make("--kv-cache-dtype", "fp8_e5m2")
    f = only(lint(spec, accelerator_type="v6e-4"), "fp8-kv-cache")
    assert f.severity == "warning" and "bf16 is allocated" in f.message and f.fix == {"kv-cache-dtype": None}
    assert "kv-cache-dtype" not in spec.with_changes(f.fix).serve_flags
    assert "fp8-kv-cache" in rules(lint(spec, accelerator_type="v5p-8"))
    assert "fp8-kv-cache" not in rules(lint(spec, accelerator_type="tpu7x-8"))    # Ironwood has fp8
    assert "fp8-kv-cache" not in rules(lint(make("--kv-cache-dtype", "auto"), accelerator_type="v6e-4"))


@pytest.mark.parametrize("image", ["vllm/vllm-tpu:nightly", "vllm/vllm-tpu:latest", "vllm/vllm-tpu"])
def test_floating_tag_offers_the_running_digest(image):
    spec = make(image=image)
    f = only(lint(spec, accelerator_type="v6e-8", running_image_digest=DIGEST), "floating-tag")
    assert f.severity == "warning" and f.fix == {"image": DIGEST} and DIGEST in f.message
    assert spec.with_changes(f.fix).image == DIGEST
    assert "floating-tag" not in rules(lint(spec.with_changes(f.fix), accelerator_type="v6e-8"))


def test_floating_tag_with_bare_digest_and_without_any():
    spec = make(image="registry.example.com:5000/vllm-tpu:nightly")
    f = only(lint(spec, accelerator_type="v6e-8", running_image_digest="sha256:" + "d" * 64), "floating-tag")
    assert f.fix == {"image": "registry.example.com:5000/vllm-tpu@sha256:" + "d" * 64}
    f = only(lint(spec, accelerator_type="v6e-8"), "floating-tag")
    assert f.fix is None and "pin a version tag" in f.message
    assert "floating-tag" not in rules(lint(make(image="registry.example.com:5000/vllm-tpu:v1"), accelerator_type=None))


def test_digest_of_another_repository_is_not_offered():
    f = only(lint(make(image="vllm/vllm-tpu:nightly"), accelerator_type="v6e-8",
                  running_image_digest="other/image@sha256:" + "e" * 64), "floating-tag")
    assert f.fix is None


def test_missing_compile_cache_volume():
    spec = make(volumes=("/dev/shm:/dev/shm",))
    f = only(lint(spec, accelerator_type="v5litepod-8"), "compile-cache")
    assert "857 s to 497 s" in f.message
    assert f.fix == {"env.VLLM_XLA_CACHE_PATH": CACHE, f"volume:{CACHE}": HOST_XLA_CACHE_DIR}
    fixed = spec.with_changes(f.fix)
    assert f"{HOST_XLA_CACHE_DIR}:{CACHE}" in fixed.volumes and fixed.env["VLLM_XLA_CACHE_PATH"] == CACHE
    assert "compile-cache" not in rules(lint(fixed, accelerator_type="v5litepod-8"))


def test_compile_cache_follows_the_env_path_and_parent_mounts():
    moved = make(env={"VLLM_XLA_CACHE_PATH": "/cache/xla"}, volumes=(f"/mnt/x:{CACHE}",))
    f = only(lint(moved, accelerator_type="v6e-8"), "compile-cache")
    assert f.fix == {"env.VLLM_XLA_CACHE_PATH": "/cache/xla", "volume:/cache/xla": HOST_XLA_CACHE_DIR}
    parent = make(volumes=("/mnt/disks/persist/cache:/root/.cache",))
    assert "compile-cache" not in rules(lint(parent, accelerator_type="v6e-8"))
    bucket = make(env={"VLLM_XLA_CACHE_PATH": "gs://my-bucket/xla-cache"}, volumes=())
    assert "compile-cache" not in rules(lint(bucket, accelerator_type="v6e-8"))
    disabled = make(env={"VLLM_DISABLE_COMPILE_CACHE": "1"})
    assert only(lint(disabled, accelerator_type="v6e-8"), "compile-cache").fix == {"env.VLLM_DISABLE_COMPILE_CACHE": None}


def test_max_model_len_above_last_kv_cache():
    spec = make("--max-model-len", "131072")
    f = only(lint(spec, accelerator_type="v6e-8", last_kv_cache_tokens=100_000), "max-model-len-kv")
    assert f.severity == "error" and "0.76" in f.message and f.fix == {"max-model-len": "99328"}
    assert "max-model-len-kv" not in rules(lint(spec, accelerator_type="v6e-8", last_kv_cache_tokens=262_144))


def test_max_model_len_above_model_maximum():
    spec = make("--max-model-len", "131072")
    f = only(lint(spec, accelerator_type="v6e-8", model_max_len=40960), "max-model-len-model")
    assert f.severity == "error" and f.fix == {"max-model-len": "40960"}
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in f.message
    assert "max-model-len-model" not in rules(lint(spec.with_changes(f.fix), accelerator_type="v6e-8",
                                                   model_max_len=40960))
    allowed = spec.with_changes({"env.VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    assert only(lint(allowed, accelerator_type="v6e-8", model_max_len=40960), "max-model-len-model").severity == "warning"


@pytest.mark.parametrize(("accel", "tp", "severity"), [
    ("v6e-8", "3", "error"), ("v5litepod-4", "8", "error"), ("v5p-8", "8", "error"), ("v6e-8", "4", "info"),
])
def test_tensor_parallel_must_divide_chips(accel, tp, severity):
    f = only(lint(make("--tensor-parallel-size", tp), accelerator_type=accel), "tp-chips")
    assert f.severity == severity
    assert "tp-chips" not in rules(lint(make("--tensor-parallel-size", f.fix["tensor-parallel-size"]),
                                        accelerator_type=accel))


def test_tensor_parallel_equal_to_chips_is_quiet():
    assert "tp-chips" not in rules(lint(make("--tensor-parallel-size", "4"), accelerator_type="v5p-8"))


def test_boot_time_longer_than_time_left():
    f = only(lint(make(), accelerator_type="v6e-8", time_left_s=600, predicted_boot_s=1200), "boot-time")
    assert f.severity == "error" and "20 min" in f.message and "10 min left" in f.message
    f = only(lint(make(), accelerator_type="v6e-8", time_left_s=DEFAULT_BOOT_S - 1), "boot-time")
    assert "default estimate" in f.message
    assert "boot-time" not in rules(lint(make(), accelerator_type="v6e-8", time_left_s=3600, predicted_boot_s=497))
    assert "boot-time" not in rules(lint(make(), accelerator_type="v6e-8", predicted_boot_s=10_000))


def test_known_failures_from_history():
    when = datetime(2025, 9, 30, 14, 5, tzinfo=UTC)
    found = lint(make(), accelerator_type="v5litepod-8",
                 known_failures=[(when, "RESOURCE_EXHAUSTED", "HBM OOM after 612 s of compilation")])
    f = only(found, "known-failure")
    assert "2025-09-30T14:05:00Z" in f.message and "RESOURCE_EXHAUSTED" in f.message and "612 s" in f.message


def test_unknown_flags_are_warnings_with_a_removal_fix():
    spec = make("--max-model-length", "4096", "--enable-prefix-caching", "--no-enable-chunked-prefill")
    f = only(lint(spec, accelerator_type="v6e-8"), "unknown-flag")
    assert f.severity == "warning" and "--max-model-length" in f.message
    assert spec.with_changes(f.fix).extra_args == ("--enable-prefix-caching", "--no-enable-chunked-prefill")


def test_dropped_settings_are_listed(tmp_path):
    import json
    from pathlib import Path
    data = json.loads((Path(__file__).parent.parent / "fixtures" / "docker-inspect-vllm-tpu.json").read_text())
    data[0]["HostConfig"]["CapAdd"] = ["SYS_PTRACE"]
    spec = ContainerSpec.from_inspect(data)
    f = only(lint(spec, accelerator_type="v6e-8"), "dropped-setting")
    assert "--cap-add SYS_PTRACE" in f.message


def test_errors_come_first():
    spec = make("--gpu-memory-utilization", "0.95", "--tensor-parallel-size", "3", image="vllm/vllm-tpu:nightly")
    severities = [f.severity for f in lint(spec, accelerator_type="v6e-8")]
    assert severities == sorted(severities, key=["error", "warning", "info"].index) and severities[0] == "error"


def test_unknown_quantization_method_is_a_warning_with_a_removal_fix():
    spec = make("--quantization", "fp9")
    f = only(lint(spec, accelerator_type="v6e-8"), "quantization")
    assert f.severity == "warning" and "fp9" in f.message and f.fix == {"quantization": None}
    assert "quantization" not in rules(lint(make("--quantization", "fp8"), accelerator_type="v6e-8"))


def test_a_utilization_that_failed_loading_compiled_programs_on_this_accelerator_is_flagged_before_the_swap():
    """The history's hbm_oom_after_compile boot (another model, 0.92 on a v5litepod-1: 1.76G asked, 1.12G
    free) flags 0.92 again on that type, with the utilization its figures leave room at."""
    detail = ("jax.errors.JaxRuntimeError: INTERNAL: Error loading program 'jit_step_fun': Attempting to allocate "
              "1.76G. That was not possible. There are 1.12G free.; (0x0x0_HBM0)")
    failed = [(datetime(2026, 11, 30, 9, 0, tzinfo=UTC),
               ["google/gemma-3-4b-it", "--gpu-memory-utilization", "0.92"], detail)]
    found = only(lint(make("--gpu-memory-utilization", "0.92"), accelerator_type="v5litepod-1",
                      hbm_failures=failed), "hbm-failed-here")
    assert found.severity == "warning"
    # 0.92 x 15.75 = 14.49 GiB, minus the 0.64 GiB short = 13.85 GiB = 0.879 of the chip
    assert found.message == ("gpu-memory-utilization 0.92: 0.92 failed on v5litepod-1 after compiling, loading its "
                             "programs (2026-11-30T09:00:00Z (needed 1.76 GiB, 1.12 GiB available: 0.64 GiB short)); "
                             "--gpu-memory-utilization 0.87 instead of 0.92 leaves those 0.64 GiB free.")
    assert found.fix == {"gpu-memory-utilization": "0.87"}
    assert "hbm-failed-here" not in rules(lint(make("--gpu-memory-utilization", "0.85"),
                                               accelerator_type="v5litepod-1", hbm_failures=failed))


def test_the_flag_leaf_keeps_the_swap_forms_flags() -> None:
    from remote.container.parse import KNOWN_SERVE_FLAGS
    from remote.vllm_flags import FORM_FLAGS, is_vllm_serve_flag

    assert set(KNOWN_SERVE_FLAGS) == FORM_FLAGS
    assert all(is_vllm_serve_flag(w) for w in ("--max_model_len=8", "--no-enable-prefix-caching", "-tp", "--model"))
    assert not is_vllm_serve_flag("--max-modle-len")
