"""Throughput benchmark: N concurrent streaming chat requests, like ``vllm bench serve``.

``concurrency`` workers each send one request at a time (vLLM's ``--max-concurrency``
with ``--request-rate inf``) until ``requests`` have been sent or ``duration_s`` has
passed; requests in flight at the deadline are allowed to finish and are counted.
Each request asks for exactly ``output_tokens`` tokens (``max_tokens`` plus vLLM's
``ignore_eos``) after a synthetic prompt of ``prompt_tokens`` tokens: the filler is sized
with the server's ``/tokenize`` (chat template included, see ``remote.bench.tokenize``)
and every prompt is counted there before it is sent, untimed; without ``/tokenize`` the
4-characters-per-token estimate is used and the result says ``prompt_tokens_exact: false``.

A level stops early after :data:`STOP_AFTER_FAILURES` consecutive failures that mean the
server is gone (transport errors or HTTP 5xx): the remaining requests are not sent and
``stopped`` says why. A stream without a ``usage`` chunk has its generated text counted by
``/tokenize`` afterwards (vLLM 0.32 ``calculate_metrics`` counts it with the tokenizer);
without ``/tokenize`` its output tokens stay the chunk count, flagged estimated.

What may make the figures mislead is measured and said (:meth:`ThroughputResult.caveats`): the
prefix-cache hit rate of the timed run, from vLLM's ``/metrics`` read just before and just after it
(``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries``, counters in tokens, vLLM V1 0.8+): hits
mean prefills skipped, so TTFT and throughput look better than fresh prompts get; output shorter than
asked (a server that ignores ``ignore_eos`` stops at EOS: per-request tok/s then compares unlike
work); output tokens counted by ``/tokenize`` because the stream carried no ``usage``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from remote.bench.client import client_scope, make_stream_client, resolve_model, stream_chat
from remote.bench.metrics import RequestRecord, ServingMetrics, calculate_metrics
from remote.bench.progress import ProgressCallback, ProgressTracker
from remote.bench.prompts import PromptFactory, filler_words
from remote.bench.tokenize import count_chat_tokens, count_text_tokens, fit_words
from remote.errors import RemoteError
from remote.vllm_metrics import MetricsSample, fetch_metrics

#: Default read timeout per request in seconds (a long prefill at high concurrency is slow).
REQUEST_TIMEOUT_S = 600.0

#: Consecutive failures of the "server gone" kind (transport error, HTTP 5xx) that stop a level.
STOP_AFTER_FAILURES = 3

#: Prefix-cache hit rate of a timed run above which its figures are flagged (prefills were skipped).
PREFIX_HIT_WARN = 0.03

#: Seconds one ``/metrics`` read around the timed run may take (the whole call).
METRICS_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ThroughputResult:
    """Figures of one throughput run at one concurrency level.

    Attributes:
        base_url: server benchmarked.
        model: model name sent.
        concurrency: streams kept in flight.
        prompt_tokens_target: prompt length asked for (tokens, chat template included).
        output_tokens_target: output length asked for (tokens).
        requests_sent: requests sent (completed + failed).
        metrics: the ``vllm bench serve`` figures.
        errors: distinct failure messages (at most 5), each with its count.
        kind: always ``"throughput"``.
        prompt_tokens_exact: prompts were sized and counted by the server's ``/tokenize``;
            false when it has none and the 4-characters-per-token estimate was used.
        prompt_tokens_sent: mean prompt tokens of the requests sent, by ``/tokenize``
            (``None`` when not exact).
        stopped: why the level stopped before sending every request (``None`` if it did not).
        prefix_cache_hit_rate: prefix-cache hits / queries over the timed run (0..1), from
            ``/metrics`` before and after it; ``None`` when ``/metrics`` was not read or nothing queried.
        prefix_cache_queried_tokens: prompt tokens the prefix cache was asked about in the run.
        output_short_requests: completed requests that returned fewer tokens than asked.
        output_tokens_tokenized: completed requests whose output tokens were counted by ``/tokenize``
            (the stream carried no ``usage``), not reported by the server.
    """

    base_url: str
    model: str
    concurrency: int
    prompt_tokens_target: int
    output_tokens_target: int
    requests_sent: int
    metrics: ServingMetrics
    errors: tuple[tuple[str, int], ...] = ()
    kind: str = field(default="throughput")
    prompt_tokens_exact: bool = False
    prompt_tokens_sent: float | None = None
    stopped: str | None = None
    prefix_cache_hit_rate: float | None = None
    prefix_cache_queried_tokens: float | None = None
    output_short_requests: int = 0
    output_tokens_tokenized: int = 0

    @property
    def mean_output_tokens(self) -> float:
        """Mean output tokens of completed requests (0.0 if none completed)."""
        m = self.metrics
        return m.total_output_tokens / m.completed if m.completed else 0.0

    @property
    def output_short(self) -> bool:
        """Some completed request returned fewer tokens than asked."""
        return self.output_short_requests > 0

    def caveats(self) -> list[str]:
        """Sentences on what may make this level's figures mislead (empty when nothing does)."""
        out = []
        rate = self.prefix_cache_hit_rate
        if rate is not None and rate > PREFIX_HIT_WARN:
            out.append(f"prefix-cache hit rate {100 * rate:.1f}% during the run (/metrics): prefills were "
                       "skipped, so TTFT and throughput look better than for fresh prompts")
        if self.output_short:
            out.append(f"output short: {self.mean_output_tokens:,.1f} tokens per request on average of "
                       f"{self.output_tokens_target:,} asked ({self.output_short_requests} of "
                       f"{self.metrics.completed} requests short; the server may ignore ignore_eos)")
        if self.output_tokens_tokenized:
            out.append(f"{self.output_tokens_tokenized} requests without usage: output tokens counted by "
                       "/tokenize, not reported by the server")
        return out

    @property
    def mean_prompt_tokens(self) -> float:
        """Mean server-counted prompt tokens of completed requests (0.0 if none completed)."""
        m = self.metrics
        return m.total_input_tokens / m.completed if m.completed else 0.0


