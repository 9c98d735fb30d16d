"""Smoke test: does the server answer, how fast, under which model name, and can it call a tool.

Two checks against ``/v1/chat/completions`` (non-streaming):

1. A short question; reports the latency in seconds and the answer text.
2. Tool calling (OpenAI ``tools`` / ``tool_calls`` shapes): a multiplication the model
   is asked to do with a ``multiply(a, b)`` function. Scored on the call it emits
   (name and both arguments), then on the final number it reports after the tool's
   result is sent back in a ``role: "tool"`` message. vLLM only emits tool calls when
   started with ``--enable-auto-tool-choice --tool-call-parser ...``: when the caller knows
   the server was started without them (the container's flags), the check is not sent and
   says so (``not_enabled``); a server that answers vLLM's 400 for it (0.32: ``"auto" tool
   choice requires --enable-auto-tool-choice and --tool-call-parser to be set``) is reported
   the same way, with its message in ``error``, rather than as a failed check.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from remote.bench.client import client_scope, error_message, resolve_model, transport_error

SMOKE_QUESTION = "In one short sentence: what is the capital of France?"
TOOL_A, TOOL_B = 1234, 5678
TOOL_QUESTION = (f"What is {TOOL_A} multiplied by {TOOL_B}? Use the multiply tool, "
                 "then reply with the number only.")
MULTIPLY_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "multiply",
        "description": "Multiply two integers and return the product.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


@dataclass(frozen=True)
class ToolCheck:
    """Outcome of the tool-calling check.

    Attributes:
        called: the model answered with at least one tool call.
        name: the function name it called, if any.
        arguments: the parsed JSON arguments, or ``None`` (absent or not JSON).
        arguments_ok: name is ``multiply`` and the arguments are {1234, 5678} in any order.
        final_answer: the model's text after the tool result was sent back.
        final_ok: the expected product appears in ``final_answer`` (digit groups joined).
        expected: the product the model should report.
        error: the server's message when a step failed.
        not_enabled: what to start vLLM with when it has no tool calling (:data:`ENABLE_TOOLS`),
            else ``None``.
    """

    called: bool = False
    name: str | None = None
    arguments: dict[str, Any] | None = None
    arguments_ok: bool = False
    final_answer: str = ""
    final_ok: bool = False
    expected: int = TOOL_A * TOOL_B
    error: str | None = None
    not_enabled: str | None = None

    @property
    def passed(self) -> bool:
        """Both the call and the final number were right."""
        return self.arguments_ok and self.final_ok

    @property
    def verdict(self) -> str:
        """``"PASS"``, ``"FAIL"``, or ``"not enabled (start with ...)"`` when the server has no tool calling."""
        if self.not_enabled:
            return f"not enabled ({self.not_enabled})"
        return "PASS" if self.passed else "FAIL"


@dataclass(frozen=True)
class SmokeResult:
    """Outcome of :func:`run_smoke`.

    Attributes:
        base_url: the server.
        model: served model name used (from ``/v1/models`` unless given).
        ok: the plain question got an answer.
        latency_s: seconds for the plain question (0.0 when it failed).
        answer: the answer text.
        prompt_tokens, completion_tokens: the server's ``usage`` counts.
        error: the server's message (or transport error) when the question failed.
        tool: the tool-calling check.
        kind: always ``"smoke"``.
    """

    base_url: str
    model: str
    ok: bool
    latency_s: float = 0.0
    answer: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    tool: ToolCheck = field(default_factory=ToolCheck)
    kind: str = "smoke"


class _Failed(Exception):
    pass


async def _chat(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    try:
        response = await client.post("/v1/chat/completions", json=body)
    except httpx.HTTPError as exc:
        raise _Failed(str(transport_error(exc, str(client.base_url)))) from None
    if response.status_code != 200:
        raise _Failed(f"HTTP {response.status_code}: {error_message(response)}")
    data: dict[str, Any] = {}
    try:
        data = response.json()
        ok = isinstance(data["choices"][0]["message"], dict)
    except (ValueError, KeyError, IndexError, TypeError):
        ok = False
    if not ok:
        raise _Failed(f"not an OpenAI chat completion: {response.text[:200]}")
    return data


def numbers_in(text: str) -> list[int]:
    """Integers in ``text``, with ``7,006,652`` / ``7 006 652`` digit groups joined."""
    return [int(re.sub(r"[ ,_]", "", m)) for m in re.findall(r"\d{1,3}(?:[ ,_]\d{3})+|\d+", text)]


def _arguments_ok(arguments: dict[str, Any] | None) -> bool:
    if not arguments:
        return False
    try:
        values = sorted(int(v) for v in arguments.values())
    except (TypeError, ValueError):
        return False
    return values == sorted((TOOL_A, TOOL_B))


#: What a vLLM without tool calling must be started with (``--tool-call-parser`` takes the
#: model family's parser, e.g. ``hermes``, ``llama3_json``, ``mistral``).
ENABLE_TOOLS = "start with --enable-auto-tool-choice --tool-call-parser ..."

#: vLLM's refusal of ``tools`` it was not started for (0.32, see
#: tests/fixtures/vllm-api/tools-refused-0.32.json): "... requires --enable-auto-tool-choice and
#: --tool-call-parser to be set" / "... requires --tool-call-parser to be set".
_TOOLS_REFUSED = re.compile(r"requires (?:--enable-auto-tool-choice and )?--tool-call-parser to be set")


def tool_calling_enabled(argv: Sequence[str]) -> bool:
    """Whether a ``vllm serve`` argv enables "auto" tool calling: ``--enable-auto-tool-choice``
    and ``--tool-call-parser NAME`` (or ``--tool-call-parser=NAME``) both given."""
    words = [str(w) for w in argv]
    parser = any(w.startswith("--tool-call-parser=") and len(w) > 19 for w in words) or any(
        w == "--tool-call-parser" and i + 1 < len(words) for i, w in enumerate(words))
    return "--enable-auto-tool-choice" in words and parser


async def _tool_check(client: httpx.AsyncClient, model: str) -> ToolCheck:
    messages: list[dict[str, Any]] = [{"role": "user", "content": TOOL_QUESTION}]
    base = {"model": model, "tools": [MULTIPLY_TOOL], "tool_choice": "auto",
            "temperature": 0.0, "max_tokens": 256}
    try:
        first = (await _chat(client, {**base, "messages": messages}))["choices"][0]["message"]
    except _Failed as exc:
        if _TOOLS_REFUSED.search(str(exc)):
            return ToolCheck(error=str(exc), not_enabled=ENABLE_TOOLS)
        return ToolCheck(error=str(exc))
    calls = first.get("tool_calls") or []
    if not calls:
        return ToolCheck(final_answer=first.get("content") or "",
                         error="the model answered without calling the tool")
    function = calls[0].get("function") or {}
    name = function.get("name")
    try:
        arguments = json.loads(function.get("arguments") or "null")
    except ValueError:
        arguments = None
    arguments = arguments if isinstance(arguments, dict) else None
    ok = name == "multiply" and _arguments_ok(arguments)
    product = TOOL_A * TOOL_B
    messages += [
        {"role": "assistant", "content": first.get("content"), "tool_calls": calls[:1]},
        {"role": "tool", "tool_call_id": calls[0].get("id", "call_0"), "content": str(product)},
    ]
    try:
        final = (await _chat(client, {**base, "messages": messages}))["choices"][0]["message"]
    except _Failed as exc:
        return ToolCheck(called=True, name=name, arguments=arguments, arguments_ok=ok, error=str(exc))
    text = final.get("content") or ""
    return ToolCheck(called=True, name=name, arguments=arguments, arguments_ok=ok,
                     final_answer=text, final_ok=product in numbers_in(text))


async def run_smoke(
    base_url: str,
    *,
    model: str | None = None,
    timeout_s: float = 60.0,
    client: httpx.AsyncClient | None = None,
    api_key: str | None = None,
    tool_calling: bool | None = None,
) -> SmokeResult:
    """One chat completion plus the tool-calling check.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000``.
        model: model name; default the first of ``/v1/models``.
        timeout_s: read timeout per request in seconds.
        client: an existing ``httpx.AsyncClient``.
        api_key: vLLM's ``--api-key`` (sent as a Bearer token when ``client`` is not given).
        tool_calling: whether the server was started with tool calling
            (:func:`tool_calling_enabled` of its flags); ``False`` skips the check and says
            what to start it with, ``None`` (unknown) sends it.

    Returns:
        The result; a failing request is reported in it (``ok``/``error``), not raised.

    Raises:
        VllmHttpError: the server could not be reached at all.
    """
    async with client_scope(base_url, client, timeout_s, api_key=api_key) as c:
        served = await resolve_model(c, model)
        url = str(c.base_url).rstrip("/")

        async def tools() -> ToolCheck:
            if tool_calling is False:
                return ToolCheck(not_enabled=ENABLE_TOOLS)
            return await _tool_check(c, served.name)

        body = {"model": served.name, "messages": [{"role": "user", "content": SMOKE_QUESTION}],
                "max_tokens": 64, "temperature": 0.0}
        start = time.perf_counter()
        try:
            data = await _chat(c, body)
        except _Failed as exc:
            return SmokeResult(base_url=url, model=served.name, ok=False, error=str(exc),
                               tool=await tools())
        latency = time.perf_counter() - start
        usage = data.get("usage") or {}
        return SmokeResult(
            base_url=url, model=served.name, ok=True, latency_s=latency,
            answer=data["choices"][0]["message"].get("content") or "",
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            tool=await tools(),
        )
