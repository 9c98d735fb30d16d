"""Secrets: which names hold them, and scrubbing them out of text, arguments and specs.

Used by the history store before anything is written and by every display of a
command (``remote.container.spec``), so one set of rules decides what is a secret.

The history keeps container specs, ``vllm serve`` arguments and failure text. Those
carry Hugging Face tokens, API keys and passwords, which must never be written. Every
value goes through :func:`scrub_value` in the store's one writer. Secret values
become :data:`MASK` (``"***"``):

- env vars and dict keys whose name suggests a secret (:func:`is_secret_name`):
  ``HF_TOKEN``, ``HUGGING_FACE_HUB_TOKEN``, ``OPENAI_API_KEY``, ``DB_PASSWORD``,
  ``GOOGLE_APPLICATION_CREDENTIALS``, ``AUTHORIZATION``...;
- command-line forms: ``--api-key X``, ``--hf-token=X``, ``-e HF_TOKEN=X``, ``KEY=VAL``;
- token shapes inside free text: ``hf_...``, ``sk-...``, ``ghp_...``, ``ya29....``,
  ``AIza...`` and ``Bearer ...``.

Names are split into words at ``_``, ``-`` and ``.``. A word that is, or ends in, one of
TOKEN, KEY, SECRET, PASSWORD, PASSWD, PWD, CREDENTIAL(S), or starts with AUTH, marks the
name as secret. ``MAX_TOKENS``, ``--max-num-batched-tokens`` and ``--tokenizer`` are not
secret, because TOKENS and TOKENIZER are other words.
"""

from __future__ import annotations

import re
from typing import Any

#: What a secret value is replaced with.
MASK = "***"

_SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "PWD", "CREDENTIAL", "CREDENTIALS")
_WORD_SPLIT = re.compile(r"[_\-.\s]+")

# Credentials recognisable by their shape, wherever they appear.
_TOKEN_SHAPES = re.compile(
    r"""
    \bhf_[A-Za-z0-9]{8,}                      # Hugging Face access token
  | \bsk-[A-Za-z0-9_\-]{16,}                  # OpenAI-style API key
  | \bgh[pousr]_[A-Za-z0-9]{16,}              # GitHub token
  | \bya29\.[A-Za-z0-9_\-.]+                  # Google OAuth access token
  | \bAIza[A-Za-z0-9_\-]{30,}                 # Google API key
    """,
    re.VERBOSE,
)
_BEARER = re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9_\-.~+/=]+", re.IGNORECASE)
# user:password@ in a URL (https://u:p@host, redis://:p@host).
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][\w+.\-]*://[^\s:/@]*):(?P<password>[^\s/@]+)@")
_VALUE = r"(?:'[^']*'|\"[^\"]*\"|[^\s,;'\"}\]\[()]+)"
# Only text holding one of these (in upper case, as ``is_secret_name`` compares names) can hold
# a secret this module masks: a cheap first test of ``in`` checks (a case-insensitive regex
# alternation costs ~100x more per line). A secret name has a word that ends in KEY/TOKEN/...
# (then no letter or digit follows: vLLM's ``tokens/s`` metrics lines pass the test) or starts
# with AUTH; ``"paßword".upper()`` is ``PASSWORD``.
_MAYBE_SECRET_WORDS = ("SECRET", "PASS", "PWD", "AUTH", "CRED", "HF_", "SK-", "GHP_", "GHO_", "GHU_", "GHS_",
                       "GHR_", "YA29.", "AIZA", "BEARER", "BASIC", "://")
_KEY_OR_TOKEN_END = re.compile(r"(?:KEY|TOKEN)(?![A-Z0-9])")
# --flag value, --flag=value, -flag value.
_FLAG_WITH_VALUE = re.compile(r"(?P<flag>(?<![\w-])--?[A-Za-z][\w\-.]*)(?P<sep>=|\s+)(?P<value>" + _VALUE + ")")
# NAME=value, NAME: value, "name": "value", 'name':'value'; a bare colon needs a space after
# it, so an image tag (``org/secret-manager:v1``) is not taken for a secret.
_NAME_WITH_VALUE = re.compile(
    r"(?P<q>['\"]?)(?P<name>(?<![\w-])[A-Za-z_][\w\-.]*)(?P=q)"
    r"(?P<sep>\s*=\s*|\s*:\s+|(?<=['\"])\s*:\s*)(?P<value>" + _VALUE + ")"
)


