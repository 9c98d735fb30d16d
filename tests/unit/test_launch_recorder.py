"""The launch recorder on a real history file: whoever sees the end of a boot writes it, a launch
left by a process that is gone is claimed by the next watch, observed launches are requested when
their container started, and only ``repo@sha256:...`` digests reach the history."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

from console.flows.launch_recorder import LaunchRecorder
from remote.container.spec import ContainerSpec, container_start_time, repo_digest
from remote.startup import Phase, PhaseMark, StartupState
from store.history import HistoryStore

NODE = SimpleNamespace(name="vllm-a", project="p", zone="us-east5-a", accelerator_type="v6e-8",
                       provisioning_model="spot")
CID = "c0ffee" * 10 + "abcd"
DIGEST = "vllm/vllm-tpu@sha256:" + "ab" * 32
T0 = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)


def _booted(ready: bool) -> StartupState:
    marks = (PhaseMark(Phase.STARTING, T0, 1), PhaseMark(Phase.COMPILING, T0.replace(minute=1), 40))
    if ready:
        marks += (PhaseMark(Phase.READY, T0.replace(minute=7), 300),)
    return StartupState(phase=marks[-1].phase, timeline=marks, ready=ready, kv_cache_tokens=123_456,
                        compile_seconds=300.0, last_line_at=T0.replace(minute=7))


def _left_by_a_dead_process(path: Path, launch_id: int) -> None:
    conn = sqlite3.connect(path)
    conn.execute("UPDATE launches SET writer_pid = 2147483646 WHERE id = ?", [launch_id])  # no such process
    conn.commit()
    conn.close()


def test_a_later_watch_claims_an_interrupted_launch_and_completes_it(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    with HistoryStore(path) as store:
        swapped = store.start_launch(node="vllm-a", container_id=CID, requested_at=T0)
    _left_by_a_dead_process(path, swapped)          # `swap --yes` recorded it and exited
    with HistoryStore(path) as store:
        assert store.get_launch(swapped).outcome == "interrupted"
        recorder = LaunchRecorder(store, NODE)
        assert recorder.observe_container(CID) == swapped
        claimed = store.get_launch(swapped)
        assert claimed.outcome == "running"      # watched again: its end can still be seen
        recorder.record(_booted(ready=False))
        assert store.get_launch(swapped).outcome == "running"
        recorder.record(_booted(ready=True))
        done = store.get_launch(swapped)
    assert (done.outcome, done.kv_cache_tokens, done.compile_seconds) == ("ready", 123_456, 300.0)
    assert done.ready_at == "2026-11-30T10:07:00.000Z"
    with HistoryStore(path) as store:            # the watching process is alive: nobody interrupts it
        assert store.get_launch(swapped).outcome == "ready"


def test_a_finished_launch_is_not_reopened(tmp_path: Path) -> None:
    with HistoryStore(tmp_path / "h.db") as store:
        failed = store.start_launch(node="vllm-a", container_id=CID, outcome="failed", failure_kind="config_error")
        LaunchRecorder(store, NODE).observe_container(CID)
        assert store.get_launch(failed).outcome == "failed"


def test_a_container_that_exits_before_ready_ends_failed(tmp_path: Path) -> None:
    with HistoryStore(tmp_path / "h.db") as store:
        recorder = LaunchRecorder(store, NODE)
        launch_id = recorder.observe_container(CID)
        recorder.record_exit(_booted(ready=False), 137)
        launch = store.get_launch(launch_id)
        assert (launch.outcome, launch.failure_kind) == ("failed", "container_exited")
        assert "code 137" in launch.failure_detail
        ready = LaunchRecorder(store, NODE)
        other = ready.observe_container("f" * 64)
        ready.record_exit(_booted(ready=True), 0)    # stopped after it was ready: the boot ended well
        assert store.get_launch(other).outcome == "ready"


def test_an_observed_launch_is_requested_when_its_container_started(tmp_path: Path) -> None:
    inspect = {"Id": CID, "Created": "2026-11-30T09:59:58.123456789Z",
               "State": {"StartedAt": "2026-11-30T09:59:59.5Z"}, "Image": "sha256:" + "cd" * 32,
               "Name": "/vllm", "Config": {"Image": "vllm/vllm-tpu:latest", "Cmd": ["vllm", "serve", "org/m"]}}
    spec = ContainerSpec.from_inspect(inspect)
    assert spec.image_digest == "sha256:" + "cd" * 32 and spec.repo_digest is None   # only the local id known
    with HistoryStore(tmp_path / "h.db") as store:
        launch_id = LaunchRecorder(store, NODE).observe_container(
            CID, spec, requested_at=container_start_time(inspect))
        launch = store.get_launch(launch_id)
    assert launch.requested_at == "2026-11-30T09:59:58.123Z"
    assert launch.image_digest is None and launch.origin == "observed" and launch.model == "org/m"


def test_container_start_time_and_repo_digest() -> None:
    assert container_start_time({"Created": "2026-11-30T10:00:05Z",
                                 "State": {"StartedAt": "2026-11-30T12:00:00.000000001+02:00"}}) == T0
    assert container_start_time({"Created": "0001-01-01T00:00:00Z", "State": {}}) is None
    assert container_start_time({"Created": "yesterday"}) is None and container_start_time(None) is None
    assert repo_digest(DIGEST) == DIGEST
    assert repo_digest("sha256:" + "ab" * 32) is None
    assert repo_digest("vllm/vllm-tpu@sha256:abc") is None and repo_digest(None) is None


OTHER = "beef" * 16


def test_a_replacement_before_the_old_inspect_finished_closes_the_old_launch_and_keeps_facts_apart(
        tmp_path: Path) -> None:
    """The race: the replacement (B) shows up while the inspect of A (its launch) is still running.
    B's states wait for B's launch, and A's launch is closed `replaced` when A's inspect finishes."""
    with HistoryStore(tmp_path / "h.db") as store:
        recorder = LaunchRecorder(store, NODE)
        booting = _booted(ready=False)
        recorder.record(booting, CID)                          # A's lines, A's inspect not done yet
        recorder.record_replaced(booting, "container A replaced by B at 10:07:00", CID)
        recorder.record(_booted(ready=True), OTHER)            # B's lines, B's inspect not done either
        b_id = recorder.observe_container(OTHER)               # B's inspect finishes first
        a_id = recorder.observe_container(CID)                 # then A's
        assert a_id is not None and b_id is not None and a_id != b_id
        a, b = store.get_launch(a_id), store.get_launch(b_id)
        assert (a.container_id, a.outcome, a.failure_detail) == (CID, "replaced", "container A replaced by B at 10:07:00")
        assert a.ready_at is None and a.kv_cache_tokens == 123_456
        assert (b.container_id, b.outcome) == (OTHER, "ready")  # B's ready never went into A's launch
        assert recorder.container_id == OTHER and recorder.launch_id == b_id
        recorder.record(_booted(ready=True), OTHER)
        assert store.get_launch(a_id).outcome == "replaced"


def test_a_restart_before_the_inspect_finished_is_recorded_with_the_launch(tmp_path: Path) -> None:
    with HistoryStore(tmp_path / "h.db") as store:
        recorder = LaunchRecorder(store, NODE)
        recorder.record_restart(_booted(ready=False), 2)
        launch_id = recorder.observe_container(CID)
        recorder.record(_booted(ready=True), CID)
        launch = store.get_launch(launch_id)
    assert (launch.restart_count, launch.outcome) == (2, "ready")


def test_the_next_containers_state_never_goes_into_the_previous_launch(tmp_path: Path) -> None:
    with HistoryStore(tmp_path / "h.db") as store:
        recorder = LaunchRecorder(store, NODE)
        a_id = recorder.observe_container(CID)
        recorder.record(_booted(ready=False), CID)
        recorder.record_replaced(_booted(ready=False), "A replaced by B", CID)
        recorder.record(_booted(ready=True), OTHER)            # B's state before B's inspect finished
        assert store.get_launch(a_id).outcome == "replaced"
        b_id = recorder.observe_container(OTHER)
        assert store.get_launch(b_id).outcome == "ready" and store.get_launch(a_id).ready_at is None


def test_what_metrics_said_after_ready_is_stored_beside_the_logs_figures(tmp_path: Path) -> None:
    with HistoryStore(tmp_path / "h.db") as store:
        recorder = LaunchRecorder(store, NODE)
        launch_id = recorder.observe_container(CID)
        recorder.record(_booted(ready=True))                       # the log said 123,456 tokens
        written = recorder.record_served(300_000, 4.58, 2, 0.92)   # /metrics over two engines
        assert written == {"metrics_kv_cache_tokens": 300_000, "metrics_max_concurrency": 4.58,
                           "metrics_engines": 2, "metrics_gpu_memory_utilization": 0.92}
        assert recorder.record_served(300_000, 4.58, 2, 0.92) == {}        # unchanged: not written again
        launch = store.get_launch(launch_id)
    assert (launch.kv_cache_tokens, launch.metrics_kv_cache_tokens) == (123_456, 300_000)
    assert (launch.metrics_max_concurrency, launch.metrics_engines) == (4.58, 2)
    assert launch.metrics_gpu_memory_utilization == 0.92
    assert launch.to_json()["metrics_kv_cache_tokens"] == 300_000
