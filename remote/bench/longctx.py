"""Long-context recall: a passphrase buried at given depths in filler, one probe per depth.

Each probe is one streamed chat request, sent one at a time:

* a first line unique to the probe (so vLLM's prefix cache cannot reuse another probe),
* filler text sized so the whole prompt (chat template included) is ``context_tokens``
  tokens by the server's ``/tokenize`` (within a word; ``prompts.CHARS_PER_TOKEN`` as the
  fallback when it has none, and then ``prompt_tokens_exact`` is false), with the sentence ``The passphrase is <phrase>.`` inserted at ``depth``
  (0.0 = start, 1.0 = end) of the filler, on a word boundary,
* the question asking for the passphrase.

A probe is *found* when the answer contains the phrase (case-insensitive). ``seconds``
is the whole request; ``prompt_tokens_per_s`` is the server's prompt token count over
the time to the first token (the prefill rate). A prompt the server refuses (vLLM's
HTTP 400 ``This model's maximum context length is N tokens. However, you requested M
tokens ...``; 0.32: ``... your prompt contains at least M input tokens``) becomes the
probe's ``error`` with ``error_kind`` ``"context_length"`` and advice, not an exception.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from remote.bench.client import client_scope, resolve_model, stream_chat
from remote.bench.progress import ProgressCallback, ProgressTracker
from remote.bench.prompts import CHARS_PER_TOKEN, filler, filler_words, unique_line
from remote.bench.tokenize import fit_words

QUESTION = ("What is the passphrase stated in the document above? "
            "Reply with the passphrase only.")
_PHRASE_WORDS = ("amber", "cobalt", "falcon", "juniper", "lantern", "marble", "nimbus", "orchid",
                 "quartz", "saffron", "tundra", "velvet", "walnut", "zephyr", "copper", "harbor")

#: Extra tokens (estimate) put over ``max_model_len`` for the over-limit probe.
OVER_LIMIT_MARGIN_TOKENS = 1024


@dataclass(frozen=True)
class LongCtxProbe:
    """One depth of a long-context run.

    Attributes:
        depth: where the passphrase sits in the filler, 0.0-1.0.
        context_tokens_target: prompt length asked for (tokens, chat template included).
        passphrase: the phrase buried.
        found: the answer contains the phrase.
        seconds: request wall time in seconds (0.0 on failure).
        ttft_s: seconds to the first token.
        prompt_tokens: the server's ``usage.prompt_tokens``.
        prompt_tokens_per_s: ``prompt_tokens / ttft_s`` (prefill rate), 0.0 on failure.
        answer: the model's answer text.
        error: the server's own message when it refused the prompt (e.g. vLLM's 400), or
            the transport error; ``None`` when it answered.
        status_code: HTTP status of a refused prompt, 0 for a transport error, else ``None``.
        prompt_tokens_sent: the prompt's length by the server's ``/tokenize`` (``None``
            when it has none and the estimate was used).
        error_kind: ``"context_length"`` for vLLM's maximum-context-length refusal, else ``""``.
    """

    depth: float
    context_tokens_target: int
    passphrase: str
    found: bool = False
    seconds: float = 0.0
    ttft_s: float = 0.0
    prompt_tokens: int = 0
    prompt_tokens_per_s: float = 0.0
    answer: str = ""
    error: str | None = None
    status_code: int | None = None
    prompt_tokens_sent: int | None = None
    error_kind: str = ""


@dataclass(frozen=True)
class LongCtxResult:
    """Outcome of :func:`run_longctx`.

    Attributes:
        base_url, model: the server and model used.
        context_tokens: filler length asked for (tokens).
        max_model_len: the server's ``max_model_len`` from ``/v1/models``, if it said.
        probes: one per depth, in order (then the over-limit probe, if asked for).
        kind: always ``"longctx"``.
        prompt_tokens_exact: every prompt was sized by the server's ``/tokenize``.
    """

    base_url: str
    model: str
    context_tokens: int
    max_model_len: int | None
    probes: tuple[LongCtxProbe, ...]
    kind: str = "longctx"
    prompt_tokens_exact: bool = False

    @property
    def found_all(self) -> bool:
        """Every probe that the server accepted found its passphrase."""
        answered = [p for p in self.probes if p.error is None]
        return bool(answered) and all(p.found for p in answered)


def make_passphrase(rng: random.Random) -> str:
    """e.g. ``cobalt-orchid-4821``."""
    first, second = rng.sample(_PHRASE_WORDS, 2)
    return f"{first}-{second}-{rng.randrange(1000, 10000)}"


def build_prompt(context_tokens: int, depth: float, passphrase: str, rng: random.Random) -> str:
    """The probe prompt sized by estimate: unique line, filler with the passphrase sentence at
    ``depth``, question."""
    return _assemble(unique_line("Document"), filler(int(context_tokens * CHARS_PER_TOKEN), rng),
                     depth, passphrase)


def _assemble(head: str, text: str, depth: float, passphrase: str) -> str:
    cut = int(len(text) * depth)
    cut = text.rfind(" ", 0, cut) + 1 if 0 < cut < len(text) else cut
    needle = f" The passphrase is {passphrase}. "
    body = (text[:cut].rstrip() + needle + text[cut:].lstrip()).strip()
    return f"{head}\n{body}\n\n{QUESTION}"


async def _sized_prompt(client: httpx.AsyncClient, model: str, context_tokens: int, depth: float,
                        phrase: str, rng: random.Random) -> tuple[str, int | None]:
    """``(prompt, tokens)`` sized by ``/tokenize``, or the estimate-sized prompt and ``None``."""
    head = unique_line("Document")
    words = filler_words(2 * context_tokens + 64, rng)
    fit = await fit_words(client, model, context_tokens,
                          lambda n: _assemble(head, " ".join(words[:n]), depth, phrase), len(words))
    if fit is None:
        return build_prompt(context_tokens, depth, phrase, rng), None
    return fit


async def _probe(client: httpx.AsyncClient, model: str, context_tokens: int, depth: float,
                 rng: random.Random, tracker: ProgressTracker) -> LongCtxProbe:
    phrase = make_passphrase(rng)
    prompt, sent = await _sized_prompt(client, model, context_tokens, depth, phrase, rng)
    payload = {"model": model, "temperature": 0.0, "max_tokens": 32,
               "messages": [{"role": "user", "content": prompt}]}
    record = await stream_chat(client, payload, on_token=tracker.token, prompt_tokens=sent)
    tracker.request_done(record.token_chunks, record.output_tokens if record.success else 0)
    if not record.success:
        message = record.error.removeprefix(f"HTTP {record.status_code}: ")
        return LongCtxProbe(depth, context_tokens, phrase, error=message, status_code=record.status_code,
                            prompt_tokens_sent=sent, error_kind=record.error_kind)
    return LongCtxProbe(
        depth, context_tokens, phrase,
        found=phrase.lower() in record.text.lower(),
        seconds=record.latency_s, ttft_s=record.ttft_s, prompt_tokens=record.prompt_tokens,
        prompt_tokens_per_s=record.prompt_tokens / record.ttft_s if record.ttft_s > 0 else 0.0,
        answer=record.text.strip(), prompt_tokens_sent=sent,
    )


async def run_longctx(
    base_url: str,
    *,
    context_tokens: int,
    depths: Sequence[float],
    model: str | None = None,
    on_progress: ProgressCallback | None = None,
    over_limit: bool = False,
    seed: int | None = None,
    timeout_s: float = 600.0,
    client: httpx.AsyncClient | None = None,
    api_key: str | None = None,
) -> LongCtxResult:
    """Probe recall of a passphrase at each depth of a ``context_tokens`` prompt.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000``.
        context_tokens: prompt length in tokens (chat template included; by ``/tokenize``).
        depths: positions of the passphrase, each within 0.0-1.0.
        model: model name; default the first of ``/v1/models``.
        on_progress: called with a :class:`BenchProgress` after each probe.
        over_limit: add one probe (depth 0.5) sized ``max_model_len`` plus
            :data:`OVER_LIMIT_MARGIN_TOKENS` tokens, to show the server's refusal;
            skipped when ``/v1/models`` does not state ``max_model_len``.
        seed: makes passphrases and filler reproducible; default random.
        timeout_s: read timeout per request in seconds.
        client: an existing ``httpx.AsyncClient``.
        api_key: vLLM's ``--api-key`` (sent as a Bearer token when ``client`` is not given).

    Raises:
        ValueError: no depths, a depth outside 0..1, or ``context_tokens`` < 1.
        VllmHttpError: the server could not be reached at all.
    """
    if not depths or any(not 0.0 <= d <= 1.0 for d in depths):
        raise ValueError("depths must be one or more fractions within 0.0-1.0")
    if context_tokens < 1:
        raise ValueError(f"context length must be at least 1 token, got {context_tokens}")
    rng = random.Random(seed)
    async with client_scope(base_url, client, timeout_s, api_key=api_key) as c:
        served = await resolve_model(c, model)
        plan = [(context_tokens, d) for d in depths]
        if over_limit and served.max_model_len:
            plan.append((served.max_model_len + OVER_LIMIT_MARGIN_TOKENS, 0.5))
        tracker = ProgressTracker("longctx", on_progress, requests_total=len(plan))
        probes = [await _probe(c, served.name, tokens, depth, rng, tracker) for tokens, depth in plan]
        return LongCtxResult(base_url=str(c.base_url).rstrip("/"), model=served.name,
                             context_tokens=context_tokens, max_model_len=served.max_model_len,
                             probes=tuple(probes),
                             prompt_tokens_exact=all(p.prompt_tokens_sent is not None for p in probes))
