"""The launch compare shared by the compare view and ``history compare``: every spec difference,
every benchmark kind, and "worse" only beyond the figure's noise."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.flows.launch_compare import (
    NOISE_PCT,
    FigureDelta,
    FlagChange,
    compare_json,
    figure_diff,
    spec_diff,
)
from store.history import HistoryStore

DIGEST_A = "vllm/vllm-tpu@sha256:" + "a" * 64
DIGEST_B = "vllm/vllm-tpu@sha256:" + "b" * 64


def _spec(volumes: list[str], env: dict[str, str], digest: str) -> dict:
    return {"name": "vllm", "image": "vllm/vllm-tpu:latest", "image_digest": digest, "model": "Qwen/Qwen3-8B",
            "env": env, "volumes": volumes, "ports": [], "network": "host", "privileged": True,
            "shm_size": "16g", "extra_args": []}


@pytest.fixture
def store(tmp_path: Path):
    with HistoryStore(tmp_path / "h.db") as s:
        yield s


def _pair(store: HistoryStore, ready_b: str = "2026-11-30T10:06:40.400Z"):
    a = store.start_launch(node="vllm-a", accelerator_type="v6e-8", model="Qwen/Qwen3-8B",
                           image="vllm/vllm-tpu:latest", image_digest=DIGEST_A,
                           serve_args=["Qwen/Qwen3-8B", "--max-model-len", "8192"],
                           container_spec=_spec(["/dev/shm:/dev/shm"], {"TPU_BACKEND_TYPE": "jax"}, DIGEST_A),
                           requested_at="2026-11-30T10:00:00Z", ready_at="2026-11-30T10:06:40Z", outcome="ready",
                           kv_cache_tokens=400_000)
    b = store.start_launch(node="vllm-a", accelerator_type="v6e-8", model="Qwen/Qwen3-8B",
                           image="vllm/vllm-tpu:latest", image_digest=DIGEST_B,
                           serve_args=["Qwen/Qwen3-8B", "--max-model-len=8192"],
                           container_spec=_spec(["/dev/shm:/dev/shm", "/mnt/disks/hf:/root/.cache/huggingface:ro"],
                                                {"TPU_BACKEND_TYPE": "pjrt"}, DIGEST_B),
                           requested_at="2026-11-30T10:00:00Z", ready_at=ready_b, outcome="ready",
                           kv_cache_tokens=400_000)
    return store.get_launch(a), store.get_launch(b)


def test_every_spec_difference_is_shown(store: HistoryStore) -> None:
    a, b = _pair(store)
    assert spec_diff(a, b) == [
        FlagChange("image digest", DIGEST_A, DIGEST_B, "changed"),
        FlagChange("env TPU_BACKEND_TYPE", "jax", "pjrt", "changed"),
        FlagChange("volume /root/.cache/huggingface", None, "/mnt/disks/hf:/root/.cache/huggingface:ro", "added"),
    ]  # --max-model-len 8192 and --max-model-len=8192 are the same flag
    assert spec_diff(a, a) == []


def test_a_change_within_the_noise_is_not_worse(store: HistoryStore) -> None:
    a, b = _pair(store)  # time to ready 400.0 s -> 400.4 s: +0.1 %
    ready = next(r for r in figure_diff(a, b, [], []) if r.figure == "time to ready (s)")
    assert (ready.a, ready.b, ready.noise_pct) == (400.0, 400.4, NOISE_PCT["time_to_ready_s"])
    assert ready.verdict == "within noise"
    slower = FigureDelta("time to ready (s)", 400.0, 424.0, False, 5.0)      # +6 %
    assert slower.verdict == "worse" and FigureDelta("x", 400.0, 420.0, False, 5.0).verdict == "within noise"
    assert FigureDelta("KV cache (tokens)", 400_000, 399_999, True, 0.0).verdict == "worse"  # exact figure
    assert FigureDelta("out tok/s", 1000.0, 1060.0, True, 5.0).verdict == "better"


def test_every_benchmark_kind_is_compared(store: HistoryStore) -> None:
    a, b = _pair(store)
    store.add_benchmark(a.id, "throughput", {"streams": 16}, {"output_tokens_per_s": 1000.0, "ttft_median_ms": 200.0})
    store.add_benchmark(b.id, "throughput", {"streams": 16}, {"output_tokens_per_s": 1020.0, "ttft_median_ms": 260.0})
    store.add_benchmark(a.id, "smoke", {}, {"ok": True, "latency_s": 0.40,
                                            "tool": {"called": True, "arguments_ok": True, "final_ok": True}})
    store.add_benchmark(b.id, "smoke", {}, {"ok": True, "latency_s": 0.80,
                                            "tool": {"called": True, "arguments_ok": True, "final_ok": False}})
    probe = {"found": True, "ttft_s": 2.0, "prompt_tokens_per_s": 3500.0, "status_code": None}
    refused = {"found": False, "ttft_s": 0.0, "prompt_tokens_per_s": 0.0, "status_code": 400}  # past max-model-len
    store.add_benchmark(a.id, "longctx", {"context_tokens": 7000}, {"probes": [probe, probe, refused]})
    store.add_benchmark(b.id, "longctx", {"context_tokens": 7000},
                        {"probes": [probe, probe | {"found": False, "ttft_s": 2.1}, refused]})
    rows = {r.figure: r for r in figure_diff(a, b, store.benchmarks_for(a.id), store.benchmarks_for(b.id))}
    assert rows["out tok/s @16 streams"].verdict == "within noise"            # +2 %
    assert rows["TTFT ms @16 streams"].verdict == "worse"                     # +30 %
    assert (rows["smoke: latency (s)"].a, rows["smoke: latency (s)"].b) == (0.40, 0.80)
    assert rows["smoke: tool call ok (1/0)"].verdict == "worse"
    assert rows["smoke: answered (1 yes / 0 no)"].verdict == "same"
    recall = rows["long context: needle recall (0-1)"]
    assert (recall.a, recall.b, recall.verdict) == (1.0, 0.5, "worse")
    assert rows["long context: TTFT median (s)"].b == pytest.approx(2.05)
    data = compare_json(a, b, store.benchmarks_for(a.id), store.benchmarks_for(b.id))
    assert (data["a"], data["b"]) == (a.id, b.id) and data["noise_pct"]["time_to_ready_s"] == 5.0
    assert {"setting": "env TPU_BACKEND_TYPE", "a": "jax", "b": "pjrt", "change": "changed"} in data["spec"]


def test_a_tag_pinned_to_its_recorded_digest_is_pinned_not_changed(store: HistoryStore) -> None:
    def launch(image: str, digest: str) -> int:
        return store.start_launch(node="vllm-a", accelerator_type="v6e-8", model="Qwen/Qwen3-8B", image=image,
                                  image_digest=digest, serve_args=["Qwen/Qwen3-8B"],
                                  container_spec=_spec([], {}, digest) | {"image": image},
                                  requested_at="2026-11-30T10:00:00Z", outcome="ready")

    tag = store.get_launch(launch("vllm/vllm-tpu:latest", DIGEST_A))
    pinned = store.get_launch(launch(DIGEST_A, DIGEST_A))
    other = store.get_launch(launch(DIGEST_B, DIGEST_B))
    assert spec_diff(tag, pinned) == [FlagChange("image", "vllm/vllm-tpu:latest", DIGEST_A, "pinned")]
    assert spec_diff(pinned, tag) == [FlagChange("image", DIGEST_A, "vllm/vllm-tpu:latest", "unpinned")]
    assert spec_diff(tag, other) == [FlagChange("image", "vllm/vllm-tpu:latest", DIGEST_B, "changed"),
                                     FlagChange("image digest", DIGEST_A, DIGEST_B, "changed")]


def test_an_extra_flag_is_one_difference_not_two(store: HistoryStore) -> None:
    """A swap records an unknown flag both in the serve arguments and in the spec's extra_args:
    compare lists ``--bogus-flag`` once (it listed ``extra args`` as well)."""
    a, _ = _pair(store)
    spec = _spec(["/dev/shm:/dev/shm"], {"TPU_BACKEND_TYPE": "jax"}, DIGEST_A) | {"extra_args": ["--bogus-flag", "3"]}
    b_id = store.start_launch(node="vllm-a", accelerator_type="v6e-8", model="Qwen/Qwen3-8B",
                              image="vllm/vllm-tpu:latest", image_digest=DIGEST_A,
                              serve_args=["Qwen/Qwen3-8B", "--max-model-len", "8192", "--bogus-flag", "3"],
                              container_spec=spec, requested_at="2026-11-30T11:00:00Z", outcome="ready")
    b = store.get_launch(b_id)
    assert spec_diff(a, b) == [FlagChange("--bogus-flag", None, "3", "added")]
    # extra args the serve arguments do not hold (a positional word, another value) still show
    odd = _spec(["/dev/shm:/dev/shm"], {"TPU_BACKEND_TYPE": "jax"}, DIGEST_A) | {"extra_args": ["stray", "--x", "1"]}
    c = store.get_launch(store.start_launch(node="vllm-a", accelerator_type="v6e-8", model="Qwen/Qwen3-8B",
                                            image="vllm/vllm-tpu:latest", image_digest=DIGEST_A,
                                            serve_args=["Qwen/Qwen3-8B", "--max-model-len", "8192"],
                                            container_spec=odd, requested_at="2026-11-30T12:00:00Z"))
    assert FlagChange("extra args", None, "stray --x 1", "added") in spec_diff(a, c)
