"""``tpu-console metrics`` against the sandbox's vLLM server under load (and the real vLLM when set up)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from console.cli import main
from sandbox.openai_server import SandboxOpenAIServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def server() -> Iterator[SandboxOpenAIServer]:
    srv = SandboxOpenAIServer()
    srv.configure(model="Qwen/Qwen3-0.6B", served_model_name="qwen-small", max_model_len=4096,
                  accelerator_type="v6e-1", chips=1, kv_cache_tokens=65_536)
    srv.start()
    srv.set_ready(True)
    yield srv
    srv.stop()


def _streams(url: str, n: int, max_tokens: int) -> list[threading.Thread]:
    def one() -> None:
        with httpx.Client(timeout=60, trust_env=False) as client:
            client.post(url + "/v1/completions", json={"model": "qwen-small", "prompt": "tok " * 300,
                                                       "max_tokens": max_tokens, "stream": True})
    threads = [threading.Thread(target=one) for _ in range(n)]
    for thread in threads:
        thread.start()
    return threads


def test_metrics_under_load_show_what_the_server_carries(server: SandboxOpenAIServer, capsys) -> None:
    url = f"http://127.0.0.1:{server.port}"
    threads = _streams(url, 5, max_tokens=2000)             # longer than the two samples
    time.sleep(0.5)
    code = main(["metrics", "--url", url, "--interval", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    for thread in threads:
        thread.join()
    assert code == 0
    assert out["running"] == 5 and out["waiting"] == 0
    assert out["kv_cache_size_tokens"] == 65_536 and out["model_names"] == ["qwen-small"]
    # five streams each hold their prompt and what they generated so far
    assert 0 < out["kv_cache_usage_perc"] < 100
    served = server.stats.output_tokens_per_s()
    assert out["generation_tokens_per_s"] == pytest.approx(served, rel=0.25)
    assert out["itl_p50_s"] is not None and 0 < out["itl_p50_s"] < 1
    assert out["ttft_p50_s"] is None       # every first token came before the window: nothing to say


def test_metrics_of_an_idle_server_and_of_nothing_listening(server: SandboxOpenAIServer, capsys) -> None:
    url = f"http://127.0.0.1:{server.port}"
    assert main(["metrics", "--url", url, "--interval", "0.2"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("running 0 · waiting 0 · KV 0.0% of 65,536 tokens · 0.0 tok/s")
    server.stop()
    assert main(["metrics", "--url", url, "--interval", "0.2"]) == 1
    assert "tpu-console: " in capsys.readouterr().err


def test_metrics_read_the_real_vllm_server_as_curl_sees_it(real_vllm_url: str) -> None:
    """The real vLLM 0.32 (CPU), idle: the verb's figures equal its own /metrics text, read here with plain
    string handling (not our parser). The KV cache size is the one ``cache_config_info`` states, or, when it
    states only blocks and block size, their product reported as derived, never as the server's.

    (This test once loaded the server with three long requests and asserted ``running == 3``: on 2 cores in
    the full suite the requests were taken up seconds apart and ended before the verb's second sample, so
    it was a non-strict xfail that hid any failure. The loaded path is held against the sandbox's server by
    ``test_metrics_under_load_show_what_the_server_carries``; here only what an idle server says, which
    does not depend on timing.)"""
    url = real_vllm_url
    done = subprocess.run([sys.executable, "-m", "console.cli", "metrics", "--url", url, "--interval", "0.5",
                           "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    raw = httpx.get(url + "/metrics", timeout=10).text
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)

    def value(name: str) -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in raw.splitlines() if line.startswith(name + "{"))

    assert figures["running"] == value("vllm:num_requests_running") == 0
    assert figures["waiting"] == value("vllm:num_requests_waiting") == 0
    info = next(line for line in raw.splitlines() if line.startswith("vllm:cache_config_info{"))
    labels = {k: v.strip('"') for k, v in (part.split("=", 1) for part in info[info.index("{") + 1:info.index("}")]
                                           .split(","))}
    if labels.get("kv_cache_size_tokens"):
        assert figures["kv_cache_size_tokens"] == int(labels["kv_cache_size_tokens"])
    else:
        assert figures["kv_cache_size_tokens"] is None
        assert figures["kv_cache_derived_tokens"] == int(labels["num_gpu_blocks"]) * int(labels["block_size"])
