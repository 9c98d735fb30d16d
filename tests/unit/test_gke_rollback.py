"""What a rollback of a Deployment restores: ``kubectl rollout undo``'s choice of ReplicaSet."""

from __future__ import annotations

from typing import Any

from remote.gke.edit import previous_template, rollback_patch
from remote.gke.models import ClusterRef
from remote.gke.parse import workload_from_json
from tests.unit.test_gke_parse import DEPLOYMENT


def _rs(name: str, revision: str, arg: str, owner: str = "vllm-llama") -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": {"deployment.kubernetes.io/revision": revision},
                         "ownerReferences": [{"kind": "Deployment", "name": owner}]},
            "spec": {"template": {"metadata": {"labels": {"app": "vllm", "pod-template-hash": name[-3:]}},
                                  "spec": {"containers": [{"name": "vllm", "args": [arg]}]}}}}


def test_the_previous_revision_not_the_oldest_and_without_its_hash_label() -> None:
    sets = [_rs("a-111", "1", "--one"), _rs("a-333", "3", "--three"), _rs("a-222", "2", "--two"),
            _rs("b-999", "7", "--other", owner="someone-else")]
    current, previous, template = previous_template(sets, "vllm-llama") or (0, 0, {})
    assert (current, previous) == (3, 2)
    assert template == {"metadata": {"labels": {"app": "vllm"}}, "spec": {"containers": [{"name": "vllm", "args": ["--two"]}]}}
    assert sets[2]["spec"]["template"]["metadata"]["labels"]["pod-template-hash"] == "222"   # a copy was edited


def test_one_revision_is_nothing_to_roll_back_to() -> None:
    assert previous_template([_rs("a-111", "1", "--one"), _rs("b-999", "7", "--x", owner="other")], "vllm-llama") is None


def test_the_patch_replaces_the_template_behind_the_resource_version_test() -> None:
    workload = workload_from_json(DEPLOYMENT, ClusterRef("p", "l", "c"))
    assert workload is not None
    patch = rollback_patch(workload, {"spec": {}})
    assert patch == [{"op": "test", "path": "/metadata/resourceVersion", "value": workload.resource_version},
                     {"op": "replace", "path": "/spec/template", "value": {"spec": {}}}]


def test_a_long_patch_value_is_named_by_its_size_for_a_person() -> None:
    from remote.gke.edit import patch_lines

    template = {"spec": {"containers": [{"name": "vllm", "args": ["--x"] * 60}]}}
    lines = patch_lines([{"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                         {"op": "replace", "path": "/spec/template", "value": template}])
    assert lines[0] == '{"op": "test", "path": "/metadata/resourceVersion", "value": "7"}'
    assert lines[1].startswith('{"op": "replace", "path": "/spec/template", "value": <') and "characters" in lines[1]
    assert len(lines[1]) < 160
