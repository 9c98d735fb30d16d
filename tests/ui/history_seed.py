"""A small, fixed history written through the real ``HistoryStore`` (shared by the history UI tests).

Six launches (ids 1..6, oldest first) on sandbox fleet nodes, plus one on a node that is
gone and one observed without a spec; throughput/smoke/longctx benchmarks on three of them.
"""

from __future__ import annotations

from pathlib import Path

from store.history import HistoryStore

HF_TOKEN = "hf_" + "S3cretT0kenValue" * 2
_SPEC_BASE = {"name": "vllm", "network": "host", "privileged": True, "shm_size": "16g",
              "volumes": ["/dev/shm:/dev/shm", "/mnt/cache:/root/.cache"], "ports": [],
              "launcher": ["vllm", "serve"], "launcher_in_entrypoint": False}
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _spec(image: str, model: str) -> dict[str, object]:
    return _SPEC_BASE | {"image": image, "model": model,
                         "env": {"HF_TOKEN": HF_TOKEN, "TPU_BACKEND_TYPE": "jax"}}


def _hbm(used: float, chips: int) -> list[dict[str, object]]:
    return [{"stage": "weights", "label": "after weights", "used_gib": [used / 2] * chips,
             "limit_gib": [15.75] * chips},
            {"stage": "kv", "label": "after KV cache", "used_gib": [used] * chips, "limit_gib": [15.75] * chips}]


def seed_history(path: Path) -> None:
    """Write the fixed history into a new database at ``path``."""
    v5e = dict(node="vllm-v5e-a", project="inference-prod", zone="us-west4-a", accelerator_type="v5litepod-4",
               provisioning_model="on-demand", model=LLAMA)
    with HistoryStore(path) as store:
        one = store.start_launch(
            **v5e, image="vllm/vllm-tpu:v0.11.1", container_spec=_spec("vllm/vllm-tpu:v0.11.1", LLAMA),
            serve_args=[LLAMA, "--max-model-len", "4096", "--gpu-memory-utilization", "0.90",
                        "--tensor-parallel-size", "4"],
            requested_at="2026-11-29T09:00:00Z", started_at="2026-11-29T09:00:20Z", ready_at="2026-11-29T09:06:40Z",
            outcome="replaced", phase_durations={"pull": 20.0, "weights": 41.5, "compile": 290.0, "init": 28.5},
            compile_seconds=290.0, engine_init_seconds=318.5, hbm=_hbm(14.2, 4), kv_cache_tokens=412_160,
            max_concurrency=100.6, max_model_len=4096, container_id="a" * 64)
        two = store.start_launch(
            **v5e, image="vllm/vllm-tpu:v0.11.1", container_spec=_spec("vllm/vllm-tpu:v0.11.1", LLAMA),
            serve_args=[LLAMA, "--max-model-len", "32768", "--gpu-memory-utilization", "0.95",
                        "--tensor-parallel-size", "4"],
            requested_at="2026-11-29T10:00:00Z", started_at="2026-11-29T10:00:15Z", failed_at="2026-11-29T10:04:00Z",
            outcome="failed", failure_kind="RESOURCE_EXHAUSTED",
            failure_detail="Ran out of memory in memory space hbm. Used 16.91G of 15.75G hbm.",
            phase_durations={"pull": 15.0, "weights": 40.0}, hbm=_hbm(15.1, 4), max_model_len=32768,
            replaced_launch_id=one, container_id="b" * 64)
        three = store.start_launch(
            **v5e, image="vllm/vllm-tpu:v0.12.0", container_spec=_spec("vllm/vllm-tpu:v0.12.0", LLAMA),
            serve_args=[LLAMA, "--max-model-len", "8192", "--gpu-memory-utilization", "0.90",
                        "--tensor-parallel-size", "4", "--kv-cache-dtype", "fp8"],
            requested_at="2026-11-29T11:00:00Z", started_at="2026-11-29T11:00:18Z", ready_at="2026-11-29T11:08:00Z",
            outcome="ready", phase_durations={"pull": 18.0, "weights": 40.0, "compile": 372.0, "init": 32.0},
            compile_seconds=372.0, engine_init_seconds=404.0, hbm=_hbm(14.9, 4), kv_cache_tokens=824_320,
            max_concurrency=100.6, max_model_len=8192, replaced_launch_id=two, container_id="c" * 64)
        store.start_launch(
            node="vllm-flex-b", project="inference-prod", zone="us-east5-a", accelerator_type="v6e-8",
            provisioning_model="flex-start", model="Qwen/Qwen3-8B", image="vllm/vllm-tpu:nightly",
            container_spec=_spec("vllm/vllm-tpu:nightly", "Qwen/Qwen3-8B"),
            serve_args=["Qwen/Qwen3-8B", "--max-model-len", "16384", "--tensor-parallel-size", "8"],
            requested_at="2026-11-30T08:00:00Z", started_at="2026-11-30T08:00:30Z", outcome="interrupted",
            phase_durations={"pull": 30.0}, max_model_len=16384)
        gone = store.start_launch(
            node="vllm-old-z", project="inference-prod", zone="us-east5-a", accelerator_type="v6e-4",
            provisioning_model="spot", model="Qwen/Qwen3-8B", image="vllm/vllm-tpu:nightly",
            container_spec=_spec("vllm/vllm-tpu:nightly", "Qwen/Qwen3-8B"),
            serve_args=["Qwen/Qwen3-8B", "--max-model-len", "8192", "--tensor-parallel-size", "4"],
            requested_at="2026-11-30T09:00:00Z", ready_at="2026-11-30T09:05:00Z", outcome="ready",
            kv_cache_tokens=1_310_720, max_concurrency=160.0, max_model_len=8192, compile_seconds=240.0)
        store.start_launch(node="vllm-flex-b", project="inference-prod", zone="us-east5-a", accelerator_type="v6e-8",
                           origin="observed", requested_at="2026-11-30T11:30:00Z", outcome="interrupted")
        price = 4.8
        for launch_id, at, rows in (
            (one, "2026-11-29T09:10:00Z", [(1, 92.0, 48.0, 10.9, 3.62), (16, 1210.0, 180.0, 13.1, 0.275)]),
            (three, "2026-11-29T11:10:00Z", [(1, 88.0, 55.0, 11.4, 3.79), (16, 790.0, 240.0, 19.8, 0.422)]),
            (gone, "2026-11-30T09:10:00Z", [(16, 2400.0, 150.0, 6.6, 0.556)]),
        ):
            for i, (streams, tok_s, ttft, tpot, usd) in enumerate(rows):
                store.add_benchmark(launch_id, "throughput", {"streams": streams, "prompt_tokens": 1024,
                                                              "output_tokens": 256},
                                    {"output_throughput": tok_s, "median_ttft_ms": ttft, "median_tpot_ms": tpot,
                                     "failed": 0}, price_per_hour_usd=price, usd_per_mtok=usd,
                                    started_at=at[:-3] + f"{i}0Z")
        store.add_benchmark(one, "smoke", {}, {"ok": True, "latency_s": 0.41, "tool": {"passed": True}},
                            started_at="2026-11-29T09:09:00Z")
        store.add_benchmark(three, "longctx", {"context_tokens": 7000},
                            {"found_all": True, "context_tokens": 7000}, started_at="2026-11-29T11:20:00Z")