def _validate(concurrency: int, prompt_tokens: int, output_tokens: int,
              requests: int | None, duration_s: float | None) -> None:
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if prompt_tokens < 1 or output_tokens < 1:
        raise ValueError("prompt and output lengths must be at least 1 token")
    if (requests is None) == (duration_s is None):
        raise ValueError("give either a request count or a duration, not both or neither")
    if requests is not None and requests < 1:
        raise ValueError(f"request count must be at least 1, got {requests}")
    if duration_s is not None and duration_s <= 0:
        raise ValueError(f"duration must be positive, got {duration_s} s")


def _error_summary(records: Sequence[RequestRecord]) -> tuple[tuple[str, int], ...]:
    counts: dict[str, int] = {}
    for record in records:
        if not record.success:
            counts[record.error] = counts.get(record.error, 0) + 1
    return tuple(sorted(counts.items(), key=lambda kv: -kv[1])[:5])


async def _warm_up(client: httpx.AsyncClient) -> None:
    """One ``GET /v1/models`` so the worker's connection exists before timing starts.

    Like ``vllm bench serve``'s initial test request, this keeps TCP (and, through an SSH
    forward, channel) set-up out of the first requests' TTFT; a failure is left for the
    timed requests to report.
    """
    try:
        await client.get("/v1/models")
    except httpx.HTTPError:
        pass


@dataclass
class _Level:
    """What one level's timed run gave (records, seconds, and what to say about the counts)."""

    records: list[RequestRecord]
    elapsed_s: float
    exact: bool
    sent_counts: list[int]
    stopped: str | None
    tokenized: int = 0
    metrics_before: MetricsSample | None = None
    metrics_after: MetricsSample | None = None


async def read_metrics(client: httpx.AsyncClient) -> MetricsSample | None:
    """``/metrics`` of the server ``client`` points at, or ``None`` when it does not answer in
    :data:`METRICS_TIMEOUT_S` (a figure then missing, never a failed benchmark)."""
    try:
        return await asyncio.wait_for(fetch_metrics(client, str(client.base_url)), METRICS_TIMEOUT_S)
    except (RemoteError, TimeoutError):
        return None


def prefix_cache_delta(before: MetricsSample | None, after: MetricsSample | None) -> tuple[float | None, float | None]:
    """``(hit rate 0..1, queried tokens)`` between two ``/metrics`` reads; ``(None, None)`` when
    either is missing or lacks the counters, or the counters went down (a restart); the rate is
    ``None`` when nothing was queried."""
    if before is None or after is None:
        return None, None
    keys = ("prefix_cache_queries", "prefix_cache_hits")
    if any(k not in before.totals or k not in after.totals for k in keys):
        return None, None
    queries = after.totals["prefix_cache_queries"] - before.totals["prefix_cache_queries"]
    hits = after.totals["prefix_cache_hits"] - before.totals["prefix_cache_hits"]
    if queries < 0 or hits < 0:
        return None, None
    return (hits / queries if queries > 0 else None), queries


