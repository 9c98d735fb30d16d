"""The fleet cache on disk: what the first frame shows before the first TPU API list."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from console.flows.fleet_cache import FleetCache, cache_for, default_cache_path
from remote.models import FleetProblem, FleetSnapshot, Node, QueuedResource, WorkerEndpoint

SAVED = datetime(2026, 12, 1, 12, 34, 56, tzinfo=UTC)
HOSTILE = "[/x][link=http://e.x]L[/link]\x1b]52;c;QQ==\x07\x1b[2J\nforged"


def _snapshot() -> FleetSnapshot:
    node = Node(project="inference-prod", zone="us-east5-a", name="vllm-flex-b", state="READY",
                accelerator_type="v6e-8", provisioning_model="flex-start",
                termination_time=datetime(2026, 12, 1, 14, 0, tzinfo=UTC), health="HEALTHY",
                health_description="serving; HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123",
                symptoms=("HBM_OUT_OF_MEMORY",), runtime_version="v2-alpha-tpuv6e", queued_resource="qr-flex-b",
                create_time=datetime(2026, 12, 1, 10, 0, tzinfo=UTC), node_id="1234567890",
                workers=(WorkerEndpoint(0, "10.0.0.2", "34.1.2.3"), WorkerEndpoint(1, "10.0.0.3", None)),
                raw={"metadata": {"startup-script": "docker run -e HF_TOKEN=hf_rawsecretrawsecretrawsecret1"}})
    hostile = Node(project="research-sandbox", zone="europe-west4-a", name=HOSTILE, state="CREATING",
                   accelerator_type="v5litepod-8")
    qr = QueuedResource(project="inference-prod", zone="us-east5-a", name="qr-flex-b", state="ACTIVE",
                        provisioning_model="flex-start", state_initiator="USER", accelerator_type=None,
                        max_run_duration_s=7200.0, termination_time=datetime(2026, 12, 1, 14, 0, tzinfo=UTC),
                        failure=None, node_ids=("vllm-flex-b",), raw={"name": "qr"})
    problem = FleetProblem("denied-project", None, 403, "Permission 'tpu.nodes.list' denied")
    return FleetSnapshot((node, hostile), (qr,), (problem,))


def test_a_saved_fleet_reads_back_field_for_field(tmp_path: Path) -> None:
    cache = FleetCache(tmp_path / "state" / "fleet-cache.json", "demo")
    snapshot = _snapshot()
    cache.save(snapshot, SAVED)
    cached = cache.load()
    assert cached is not None
    assert cached.saved_at == SAVED
    node, hostile = cached.snapshot.nodes
    # every field but raw (not compared, not kept); the free text with its secret masked
    assert node == dataclasses.replace(snapshot.nodes[0], health_description="serving; HF_TOKEN=***")
    assert node.raw == {} and node.workers[1] == WorkerEndpoint(1, "10.0.0.3", None)
    assert node.time_left_s(SAVED) == pytest.approx(5104.0)
    assert hostile.name == HOSTILE            # outside text stays data; the screen makes it printable
    assert cached.snapshot.queued_resources == snapshot.queued_resources
    assert cached.snapshot.queued_resources[0].max_run_duration_s == 7200.0
    assert cached.snapshot.problems == snapshot.problems


def test_secrets_never_reach_the_cache_file(tmp_path: Path) -> None:
    cache = FleetCache(tmp_path / "fleet-cache.json", "demo")
    cache.save(_snapshot(), SAVED)
    text = cache.path.read_text()
    assert "hf_rawsecret" not in text and "startup-script" not in text   # raw JSON is not kept
    assert "hf_abcdefghijklmnopqrstuvwxyz0123" not in text                  # free text is scrubbed
    assert "serving; HF_TOKEN=" in text


@pytest.mark.parametrize("content", [
    b"",
    b"{not json",
    b"\xff\xfe\x00garbage",
    b"[]",
    b'{"version": 1, "source": "demo"}',
    b'{"version": 1, "source": "demo", "saved_at": "yesterday", "nodes": [], "queued_resources": [],'
    b' "problems": []}',
    b'{"version": 1, "source": "demo", "saved_at": "2026-12-01T12:00:00+00:00", "nodes": [{"name": 5}],'
    b' "queued_resources": [], "problems": []}',
    b'{"version": 1, "source": "demo", "saved_at": "2026-12-01T12:00:00+00:00", "nodes": [{"project": "p",'
    b' "zone": "z", "name": "n", "state": "READY", "accelerator_type": ["v6e-8"]}], "queued_resources": [],'
    b' "problems": []}',
    b'{"version": 1, "source": "demo", "saved_at": "2026-12-01T12:00:00+00:00", "nodes": "abc",'
    b' "queued_resources": [], "problems": []}',
])
def test_a_corrupt_cache_is_ignored(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "fleet-cache.json"
    path.write_bytes(content)
    assert FleetCache(path, "demo").load() is None


def test_another_source_or_version_is_not_shown(tmp_path: Path) -> None:
    path = tmp_path / "fleet-cache.json"
    FleetCache(path, "demo").save(_snapshot(), SAVED)
    assert FleetCache(path, "/home/me/.config/tpu-console/config.toml").load() is None
    data = json.loads(path.read_text())
    data["version"] = 99
    path.write_text(json.dumps(data))
    assert FleetCache(path, "demo").load() is None
    assert FleetCache(tmp_path / "absent.json", "demo").load() is None


def test_the_default_path_is_under_xdg_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "st"))
    assert default_cache_path() == tmp_path / "st" / "tpu-console" / "fleet-cache.json"
    assert cache_for(None, demo=True).source == "demo"
    config = tmp_path / "config.toml"
    assert cache_for(config, demo=False).source == str(config.resolve())


def test_a_demo_run_keeps_the_real_fleets_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "st"))
    config = tmp_path / "config.toml"
    real, demo = cache_for(config, demo=False), cache_for(None, demo=True)
    assert real.path == tmp_path / "st" / "tpu-console" / "fleet-cache.json"
    assert demo.path == tmp_path / "st" / "tpu-console" / "fleet-cache-demo.json"
    fleet = _snapshot()
    real.save(dataclasses.replace(fleet, nodes=fleet.nodes[:1]), SAVED)
    demo.save(dataclasses.replace(fleet, nodes=fleet.nodes[1:]), SAVED)     # after: the demo run came second
    real_back, demo_back = real.load(), demo.load()
    assert real_back is not None and [n.name for n in real_back.snapshot.nodes] == ["vllm-flex-b"]
    assert demo_back is not None and [n.name for n in demo_back.snapshot.nodes] == [HOSTILE]
