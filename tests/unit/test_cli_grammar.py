"""One CLI grammar: every verb's help is plain text, node verbs take --project/--zone/--worker, global
options work before or after the verb, and ``--version`` answers."""

from __future__ import annotations

import re
from importlib.metadata import version

import pytest

from console.cli import VERB_MODULES, build_parser, main

VERBS = [m.replace("_", "-") for m in VERB_MODULES]
NODE_VERBS = ("watch", "ssh", "swap", "rollback", "bench", "metrics", "forward")


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("verb", VERBS)
def test_every_verbs_help_is_plain_text(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys, verb)
    assert f"tpu-console {verb}" in text
    assert "``" not in text and not re.search(r":(mod|func|class|meth|data|attr):`", text), text
    assert "Usage::" not in text


@pytest.mark.parametrize("verb", NODE_VERBS)
def test_every_node_verb_takes_the_one_node_grammar(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys, verb)
    for option in ("--project P", "--zone Z", "--worker N"):
        assert option in text, f"{verb} has no {option}"
    args = build_parser().parse_args([verb, "europe-west4-a/vllm-flex-b", "--project", "p1", "--zone",
                                      "europe-west4-a", "--worker", "2"]
                                     + (["--kind", "smoke"] if verb == "bench" else []))
    assert (args.node, args.project, args.zone, int(args.worker)) == ("europe-west4-a/vllm-flex-b", "p1",
                                                                       "europe-west4-a", 2)   # ssh: "2" or "all"


def test_global_options_before_or_after_the_verb() -> None:
    parser = build_parser()
    before = parser.parse_args(["--config", "c.toml", "--db", "h.db", "--readonly", "history", "show", "4"])
    after = parser.parse_args(["history", "show", "4", "--db", "h.db", "--config", "c.toml", "--readonly"])
    for args in (before, after):
        assert (args.config, args.db, args.readonly, args.id) == ("c.toml", "h.db", True, 4)
    plain = parser.parse_args(["swap", "n1"])
    assert (plain.config, plain.db, plain.readonly, plain.demo) == (None, None, False, False)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"tpu-console {version('tpu-console')}"
