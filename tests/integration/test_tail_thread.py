"""The tail's line thread (issue 18): the per-line work runs off the event loop, in log order,
and the thread ends with the watch (real asyncssh client against the sandbox VM)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncssh
import pytest

from console.flows.startup_watch import StartupWatch
from remote.container.tail import LogTail, TailStatus
from remote.ssh import SshTarget, connect
from sandbox.vm import SandboxVm

READY_ARGV = ["Qwen/Qwen3-8B", "--max-model-len", "8192", "--tensor-parallel-size", "8"]
ALIAS = "tpu.4242-0"


def _tail_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("log-tail-")]


async def _until(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while not predicate():
        if loop.time() > end:
            raise AssertionError("timed out")
        await asyncio.sleep(0.02)


@pytest.fixture
async def vm_target(tmp_path: Path) -> AsyncIterator[tuple[SandboxVm, SshTarget]]:
    key = asyncssh.generate_private_key("ssh-ed25519")
    # a burst with one 2 MB chunk of long lines due at once (docker writes it in one go)
    vm = SandboxVm(node_name="vllm-a", accelerator_type="v5litepod-8", authorized_client_key=key,
                   boot_s=1.0, burst_lines_per_s=5000, burst_s=1.0, burst_chunk_bytes=2_000_000)
    await vm.start()
    known = tmp_path / "google_compute_known_hosts"
    known.write_text(vm.known_hosts_line(ALIAS))
    target = SshTarget(host="127.0.0.1", port=vm.ssh_port, user="operator", private_key=None,
                       known_hosts=known, host_key_alias=ALIAS, client_keys=(key,), node_name="vllm-a")
    yield vm, target
    await vm.stop()


async def test_the_watch_reads_on_its_line_thread_and_hands_the_loop_every_line_in_order(vm_target) -> None:
    vm, target = vm_target
    await vm.boot_container(READY_ARGV)
    plan = vm.docker.find("vllm").plan
    loop_thread = threading.current_thread()
    seen_on: dict[str, set[str]] = {"read": set(), "lines": set(), "status": set()}
    received: list[str] = []

    def read(batch: list[object]) -> None:
        seen_on["read"].add(threading.current_thread().name)

    def on_lines(batch: list[tuple[object, str]]) -> None:
        seen_on["lines"].add(threading.current_thread().name)
        received.extend(text for _, text in batch)

    def on_status(status: TailStatus) -> None:
        seen_on["status"].add(threading.current_thread().name)

    watch = StartupWatch(target, container="vllm", on_lines=on_lines, on_status=on_status,
                         tail_options={"poll_interval_s": 0.1, "max_batch_lines": 500})
    reader_feed = watch.reader.feed_lines

    def feed(items: list[tuple[object, str]]) -> None:      # the real reader, watched for its thread
        read([])
        reader_feed(items)  # type: ignore[arg-type]

    watch.reader.feed_lines = feed  # type: ignore[method-assign]
    await watch.connect()
    task = asyncio.create_task(watch.follow())
    await _until(lambda: watch.tail_thread is not None)
    thread = watch.tail_thread
    await _until(lambda: len(received) >= len(plan.lines))
    watch.stop()
    await task
    await watch.close()

    # every line, in the log's order, the big chunk's ~1,400-character lines whole
    assert received == [line for _, line in plan.lines]
    assert sum(" chunk line " in line and len(line) >= 1390 for line in received) >= 1000
    # the reader read on the tail's thread; the callbacks ran on the loop's
    assert seen_on["read"] == {thread.name} and thread is not loop_thread
    assert seen_on["lines"] == {loop_thread.name} and seen_on["status"] == {loop_thread.name}
    assert watch.state.ready and watch.lines_received == len(plan.lines)
    # the thread ended with the watch
    assert not thread.is_alive() and watch.tail_thread is None and _tail_threads() == []


async def test_the_line_thread_ends_when_the_tail_is_cancelled(vm_target) -> None:
    vm, target = vm_target
    await vm.boot_container(READY_ARGV)
    received: list[str] = []
    tail = LogTail(lambda: connect(target), "vllm", on_lines=lambda batch: received.extend(t for _, t in batch),
                   on_status=lambda status: None, poll_interval_s=0.1)
    task = asyncio.create_task(tail.run())
    await _until(lambda: len(received) >= 100)
    thread = tail.thread
    assert thread is not None and thread.is_alive()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not thread.is_alive() and tail.thread is None and _tail_threads() == []


async def test_a_slow_line_thread_stops_the_channel_reading_and_loses_nothing(vm_target, monkeypatch) -> None:
    """Backpressure: while the thread is behind by more than QUEUED_BYTES_HIGH the session stops
    reading (the SSH window then holds the sender), so the bytes waiting stay bounded."""
    import time

    import remote.container.tail as tail_module

    high = 256 << 10
    monkeypatch.setattr(tail_module, "QUEUED_BYTES_HIGH", high)
    monkeypatch.setattr(tail_module, "QUEUED_BYTES_LOW", 64 << 10)
    vm, target = vm_target
    await vm.boot_container(READY_ARGV)
    plan = vm.docker.find("vllm").plan
    received: list[str] = []
    queued: list[int] = []
    tail: LogTail

    def slow(batch: list[object]) -> None:          # a consumer slower than the node (thread side)
        queued.append(tail.queued_bytes)
        time.sleep(0.01)

    tail = LogTail(lambda: connect(target), "vllm", on_lines=lambda batch: received.extend(t for _, t in batch),
                   on_status=lambda status: None, prepare_lines=slow, poll_interval_s=0.1, max_batch_lines=100)
    task = asyncio.create_task(tail.run())
    await _until(lambda: len(received) >= len(plan.lines), timeout_s=60)
    tail.stop()
    await task
    assert received == [line for _, line in plan.lines]
    # one SSH packet (asyncssh's default max packet: 32 KiB) may land after the high mark
    assert max(queued) > 0 and max(queued) <= high + (64 << 10), max(queued)


async def test_the_switch_interval_is_short_while_a_watch_follows_and_restored_after(vm_target) -> None:
    import sys

    from console.flows.startup_watch import SWITCH_INTERVAL_S

    vm, target = vm_target
    await vm.boot_container(READY_ARGV)
    before = sys.getswitchinterval()
    seen: list[float] = []
    watch = StartupWatch(target, container="vllm", on_lines=lambda batch: seen.append(sys.getswitchinterval()),
                         tail_options={"poll_interval_s": 0.1})
    await watch.connect()
    task = asyncio.create_task(watch.follow())
    await _until(lambda: len(seen) >= 3)
    watch.stop()
    await task
    await watch.close()
    assert before > SWITCH_INTERVAL_S and set(seen) == {SWITCH_INTERVAL_S}
    assert sys.getswitchinterval() == before
