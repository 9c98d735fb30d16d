"""Where the benchmark client's own time goes at 32-64 streams, against the sandbox server.

Run:  ``.venv/bin/python -m benches.bench_client_overhead [--streams 32,64] [--rounds 2] [--json]
      [--vllm-bench] [--profile 25]``

The sandbox's OpenAI-compatible server runs in its own process (as a real server would be
elsewhere), serving Qwen3-0.6B on one v6e chip: ~16,700 tok/s over 64 streams, ~3 tokens per
10 ms chunk, so ~5,000 chunks/s reach the client: far more than the real CPU vLLM here makes,
which is the point (the client must not be what the figures measure). Per level
``remote.bench.run_throughput`` runs ``4 x streams`` requests of 256 prompt / 64 output tokens;
the client's CPU (user + system, ``getrusage``) is taken from the first token's progress
callback to the end of the level (the timed window; prompt sizing by ``/tokenize`` is before
it), and printed as seconds, % of one core and microseconds per streamed chunk, beside the
level's output tok/s, mean TTFT, mean TPOT and median ITL (per token and per chunk).
``--vllm-bench`` also runs ``vllm bench serve`` (aiohttp) with the same load against the same
server (needs ``../shared/real-vllm/setup.sh``), ABBA per round. ``--profile N`` prints the
top N functions by own time (cProfile) of one extra run per level. The machine is 2 cores
shared with other work: compare rounds, not single runs.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remote.bench import BenchProgress, run_throughput  # noqa: E402

REAL_VLLM_DIR = Path(os.environ.get("REAL_VLLM_DIR", Path.home() / ".cache" / "real-vllm"))
PROMPT_TOKENS, OUTPUT_TOKENS = 256, 64
SERVER = """
import sys, time
from sandbox.openai_server import SandboxOpenAIServer
srv = SandboxOpenAIServer("127.0.0.1", 0)
srv.configure(model="Qwen/Qwen3-0.6B", served_model_name="qwen-small", max_model_len=40960,
              accelerator_type="v6e-1", chips=1)
print(srv.start(), flush=True)
srv.set_ready(True)
sys.stdin.read()          # until the bench closes our stdin
"""


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run_ours(url: str, streams: int, profile: cProfile.Profile | None = None) -> dict[str, Any]:
    """One level with our client; its figures and the client's CPU in the timed window."""
    started: list[float] = []

    def first_token(progress: BenchProgress) -> None:
        if not started and progress.output_tokens > 0:
            started.append(_cpu_s())
            if profile is not None:
                profile.enable()

    result = await run_throughput(url, concurrency=streams, prompt_tokens=PROMPT_TOKENS,
                                  output_tokens=OUTPUT_TOKENS, requests=4 * streams, on_progress=first_token)
    cpu_s = _cpu_s() - (started[0] if started else _cpu_s())
    if profile is not None:
        profile.disable()
    m = result.metrics
    chunks = m.itl_chunk.samples + m.completed            # every token chunk: the first has no gap
    return {"client": "ours", "streams": streams, "completed": m.completed, "duration_s": m.duration_s,
            "chunks": chunks, "client_cpu_s": cpu_s, "client_core_pct": 100 * cpu_s / m.duration_s,
            "client_us_per_chunk": 1e6 * cpu_s / chunks if chunks else None,
            "output_throughput": m.output_throughput, "mean_ttft_ms": m.ttft.mean_ms,
            "mean_tpot_ms": m.tpot.mean_ms, "median_itl_ms": m.itl.median_ms,
            "median_itl_chunk_ms": m.itl_chunk.median_ms}


