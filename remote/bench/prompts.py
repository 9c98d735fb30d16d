"""Synthetic prompts of a wanted token length, without a tokenizer.

No tokenizer can be downloaded here, so prompt text is sized with an estimate of
:data:`CHARS_PER_TOKEN` characters per token: the filler is common lower-case
English words separated by spaces, which Llama 3, Qwen 2.5/3 and Gemma tokenizers
encode at about one token per word (4-5 characters with its space), close to the
usual 4-characters-per-token rule of thumb for English. The benchmarks always
report the server's own count (``usage.prompt_tokens``), never this estimate.

Every prompt starts with a line unique to the request so vLLM's automatic prefix
cache cannot reuse another request's KV cache blocks.
"""

from __future__ import annotations

import random
import uuid

#: Estimated characters per token for the filler text (see the module docstring).
CHARS_PER_TOKEN = 4.0

_WORDS = ["time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world", "school", "state", "family", "student", "group", "country", "problem", "hand", "part", "place", "case", "week", "company", "system", "program", "question", "work", "number", "night", "point", "home", "water", "room", "mother", "area", "money", "story", "fact", "month", "lot", "right", "study", "book", "eye", "job", "word", "business", "issue", "side", "kind", "head", "house", "service", "friend", "father", "power", "hour", "game", "line", "end", "member", "law", "car", "city", "name", "team", "minute", "idea", "kid", "body", "back", "parent", "face", "level", "office", "door", "health", "person", "art", "war", "history", "party", "result", "change", "morning", "reason", "research", "girl", "guy", "moment", "air", "teacher", "force", "education", "river", "stone", "bridge", "garden", "window", "market", "road", "table", "paper", "music", "light", "field", "winter", "summer", "cloud", "forest", "letter", "island", "engine", "harbor"]

_MEAN_WORD_CHARS = sum(len(w) + 1 for w in _WORDS) / len(_WORDS)


def filler(chars: int, rng: random.Random) -> str:
    """About ``chars`` characters of space-separated common words (never more than a word over)."""
    if chars <= 0:
        return ""
    text = " ".join(rng.choices(_WORDS, k=int(chars / _MEAN_WORD_CHARS) + 8))  # a few spare words
    while len(text) <= chars:   # rare: the random words came out short
        text += " " + " ".join(rng.choices(_WORDS, k=64))
    cut = text.find(" ", chars)
    return text if cut < 0 else text[:cut]


def unique_line(label: str = "Request") -> str:
    """A first line no other prompt shares, e.g. ``Request 3f2a...: ``."""
    return f"{label} {uuid.uuid4().hex}."


def synthetic_prompt(prompt_tokens: int, *, seed: int) -> str:
    """A prompt of about ``prompt_tokens`` tokens (by :data:`CHARS_PER_TOKEN`), unique per call.

    Args:
        prompt_tokens: wanted length in tokens (>= 1); chat templates add a few more.
        seed: varies the filler between requests.
    """
    head = unique_line() + " Continue this text:\n"
    body = max(0, int(prompt_tokens * CHARS_PER_TOKEN) - len(head))
    return head + filler(body, random.Random(seed))


def filler_words(words: int, rng: random.Random) -> list[str]:
    """``words`` common lower-case words (the filler of :func:`filler`, counted in words)."""
    return rng.choices(_WORDS, k=max(0, words))


class PromptFactory:
    """Many :func:`synthetic_prompt`-like prompts of one length, each in microseconds.

    The filler is generated once; prompt ``i`` is the unique first line plus the filler
    rotated to a word boundary near a seed-dependent offset, so a benchmark's event loop
    does not spend milliseconds per request on random words while other streams wait.
    With ``body`` that text is the filler (sized by the server's tokenizer, see
    ``remote.bench.tokenize``) instead of filler sized by the character estimate.
    """

    def __init__(self, prompt_tokens: int, *, seed: int = 0, body: str | None = None) -> None:
        self.head_chars = len(unique_line()) + len(" Continue this text:\n")
        self.body_chars = max(0, int(prompt_tokens * CHARS_PER_TOKEN) - self.head_chars)
        self._filler = body if body is not None else filler(self.body_chars, random.Random(seed))
        self._rng = random.Random(seed + 1)

    @staticmethod
    def head() -> str:
        """A fresh unique first line and the instruction that every prompt starts with."""
        return unique_line() + " Continue this text:\n"

    def make(self) -> str:
        """The next prompt (about ``prompt_tokens`` tokens, unique first line)."""
        text = self._filler
        cut = text.find(" ", self._rng.randrange(len(text))) if text else -1
        body = text if cut < 0 else f"{text[cut + 1:]} {text[:cut]}"
        return self.head() + body