def is_secret_name(name: str) -> bool:
    """Whether an env var, flag or key name suggests its value is a secret.

    Args:
        name: e.g. ``HF_TOKEN``, ``--api-key``, ``openai.api_key``.

    Returns:
        ``True`` for ``HF_TOKEN``, ``API_KEY``, ``--hf-token``, ``DB_PASSWORD``,
        ``AUTHORIZATION``; ``False`` for ``MAX_TOKENS``, ``--max-num-batched-tokens``,
        ``--tokenizer``, ``MODEL``.
    """
    for word in _WORD_SPLIT.split(name.strip("-").upper()):
        if not word:
            continue
        if word.startswith("AUTH") or any(word.endswith(w) for w in _SECRET_WORDS):
            return True
    return False


def _mask_quoted(value: str) -> str:
    """``'x'`` -> ``'***'``; ``['a', 'b']`` / ``('a',)`` -> ``['***']`` / ``('***')``; else ``***``."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[0] + MASK + value[0]
    if len(value) >= 2 and (value[0], value[-1]) in (("[", "]"), ("(", ")")):
        inner = value[1:-1].strip()
        quote = inner[0] if inner and inner[0] in "'\"" else ""
        return value[0] + quote + MASK + quote + value[-1]
    return MASK


# ``'api_key': [`` / ``"token": (`` / ``API_KEY=[``: a secret name whose value is a list or tuple.
_NAME_BEFORE_SEQUENCE = re.compile(
    r"(?P<q>['\"]?)(?P<name>(?<![\w-])[A-Za-z_][\w\-.]*)(?P=q)(?:\s*=\s*|\s*:\s*)(?=[\[(])")
_CLOSING = {"[": "]", "(": ")"}


def _sequence_end(text: str, start: int) -> int:
    """Index just after the bracket closing the one at ``start`` (quotes respected), or ``len(text)``."""
    depth, quote, i = 0, "", start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(text)


def _mask_sequences(text: str) -> str:
    """Mask whole list/tuple values under secret names, however deep they nest."""
    out, pos = [], 0
    for match in _NAME_BEFORE_SEQUENCE.finditer(text):
        if match.start() < pos or not is_secret_name(match["name"]):
            continue
        start = match.end()
        end = _sequence_end(text, start)
        first = text[start + 1:end].lstrip("[( ")[:1]
        quote = first if first in ("'", '"') else ""
        out.append(f"{text[pos:start]}{text[start]}{quote}{MASK}{quote}{_CLOSING[text[start]]}")
        pos = end
    return "".join(out) + text[pos:] if out else text


def may_hold_secret(text: str) -> bool:
    """Whether ``text`` may hold something :func:`scrub_text` masks (a cheap first test: one
    ``in`` test per word and shape it looks for, on the upper-cased text). ``False`` for vLLM's
    metrics lines.

    Lines of up to :data:`_VERDICT_MAX_BYTES` bytes are answered from a cache keyed by their
    bytes with every ASCII digit read as ``0`` (a followed log repeats a few line shapes whose
    figures change: vLLM's metrics lines, compile steps): no word looked for holds a digit but
    ``ya29.``, tested on its own, and ``KEY``/``TOKEN`` end the same before any digit. A miss
    costs ~1 us more than the test alone; a hit ~1 us instead of ~7 (a metrics line).
    """
    if not text:
        return False
    if len(text) > _VERDICT_MAX_BYTES:
        return _may_hold_secret(text)
    key = text.encode("utf-8", "surrogatepass").translate(_DIGITS_AS_ZERO)
    verdict = _verdicts.get(key)
    if verdict is None:
        verdict = _may_hold_secret(key.decode("utf-8", "surrogatepass"))
        if len(_verdicts) >= _VERDICTS_MAX:
            _verdicts.clear()
        _verdicts[key] = verdict
    return verdict or ("29." in text and "YA29." in text.upper())


def _may_hold_secret(text: str) -> bool:
    upper = text.upper()
    for word in _MAYBE_SECRET_WORDS:
        if word in upper:
            return True
    return ("KEY" in upper or "TOKEN" in upper) and _KEY_OR_TOKEN_END.search(upper) is not None


#: Every ASCII digit as ``0`` (the cache key of :func:`may_hold_secret`).
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
#: Longest text whose verdict is cached, and how many verdicts are kept (then all are forgotten).
_VERDICT_MAX_BYTES = 2048    # at most ~4 MiB of keys
_VERDICTS_MAX = 2048
_verdicts: dict[bytes, bool] = {}


def scrub_text(text: str) -> str:
    """Mask secrets inside free text: a log line, an error message, a shell command.

    Args:
        text: any text.

    Returns:
        The text with token-shaped strings, ``Bearer`` credentials, the password of
        ``scheme://user:password@host``, ``--secret-flag value`` and ``SECRET_NAME=value`` /
        ``"secret_name": "value"`` values replaced by ``***``; a list or tuple value (vLLM's
        ``non-default args: {'api_key': ['sk-...']}``) keeps its brackets: ``['***']``.
    """
    if not may_hold_secret(text):
        return text

    def flag(match: re.Match[str]) -> str:
        if not is_secret_name(match["flag"]):
            return match[0]
        return match["flag"] + match["sep"] + _mask_quoted(match["value"])

    def named(match: re.Match[str]) -> str:
        if not is_secret_name(match["name"]):
            return match[0]
        q = match["q"]
        return q + match["name"] + q + match["sep"] + _mask_quoted(match["value"])

    text = _mask_sequences(text)
    text = _TOKEN_SHAPES.sub(MASK, text)
    text = _BEARER.sub(lambda m: f"{m[1]} {MASK}", text)
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}:{MASK}@", text)
    text = _FLAG_WITH_VALUE.sub(flag, text)
    return _NAME_WITH_VALUE.sub(named, text)


def scrub_args(args: list[str] | tuple[str, ...]) -> list[str]:
    """Mask secrets in an argument vector (``vllm serve`` or ``docker run`` arguments).

    Handles ``--api-key X`` (the next argument is masked), ``--api-key=X``,
    ``-e HF_TOKEN=X`` / ``HF_TOKEN=X`` and token shapes inside any argument.

    Args:
        args: the arguments, one string each.

    Returns:
        A new list of the same length with secret values replaced by ``***``.
    """
    out: list[str] = []
    mask_next = False
    for arg in args:
        arg = str(arg)
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        if arg.startswith("-") and "=" not in arg and is_secret_name(arg):
            mask_next = True
            out.append(arg)
            continue
        name, eq, _ = arg.partition("=")
        if eq and name and is_secret_name(name):
            out.append(f"{name}={MASK}")
            continue
        out.append(scrub_text(arg))
    return out


def scrub_value(value: Any) -> Any:
    """Deep-scrub a JSON-like value before it is stored.

    Dict entries under a secret-looking key are masked whole: a string, list, tuple or set
    becomes ``***``; a dict is walked and every value in it, at any depth, is masked the same
    way (``{'api_key': {'value': 'X'}}`` -> ``{'api_key': {'value': '***'}}``), except
    ``None``, numbers and booleans, which no secret is (``total_token_throughput: 1141.4``
    stays). Elsewhere lists of strings are scrubbed as argument vectors (:func:`scrub_args`),
    so both ``["--api-key", "X"]`` and docker's ``Env: ["HF_TOKEN=X"]`` are covered; strings
    are scrubbed as free text; sets are scrubbed like lists. Numbers, booleans and ``None``
    pass through; any other object is scrubbed as its ``str()``.

    Args:
        value: ``dict``, ``list``, ``tuple``, ``set``, ``str`` or a scalar.

    Returns:
        A scrubbed copy (lists, tuples and sets come back as lists; sets sorted by ``str``).
    """
    if isinstance(value, dict):
        return {key: _masked(item) if is_secret_name(str(key)) else scrub_value(item)
                for key, item in value.items()}
    if isinstance(value, (set, frozenset)):
        value = sorted(value, key=str)
    if isinstance(value, (list, tuple)):
        if all(isinstance(item, str) for item in value):
            return scrub_args(list(value))
        return [scrub_value(item) for item in value]
    if isinstance(value, str):
        return scrub_text(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return scrub_text(str(value))


def _masked(value: Any) -> Any:
    """A value held under a secret key: ``***``, or for a dict the same walk over its values
    (numbers, booleans and ``None`` kept: figures such as ``{"x": 1}`` are no secret)."""
    if isinstance(value, dict):
        return {key: _masked(item) for key, item in value.items()}
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return MASK