def run_vllm_bench(url: str, streams: int) -> dict[str, Any]:
    """``vllm bench serve`` with the same load; its figures (no client CPU split: its process
    also loads a tokenizer and builds the dataset)."""
    with tempfile.TemporaryDirectory(prefix="h15-vb-") as out:
        cmd = [str(REAL_VLLM_DIR / "venv" / "bin" / "vllm"), "bench", "serve", "--backend", "openai-chat",
               "--base-url", url, "--endpoint", "/v1/chat/completions", "--model", "qwen-small",
               "--tokenizer", str(REAL_VLLM_DIR / "tiny-llama"), "--dataset-name", "random",
               "--random-input-len", str(PROMPT_TOKENS), "--random-output-len", str(OUTPUT_TOKENS),
               "--num-prompts", str(4 * streams), "--max-concurrency", str(streams), "--ignore-eos",
               "--seed", str(random.randrange(1 << 30)), "--save-result", "--result-dir", out,
               "--result-filename", "r.json"]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_TARGET_DEVICE": "cpu"}
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        path = Path(out) / "r.json"
        if done.returncode != 0 or not path.exists():
            raise RuntimeError(f"vllm bench serve failed ({done.returncode}): {done.stderr[-600:]}")
        data = json.loads(path.read_text())
    return {"client": "vllm bench serve", "streams": streams, "completed": data["completed"],
            "duration_s": data["duration"], "output_throughput": data["output_throughput"],
            "mean_ttft_ms": data["mean_ttft_ms"], "mean_tpot_ms": data["mean_tpot_ms"],
            "median_itl_ms": None, "median_itl_chunk_ms": data["median_itl_ms"]}


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _table(rows: list[dict[str, Any]]) -> str:
    lines = ["| client | streams | done | chunks | client CPU s | % of a core | us/chunk | out tok/s | "
             "mean TTFT ms | mean TPOT ms | median ITL ms/token | median ITL ms/chunk |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['client']} | {r['streams']} | {r['completed']} | {_fmt(r.get('chunks'), 'd')} | "
            f"{_fmt(r.get('client_cpu_s'), '.2f')} | {_fmt(r.get('client_core_pct'), '.0f')} | "
            f"{_fmt(r.get('client_us_per_chunk'), '.0f')} | {r['output_throughput']:,.0f} | "
            f"{r['mean_ttft_ms']:.1f} | {r['mean_tpot_ms']:.2f} | {_fmt(r['median_itl_ms'], '.2f')} | "
            f"{_fmt(r['median_itl_chunk_ms'], '.2f')} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="32,64", help="concurrency levels, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--vllm-bench", action="store_true", help="also run vllm bench serve (ABBA)")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print the top N functions per level")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    try:
        levels = [int(s) for s in args.streams.split(",")]
    except ValueError:
        print(f"--streams must be integers separated by commas, got {args.streams!r}", file=sys.stderr)
        return 2
    if args.vllm_bench and not (REAL_VLLM_DIR / "venv" / "bin" / "vllm").exists():
        print(f"--vllm-bench needs the real vLLM at {REAL_VLLM_DIR}: run ../shared/real-vllm/setup.sh",
              file=sys.stderr)
        return 2
    server = subprocess.Popen([sys.executable, "-c", SERVER], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{int(server.stdout.readline())}"
        time.sleep(0.2)
        rows: list[dict[str, Any]] = []
        profiles: list[str] = []
        for streams in levels:
            for i in range(max(1, args.rounds)):
                order = ["vllm", "ours"] if i % 2 == 0 else ["ours", "vllm"]
                for step in order:
                    if step == "ours":
                        rows.append(asyncio.run(run_ours(url, streams)))
                    elif args.vllm_bench:
                        rows.append(run_vllm_bench(url, streams))
            if args.profile:
                profile = cProfile.Profile()
                asyncio.run(run_ours(url, streams, profile))
                buffer = io.StringIO()
                pstats.Stats(profile, stream=buffer).sort_stats("tottime").print_stats(args.profile)
                profiles.append(f"--- {streams} streams, timed window, by own time ---\n{buffer.getvalue()}")
    except RuntimeError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(json.dumps(rows, indent=2) if args.json else _table(rows))
    for text in profiles:
        print(text, file=sys.stderr if args.json else sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
