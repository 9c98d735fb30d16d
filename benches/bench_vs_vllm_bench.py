"""Same load, two clients: ``remote.bench.run_throughput`` and ``vllm bench serve`` on one real vLLM server.

Run:  ``.venv/bin/python -m benches.bench_vs_vllm_bench --url http://127.0.0.1:8011 [--streams 1,4,16] [--json]``
      (or ``--start PORT`` to start ``../shared/real-vllm/serve.sh PORT`` and stop it afterwards)

Both clients send chat requests (``/v1/chat/completions``, streamed, ``ignore_eos``) of
``--prompt-tokens`` prompt tokens and ``--output-tokens`` output tokens, at each level of
``--streams`` with the same request count (``max(8, 2 x streams)``), one after the other
against the same server, ``--rounds`` times each in ABBA order (medians reported: the
machine is 2 shared cores, and its load drifts). ``vllm bench serve`` is the reference (vLLM 0.32's ``random``
dataset: ``--random-input-len`` tokens decoded to text, then the chat template, so its
prompts are a few tokens longer than asked; ours include the template in the ask). Each
``vllm bench serve`` run gets a fresh ``--seed``: with its default seed 0 a rerun sends the
same prompts again and the server's prefix cache serves ~97% of the prompt tokens (seen
in ``vllm:prefix_cache_hits_total``: +2,048 of +2,121 tokens at 8 x 256), which made its
TTFT look 3-4x better than ours (unique prompts) in the first comparison.

The server must not cache prefixes (``--start`` passes ``--no-enable-prefix-caching``): vllm bench
serve's random prompts are runs of consecutive token ids, and over the tiny model's 4,096-token
vocabulary they share prefixes: 42% of their prompt tokens were prefix-cache hits at 16 x 160
(``vllm:prefix_cache_hits_total``; ours 0%), which put their mean TTFT 25-35% below ours for the
same prefill. Each run's hit rate is read from ``/metrics`` and printed (with a warning above 1%).
By default ours asks for as many prompt tokens as the server counted for vllm bench serve's first
run (``vllm:prompt_tokens_total``: its ``--random-input-len`` plus the chat template, 256 + 9), so
both put the same prefill on the server (``--no-match-prompt``: ours asks for ``--prompt-tokens``).

Printed per level: prompt tokens per request as the server counted them (usage), output
tokens/s, mean TTFT, mean TPOT and median ITL per chunk (``vllm bench serve``'s ITL; ours per
token beside it) for both, and ours / vllm's; then per figure the ratio of each ABBA round's
pair (a systematic difference keeps its sign in every round, noise does not) and each client's
spread between its rounds. ``--json`` prints the rows
as a JSON list instead. Needs ``../shared/real-vllm/setup.sh`` (the vllm executable is
``$REAL_VLLM_DIR/venv/bin/vllm``, the tokenizer ``$REAL_VLLM_DIR/tiny-llama``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from remote.bench import run_throughput  # noqa: E402

REAL_VLLM_DIR = Path(os.environ.get("REAL_VLLM_DIR", Path.home() / ".cache" / "real-vllm"))
SERVE = ROOT.parent / "shared" / "real-vllm" / "serve.sh"


def requests_for(streams: int) -> int:
    """Requests per level for both clients: 8 per stream, at least 32 (runs of 3-15 s: with 8-32
    requests per run, 1-3 s, one client's rounds spread by 10-50% on this machine)."""
    return max(32, 8 * streams)


#: The server's counters read around every run (vLLM 0.32 /metrics names).
COUNTERS = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total")


def read_counters(url: str) -> dict[str, float]:
    """The :data:`COUNTERS` from the server's ``/metrics`` (summed over labels; absent: 0.0), parsed
    with prometheus_client's text parser."""
    text = httpx.get(url + "/metrics", timeout=10).text
    found = dict.fromkeys(COUNTERS, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in found:
                found[sample.name] += sample.value
    return found


def server_side(url: str, run: Any, *args: Any) -> dict[str, Any]:
    """``run(*args)`` (either client) with the server's view of it added: ``server_prompt_tokens``
    (per completed request, by ``vllm:prompt_tokens_total``) and ``prefix_cache_hit_rate`` (hits /
    queries of the prefix cache during the run; 0.0 when the cache is off)."""
    before = read_counters(url)
    result: dict[str, Any] = run(*args)
    after = read_counters(url)
    delta = {k: after[k] - before[k] for k in COUNTERS}
    queries = delta["vllm:prefix_cache_queries_total"]
    result["prefix_cache_hit_rate"] = delta["vllm:prefix_cache_hits_total"] / queries if queries else 0.0
    result["server_prompt_tokens"] = delta["vllm:prompt_tokens_total"] / max(1, result["completed"])
    return result


def run_vllm_bench(url: str, streams: int, requests: int, prompt_tokens: int, output_tokens: int,
                   model: str = "tiny") -> dict[str, Any]:
    """``vllm bench serve`` once; its saved result JSON (keys ``total_input_tokens``,
    ``completed``, ``output_throughput`` tok/s, ``mean_ttft_ms``, ``mean_tpot_ms``, ...).

    Raises:
        RuntimeError: it failed (its stderr tail in the message).
    """
    with tempfile.TemporaryDirectory(prefix="h15-vllm-bench-") as out:
        cmd = [str(REAL_VLLM_DIR / "venv" / "bin" / "vllm"), "bench", "serve", "--backend", "openai-chat",
               "--base-url", url, "--endpoint", "/v1/chat/completions", "--model", model,
               "--tokenizer", str(REAL_VLLM_DIR / "tiny-llama"), "--dataset-name", "random",
               "--random-input-len", str(prompt_tokens), "--random-output-len", str(output_tokens),
               "--num-prompts", str(requests), "--max-concurrency", str(streams), "--ignore-eos",
               "--seed", str(random.randrange(1 << 30)),
               "--save-result", "--result-dir", out, "--result-filename", "result.json"]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_TARGET_DEVICE": "cpu"}
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
        result = Path(out) / "result.json"
        if done.returncode != 0 or not result.exists():
            raise RuntimeError(f"vllm bench serve failed ({done.returncode}): {done.stderr[-800:]}")
        data: dict[str, Any] = json.loads(result.read_text())
        return data


async def run_ours(url: str, streams: int, requests: int, prompt_tokens: int, output_tokens: int) -> dict[str, Any]:
    """``run_throughput`` once; the same figures as :func:`run_vllm_bench` plus ``prompt_tokens_sent``
    (mean, by ``/tokenize``) and ``prompt_tokens_exact``."""
    r = await run_throughput(url, concurrency=streams, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                             requests=requests)
    m = r.metrics
    return {"completed": m.completed, "failed": m.failed, "total_input_tokens": m.total_input_tokens,
            "output_throughput": m.output_throughput, "mean_ttft_ms": m.ttft.mean_ms,
            "mean_tpot_ms": m.tpot.mean_ms, "median_itl_ms": m.itl_chunk.median_ms,
            "median_itl_per_token_ms": m.itl.median_ms, "prompt_tokens_sent": r.prompt_tokens_sent,
            "prompt_tokens_exact": r.prompt_tokens_exact, "errors": [e for e, _ in r.errors]}


def compare(url: str, streams: int, prompt_tokens: int, output_tokens: int, rounds: int = 1,
            match_prompt: bool = True, requests: int | None = None) -> dict[str, Any]:
    """One level, both clients, ``rounds`` times in ABBA order (vllm, ours, ours, vllm, ...) so a
    drifting machine load does not favour one; a row of median figures (``ours_*``, ``vllm_*``,
    ``ratio_*`` = ours / vllm of the medians).

    ``match_prompt``: ours asks for as many prompt tokens as the server counted for ``vllm bench
    serve``'s first run (its ``--random-input-len`` tokens plus the chat template, e.g. 256 + 9),
    so both put the same prefill on the server; else ours asks for ``prompt_tokens`` (template
    included). ``requests`` per run: default :func:`requests_for`."""
    requests = requests or requests_for(streams)
    ours_runs: list[dict[str, Any]] = []
    theirs_runs: list[dict[str, Any]] = []
    ours_ask = prompt_tokens
    for i in range(rounds):
        steps = ["vllm", "ours"] if i % 2 == 0 else ["ours", "vllm"]
        for step in steps:
            if step == "vllm":
                theirs_runs.append(server_side(url, run_vllm_bench, url, streams, requests, prompt_tokens,
                                               output_tokens))
                if match_prompt and len(theirs_runs) == 1:
                    ours_ask = round(theirs_runs[0]["server_prompt_tokens"]) or prompt_tokens
            else:
                ours_runs.append(server_side(url, lambda *a: asyncio.run(run_ours(*a)), url, streams, requests,
                                             ours_ask, output_tokens))

    def med(runs: list[dict[str, Any]], key: str) -> float:
        return float(statistics.median(r[key] for r in runs))

    row: dict[str, Any] = {"streams": streams, "requests": requests, "rounds": rounds, "ours_prompt_ask": ours_ask,
                           "ours_prefix_cache_hit_rate": max(r["prefix_cache_hit_rate"] for r in ours_runs),
                           "vllm_prefix_cache_hit_rate": max(r["prefix_cache_hit_rate"] for r in theirs_runs),
                           "ours_completed": min(r["completed"] for r in ours_runs),
                           "vllm_completed": min(r["completed"] for r in theirs_runs),
                           "ours_prompt_tokens_sent": med(ours_runs, "prompt_tokens_sent"),
                           "ours_prompt_tokens_exact": all(r["prompt_tokens_exact"] for r in ours_runs),
                           "ours_errors": sorted({e for r in ours_runs for e in r["errors"]})}
    row["ours_prompt_tokens"] = float(statistics.median(
        r["total_input_tokens"] / max(1, r["completed"]) for r in ours_runs))
    row["vllm_prompt_tokens"] = med(theirs_runs, "server_prompt_tokens")
    for key in COMPARED:
        row[f"ours_{key}"], row[f"vllm_{key}"] = med(ours_runs, key), med(theirs_runs, key)
        row[f"ratio_{key}"] = row[f"ours_{key}"] / row[f"vllm_{key}"] if row[f"vllm_{key}"] else None
        # per round: ours / vllm of that round's pair, and each client's spread (max / min - 1)
        row[f"round_ratios_{key}"] = [o[key] / t[key] if t[key] else None
                                      for o, t in zip(ours_runs, theirs_runs, strict=True)]
        row[f"ours_spread_{key}"] = _spread([r[key] for r in ours_runs])
        row[f"vllm_spread_{key}"] = _spread([r[key] for r in theirs_runs])
    row["ours_median_itl_per_token_ms"] = med(ours_runs, "median_itl_per_token_ms")
    return row


#: Figures compared per level (``vllm bench serve`` result keys; our ``median_itl_ms`` is our
#: per-chunk ITL, which is what vLLM's is; ``ours_median_itl_per_token_ms`` is reported beside it).
COMPARED = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms", "median_itl_ms")


def _spread(values: list[float]) -> float | None:
    """max / min - 1 of one client's runs (0.0 for a single run; None if a value is 0)."""
    return max(values) / min(values) - 1 if min(values) > 0 else None


def _ratios(values: list[float | None]) -> str:
    return " ".join("-" if v is None else f"{v:.2f}" for v in values)


def _table(rows: list[dict[str, Any]]) -> str:
    lines = ["| streams | prompt tokens ours / vllm | output tok/s ours / vllm (ratio) | "
             "mean TTFT ms ours / vllm (ratio) | mean TPOT ms ours / vllm (ratio) | "
             "median ITL ms per chunk ours / vllm (ratio); ours per token |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['streams']} | {r['ours_prompt_tokens']:.1f} / {r['vllm_prompt_tokens']:.1f} | "
            f"{r['ours_output_throughput']:.0f} / {r['vllm_output_throughput']:.0f} "
            f"({r['ratio_output_throughput']:.2f}) | {r['ours_mean_ttft_ms']:.1f} / {r['vllm_mean_ttft_ms']:.1f} "
            f"({r['ratio_mean_ttft_ms']:.2f}) | {r['ours_mean_tpot_ms']:.2f} / {r['vllm_mean_tpot_ms']:.2f} "
            f"({r['ratio_mean_tpot_ms']:.2f}) | {r['ours_median_itl_ms']:.2f} / {r['vllm_median_itl_ms']:.2f} "
            f"({r['ratio_median_itl_ms']:.2f}); {r['ours_median_itl_per_token_ms']:.2f} |")
    lines.append("")
    for r in rows:
        hits = (r["ours_prefix_cache_hit_rate"], r["vllm_prefix_cache_hit_rate"])
        lines.append(f"{r['streams']} streams: {r['requests']} requests per run, {r['rounds']} runs each; ours asked "
                     f"for {r['ours_prompt_ask']} prompt tokens; prefix cache hits ours / vllm "
                     f"{hits[0]:.0%} / {hits[1]:.0%}" + (
                         " (the server's prefix cache served part of the prompts: TTFT compares cached with "
                         "uncached prefill; start it with --no-enable-prefix-caching, as --start does)"
                         if max(hits) > 0.01 else ""))
    lines += ["", "ours / vllm per round (ABBA pairs), and each client's spread between rounds (max / min - 1):",
              "| streams | figure | ratio per round | spread ours | spread vllm |", "|---|---|---|---|---|"]
    for r in rows:
        for key in COMPARED:
            ours, theirs = r[f"ours_spread_{key}"], r[f"vllm_spread_{key}"]
            lines.append(f"| {r['streams']} | {key} | {_ratios(r[f'round_ratios_{key}'])} | "
                         f"{'-' if ours is None else f'{ours:.0%}'} | {'-' if theirs is None else f'{theirs:.0%}'} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="a running real vLLM server, e.g. http://127.0.0.1:8011")
    where.add_argument("--start", type=int, metavar="PORT", help="start serve.sh PORT and stop it afterwards")
    parser.add_argument("--streams", default="1,4,16", help="concurrency levels, comma-separated")
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each client per level (ABBA order; medians)")
    parser.add_argument("--requests", type=int, default=None,
                        help="requests per run (default: 8 per stream, at least 32)")
    parser.add_argument("--no-match-prompt", action="store_true",
                        help="ours asks for --prompt-tokens (template included) instead of vllm's count")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    if not (REAL_VLLM_DIR / "venv" / "bin" / "vllm").exists():
        print(f"the real vLLM is not set up at {REAL_VLLM_DIR}: run ../shared/real-vllm/setup.sh", file=sys.stderr)
        return 2
    try:
        levels = [int(s) for s in args.streams.split(",")]
    except ValueError:
        print(f"--streams must be integers separated by commas, got {args.streams!r}", file=sys.stderr)
        return 2
    pid = None
    url = args.url
    if args.start is not None:
        # no prefix cache: vllm bench serve's random prompts over the tiny model's 4,096-token vocabulary
        # share prefixes (42% of their prompt tokens were cache hits at 16 x 160; ours 0%)
        started = subprocess.run([str(SERVE), str(args.start), "--no-enable-prefix-caching"],
                                 capture_output=True, text=True, timeout=900)
        if started.returncode != 0:
            print(f"the real vLLM did not start: {started.stderr[-500:]}", file=sys.stderr)
            return 1
        pid, url = int(started.stdout.strip()), f"http://127.0.0.1:{args.start}"
    try:
        asyncio.run(run_ours(url, 1, 1, args.prompt_tokens, 4))      # warm the server up, untimed
        rows = [compare(url, s, args.prompt_tokens, args.output_tokens, max(1, args.rounds),
                        match_prompt=not args.no_match_prompt, requests=args.requests) for s in levels]
    except (RuntimeError, httpx.HTTPError) as exc:
        print(str(exc), file=sys.stderr)
        return 1
    finally:
        if pid is not None:
            os.kill(pid, 15)
    print(json.dumps(rows, indent=2) if args.json else _table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
