"""The sandbox Kubernetes API's patch and selector semantics (RFC 6902 / 7386, strategic merge, label and
field selectors), on small documents."""

from __future__ import annotations

import pytest

from sandbox.gke.patches import PatchFailed, json_patch, merge_patch, strategic_merge_patch
from sandbox.gke.store import ApiError, Selector, field_values

DOC = {"metadata": {"resourceVersion": "7"},
       "spec": {"containers": [{"name": "vllm", "image": "a", "args": ["--x=1"], "env": [{"name": "A", "value": "1"}]},
                               {"name": "side", "image": "b"}]}}


def test_json_patch_applies_ops_in_order_and_guards_with_test() -> None:
    out = json_patch(DOC, [{"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                           {"op": "add", "path": "/spec/containers/0/args/-", "value": "--y=2"},
                           {"op": "replace", "path": "/spec/containers/1/image", "value": "c"},
                           {"op": "copy", "from": "/spec/containers/1/image", "path": "/spec/note"},
                           {"op": "remove", "path": "/spec/containers/0/env"}])
    assert out["spec"]["containers"][0] == {"name": "vllm", "image": "a", "args": ["--x=1", "--y=2"]}
    assert out["spec"]["containers"][1]["image"] == "c" and out["spec"]["note"] == "c"
    assert DOC["spec"]["containers"][0]["args"] == ["--x=1"]                    # the input is left alone
    with pytest.raises(PatchFailed, match="testing value /metadata/resourceVersion failed"):
        json_patch(DOC, [{"op": "test", "path": "/metadata/resourceVersion", "value": "6"}])
    with pytest.raises(PatchFailed, match="missing"):
        json_patch(DOC, [{"op": "replace", "path": "/spec/containers/5/image", "value": "x"}])


def test_merge_patch_replaces_lists_and_deletes_nulls() -> None:
    out = merge_patch(DOC, {"spec": {"containers": [{"name": "vllm"}]}, "metadata": {"resourceVersion": None}})
    assert out == {"metadata": {}, "spec": {"containers": [{"name": "vllm"}]}}


def test_strategic_merge_patch_merges_by_key_and_honours_directives() -> None:
    out = strategic_merge_patch(DOC, {"spec": {"containers": [
        {"name": "vllm", "env": [{"name": "B", "value": "2"}, {"name": "A", "$patch": "delete"}], "args": ["--z"]},
        {"name": "side", "$patch": "delete"}, {"name": "new", "image": "n"}],
        "$setElementOrder/containers": [{"name": "vllm"}, {"name": "new"}]}})
    assert [c["name"] for c in out["spec"]["containers"]] == ["vllm", "new"]
    assert out["spec"]["containers"][0] == {"name": "vllm", "image": "a", "args": ["--z"],
                                            "env": [{"name": "B", "value": "2"}]}
    with pytest.raises(PatchFailed, match="merge key: name"):
        strategic_merge_patch(DOC, {"spec": {"containers": [{"image": "no-name"}]}})


def test_selectors_read_like_the_api_servers() -> None:
    labels = Selector.parse("app=vllm,tier in (a, b),!canary,env!=prod")
    assert labels.matches({"app": "vllm", "tier": "b", "env": "dev"})
    assert not labels.matches({"app": "vllm", "tier": "c"})
    assert not labels.matches({"app": "vllm", "tier": "a", "canary": "1"})
    fields = Selector.parse("metadata.name=vllm-llama,spec.nodeName!=", fields=True)
    obj = {"metadata": {"name": "vllm-llama"}, "spec": {"nodeName": "n1"}}
    assert field_values(obj, fields) == {"metadata.name": "vllm-llama", "spec.nodeName": "n1"}
    assert fields.matches(field_values(obj, fields))
    with pytest.raises(ApiError) as refused:
        Selector.parse("metadata.name in (a)", fields=True)
    assert refused.value.code == 400
