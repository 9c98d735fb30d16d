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


@pytest.mark.parametrize("verb", NODE_VERBS)
def test_every_node_verb_takes_a_gke_workload(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    from console.verbs.common import workload_spec_or_none

    text = _help(capsys, verb)
    assert "--cluster C" in text and "--namespace N" in text and "deploy/NAME" in text
    args = build_parser().parse_args([verb, "deploy/vllm-llama", "--cluster", "tpu-serving", "--namespace", "serving"]
                                     + (["--kind", "smoke"] if verb == "bench" else []))
    spec = workload_spec_or_none(args)
    assert (spec.kind, spec.name, spec.namespace, spec.cluster, spec.ref) == (   # type: ignore[attr-defined]
        "Deployment", "vllm-llama", "serving", "tpu-serving", "deploy/vllm-llama")


def test_workload_grammar_refuses_bad_names(capsys: pytest.CaptureFixture[str]) -> None:
    from console.flows.gke_target import WorkloadSpecError, parse_workload_spec
    from console.verbs.common import workload_spec_or_none

    assert parse_workload_spec("lws/vllm").kind == "LeaderWorkerSet"
    assert parse_workload_spec("deployment/vllm").namespace == "default"
    for bad, match in (("deploy/Vllm", "object name"), ("deploy/", "not deploy/NAME"), ("deploy/a/b", "not deploy")):
        with pytest.raises(WorkloadSpecError, match=match):
            parse_workload_spec(bad)
    with pytest.raises(WorkloadSpecError, match="namespace name"):
        parse_workload_spec("deploy/x", namespace="../etc")
    parser = build_parser()
    assert workload_spec_or_none(parser.parse_args(["watch", "vllm-a"])) is None           # a TPU node
    assert workload_spec_or_none(parser.parse_args(["watch", "vllm-a", "--namespace", "x"])) is False
    assert "go with a GKE workload" in capsys.readouterr().err


def test_node_only_verbs_say_a_workload_is_not_a_node() -> None:
    from console.flows.node_lookup import NodeLookupError, split_node_spec

    with pytest.raises(NodeLookupError, match="is a GKE workload"):
        split_node_spec("deploy/vllm-llama")
    assert split_node_spec("us-east5-a/vllm-a") == (None, "us-east5-a", "vllm-a")