async def _run_level(client: httpx.AsyncClient, model: str, *, concurrency: int, prompt_tokens: int,
                     output_tokens: int, requests: int | None, duration_s: float | None,
                     on_progress: ProgressCallback | None) -> _Level:
    """Run one level. Each worker (stream) has its own single-connection client (same base URL,
    timeout and headers as ``client``; :func:`~remote.bench.client.make_stream_client`, aiohttp's
    transport): httpx's pool checks every pooled connection on each request, which at 32-64
    connections costs the event loop more than the streams themselves and inflated TTFT
    several-fold in the sandbox comparison."""
    workers = concurrency if requests is None else min(concurrency, requests)
    clients = [make_stream_client(str(client.base_url), client.timeout, client.headers) for _ in range(workers)]
    try:
        await asyncio.gather(*(_warm_up(c) for c in clients))
        before = await read_metrics(client)
        timed = await _timed(clients, model, concurrency=concurrency, prompt_tokens=prompt_tokens,
                             output_tokens=output_tokens, requests=requests, duration_s=duration_s,
                             on_progress=on_progress)
        timed.metrics_before, timed.metrics_after = before, await read_metrics(client)
        return timed
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


def server_gone(record: RequestRecord) -> bool:
    """The failure means the engine or server is down (transport error or HTTP 5xx), not a bad request."""
    return not record.success and (record.status_code == 0 or (record.status_code or 0) >= 500)


async def size_prompts(client: httpx.AsyncClient, model: str, prompt_tokens: int,
                       seed: int) -> tuple[PromptFactory, bool]:
    """A :class:`PromptFactory` whose prompts are ``prompt_tokens`` long on the server's tokenizer,
    and whether that is exact (``False``: no ``/tokenize``, the estimate is used)."""
    words = filler_words(2 * prompt_tokens + 64, random.Random(seed))
    head = PromptFactory.head()
    fit = await fit_words(client, model, prompt_tokens, lambda n: head + " ".join(words[:n]), len(words))
    if fit is None:
        return PromptFactory(prompt_tokens, seed=seed), False
    body = fit[0].removeprefix(head)
    return PromptFactory(prompt_tokens, seed=seed, body=body), True


async def _counted(client: httpx.AsyncClient, model: str, text: str, prompt_tokens: int,
                   exact: bool) -> tuple[str, int | None]:
    """``(prompt, tokens by /tokenize)``; a prompt that came out off the target (its unique line
    and rotation tokenize differently from the sized one) gets words appended (short) or dropped
    from its end (long), up to :data:`_RECOUNTS` times (a dropped word may be several tokens, so one
    drop can land well under); the nearest count not over the target is kept (else the first)."""
    if not exact:
        return text, None
    tokens = await count_chat_tokens(client, model, text)
    if tokens is None:
        return text, tokens
    best = (text, tokens)
    for _ in range(_RECOUNTS):
        if tokens == prompt_tokens:
            break
        if tokens < prompt_tokens:
            text = text + " " + " ".join(filler_words(prompt_tokens - tokens, random.Random(tokens)))
        else:
            text = text.rsplit(" ", tokens - prompt_tokens)[0]
        counted = await count_chat_tokens(client, model, text)
        if counted is None:
            break
        tokens = counted
        if tokens <= prompt_tokens and (best[1] > prompt_tokens or tokens > best[1]):
            best = (text, tokens)
    return best


#: Corrections of a prompt whose count is off the target (each one more ``/tokenize``).
_RECOUNTS = 3


async def _timed(clients: list[httpx.AsyncClient], model: str, *, concurrency: int, prompt_tokens: int,
                 output_tokens: int, requests: int | None, duration_s: float | None,
                 on_progress: ProgressCallback | None) -> _Level:
    prompts, exact = await size_prompts(clients[0], model, prompt_tokens, seed=concurrency)
    planned: list[tuple[str, int | None]] = []
    if requests is not None:   # every prompt counted up front, outside the timed window
        planned = list(await asyncio.gather(*(
            _counted(clients[i % len(clients)], model, prompts.make(), prompt_tokens, exact)
            for i in range(requests))))
    tracker = ProgressTracker("throughput", on_progress, requests_total=requests, concurrency=concurrency)
    records: list[RequestRecord] = []
    sent_counts: list[int] = []
    stopped: str | None = None
    failures_in_row = 0
    next_index = 0
    start = time.perf_counter()
    deadline = None if duration_s is None else start + duration_s

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal next_index, stopped, failures_in_row
        while stopped is None:
            if requests is not None and next_index >= requests:
                return
            if deadline is not None and time.perf_counter() >= deadline:
                return
            if planned:
                text, known = planned[next_index]
            else:
                text, known = await _counted(client, model, prompts.make(), prompt_tokens, exact)
            next_index += 1
            payload = {
                "model": model,
                "messages": [{"role": "user", "content": text}],
                "max_tokens": output_tokens,
                "ignore_eos": True,
                "temperature": 0.0,
            }
            record = await stream_chat(client, payload, on_token=tracker.token, prompt_tokens=known)
            records.append(record)
            if known is not None:
                sent_counts.append(known)
            tracker.request_done(record.token_chunks, record.output_tokens if record.success else 0)
            failures_in_row = failures_in_row + 1 if server_gone(record) else 0
            if failures_in_row >= STOP_AFTER_FAILURES and stopped is None:
                stopped = (f"stopped after {failures_in_row} requests in a row failed with the server gone "
                           f"({record.error}); the engine log says why")

    await asyncio.gather(*(worker(c) for c in clients))
    elapsed = time.perf_counter() - start
    tokenized = 0
    if exact:   # no usage chunk: count the generated text with the tokenizer, as vllm bench serve does
        for record in records:
            if record.success and record.output_tokens_estimated:
                counted = await count_text_tokens(clients[0], model, record.text)
                if counted is not None:
                    record.output_tokens, record.output_tokens_estimated = counted, False
                    tokenized += 1
    return _Level(records, elapsed, exact, sent_counts, stopped, tokenized)


