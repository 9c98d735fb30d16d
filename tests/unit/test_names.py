"""GCP's naming rules (remote.names), printed commands, and names made unmistakable (remote.printable)."""

from __future__ import annotations

import shlex

import pytest

from remote.names import check_name, console_command, is_valid_name, name_problem
from remote.printable import printable, shown_name


@pytest.mark.parametrize(("kind", "value"), [
    ("node", "vllm-a"), ("node", "a"), ("node", "v" * 63), ("queued resource", "qr-flex-b"),
    ("zone", "us-east5-a"), ("project", "inference-prod"), ("project", "abcdef"), ("project", "a" * 30),
    ("project", "example.com:my-project"), ("project", "123456789012")])
def test_names_gcp_gives_pass(kind: str, value: str) -> None:
    assert is_valid_name(kind, value) and name_problem(kind, value) is None and check_name(kind, value) == value


@pytest.mark.parametrize(("kind", "value"), [
    ("node", "n$(id);`id`"), ("node", "vllm\u200ba"), ("node", "vllm-\u0430"), ("node", "Vllm"), ("node", "-a"),
    ("node", "a-"), ("node", "1a"), ("node", "v" * 64), ("node", ""), ("node", None), ("node", 7),
    ("zone", "us-east5-a/../x"), ("project", "abcde"), ("project", "a" * 31), ("project", "proj-"),
    ("project", "0123")])
def test_anything_else_is_refused_with_a_sentence(kind: str, value: object) -> None:
    assert not is_valid_name(kind, value)
    problem = name_problem(kind, value)
    assert problem is not None and f"is not a {kind} name (" in problem
    assert problem.isascii() and problem.isprintable()
    with pytest.raises(ValueError, match="is not a"):
        check_name(kind, value)


def test_printed_commands_are_quoted_for_the_shell() -> None:
    line = console_command(["watch", "n$(id);`id`", "--project", "p q"])
    assert line == "tpu-console watch 'n$(id);`id`' --project 'p q'"
    assert shlex.split(line) == ["tpu-console", "watch", "n$(id);`id`", "--project", "p q"]
    assert console_command(["watch", "vllm-a"]) == "tpu-console watch vllm-a"


def test_invisible_characters_are_made_visible() -> None:
    """A zero-width space (or joiner, BOM, Hangul filler, odd space) let one name look exactly like another."""
    assert printable("vllm\u200ba") == "vllm\\u200ba"
    assert printable("a\u200d\ufeff\u3164\u00a0b") == "a\\u200d\\ufeff\\u3164\\u00a0b"
    assert printable("tag\U000e0041") == "tag\\U000e0041"
    assert printable("café ok") == "café ok" and printable("plain") == "plain"   # visible letters stay
    assert printable("\x1b[2Jx\u202ey") == "[2Jxy"                              # controls still removed


def test_shown_names_cannot_pass_for_others() -> None:
    assert shown_name("vllm-a") == "'vllm-a'"
    assert shown_name("vllm-\u0430") == "'vllm-\\u0430'"           # Cyrillic a
    assert shown_name("n\x1b[2J\u200b") == "'n[2J\\u200b'"
    assert shown_name(None) == "(none)"
