"""Benchmark results as Rich tables, shown by the ``bench`` verb and the benchmark screen.

One function per kind; :func:`result_view` picks it. Throughput: one row per concurrency
level with ``vllm bench serve``'s figures and $/Mtok (and the price used under the table);
smoke: latency, served model, answer and the tool-call check; long context: one row per
depth, where a prompt the server refused shows the server's own message (e.g. vLLM's 400).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from console.flows.bench import Pricing
from console.render.plain import plain, row


def _add(table: Table, *cells: Any) -> None:
    """One row, each outside value literal and printable (:func:`console.render.plain.row`)."""
    table.add_row(*row(*cells))


def json_args(arguments: dict[str, Any] | None) -> str:
    """``{"a": 1, "b": 2}`` -> ``a=1, b=2``."""
    return ", ".join(f"{k}={v}" for k, v in (arguments or {}).items())


def _ms(stats: Any) -> str:
    return " / ".join(_one_ms(v) for v in (stats.mean_ms, stats.median_ms, stats.p99_ms))


def _one_ms(value_ms: float) -> str:
    """One decimal below 100 ms, none above (run-to-run noise is far larger): keeps the row narrow."""
    return f"{value_ms:,.1f}" if value_ms < 100 else f"{value_ms:,.0f}"


def smoke_view(head: str, result: Any) -> RenderableType:
    """The smoke check: answer and latency, then the tool-calling check."""
    r = result
    table = Table(title=plain(f"Smoke: {head}", style="table.title"), title_justify="left", show_header=False, expand=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    _add(table, "served model", r.model)
    if r.ok:
        _add(table, "latency", f"{r.latency_s:.2f} s ({r.prompt_tokens} prompt + {r.completion_tokens} "
                                 "output tokens)")
        _add(table, "answer", r.answer.strip())
    else:
        _add(table, "answer", Text(f"FAILED: {r.error}", style="red"))
    t = r.tool
    if t.called:
        _add(table, "tool call", f"{t.name}({json_args(t.arguments)}) {'right' if t.arguments_ok else 'WRONG'}")
        _add(table, "final answer", f"{t.final_answer.strip()!r} "
                                      f"{'right' if t.final_ok else f'WRONG (expected {t.expected})'}")
    if t.error and not t.not_enabled:
        _add(table, "tool check", t.error)
    style = "yellow" if t.not_enabled else "green" if t.passed else "red"
    _add(table, "tool calling", Text(t.verdict, style=style))
    return table


def throughput_view(head: str, results: Sequence[Any], pricing: Pricing) -> RenderableType:
    """One row per concurrency level (ITL per token, and the median per chunk as `vllm bench serve`
    reports ITL); the price used (or why there is none) under the table."""
    first = results[0]
    table = Table(title=plain(f"Throughput: {head}; prompt ~{first.prompt_tokens_target} tokens, "
                              f"output {first.output_tokens_target} tokens asked", style="table.title"),
                  title_justify="left")
    for column in ("STREAMS", "OK", "FAILED", "SECONDS", "PROMPT\nTOK", "OUT TOK\n/REQ", "REQ/S", "OUT\nTOK/S",
                   "TOTAL\nTOK/S",
                   "TTFT ms\nmean / med / p99", "TPOT ms\nmean / med / p99", "ITL ms/token\nmean / med / p99",
                   "ITL/CHUNK\nmed ms", "$/Mtok"):
        table.add_column(column, justify="right", no_wrap=True)
    for r in results:
        m = r.metrics
        cost = pricing.usd_per_mtok(m.output_throughput)
        failed = Text(str(m.failed), style="red" if m.failed else "")
        out = Text(f"{r.mean_output_tokens:,.1f}" + (" SHORT" if r.output_short else ""),
                   style="bold yellow" if r.output_short else "")
        _add(table, str(r.concurrency), str(m.completed), failed, f"{m.duration_s:.1f}",
                      f"{r.mean_prompt_tokens:,.0f}", out, f"{m.request_throughput:.2f}",
                      f"{m.output_throughput:,.0f}", f"{m.total_token_throughput:,.0f}",
                      _ms(m.ttft), _ms(m.tpot), _ms(m.itl), f"{m.itl_chunk.median_ms:.1f}", "-" if cost is None else f"{cost:.3f}")
    lines: list[RenderableType] = [table]
    if pricing.price_per_hour_usd is None:
        lines.append(plain(f"$/Mtok: {pricing.describe()}"))
    else:
        lines.append(plain(f"$/Mtok at {pricing.describe()}"))
    if not all(r.prompt_tokens_exact for r in results):
        lines.append(plain("prompt lengths sized by estimate (4 characters per token): "
                           "the server has no /tokenize", style="yellow"))
    for r in results:
        if r.metrics.output_tokens_estimated:
            lines.append(plain(f"{r.concurrency} streams: {r.metrics.output_tokens_estimated} requests without "
                               "usage: output tokens counted as streamed chunks (estimate)", style="yellow"))
        for caveat in r.caveats():
            lines.append(plain(f"{r.concurrency} streams: {caveat}", style="yellow"))
        for message, count in r.errors:
            lines.append(plain(f"{r.concurrency} streams: {count} failed: {message}", style="red"))
        if r.stopped:
            lines.append(plain(f"{r.concurrency} streams: {r.stopped}", style="red"))
    return Group(*lines)


def longctx_view(head: str, result: Any) -> RenderableType:
    """One row per depth: found or not, seconds, prefill tokens/s, answer or the server's refusal."""
    r = result
    limit = f", max-model-len {r.max_model_len:,}" if r.max_model_len else ""
    table = Table(title=plain(f"Long-context recall: {head}; ~{r.context_tokens:,} tokens{limit}", style="table.title"),
                  title_justify="left")
    for column in ("DEPTH", "PROMPT TOK", "FOUND", "SECONDS", "PROMPT TOK/S", "ANSWER / SERVER MESSAGE"):
        table.add_column(column, justify="left" if column.startswith("ANSWER") else "right", overflow="fold")
    for p in r.probes:
        if p.error is not None:
            status = f"HTTP {p.status_code}: " if p.status_code else ""
            _add(table, f"{p.depth:.2f}", f"~{p.context_tokens_target:,}", Text("refused", style="yellow"),
                          "-", "-", Text(f"{status}{p.error}", style="yellow"))
        else:
            found = Text("yes", style="green") if p.found else Text("NO", style="bold red")
            _add(table, f"{p.depth:.2f}", f"{p.prompt_tokens:,}", found, f"{p.seconds:.2f}",
                          f"{p.prompt_tokens_per_s:,.0f}", p.answer)
    return table


def result_view(kind: str, head: str, results: Sequence[Any], pricing: Pricing) -> RenderableType:
    """The table(s) for ``results`` of ``kind`` (``head``: model and where it ran)."""
    if kind == "smoke":
        return smoke_view(head, results[0])
    if kind == "throughput":
        return throughput_view(head, results, pricing)
    return longctx_view(head, results[0])
