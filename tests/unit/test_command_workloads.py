"""Command mode with GKE workloads: ``swap deploy/NAME``... completed and parsed beside the nodes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from console.screens.command import Command, candidates, parse_command
from remote.gke.models import ClusterRef
from remote.gke.parse import workload_from_json
from tests.unit.test_gke_parse import DEPLOYMENT

LLAMA = workload_from_json(DEPLOYMENT, ClusterRef("p", "us-east5", "tpu-serving"))
assert LLAMA is not None
OTHER = replace(LLAMA, cluster="tpu-b", name="other")
TWIN = replace(LLAMA, namespace="staging")


def test_a_unique_name_is_short_and_a_repeated_one_says_where() -> None:
    options = candidates([], workloads=[LLAMA, OTHER, TWIN])
    assert "rollback deploy/other" in options and "bench deploy/other" in options
    assert "swap tpu-serving/default/deploy/vllm-llama" in options and "swap deploy/vllm-llama" not in options
    assert parse_command("rollback deploy/other", [], workloads=[LLAMA, OTHER, TWIN]) == Command(
        "rollback", workload="deploy/other")
    assert parse_command("watch tpu-serving/staging/deploy/vllm-llama", [], workloads=[LLAMA, OTHER, TWIN]) == Command(
        "startup", workload="tpu-serving/staging/deploy/vllm-llama")
    with pytest.raises(ValueError, match="several clusters or namespaces: say which, e.g. tpu-serving/"):
        parse_command("swap deploy/vllm-llama", [], workloads=[LLAMA, OTHER, TWIN])
    with pytest.raises(ValueError, match="No GKE workload deploy/nope"):
        parse_command("bench deploy/nope", [], workloads=[LLAMA])
    with pytest.raises(ValueError, match="node takes a TPU node, not a GKE workload; a workload has startup"):
        parse_command("node deploy/other", [], workloads=[OTHER])


def test_read_only_mode_offers_and_takes_no_swap_or_rollback_of_a_workload() -> None:
    options = candidates([], readonly=True, workloads=[LLAMA])
    assert "metrics deploy/vllm-llama" in options and not any(o.startswith(("swap ", "rollback ")) for o in options)
    with pytest.raises(ValueError, match="rollback changes the fleet and read-only mode is on"):
        parse_command("rollback deploy/vllm-llama", [], readonly=True, workloads=[LLAMA])
