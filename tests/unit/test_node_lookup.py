"""console.flows.node_lookup: one node by NAME, ZONE/NAME or PROJECT/ZONE/NAME (plus --project/--zone)."""

from __future__ import annotations

import pytest

from console.flows.node_lookup import (
    NodeAmbiguous,
    NodeLookupError,
    NodeNotFound,
    NodeNotReady,
    find_node,
    pick_node,
    split_node_spec,
)
from remote.models import FleetProblem, FleetSnapshot, Node


def _node(project: str, zone: str, name: str, state: str = "READY") -> Node:
    return Node(project=project, zone=zone, name=name, state=state, accelerator_type="v5litepod-4")


A = _node("prod-1", "us-west4-a", "vllm-a")
A_TWIN = _node("staging", "us-east5-b", "vllm-a")
NEW = _node("prod-1", "us-west4-a", "vllm-new", state="CREATING")
FLEET = FleetSnapshot(nodes=(A, NEW, A_TWIN))


def test_split_node_spec() -> None:
    assert split_node_spec("n") == (None, None, "n")
    assert split_node_spec("z/n") == (None, "z", "n")
    assert split_node_spec("proj-1/z/n") == ("proj-1", "z", "n")
    for bad in ("", "a//b", "p/z/n/x", "/n"):
        with pytest.raises(NodeLookupError, match="is not NAME, ZONE/NAME or PROJECT/ZONE/NAME"):
            split_node_spec(bad)


def test_spec_or_flags_pick_one_of_two_namesakes() -> None:
    assert pick_node(FLEET, "staging/us-east5-b/vllm-a") is A_TWIN
    assert pick_node(FLEET, "us-west4-a/vllm-a") is A
    assert pick_node(FLEET, "vllm-a", project="staging") is A_TWIN
    assert pick_node(FLEET, "vllm-a", zone="us-west4-a") is A
    with pytest.raises(NodeNotFound):                     # the spec and the flag disagree
        pick_node(FLEET, "us-west4-a/vllm-a", project="staging")


def test_ambiguous_lists_every_match() -> None:
    with pytest.raises(NodeAmbiguous) as err:
        pick_node(FLEET, "vllm-a")
    assert err.value.matches == (A, A_TWIN)
    assert err.value.title == "Ambiguous node"
    assert err.value.message == ("2 nodes are named 'vllm-a' (prod-1/us-west4-a/vllm-a (READY, v5litepod-4), "
                                 "staging/us-east5-b/vllm-a (READY, v5litepod-4)); name one as PROJECT/ZONE/NAME.")


def test_not_found_names_the_search_and_the_projects_that_did_not_list() -> None:
    with pytest.raises(NodeNotFound) as err:
        pick_node(FLEET, "vllm-b", zone="us-west4-a", searched=["prod-1", "staging"])
    assert err.value.message == "No node 'vllm-b' in prod-1, staging (zone us-west4-a); nodes there: vllm-a, vllm-new."
    assert err.value.problems == ()
    problem = FleetProblem("denied", None, 403, "Permission denied")
    with pytest.raises(NodeNotFound) as err:
        pick_node(FleetSnapshot(problems=(problem,)), "vllm-b")
    assert err.value.message == ("No node 'vllm-b' in the configured projects; nodes there: none. "
                                 "Some projects did not list: denied: Permission denied")
    assert err.value.problems == (problem,)


def test_many_names_are_counted_not_listed() -> None:
    many = FleetSnapshot(nodes=tuple(_node("p", "z", f"n{i:02}") for i in range(11)))
    with pytest.raises(NodeNotFound, match=r"nodes there: n00, .*, n07 and 3 more\.$"):
        pick_node(many, "x")


def test_not_ready_only_when_required() -> None:
    assert pick_node(FLEET, "vllm-new") is NEW
    with pytest.raises(NodeNotReady) as err:
        pick_node(FLEET, "vllm-new", require_ready=True)
    assert (err.value.message, err.value.node) == ("Node vllm-new is CREATING, not READY.", NEW)


async def test_find_node_lists_once_and_names_the_searched_projects() -> None:
    class Project:
        def __init__(self, id: str) -> None:
            self.id = id

    class Source:
        projects = [Project("prod-1"), Project("empty")]
        calls = 0

        async def list_fleet(self) -> FleetSnapshot:
            Source.calls += 1
            return FleetSnapshot(nodes=(A, NEW))

    assert await find_node(Source(), "vllm-a") is A
    with pytest.raises(NodeNotFound, match=r"^No node 'gone' in prod-1, empty;"):
        await find_node(Source(), "gone")
    assert Source.calls == 2


@pytest.mark.parametrize(("spec", "flags", "said"), [
    ("n$(id);`id`", {}, "'n$(id);`id`' is not a node name"),
    ("vllm\u200ba", {}, "'vllm\\u200ba' is not a node name"),                 # zero-width space
    ("vllm-\u0430", {}, "'vllm-\\u0430' is not a node name"),                 # Cyrillic a
    ("us-west4-a;rm/vllm-a", {}, "'us-west4-a;rm' is not a zone name"),
    ("pr/us-west4-a/vllm-a", {}, "'pr' is not a project name"),
    ("vllm-a", {"project": "$(id)"}, "'$(id)' is not a project name"),
    ("vllm-a", {"zone": "us-west4-a\x1b[2J"}, "'us-west4-a[2J' is not a zone name"),
])
def test_names_that_break_gcps_rule_are_refused_before_any_lookup(spec: str, flags: dict[str, str],
                                                                  said: str) -> None:
    from console.flows.node_lookup import lookup_exit_code

    with pytest.raises(NodeLookupError) as err:
        pick_node(FLEET, spec, **flags)
    assert type(err.value) is NodeLookupError and lookup_exit_code(err.value) == 2     # bad input
    assert err.value.message.startswith(said) and err.value.message.endswith(".")
    assert err.value.message.isascii() and err.value.message.isprintable()


def test_the_nodes_verb_refuses_a_bad_project_id(capsys) -> None:
    from console.cli import main

    assert main(["nodes", "--project", "p;id", "--api-endpoint", "http://127.0.0.1:9"]) == 2
    assert "tpu-console: --project: 'p;id' is not a project name (6-30 lowercase" in capsys.readouterr().err
