"""What the sandbox's OpenAI-compatible server says: token counting and reply rules.

Tokens (deterministic, no tokenizer, but tokenizer-like and deliberately not the client's
4-characters-per-token estimate): :func:`count_tokens` splits a text into runs of letters,
single digits and single other non-space characters; a run of letters is ``ceil(len / 4)``
tokens, a digit or a punctuation mark is one, whitespace is free (as BPE folds a space into the
next word). English prose then comes out ~1.2-1.4x the estimate, as real tokenizers do
(Llama's gave 1.5x on the bench's filler). Output tokens are 4-char pieces of the reply (the
usage counts pieces; re-tokenizing the text may differ, as with a real detokenizer).

Replies (first rule that applies):
1. last message has role ``tool``: "The result is N." with the first number in it;
2. ``tools`` given (``tool_choice`` not ``"none"``), last message from the user: a call to
   the named ``tool_choice``, else the tool sharing most words (3+ letters, common ones and
   a plural ``s`` dropped; from its name and description) with the user's text; number/integer parameters take the numbers of
   the text in order, strings the first quoted text, else the word after " in ", else the
   last capitalised word; enums the first value named in the text;
3. the prompt contains ``The passphrase is WORD.`` (WORD: letters, digits, ``-``, ``_``) and
   the word "passphrase" appears again after it: "The passphrase is WORD.";
4. otherwise filler text.
A reply stops at its natural end (``finish_reason`` ``stop``) unless ``max_tokens`` is set
for a filler reply or ``ignore_eos`` is true, in which case exactly ``max_tokens`` tokens
come back (``length``); ``max_tokens`` always caps.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from dataclasses import dataclass
from typing import Any

CHARS_PER_TOKEN = 4
CHAT_TOKENS_PER_MESSAGE = 4
DEFAULT_FILLER_TOKENS = 16
PASSPHRASE = re.compile(r"The passphrase is ([A-Za-z0-9_-]+)\.")
_FILLER = "Simulated tokens from the tpu-console sandbox, standing in for a vLLM TPU server. "
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


_PRE_TOKENS = re.compile(r"[^\W\d_]+|\d|[^\w\s]|_")


def count_tokens(text: str) -> int:
    """Sandbox token count of ``text`` (see the module docstring): letter runs ``ceil(len / 4)``
    each, digits and punctuation one each, whitespace none. ``"a" * 100`` is 25 tokens,
    ``"Say hi, TPU."`` is 5 (Say, hi, ``,``, TPU, ``.``)."""
    total = 0
    for piece in _PRE_TOKENS.findall(text):
        total += math.ceil(len(piece) / CHARS_PER_TOKEN) if piece[0].isalpha() else 1
    return total


@dataclass(frozen=True)
class Reply:
    pieces: tuple[str, ...]
    finish: str
    tool_call: dict[str, Any] | None = None


def content_text(content: Any) -> str:
    """Message content as text: a string, or the ``text`` parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _pieces(text: str) -> tuple[str, ...]:
    return tuple(text[i:i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN))


def _filler(n: int, offset: int = 0) -> tuple[str, ...]:
    cycle = _pieces(_FILLER)
    return tuple(cycle[(offset + i) % len(cycle)] for i in range(n))


def _tool_arguments(tool: dict[str, Any], text: str) -> dict[str, Any]:
    params = (tool.get("parameters") or {}).get("properties") or {}
    numbers = iter(_NUMBER.findall(text))
    quoted = re.search(r"['\"]([^'\"]+)['\"]", text)
    after_in = re.search(r"\bin ([A-Z][\w-]*(?: [A-Z][\w-]*)*)", text)
    capitals = re.findall(r"\b[A-Z][a-z][\w-]*", text)
    args: dict[str, Any] = {}
    for name, schema in params.items():
        kind = schema.get("type") if isinstance(schema, dict) else None
        if isinstance(schema, dict) and schema.get("enum"):
            args[name] = next((v for v in schema["enum"] if str(v).lower() in text.lower()), schema["enum"][0])
        elif kind in ("number", "integer"):
            raw = next(numbers, "0")
            value = float(raw)
            args[name] = int(value) if kind == "integer" or value.is_integer() else value
        elif kind == "boolean":
            args[name] = False
        else:
            args[name] = (quoted.group(1) if quoted else after_in.group(1) if after_in
                          else capitals[-1] if capitals else "")
    return args


_COMMON = frozenset(["the", "and", "for", "with", "please", "what", "which", "this", "that", "from", "you", "are", "can", "use", "using", "tool", "tools", "give", "tell", "how"])


def _words(text: str) -> set[str]:
    """Words of 3+ letters, lower-cased, without a plural ``s``, minus common ones."""
    return {w.removesuffix("s") for w in re.findall(r"[a-z]{3,}", text.lower()) if w not in _COMMON}


def _pick_tool(tools: list[dict[str, Any]], choice: Any, text: str) -> dict[str, Any] | None:
    functions = [t.get("function", {}) for t in tools if isinstance(t, dict)]
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return next((f for f in functions if f.get("name") == name), None)
    words = _words(text)
    best, best_score = None, 0
    for function in functions:
        own = _words(f"{function.get('name', '')} {function.get('description', '')}".replace("_", " "))
        if len(words & own) > best_score:
            best, best_score = function, len(words & own)
    return best if best is not None or choice != "required" else (functions[0] if functions else None)


def make_reply(request: dict[str, Any], prompt_text: str, max_tokens: int | None) -> Reply:
    messages = request.get("messages") or []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    tools = request.get("tools") or []
    natural: tuple[str, ...] | None = None
    tool_call = None
    if last.get("role") == "tool":
        found = _NUMBER.search(content_text(last.get("content")))
        natural = _pieces(f"The result is {found.group(0) if found else content_text(last.get('content')).strip()}.")
    elif tools and request.get("tool_choice", "auto") != "none" and last.get("role") == "user":
        function = _pick_tool(tools, request.get("tool_choice", "auto"), content_text(last.get("content")))
        if function is not None:
            arguments = json.dumps(_tool_arguments(function, content_text(last.get("content"))))
            tool_call = {"id": f"chatcmpl-tool-{secrets.token_hex(16)}", "type": "function",
                         "function": {"name": function.get("name", ""), "arguments": arguments}}
            natural = _pieces(function.get("name", "") + arguments)
    if natural is None:
        needles = list(PASSPHRASE.finditer(prompt_text))
        if needles and "passphrase" in prompt_text[needles[-1].end():].lower():
            natural = _pieces(f"The passphrase is {needles[-1].group(1)}.")
    if natural is None:
        natural = _filler(max_tokens if max_tokens is not None else DEFAULT_FILLER_TOKENS)
        if max_tokens is not None:
            return Reply(natural, "length")
    if request.get("ignore_eos") and max_tokens is not None and tool_call is None:
        return Reply(natural[:max_tokens] + _filler(max(0, max_tokens - len(natural))), "length")
    if max_tokens is not None and len(natural) > max_tokens:
        return Reply(natural[:max_tokens], "length", None)
    return Reply(natural, "tool_calls" if tool_call else "stop", tool_call)