async def run_throughput(
    base_url: str,
    *,
    concurrency: int,
    prompt_tokens: int,
    output_tokens: int,
    requests: int | None = None,
    duration_s: float | None = None,
    model: str | None = None,
    on_progress: ProgressCallback | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
    client: httpx.AsyncClient | None = None,
) -> ThroughputResult:
    """Run one throughput benchmark at one concurrency level.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000`` (a trailing ``/v1`` is accepted).
        concurrency: streams kept in flight.
        prompt_tokens: wanted prompt length in tokens (sized by estimate, see ``prompts``).
        output_tokens: output tokens per request.
        requests: requests to send; exclusive with ``duration_s``.
        duration_s: keep sending for this many seconds; exclusive with ``requests``.
        model: model name; default the first of ``/v1/models``.
        on_progress: called with a :class:`BenchProgress` as tokens and requests arrive.
        timeout_s: read timeout per request in seconds.
        client: an existing ``httpx.AsyncClient``: used for ``/v1/models``; the streams use
            its base URL, timeout and headers with one connection each.

    Returns:
        The figures; failed requests are counted in ``metrics.failed``, not raised.

    Raises:
        ValueError: bad arguments.
        VllmHttpError: the server could not be reached (``/v1/models`` failed).
    """
    _validate(concurrency, prompt_tokens, output_tokens, requests, duration_s)
    async with client_scope(base_url, client, timeout_s, connections=concurrency) as c:
        served = await resolve_model(c, model)
        level = await _run_level(
            c, served.name, concurrency=concurrency, prompt_tokens=prompt_tokens,
            output_tokens=output_tokens, requests=requests, duration_s=duration_s,
            on_progress=on_progress)
        records, exact, sent_counts = level.records, level.exact, level.sent_counts
        hit_rate, queried = prefix_cache_delta(level.metrics_before, level.metrics_after)
        return ThroughputResult(
            base_url=str(c.base_url).rstrip("/"),
            model=served.name,
            concurrency=concurrency,
            prompt_tokens_target=prompt_tokens,
            output_tokens_target=output_tokens,
            requests_sent=len(records),
            metrics=calculate_metrics(records, level.elapsed_s),
            errors=_error_summary(records),
            prompt_tokens_exact=exact,
            prompt_tokens_sent=sum(sent_counts) / len(sent_counts) if exact and sent_counts else None,
            stopped=level.stopped,
            prefix_cache_hit_rate=hit_rate, prefix_cache_queried_tokens=queried,
            output_short_requests=sum(1 for r in records if r.success and r.output_tokens < output_tokens),
            output_tokens_tokenized=level.tokenized,
        )


def default_requests(concurrency: int) -> int:
    """Requests per level when neither a count nor a duration is given: 4 per stream, at least 8."""
    return max(8, 4 * concurrency)


async def run_sweep(
    base_url: str,
    *,
    concurrencies: Sequence[int],
    prompt_tokens: int,
    output_tokens: int,
    requests: int | None = None,
    duration_s: float | None = None,
    model: str | None = None,
    on_progress: ProgressCallback | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
    client: httpx.AsyncClient | None = None,
) -> list[ThroughputResult]:
    """Run :func:`run_throughput` at each concurrency level, one after the other.

    ``requests`` is per level; with neither ``requests`` nor ``duration_s`` each level
    sends :func:`default_requests` requests. Arguments and errors as :func:`run_throughput`.
    """
    if not concurrencies:
        raise ValueError("give at least one concurrency level")
    def count(level: int) -> int | None:
        return requests if requests is not None or duration_s is not None else default_requests(level)

    for level in concurrencies:
        _validate(level, prompt_tokens, output_tokens, count(level), duration_s)
    results = []
    async with client_scope(base_url, client, timeout_s, connections=max(concurrencies)) as c:
        served = await resolve_model(c, model)
        for level in concurrencies:
            results.append(await run_throughput(
                base_url, concurrency=level, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                requests=count(level), duration_s=duration_s, model=served.name, on_progress=on_progress,
                timeout_s=timeout_s, client=c))
    return results
