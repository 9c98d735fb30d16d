"""The one table of TPU generation facts: lookups, and the sandbox prints its figures."""

from __future__ import annotations

import pytest

from remote.accelerators import GENERATIONS, generation_by_hbm_limit, generation_facts
from sandbox.engine import plan_startup


@pytest.mark.parametrize(("accel", "generation", "usable_gib", "ceiling"), [
    ("v5litepod-8", "v5e", 15.75, 0.92), ("v5e-4", "v5e", 15.75, 0.92), ("V6E-8", "v6e", 31.25, 0.92),
    ("v5p-8", "v5p", 95.0, None), ("v4-8", "v4", None, None), ("tpu7x-8", "tpu7x", None, None),
])
def test_generation_facts_by_accelerator_type(accel, generation, usable_gib, ceiling):
    facts = generation_facts(accel)
    assert facts is not None and facts.generation == generation
    assert facts.hbm_usable_gib == usable_gib and facts.max_hbm_utilization == ceiling


def test_nominal_hbm_and_native_formats():
    assert {g: f.hbm_nominal_gib for g, f in GENERATIONS.items()} == {
        "v5e": 16.0, "v6e": 32.0, "v5p": 95.0, "v4": 32.0, "tpu7x": 192.0}
    assert generation_facts("tpu7x-8").hbm_gib == 192.0          # nominal when no usable figure was seen
    assert generation_facts("tpu7x-8").supports_format("fp8_e4m3")
    assert not generation_facts("v6e-8").supports_format("fp8")
    assert generation_facts("v5litepod-1").supports_format("bfloat16")


@pytest.mark.parametrize("accel", ["v9z-8", "", None, "gpu-a100"])
def test_unknown_types_have_no_facts(accel):
    assert generation_facts(accel) is None


@pytest.mark.parametrize(("accel", "generation"), [("v5litepod-1", "v5e"), ("v6e-1", "v6e"), ("v5p-8", "v5p")])
def test_the_sandbox_engine_prints_the_tables_hbm_limit(accel, generation):
    plan = plan_startup(["Qwen/Qwen3-0.6B", "--max-model-len", "4096"], accel)
    limit = GENERATIONS[generation].hbm_usable_gib
    assert plan.hbm_limit_gib == limit
    assert any(f"hbm=[(0.0, {limit!r})" in line for _, line in plan.lines)


def test_generation_from_the_printed_hbm_limit():
    assert generation_by_hbm_limit(15.75).generation == "v5e"
    assert generation_by_hbm_limit(31.25).generation == "v6e"
    assert generation_by_hbm_limit(12.0) is None and generation_by_hbm_limit(None) is None
