"""The sandbox Kubernetes API's 422s: the Status the API server answers for an invalid Deployment or
LeaderWorkerSet (message, reason Invalid, causes with their fields)."""

from __future__ import annotations

import copy

import pytest

from sandbox.gke.cluster_data import demo_deployment
from sandbox.gke.store import ApiError
from sandbox.gke.validation import validate_deployment, validate_lws
from sandbox.gke.writes import lws_with_defaults, with_defaults


def test_the_demo_deployment_is_valid_and_a_broken_one_lists_every_cause() -> None:
    good = with_defaults(demo_deployment())
    validate_deployment(good)
    bad = copy.deepcopy(good)
    bad["spec"]["template"]["spec"]["containers"] = [{"name": "vllm", "resources": {"limits": {"google.com/tpu": "4x"}}},
                                                     {"name": "vllm", "image": "i"}]
    bad["spec"]["strategy"] = {"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}
    with pytest.raises(ApiError) as refused:
        validate_deployment(bad)
    status = refused.value.status()
    assert (status["code"], status["reason"], status["details"]["kind"]) == (422, "Invalid", "Deployment")
    assert [c["field"] for c in status["details"]["causes"]] == [
        "spec.strategy.rollingUpdate", "spec.template.spec.containers[0].image",
        "spec.template.spec.containers[0].resources.limits[google.com/tpu]", "spec.template.spec.containers[1].name"]
    assert status["message"].startswith('Deployment.apps "vllm-llama" is invalid: [spec.strategy.rollingUpdate: '
                                        "Forbidden: may not be specified when strategy `type` is 'Recreate', ")


def test_a_leaderworkerset_needs_a_worker_template_and_a_short_name() -> None:
    with pytest.raises(ApiError) as refused:
        validate_lws(lws_with_defaults({"metadata": {"name": "x" * 64}, "spec": {"leaderWorkerTemplate": {"size": 0}}}))
    causes = refused.value.status()["details"]["causes"]
    assert [c["field"] for c in causes] == ["metadata.name", "spec.leaderWorkerTemplate.size",
                                            "spec.leaderWorkerTemplate.workerTemplate"]
