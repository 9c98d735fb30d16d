"""The sandbox counts tokens with a tokenizer-like rule, not the client's 4-characters estimate."""

from __future__ import annotations

import random

import pytest

from remote.bench.longctx import build_prompt
from remote.bench.prompts import CHARS_PER_TOKEN, synthetic_prompt
from sandbox.openai_replies import count_tokens


@pytest.mark.parametrize(("text", "tokens"), [
    ("a" * 100, 25),                       # one long run of letters: ceil(100 / 4)
    ("Say hi, TPU.", 5),                   # Say, hi, ",", TPU, "."
    ("Request 4f2a9.", 2 + 1 + 1 + 2 + 1 + 1),   # Request(2) 4 f 2 a 9 .: digits one each
    ("   \n\t  ", 0),                       # whitespace is folded into the next word
    ("naïve café", 2 + 1),                 # letters beyond ASCII are letters
])
def test_the_rule_on_hand_counted_texts(text: str, tokens: int) -> None:
    assert count_tokens(text) == tokens


@pytest.mark.parametrize("prompt_tokens", [256, 2000])
def test_the_clients_estimate_and_the_sandboxs_count_differ_on_the_benchs_own_prompts(prompt_tokens: int) -> None:
    prompt = synthetic_prompt(prompt_tokens, seed=7)
    estimated = len(prompt) / CHARS_PER_TOKEN
    assert estimated == pytest.approx(prompt_tokens, abs=2)              # what the estimate aims at
    counted = count_tokens(prompt)
    assert counted > estimated * 1.07                                   # as a real tokenizer, more tokens


def test_a_long_context_prompt_by_estimate_overshoots_the_sandbox_count() -> None:
    # near a limit an estimate is useless: a "~8,000-token" prompt by 4 characters a token
    prompt = build_prompt(8000, 0.5, "juniper-copper-4375", random.Random(3))
    assert abs(count_tokens(prompt) - len(prompt) / CHARS_PER_TOKEN) > 300
