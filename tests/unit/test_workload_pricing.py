"""$/Mtok of a GKE workload: the node pool's generation (machine type) and provisioning model, the pod's chips."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from console.config import DEFAULT_PRICES
from console.flows.workload_bench import workload_api_key, workload_pricing
from remote.gke.models import ClusterRef, NodePool
from remote.gke.parse import workload_from_json
from tests.unit.test_gke_parse import DEPLOYMENT

WORKLOAD = workload_from_json(DEPLOYMENT, ClusterRef("p", "us-east5", "c"))


def _pool(machine_type: str, model: str) -> NodePool:
    return NodePool(project="p", location="us-east5", cluster="c", name="pool", machine_type=machine_type,
                    provisioning_model=model)


def test_the_pools_generation_and_provisioning_model_and_the_pods_chips() -> None:
    assert WORKLOAD is not None and WORKLOAD.chips == 4
    pricing = workload_pricing(WORKLOAD, _pool("ct5lp-hightpu-4t", "spot"), DEFAULT_PRICES)
    assert (pricing.generation, pricing.provisioning_model, pricing.chips) == ("v5e", "spot", 4)
    assert pricing.price_per_chip_hour_usd == DEFAULT_PRICES["v5e"]["spot"]
    assert pricing.usd_per_mtok(1000.0) == pytest.approx(DEFAULT_PRICES["v5e"]["spot"] * 4 / 3.6)
    flex = workload_pricing(WORKLOAD, _pool("ct6e-standard-4t", "flex-start"), DEFAULT_PRICES,
                            provisioning_model="on-demand")
    assert (flex.generation, flex.provisioning_model, flex.price_per_chip_hour_usd) == ("v6e", "on-demand", 2.70)


def test_a_leader_worker_set_group_bills_every_pods_chips() -> None:
    assert WORKLOAD is not None
    group = replace(WORKLOAD, size=4)
    assert workload_pricing(group, _pool("ct6e-standard-4t", "reserved"), DEFAULT_PRICES).chips == 16


def test_the_api_key_from_the_container_args(monkeypatch: pytest.MonkeyPatch) -> None:
    assert WORKLOAD is not None
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    raw = copy.deepcopy(WORKLOAD.raw)
    serving = next(c for c in raw["spec"]["template"]["spec"]["containers"] if c["name"] == WORKLOAD.container)
    serving["args"] = [*serving.get("args", []), "--api-key=s3cret"]
    keyed = replace(WORKLOAD, raw=raw)
    assert workload_api_key(WORKLOAD) is None
    assert workload_api_key(keyed) == "s3cret" and workload_api_key(keyed, "given") == "given"
