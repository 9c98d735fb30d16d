"""WorkloadSwapCase's policy without a server: read-only refusal, the lint gate, what a preview patches,
and what it refuses to touch (LeaderWorkerSets, env and volumes)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest

from console.flows.history_access import HistoryAccess
from console.flows.policy import ReadOnlyRefused
from console.flows.workload_swap import WorkloadSwapCase, accelerator_type_of
from remote.gke.models import ClusterRef
from remote.gke.parse import workload_from_json
from tests.unit.test_gke_parse import DEPLOYMENT

REF = ClusterRef("inference-prod", "us-east5", "tpu-serving")


@dataclass(frozen=True)
class Policy:
    readonly: bool = False


def _case(obj: dict[str, Any] | None = None, **kw: Any) -> WorkloadSwapCase:
    w = workload_from_json(obj or DEPLOYMENT, REF)
    assert w is not None
    return WorkloadSwapCase(w, kube=None, config=kw.pop("config", Policy()), history=HistoryAccess.none(),  # type: ignore[arg-type]
                            **kw)


def test_read_only_refuses_but_a_dry_run_previews() -> None:
    with pytest.raises(ReadOnlyRefused):
        _case(config=Policy(readonly=True))
    preview = _case(config=Policy(readonly=True), preview_only=True).preview({"max-model-len": "8192"}, None)
    assert preview.args is not None and "--max-model-len=8192" in preview.args


def test_preview_patches_args_and_image_behind_the_resource_version_test() -> None:
    case = _case()
    assert accelerator_type_of(case.workload) == "v6e-4"
    preview = case.preview({"max-model-len": "8192"}, "vllm/vllm-tpu:v0.12.0")
    assert [op["op"] for op in preview.patch] == ["test", "add", "replace"]
    assert preview.patch[1]["value"] == [a.replace("4096", "8192") for a in preview.old_args]
    assert preview.spec.image == "vllm/vllm-tpu:v0.12.0" and preview.spec.flag("max-model-len") == "8192"
    with pytest.raises(ValueError, match="max-model-len"):
        case.preview({"max-model-len": "0"}, None)
    with pytest.raises(ValueError, match="flags and image only"):
        case.preview({"env.HF_TOKEN": "x"}, None)


def test_the_lint_gate_needs_force_or_the_typed_name() -> None:
    probed = copy.deepcopy(DEPLOYMENT)
    probed["spec"]["template"]["spec"]["containers"][1]["startupProbe"] = {"periodSeconds": 1, "failureThreshold": 1}
    case = _case(probed)
    case._history_facts = lambda node, spec: {"predicted_boot_s": 400.0}  # type: ignore[method-assign]
    preview = case.preview({"max-model-len": "8192"}, None)
    assert [f.rule_id for f in preview.errors] == ["gke-startup-probe-short"]
    refused = case.refusal(preview)
    assert refused is not None and "gke-startup-probe-short" in refused and "Nothing was changed" in refused
    assert case.refusal(preview, force=True) is None and case.refusal(preview, typed_name="vllm-llama") is None


def test_a_leader_worker_sets_templates_change_in_one_guarded_patch() -> None:
    """Leader and worker templates (each its own container index) in one patch after the resourceVersion test;
    a Ray worker whose args carry no vLLM flags keeps them (its image still changes)."""
    lws = {"kind": "LeaderWorkerSet", "metadata": {"name": "vllm", "namespace": "default", "resourceVersion": "7"},
           "spec": {"leaderWorkerTemplate": {"size": 2,
                    "leaderTemplate": {"spec": {"containers": [
                        {"name": "sidecar", "image": "busybox"},
                        {"name": "vllm", "image": "vllm/vllm-tpu:latest", "args": ["--model=m", "--max-model-len=1024"],
                         "resources": {"limits": {"google.com/tpu": "4"}}}]}},
                    "workerTemplate": {"spec": {"containers": [
                        {"name": "vllm", "image": "vllm/vllm-tpu:latest", "args": ["--model=m", "--max-model-len", "1024"],
                         "resources": {"limits": {"google.com/tpu": "4"}}}]}}}}}
    preview = _case(lws).preview({"max-model-len": "8192"}, "vllm/vllm-tpu:v2")
    leader, worker = "/spec/leaderWorkerTemplate/leaderTemplate/spec/containers/1", \
        "/spec/leaderWorkerTemplate/workerTemplate/spec/containers/0"
    assert preview.patch == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "add", "path": f"{leader}/args", "value": ["--model=m", "--max-model-len=8192"]},
        {"op": "replace", "path": f"{leader}/image", "value": "vllm/vllm-tpu:v2"},
        {"op": "add", "path": f"{worker}/args", "value": ["--model=m", "--max-model-len", "8192"]},
        {"op": "replace", "path": f"{worker}/image", "value": "vllm/vllm-tpu:v2"}]
    ray = copy.deepcopy(lws)
    ray["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["args"] = [
        "ray", "start", "--address=$(LWS_LEADER_ADDRESS):6379", "--block"]
    paths = [op["path"] for op in _case(ray).preview({"max-model-len": "8192"}, None).patch]
    assert paths == ["/metadata/resourceVersion", f"{leader}/args"]
