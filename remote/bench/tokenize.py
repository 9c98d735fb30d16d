"""Exact prompt lengths from the server's own tokenizer (vLLM's ``POST /tokenize``).

vLLM's OpenAI-compatible server (0.5+, checked against 0.32) answers ``POST /tokenize``
with ``{"model", "messages"}`` (the chat template applied, as ``/v1/chat/completions``
does) or ``{"model", "prompt"}`` with ``{"count", "max_model_len", "tokens", ...}``.
:func:`fit_words` sizes a prompt made of words to an exact token count with a handful of
such calls; when the server has no ``/tokenize`` (404/405, or a non-vLLM server) the
callers fall back to the 4-characters-per-token estimate and say so
(``prompt_tokens_exact: false``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

#: ``/tokenize`` calls allowed to size one prompt.
MAX_FIT_CALLS = 16


async def count_chat_tokens(client: httpx.AsyncClient, model: str, content: str) -> int | None:
    """Tokens of a one-user-message chat prompt (chat template included), by the server's ``/tokenize``.

    Returns:
        The server's ``count``, or ``None`` when the server has no usable ``/tokenize``
        (error status, transport failure, or an answer without an integer ``count``).
    """
    return await _count(client, {"model": model, "messages": [{"role": "user", "content": content}]})


async def count_text_tokens(client: httpx.AsyncClient, model: str, text: str) -> int | None:
    """Tokens of ``text`` alone (``{"prompt", "add_special_tokens": false}``), as ``vllm bench
    serve`` counts a generated text that came without usage; ``None`` without a usable ``/tokenize``."""
    return await _count(client, {"model": model, "prompt": text, "add_special_tokens": False})


async def _count(client: httpx.AsyncClient, payload: dict[str, Any]) -> int | None:
    """POST ``payload`` to ``/tokenize``: its integer ``count``, or ``None`` when the server has none."""
    try:
        response = await client.post("/tokenize", json=payload)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        count: Any = response.json().get("count")
    except (ValueError, AttributeError):
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


async def fit_words(client: httpx.AsyncClient, model: str, target_tokens: int,
                    build: Callable[[int], str], max_words: int) -> tuple[str, int] | None:
    """The prompt ``build(n)`` (``n`` filler words, 0..``max_words``) with the most words whose
    chat token count is at most ``target_tokens`` (``build(0)`` if even that is over).

    Counts grow with ``n`` for word filler, nearly linearly: the search keeps a bracket
    ``lo`` (fits) / ``hi`` (over) and steps by linear interpolation (a bisection after a
    step that did not halve the bracket), usually 3-6 ``/tokenize`` calls, at most
    :data:`MAX_FIT_CALLS`.

    Returns:
        ``(prompt, tokens)`` with the server's count, or ``None`` when ``/tokenize`` is unusable.
    """
    calls = 0

    async def count(n: int) -> int | None:
        nonlocal calls
        calls += 1
        return await count_chat_tokens(client, model, build(n))

    lo, lo_tokens = 0, await count(0)
    if lo_tokens is None:
        return None
    hi: int | None = None
    hi_tokens = 0
    bisect = False
    while lo_tokens < target_tokens and calls < MAX_FIT_CALLS and (hi is None or hi - lo > 1):
        if hi is None:
            n = min(max_words, lo + max(1, target_tokens - lo_tokens))   # about a token a word
            if n <= lo:
                break
        elif bisect:
            n = (lo + hi) // 2
        else:
            n = lo + round((target_tokens - lo_tokens) * (hi - lo) / max(1, hi_tokens - lo_tokens))
            n = max(lo + 1, min(hi - 1, n))
        width = None if hi is None else hi - lo
        tokens = await count(n)
        if tokens is None:
            return None
        if tokens <= target_tokens:
            lo, lo_tokens = n, tokens
        else:
            hi, hi_tokens = n, tokens
        bisect = width is not None and hi is not None and (hi - lo) * 2 > width and not bisect
    return build(lo), lo_tokens
