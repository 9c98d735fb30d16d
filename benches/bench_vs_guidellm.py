"""Same load, two tools: ``remote.bench.run_sweep`` and guidellm, against one sandbox vLLM server.

Run:  ``.venv/bin/python -m benches.bench_vs_guidellm [--streams 1,8] [--requests 16]``

The sandbox OpenAI server (Qwen3-8B on one v6e chip: 150 tokens/s single stream, total
rate x streams ** 0.8) runs in a child process so neither client shares a GIL with it.
Both tools get the same prompts (``remote.bench.prompts.synthetic_prompt``: guidellm
reads them from a JSONL file, so it needs no tokenizer and no Hugging Face hub) and the
same output length per request, at the same concurrency levels and request counts.
A third column shows what the server itself recorded (its ``stats``).

guidellm is found via ``$GUIDELLM_BIN``, then ``.venv/bin/guidellm``, then ``PATH``.
It requires torch (its data loader); install it in a separate venv, e.g.
``python -m venv ../guidellm-venv && ../guidellm-venv/bin/pip install guidellm``.
Without it the script says why and prints our figures only.

ITL: guidellm's is per *token* (decode time / (tokens - 1)), and so is ours (a chunk of k
tokens after a gap g counts as k gaps of g / k); ``vllm bench serve``'s per-chunk ITL is our
``itl_chunk``, not compared here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remote.bench import run_sweep  # noqa: E402
from remote.bench.prompts import synthetic_prompt  # noqa: E402

GUIDELLM_TIMEOUT_S = 150


def _serve(conn: Any) -> None:
    """Child process: a ready sandbox server; answers "reset", "stats", "stop" over ``conn``."""
    from sandbox import openai_server
    from sandbox.openai_server import SandboxOpenAIServer

    openai_server.OpenAIHandler.disable_nagle_algorithm = True   # as uvicorn does (TCP_NODELAY)
    server = SandboxOpenAIServer()
    server.configure(model="Qwen/Qwen3-8B", served_model_name="qwen3-8b", max_model_len=32768,
                     accelerator_type="v6e-1", chips=1)
    conn.send(server.start())
    server.set_ready(True)
    while (command := conn.recv()) != "stop":
        if command == "reset":
            server.reset_stats()
            conn.send(None)
        else:
            conn.send(server.stats)
    server.stop()


def _served(stats: Any) -> dict[str, float]:
    ok = stats.ok
    tpots = [(r.token_times_s[-1] - r.token_times_s[0]) / (len(r.token_times_s) - 1)
             for r in ok if len(r.token_times_s) > 1]
    return {"completed": len(ok), "failed": stats.errors,
            "output_tok_s": stats.output_tokens_per_s(),
            "ttft_mean_ms": statistics.mean(r.ttft_s for r in ok) * 1000 if ok else 0.0,
            "ttft_median_ms": statistics.median(r.ttft_s for r in ok) * 1000 if ok else 0.0,
            "tpot_mean_ms": statistics.mean(tpots) * 1000 if tpots else 0.0}


def _ours(result: Any) -> dict[str, float]:
    m = result.metrics
    return {"completed": m.completed, "failed": m.failed, "duration_s": m.duration_s,
            "req_s": m.request_throughput, "output_tok_s": m.output_throughput,
            "total_tok_s": m.total_token_throughput,
            "ttft_mean_ms": m.ttft.mean_ms, "ttft_median_ms": m.ttft.median_ms, "ttft_p99_ms": m.ttft.p99_ms,
            "tpot_mean_ms": m.tpot.mean_ms, "tpot_median_ms": m.tpot.median_ms, "tpot_p99_ms": m.tpot.p99_ms,
            "itl_mean_ms": m.itl.mean_ms, "itl_median_ms": m.itl.median_ms, "itl_p99_ms": m.itl.p99_ms}


def _guidellm_bin() -> str | None:
    for candidate in (os.environ.get("GUIDELLM_BIN"), str(ROOT / ".venv/bin/guidellm"), shutil.which("guidellm")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def _run_guidellm(binary: str, url: str, streams: list[int], requests: int, prompt_tokens: int,
                  output_tokens: int, workdir: Path) -> tuple[list[dict[str, float]] | None, str]:
    """Run guidellm once over every level; return per-level figures or ``None`` and why."""
    data = workdir / "prompts.jsonl"
    with data.open("w") as f:
        for i in range(requests * len(streams)):
            f.write(json.dumps({"prompt": synthetic_prompt(prompt_tokens, seed=10_000 + i),
                                "output_tokens_count": output_tokens}) + "\n")
    out = workdir / "guidellm.json"
    argv = [binary, "run", "--backend", f"kind=openai_http,target={url}",
            "--profile", f"kind=concurrent,streams={streams[0]}",
            "--override", "profile.streams", ",".join(map(str, streams)),
            "--data", f"kind=json_file,path={data}",
            "--constraint", f"kind=max_requests,count={requests}",
            "--output", f"kind=json,path={out}", "--disable-console"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=GUIDELLM_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return None, f"guidellm did not finish within {GUIDELLM_TIMEOUT_S} s"
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return None, f"guidellm exited {proc.returncode}: " + " | ".join(tail)
    levels = []
    for bench in json.loads(out.read_text())["benchmarks"]:
        m = bench["metrics"]

        def stat(name: str, key: str = "mean", m: dict[str, Any] = m) -> float:
            s = m[name]["successful"]
            return float(s["percentiles"]["p99"] if key == "p99" else s[key])
        totals = m["request_totals"]
        levels.append({
            "completed": totals["successful"], "failed": totals["errored"] + totals["incomplete"],
            "duration_s": bench["duration"], "req_s": stat("requests_per_second"),
            "output_tok_s": stat("output_tokens_per_second"), "total_tok_s": stat("tokens_per_second"),
            **{f"{short}_{k}_ms": stat(name, k) for short, name in (
                ("ttft", "time_to_first_token_ms"), ("tpot", "time_per_output_token_ms"),
                ("itl", "inter_token_latency_ms")) for k in ("mean", "median", "p99")},
        })
    return levels, ""


ROWS = [("completed", "requests completed", "{:.0f}"), ("failed", "requests failed", "{:.0f}"),
        ("duration_s", "duration s", "{:.2f}"), ("req_s", "requests/s", "{:.2f}"),
        ("output_tok_s", "output tokens/s", "{:.1f}"), ("total_tok_s", "total tokens/s", "{:.1f}"),
        *[(f"{m}_{k}_ms", f"{m.upper()} {k} ms", "{:.1f}") for m in ("ttft", "tpot", "itl")
          for k in ("mean", "median", "p99")]]


def _print(streams: list[int], ours: list[dict], theirs: list[dict] | None, served: list[dict]) -> None:
    for i, level in enumerate(streams):
        print(f"\n== {level} stream(s) ==")
        print(f"{'':22}{'tpu-console':>14}{'guidellm':>14}{'server saw':>14}")
        for key, label, fmt in ROWS:
            cells = [ours[i].get(key), theirs[i].get(key) if theirs else None, served[i].get(key)]
            print(f"{label:22}" + "".join(f"{'-' if v is None else fmt.format(v):>14}" for v in cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="1,8", help="concurrency levels (default 1,8)")
    parser.add_argument("--requests", type=int, default=16, help="requests per level (default 16)")
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--output-tokens", type=int, default=32)
    args = parser.parse_args()
    streams = [int(s) for s in args.streams.split(",")]

    parent, child = mp.Pipe()
    proc = mp.Process(target=_serve, args=(child,), daemon=True)
    proc.start()
    url = f"http://127.0.0.1:{parent.recv()}"
    started = time.perf_counter()
    try:
        served: list[dict] = []
        ours: list[dict] = []
        for level in streams:          # one level at a time so the server's stats split by level
            parent.send("reset")
            parent.recv()
            result, = asyncio.run(run_sweep(url, concurrencies=[level], prompt_tokens=args.prompt_tokens,
                                            output_tokens=args.output_tokens, requests=args.requests))
            ours.append(_ours(result))
            parent.send("stats")
            served.append(_served(parent.recv()))
        theirs, why = None, "guidellm not found (set GUIDELLM_BIN or install it; see the docstring)"
        if binary := _guidellm_bin():
            parent.send("reset")
            parent.recv()
            with tempfile.TemporaryDirectory() as tmp:
                theirs, why = _run_guidellm(binary, url, streams, args.requests, args.prompt_tokens,
                                            args.output_tokens, Path(tmp))
            parent.send("stats")
            whole = _served(parent.recv())
            for row in served:     # guidellm ran all levels in one go: show its server totals apart
                row["guidellm_run_output_tok_s"] = whole["output_tok_s"]
    finally:
        parent.send("stop")
        proc.join(timeout=10)
    print(f"sandbox: Qwen3-8B on v6e-1; prompt ~{args.prompt_tokens} tokens, output {args.output_tokens} "
          f"tokens, {args.requests} requests per level; wall {time.perf_counter() - started:.0f} s")
    if theirs is None:
        print(f"guidellm: not run: {why}")
    _print(streams, ours, theirs, served)
    print("\n'server saw' is per level for our runs (the server's own token times); ITL is per token "
          "for both.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
