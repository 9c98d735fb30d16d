"""The real asyncssh client (remote.ssh, remote.container.docker, remote.container.tail) against the sandbox TPU VM."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncssh
import pytest

from remote.container.docker import (
    DockerMissing,
    docker_inspect,
    docker_ps,
    docker_pull,
    docker_rm_f,
    docker_run,
)
from remote.container.tail import LogTail, TailStatus, parse_docker_timestamp
from remote.errors import VllmHttpError
from remote.ssh import (
    HostKeyChanged,
    HostKeyUnknown,
    SshAuthRefused,
    SshTarget,
    SshTimeout,
    SshUnreachable,
    connect,
    forward_port,
    probe_models,
)
from sandbox.engine import plan_startup
from sandbox.vm import SandboxVm
from tests.sandbox_keys import host_keys_unpublished

ACCEL = "v5litepod-8"
READY_ARGV = ["Qwen/Qwen3-8B", "--max-model-len", "8192", "--tensor-parallel-size", "8"]
OOM_ARGV = ["Qwen/Qwen3-8B", "--gpu-memory-utilization", "0.95", "--tensor-parallel-size", "8"]
ALIAS = "tpu.4242-0"


@pytest.fixture
def client_key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519")


@pytest.fixture
async def make_vm(client_key: asyncssh.SSHKey) -> AsyncIterator[Callable[..., object]]:
    vms: list[SandboxVm] = []

    async def make(**kw: object) -> SandboxVm:
        vm = SandboxVm(node_name="vllm-a", accelerator_type=ACCEL, authorized_client_key=client_key,
                       boot_s=kw.pop("boot_s", 2.5), **kw)  # type: ignore[arg-type]
        await vm.start()
        vms.append(vm)
        return vm

    yield make
    for vm in vms:
        await vm.stop()


def _target(vm: SandboxVm, known_hosts: Path, key: asyncssh.SSHKey, **kw: object) -> SshTarget:
    return SshTarget(host="127.0.0.1", port=vm.ssh_port, user="operator", private_key=None,
                     known_hosts=known_hosts, host_key_alias=ALIAS, client_keys=(key,), node_name="vllm-a",
                     **kw)  # type: ignore[arg-type]


@pytest.fixture
async def vm_target(make_vm, client_key, tmp_path) -> tuple[SandboxVm, SshTarget]:
    vm = await make_vm()
    known = tmp_path / "google_compute_known_hosts"
    known.write_text(vm.known_hosts_line(ALIAS))
    return vm, _target(vm, known, client_key)


class Recorder:
    """Collects what a LogTail delivers."""

    def __init__(self) -> None:
        self.lines: list[tuple[object, str]] = []
        self.statuses: list[TailStatus] = []
        self.batches = 0

    def on_lines(self, batch: list[tuple[object, str]]) -> None:
        self.batches += 1
        self.lines.extend(batch)

    def on_status(self, status: TailStatus) -> None:
        self.statuses.append(status)

    def texts(self) -> list[str]:
        return [text for _, text in self.lines]

    async def until(self, predicate: Callable[[], bool], timeout_s: float = 15.0) -> None:
        for _ in range(int(timeout_s / 0.02)):
            if predicate():
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"timed out; statuses: {self.statuses[-3:]}, lines: {len(self.lines)}")


def _tail(target: SshTarget, rec: Recorder, **kw: object) -> LogTail:
    return LogTail(lambda: connect(target), "vllm", on_lines=rec.on_lines, on_status=rec.on_status,
                   initial_backoff_s=0.05, max_backoff_s=0.2, poll_interval_s=0.1, **kw)  # type: ignore[arg-type]


# --- host keys and connection errors ------------------------------------------------------


async def test_unknown_host_key_accepted_once_then_recorded(make_vm, client_key, tmp_path) -> None:
    vm = await make_vm()
    known = tmp_path / "kh"
    known.write_text("tpu.1-0 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
    target = _target(vm, known, client_key)
    asked: list[str] = []

    async def accept(fingerprint: str) -> bool:
        asked.append(fingerprint)
        return True

    async with await connect(target, accept_new_host_key=accept) as conn:
        assert (await conn.run("echo hi")).stdout == "hi\n"
    expected = asyncssh.import_public_key(vm.host_public_key).get_fingerprint("sha256")
    assert asked == [expected]
    assert known.read_text().splitlines()[1] == f"{ALIAS} {vm.host_public_key}"
    async with await connect(target) as conn:        # now known: no callback needed
        assert (await conn.run("hostname")).stdout == "t1v-n-vllm-a-w-0\n"


async def test_unknown_host_key_refused_names_the_fingerprint(make_vm, client_key, tmp_path) -> None:
    vm = await make_vm()
    target = _target(vm, tmp_path / "absent" / "kh", client_key)

    async def refuse(fingerprint: str) -> bool:
        return False

    for callback in (None, refuse):
        with pytest.raises(HostKeyUnknown) as info:
            await connect(target, accept_new_host_key=callback)
        assert info.value.fingerprint.startswith("SHA256:")
        assert info.value.fingerprint in info.value.message
    assert not (tmp_path / "absent" / "kh").exists()
    assert vm.commands == []


async def test_changed_host_key_is_refused_with_the_line_to_remove(make_vm, client_key, tmp_path) -> None:
    vm = await make_vm()
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    known = tmp_path / "kh"
    known.write_text(f"# gcloud\ntpu.9-0 {other}\n{ALIAS} {other}\n")

    async def accept(fingerprint: str) -> bool:
        raise AssertionError("a changed key must never be offered for acceptance")

    with pytest.raises(HostKeyChanged) as info:
        await connect(_target(vm, known, client_key), accept_new_host_key=accept)
    assert f"at line 3 of {known}" in info.value.message
    assert f"run `ssh-keygen -f {known} -R {ALIAS}`" in info.value.message
    assert "recreated" in info.value.message and "intercepting" in info.value.message
    assert vm.commands == []


async def test_key_not_authorized(vm_target) -> None:
    _, target = vm_target
    stranger = asyncssh.generate_private_key("ssh-ed25519")
    with pytest.raises(SshAuthRefused, match="ssh-keys metadata") as info:
        await connect(SshTarget(**{**target.__dict__, "client_keys": (stranger,)}))
    assert "'operator'" in info.value.message and not info.value.retryable


async def test_unreachable_and_timeout(tmp_path, client_key) -> None:
    silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    target = SshTarget("127.0.0.1", port, "u", None, tmp_path / "kh", ALIAS, connect_timeout_s=0.3,
                       client_keys=(client_key,))
    with pytest.raises(SshTimeout, match="did not answer within 0.3 s") as timeout:
        await connect(target)
    assert timeout.value.retryable
    silent.close()
    await silent.wait_closed()
    with pytest.raises(SshUnreachable, match="Cannot reach"):
        await connect(SshTarget(**{**target.__dict__, "port": port}))


async def test_missing_private_key_file(tmp_path) -> None:
    target = SshTarget("127.0.0.1", 22, "u", tmp_path / "google_compute_engine", tmp_path / "kh", ALIAS)
    with pytest.raises(Exception, match="No private key at .*google_compute_engine"):
        await connect(target)


# --- the tail -----------------------------------------------------------------------------


async def test_tail_survives_a_drop_mid_boot_without_missing_or_duplicated_lines(vm_target) -> None:
    vm, target = vm_target
    await vm.boot_container(READY_ARGV)
    plan = vm.docker.find("vllm").plan
    assert plan.outcome == "ready"
    rec = Recorder()
    tail = _tail(target, rec)
    task = asyncio.create_task(tail.run())
    await rec.until(lambda: len(rec.lines) > len(plan.lines) // 3)
    vm.drop_connections()                               # mid-boot
    await rec.until(lambda: any(s.kind == "reconnecting" for s in rec.statuses))
    await rec.until(lambda: len(rec.lines) >= len(plan.lines))
    await asyncio.sleep(0.3)                             # a late duplicate would show up here
    tail.stop()
    await task
    assert rec.texts() == [line for _, line in plan.lines]
    stamps = [ts for ts, _ in rec.lines]
    assert all(ts is not None for ts in stamps) and stamps == sorted(stamps)
    kinds = [s.kind for s in rec.statuses]
    assert kinds[:2] == ["connecting", "connected"] and "reconnecting" in kinds and kinds[-1] == "connected"
    assert sum("--since" in c for c in vm.commands) >= 1
    assert rec.batches < len(plan.lines)                # delivered in batches, not line by line


async def test_the_sandbox_stops_only_our_follower_by_its_pid(vm_target) -> None:
    """The follower command prints its PID; stop_follower checks /proc/PID/cmdline, then kills it
    with sudo; a PID that is not our follower (or not following this container) is left alone."""
    from remote.container.follower import follower_command, follower_pid, stop_follower

    vm, target = vm_target
    await vm.boot_container(READY_ARGV)
    cid = vm.docker.find("vllm").id
    async with await connect(target) as conn:
        process = await conn.create_process(follower_command(["logs", "-f", "--timestamps", cid]))
        pid = follower_pid((await process.stdout.readline()).rstrip("\n"))
        assert pid is not None and vm.follower_pids() == [pid]
        assert (await conn.run(f"kill -TERM {pid}", check=False)).exit_status == 1      # root's: needs sudo
        assert await stop_follower(conn, pid, "ab" * 32) is False                       # not this container
        assert await stop_follower(conn, pid + 1, cid) is False                         # no such process
        assert vm.follower_pids() == [pid]
        assert await stop_follower(conn, pid, cid) is True
        await asyncio.wait_for(process.wait_closed(), 10)
        assert vm.follower_pids() == []


async def test_tail_follows_a_replacement_container_from_its_first_line(vm_target) -> None:
    vm, target = vm_target
    first_id = await vm.boot_container(READY_ARGV)
    first = vm.docker.find("vllm").plan
    rec = Recorder()
    task = asyncio.create_task(_tail(target, rec).run())
    await rec.until(lambda: len(rec.lines) >= 5)
    async with await connect(target) as conn:           # the swap, over SSH like the console does it
        assert (await docker_rm_f(conn, "vllm")).ok
        result = await docker_run(conn, ["-d", "--name", "vllm", "--privileged", "--net", "host",
                                         "vllm/vllm-tpu:v0.29.1", "vllm", "serve", *OOM_ARGV])
    new_id = result.stdout.strip()
    assert result.ok and re.fullmatch(r"[0-9a-f]{64}", new_id) and new_id != first_id
    second = vm.docker.find(new_id).plan
    await rec.until(lambda: rec.statuses[-1].kind == "exited")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    texts = rec.texts()
    old_part, new_part = texts[:len(texts) - len(second.lines)], texts[len(texts) - len(second.lines):]
    assert new_part == [line for _, line in second.lines]
    assert old_part == [line for _, line in first.lines][:len(old_part)] and len(old_part) >= 5
    finished = vm.docker.find(new_id).inspect(time.time_ns())["State"]["FinishedAt"]
    at = time.strftime("%H:%M:%S UTC", time.gmtime(parse_docker_timestamp(finished) // 10**9))
    # a stopped container is waited on, not given up: polled with backoff, and said so
    first_exit = next(s for s in rec.statuses if s.kind == "exited")
    assert first_exit == TailStatus("exited", 0, new_id, 1,
                                    f"waiting: container vllm exited (code 1) at {at}; polling every 0.1 s")
    assert {s.container_id for s in rec.statuses if s.kind == "connected"} == {first_id, new_id}


async def test_tail_waits_for_a_container_then_reports_its_exit(vm_target) -> None:
    vm, target = vm_target
    rec = Recorder()
    task = asyncio.create_task(_tail(target, rec).run())
    await rec.until(lambda: rec.statuses and rec.statuses[-1].kind == "waiting")
    assert rec.statuses[-1].message.startswith("waiting for container vllm: none by that name on the node yet")
    await vm.boot_container(OOM_ARGV)
    plan = vm.docker.find("vllm").plan
    assert plan.outcome == "failed" and plan.exit_code == 1
    await rec.until(lambda: rec.statuses[-1].kind == "exited")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert rec.texts() == [line for _, line in plan.lines]
    assert rec.statuses[-1].exit_code == 1


async def test_a_stopped_container_is_polled_with_backoff_and_followed_again_after_a_restart_in_place(
        vm_target) -> None:
    vm, target = vm_target
    await vm.boot_container(["Qwen/Qwen3-8B", "--tensor-parallel-size", "3"])    # config_error, exits at once
    box = vm.docker.find("vllm")
    first = box.plan
    rec = Recorder()
    tail = LogTail(lambda: connect(target), "vllm", on_lines=rec.on_lines, on_status=rec.on_status,
                   initial_backoff_s=0.05, max_backoff_s=0.4, poll_interval_s=0.1)
    task = asyncio.create_task(tail.run())
    await rec.until(lambda: sum(s.kind == "exited" for s in rec.statuses) >= 3)
    waits = [s.message.rsplit("polling every ", 1)[1] for s in rec.statuses if s.kind == "exited"]
    assert waits[:3] == ["0.1 s", "0.2 s", "0.4 s"]                    # backoff, capped at max_backoff_s
    assert rec.statuses[-1].message.startswith("waiting: container vllm exited (code 1) at ")
    second = plan_startup(READY_ARGV, ACCEL, boot_s=1.0)
    vm.docker.restart(box, second)                                    # docker restart: same id, RestartCount 1
    await rec.until(lambda: len(rec.lines) >= len(first.lines) + len(second.lines))
    await asyncio.sleep(0.3)
    tail.stop()
    await task
    started = box.inspect(time.time_ns())["State"]["StartedAt"]
    at = time.strftime("%H:%M:%S UTC", time.gmtime(parse_docker_timestamp(started) // 10**9))
    restarted = [s for s in rec.statuses if "restarted" in s.message]
    assert [(s.kind, s.container_id, s.restart_count, s.message) for s in restarted] == [
        ("connected", box.id, 1, f"container vllm restarted (restart 1) at {at}")]
    assert rec.texts() == [line for _, line in first.lines] + [line for _, line in second.lines]   # no dup, no gap


class WatchEvents:
    """What a StartupWatch hands the loop, in order: ("line", ts, text) and ("status", TailStatus)."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def on_lines(self, batch: list[tuple[object, str]]) -> None:
        self.events.extend(("line", ts, text) for ts, text in batch)

    def on_status(self, status: TailStatus) -> None:
        self.events.append(("status", status))

    def statuses(self) -> list[TailStatus]:
        return [event[1] for event in self.events if event[0] == "status"]

    async def until(self, predicate: Callable[[], bool], timeout_s: float = 15.0) -> None:
        for _ in range(int(timeout_s / 0.02)):
            if predicate():
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"timed out; statuses: {[s.message for s in self.statuses()]}")


def _startup_watch(target: SshTarget, events: WatchEvents, **kw: object):
    from console.flows.startup_watch import StartupWatch

    return StartupWatch(target, container="vllm", on_lines=events.on_lines, on_status=events.on_status,
                        tail_options={"initial_backoff_s": 0.05, "max_backoff_s": 0.2, "poll_interval_s": 0.1},
                        **kw)  # type: ignore[arg-type]


async def test_a_container_replaced_while_the_link_was_down_is_marked_from_its_last_line_read(vm_target) -> None:
    """The gap starts at the old container's last line read (docker's time), not when the console
    noticed the swap; the new container's lines are its own log from its start, not a catch-up."""
    from datetime import UTC, datetime

    vm, target = vm_target
    await vm.boot_container(READY_ARGV)
    old = vm.docker.find("vllm")
    events = WatchEvents()
    noticed = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)      # the console's clock, apart from the log's
    watch = _startup_watch(target, events, clock=lambda: noticed)
    await watch.connect()
    task = asyncio.create_task(watch.follow())
    await events.until(lambda: sum(e[0] == "line" for e in events.events) >= 8)
    vm.drop_connections()                # the link drops; the container is swapped before the tail is back
    vm.docker.remove(old)
    await vm.boot_container(OOM_ARGV)
    await events.until(lambda: any(s.message.startswith("resumed") for s in events.statuses()))
    watch.stop()
    await task
    new_id = vm.docker.find("vllm").id
    first_new = next(i for i, e in enumerate(events.events) if e[0] == "status" and e[1].container_id == new_id)
    old_lines = [e for e in events.events[:first_new] if e[0] == "line"]
    assert [text for _, _, text in old_lines] == old.texts[:len(old_lines)] and len(old_lines) >= 8
    last_read = old_lines[-1][1]
    assert [r.last_line_at for r in watch.replaced] == [last_read]
    assert watch.replaced[0].marker() == (
        f"container {old.id[:12]} replaced by {new_id[:12]} (noticed at 03:04:05 UTC); "
        f"{old.id[:12]}'s output after its last line read ({last_read:%H:%M:%S} UTC) was not seen")
    resumed = next(s.message for s in events.statuses() if s.message.startswith("resumed"))
    assert re.fullmatch(rf"resumed following container vllm: a new container \({new_id[:12]}\), read from its "
                        rf"start: \d+ lines? of its own log; the one before was last read at "
                        rf"{last_read:%H:%M:%S} UTC, its later output not seen", resumed), resumed


async def test_a_restart_found_after_a_lost_link_leaves_the_old_boots_last_lines_in_its_section(vm_target) -> None:
    """The link drops with lines of the old run still unread; the container restarts in place before
    the tail is back: ``--since`` replays the old run's last lines, then the new run's. The restart
    is said between the two, and the old boot's reader read every old line."""
    vm, target = vm_target
    await vm.boot_container(READY_ARGV)
    box = vm.docker.find("vllm")
    offsets = [offset for offset, _ in box.plan.lines]
    # cut after a line that shares its time with the next: that next one is printed, not yet read
    k = next(i for i in range(5, len(offsets) - 1) if offsets[i] == offsets[i + 1])
    second = plan_startup(READY_ARGV, ACCEL, boot_s=1.0)

    def cut() -> None:
        vm.drop_connections()
        vm.docker.restart(box, second)

    vm.docker.cut_after_followed_lines(k + 1, cut)
    events = WatchEvents()
    watch = _startup_watch(target, events)
    await watch.connect()
    task = asyncio.create_task(watch.follow())
    await events.until(lambda: watch.state.ready)
    watch.stop()
    await task
    old_run = box.texts[:box.run_starts[0]]
    assert len(old_run) > k + 1                                       # some of the old run was unread
    at = next(i for i, e in enumerate(events.events) if e[0] == "status" and "restarted" in e[1].message)
    texts = [(i, e[2]) for i, e in enumerate(events.events) if e[0] == "line"]
    assert [t for i, t in texts if i < at] == old_run                # the old boot's lines, all of them
    assert [t for i, t in texts if i > at] == [line for _, line in second.lines]
    assert events.events[at][1].restart_count == 1
    assert [r.old_state.lines_read for r in watch.restarts] == [len(old_run)]
    assert watch.state.lines_read == len(second.lines)


async def test_sudo_needing_a_password_stops_the_tail_with_one_sentence(make_vm, client_key, tmp_path) -> None:
    vm = await make_vm(sudo_password_required=True)
    known = tmp_path / "kh"
    known.write_text(vm.known_hosts_line(ALIAS))
    rec = Recorder()
    await asyncio.wait_for(_tail(_target(vm, known, client_key), rec).run(), 10)
    last = rec.statuses[-1]
    assert last.kind == "error"
    assert last.message.startswith("sudo on the node needs a password for this user")
    assert "sudo: a password is required" in last.message


async def test_docker_missing(make_vm, client_key, tmp_path) -> None:
    vm = await make_vm(docker_missing=True)
    known = tmp_path / "kh"
    known.write_text(vm.known_hosts_line(ALIAS))
    async with await connect(_target(vm, known, client_key)) as conn:
        with pytest.raises(DockerMissing, match="docker is not installed on vllm-a") as info:
            await docker_ps(conn, label="vllm-a")
    assert "sudo: docker: command not found" in info.value.message


async def test_tail_gives_up_after_max_attempts(vm_target) -> None:
    vm, target = vm_target
    await vm.stop()
    rec = Recorder()
    await asyncio.wait_for(_tail(target, rec, max_attempts=2).run(), 10)
    assert [s.kind for s in rec.statuses] == ["connecting", "reconnecting", "reconnecting", "error"]
    assert rec.statuses[-1].message.startswith("gave up after 2 attempts: Cannot reach")


# --- docker verbs and the port forward ----------------------------------------------------


async def test_docker_verbs_like_docker(vm_target) -> None:
    vm, target = vm_target
    container_id = await vm.boot_container(READY_ARGV, image="vllm/vllm-tpu:v0.29.1")
    async with await connect(target) as conn:
        info = await docker_inspect(conn, "vllm")
        assert info is not None and info["Id"] == container_id and info["Name"] == "/vllm"
        assert info["State"]["Status"] == "running" and info["State"]["Running"] is True
        assert info["Config"]["Cmd"] == ["vllm", "serve", *READY_ARGV]
        assert info["Config"]["Image"] == "vllm/vllm-tpu:v0.29.1" and info["Image"].startswith("sha256:")
        assert info["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
        assert info["HostConfig"]["NetworkMode"] == "host" and info["HostConfig"]["Privileged"] is True
        assert await docker_inspect(conn, "nope") is None
        rows = await docker_ps(conn)
        assert [(r["ID"], r["Names"], r["State"]) for r in rows] == [(container_id, "vllm", "running")]
        bad = await docker_pull(conn, "vllm/vllm-tpu:does-not-exist")
        assert (bad.exit_status, bad.stderr) == (1, "Error response from daemon: manifest for "
                                                    "vllm/vllm-tpu:does-not-exist not found: manifest unknown: "
                                                    "manifest unknown\n")
        good = await docker_pull(conn, "vllm/vllm-tpu:nightly")
        assert good.ok and "Digest: sha256:" in good.stdout
        conflict = await docker_run(conn, ["-d", "--name", "vllm", "vllm/vllm-tpu:nightly", "vllm", "serve", "m"])
        assert conflict.exit_status == 125 and 'The container name "/vllm" is already in use' in conflict.stderr
        hostile = "x'; rm -rf / #"
        assert (await docker_rm_f(conn, "vllm")).ok
        assert (await docker_rm_f(conn, "vllm")).ok            # absent: still exit 0, like docker
        run = await docker_run(conn, ["-d", "--name", "vllm", "-e", "HF_TOKEN=hf_x", "-v", "/mnt/cache:/cache",
                                      "vllm/vllm-tpu:nightly", "vllm", "serve", "Qwen/Qwen3-8B",
                                      "--served-model-name", hostile])
        assert run.ok
        info = await docker_inspect(conn, "vllm")
        assert info is not None and info["Config"]["Cmd"][-1] == hostile
        assert info["Mounts"][0]["Source"] == "/mnt/cache" and "HF_TOKEN=hf_x" in info["Config"]["Env"]
    assert all(c.startswith("sudo -n docker ") for c in vm.commands)


async def test_port_forward_reaches_the_node_openai_server_once_ready(vm_target) -> None:
    vm, target = vm_target
    await vm.boot_container(READY_ARGV + ["--served-model-name", "qwen"])
    async with await connect(target) as conn:
        listener, local_port = await forward_port(conn, 8000)
        url = f"http://127.0.0.1:{local_port}"
        try:
            with pytest.raises(VllmHttpError):
                await probe_models(url, timeout_s=2)          # still booting: nothing listens
            for _ in range(300):
                await asyncio.sleep(0.05)
                try:
                    models = await probe_models(url, timeout_s=2)
                    break
                except VllmHttpError:
                    continue
            else:
                raise AssertionError("never ready")
            assert models == ["qwen"]
            assert (await docker_rm_f(conn, "vllm")).ok
            with pytest.raises(VllmHttpError):
                await probe_models(url, timeout_s=2)
        finally:
            listener.close()


def test_plan_lines_have_shared_offsets() -> None:
    """The drop test is only meaningful when several lines share one timestamp (the resume boundary)."""
    plan = plan_startup(READY_ARGV, ACCEL, boot_s=2.5)
    offsets = [offset for offset, _ in plan.lines]
    assert len(offsets) - len(set(offsets)) > 5


# --- the watch verb against the whole sandbox (TPU API + SSH VMs + OpenAI servers) -----------


@pytest.fixture
def sandbox(tmp_path):
    from sandbox.runner import Sandbox

    box = Sandbox(tmp_path / "sandbox", boot_s=3.0, fast_boot_s=1.0)
    box.start()
    yield box
    box.stop()


def _phase_lines(lines: list[str]) -> list[tuple[str, int]]:
    from remote.vllm_log.reader import StartupReader, summary_json

    reader = StartupReader()
    for line in lines:
        reader.feed_line(line)
    reader.close()
    return [(m["phase"], m["line"]) for m in summary_json(reader.state)["phase_timeline"]]


def test_watch_follows_a_booting_node_to_ready_across_a_dropped_connection(sandbox, capsys) -> None:
    import json as jsonlib

    from console.cli import main

    vm = sandbox.vms["vllm-flex-b"]
    plan = sandbox.call(_plan_of(vm))
    # event-driven: the link drops right after the follower wrote its 12th line, however loaded
    # the machine (a 1 s timer raced the boot and the connect under load)
    sandbox.call(_cut_after(vm, 12))
    assert len(plan.lines) > 12 + 5
    code = main(["--config", str(sandbox.config_path), "watch", "vllm-flex-b", "--json"])
    captured = capsys.readouterr()
    assert vm.docker.followed_lines >= 12
    assert code == 0, captured.err
    summary = jsonlib.loads(captured.out)
    assert summary["ready"] is True and summary["failure"] is None
    assert summary["kv_cache_tokens"] == plan.kv_cache_tokens
    # phase marks carry line numbers: equal only when no line was lost or duplicated
    assert [(m["phase"], m["line"]) for m in summary["phase_timeline"]] == \
        _phase_lines([line for _, line in plan.lines])
    assert "reconnecting (attempt 1)" in captured.err
    assert "confirmed: /v1/models on port 8000 serves" in captured.err
    # the full log on disk, from the same data path: every line once, across the dropped connection
    import os

    from remote.secrets import scrub_text

    log = Path(re.search(r"full log of the launch: (\S+)", captured.err)[1])
    assert log.is_relative_to(os.environ["XDG_STATE_HOME"])
    assert log.read_text(encoding="utf-8").split("\n")[:-1] == [scrub_text(line) for _, line in plan.lines]


async def _cut_after(vm: SandboxVm, lines: int) -> None:
    vm.docker.cut_after_followed_lines(lines, vm.drop_connections)


async def _plan_of(vm: SandboxVm):
    return vm.docker.find("vllm").plan


async def _replace(vm: SandboxVm, argv: list[str]):
    vm.docker.remove(vm.docker.find("vllm"))
    await vm.boot_container(argv)
    return vm.docker.find("vllm").plan


def test_watch_reports_a_failed_boot_with_exit_1(sandbox, capsys) -> None:
    from console.cli import main

    vm = sandbox.vms["vllm-v5e-a"]
    plan = sandbox.call(_replace(vm, ["Qwen/Qwen3-0.6B", "--gpu-memory-utilization", "0.95"]))
    assert plan.outcome == "failed"
    code = main(["--config", str(sandbox.config_path), "watch", "vllm-v5e-a"])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    assert "watch inference-prod/us-west4-a/vllm-v5e-a" in captured.out           # the summary panel
    assert re.search(rf"Failure\s+{plan.failure_kind}", captured.out)
    assert f"failed: {plan.failure_kind}" in captured.err


def test_watch_marks_a_restart_in_place_and_reads_the_new_boot_from_a_fresh_state(sandbox, capsys,
                                                                                  tmp_path) -> None:
    import json as jsonlib

    from console.cli import main
    from console.flows.history_store import open_history

    vm = sandbox.vms["vllm-flex-b"]
    vm.boot_s = 6.0
    sandbox.call(_replace(vm, ["Qwen/Qwen3-0.6B", "--max-model-len", "4096", "--tensor-parallel-size", "8"]))
    box = vm.docker.find("vllm")
    restarted: list = []

    def restart() -> None:                 # on the sandbox loop, right after the 10th followed line
        vm.boot_s = 1.0
        restarted.append(plan_startup(["Qwen/Qwen3-0.6B", "--max-model-len", "4096", "--tensor-parallel-size", "8"],
                                      "v6e-8", boot_s=1.0))
        vm.docker.restart(box, restarted[0])

    sandbox.call(_cut_after_with(vm, 10, restart))
    db = tmp_path / "history.db"
    code = main(["--config", str(sandbox.config_path), "--db", str(db), "watch", "vllm-flex-b", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    second = restarted[0]
    summary = jsonlib.loads(captured.out)
    assert re.search(r"container vllm restarted \(restart 1\) at \d\d:\d\d:\d\d UTC; a fresh boot follows",
                     captured.err)
    # the summary is the new boot's alone: its lines and its phase marks from line 1
    assert summary["ready"] is True and summary["lines_read"] == len(second.lines)
    assert [(m["phase"], m["line"]) for m in summary["phase_timeline"]] == \
        _phase_lines([line for _, line in second.lines])
    store = open_history(None, db)
    try:
        rows = store.list_launches(node="vllm-flex-b")
    finally:
        store.close()
    mine = [r for r in rows if r.container_id == box.id]
    assert len(mine) == 1 and mine[0].restart_count == 1 and mine[0].outcome == "ready"


async def _cut_after_with(vm: SandboxVm, lines: int, cut) -> None:
    vm.docker.cut_after_followed_lines(lines, cut)


def test_watch_gives_a_replacing_container_its_own_reader_and_launch(sandbox, capsys, tmp_path) -> None:
    import json as jsonlib
    import threading

    from console.cli import main
    from console.flows.history_store import open_history
    from sandbox.runner import serve_args_for

    vm = sandbox.vms["vllm-flex-b"]
    vm.boot_s = 5.0
    sandbox.call(_replace(vm, serve_args_for("v6e-8", 8) or []))           # a fresh, slow boot
    first_id = vm.docker.find("vllm").id
    swapped: list = []

    def replace() -> None:
        vm.boot_s = 1.0
        swapped.append(sandbox.call(_replace(vm, ["Qwen/Qwen3-0.6B", "--max-model-len", "4096",
                                                 "--tensor-parallel-size", "8"])))

    stderr = sys.stderr

    def replace_once_following() -> None:             # mid-boot, outside the console (rm -f + run); not on a
        deadline = time.monotonic() + 30              # timer: under load the watch connects after any delay
        while "connected to " not in stderr.getvalue() and time.monotonic() < deadline:  # type: ignore[attr-defined]
            time.sleep(0.02)
        time.sleep(0.5)                               # some of the first boot's lines read
        replace()

    swapper = threading.Thread(target=replace_once_following, daemon=True)
    swapper.start()
    db = tmp_path / "history.db"
    code = main(["--config", str(sandbox.config_path), "--db", str(db), "watch", "vllm-flex-b", "--json"])
    swapper.join()
    captured = capsys.readouterr()
    second = swapped[0]
    new_id = vm.docker.find("vllm").id
    assert code == 0, captured.err
    summary = jsonlib.loads(captured.out)
    # the summary is the new container's alone: its lines, its model, its phase marks from line 1
    assert second.outcome == "ready" and summary["ready"] is True
    assert summary["lines_read"] == len(second.lines) and summary["model"] == "Qwen/Qwen3-0.6B"
    assert [(m["phase"], m["line"]) for m in summary["phase_timeline"]] == \
        _phase_lines([line for _, line in second.lines])
    marker = next(line for line in captured.err.splitlines() if line.startswith("container "))
    assert re.fullmatch(rf"container {first_id[:12]} replaced by {new_id[:12]} \(noticed at \d\d:\d\d:\d\d UTC\); "
                        rf"{first_id[:12]}'s output after its last line read \(\d\d:\d\d:\d\d UTC\) was not seen",
                        marker), marker
    store = open_history(None, db)
    try:
        launches = {launch.container_id: launch for launch in store.list_launches(node="vllm-flex-b")}
    finally:
        store.close()
    assert launches[first_id].outcome == "replaced" and launches[first_id].failure_detail == marker
    assert launches[new_id].outcome == "ready" and launches[new_id].kv_cache_tokens == second.kv_cache_tokens


def test_the_old_launch_is_closed_even_when_its_inspect_finishes_after_the_replacement(sandbox, capsys,
                                                                                      tmp_path) -> None:
    import json as jsonlib

    from console.cli import main
    from console.flows.history_store import open_history
    from sandbox.runner import serve_args_for

    vm = sandbox.vms["vllm-flex-b"]
    vm.boot_s = 6.0
    sandbox.call(_replace(vm, serve_args_for("v6e-8", 8) or []))          # a fresh, slow boot
    first_id = vm.docker.find("vllm").id
    booted: list = []

    def replace() -> None:           # on the sandbox loop, while the inspect of the first container is held
        vm.boot_s = 1.0
        vm.docker.remove(vm.docker.find("vllm"))
        booted.append(asyncio.ensure_future(vm.boot_container(
            ["Qwen/Qwen3-0.6B", "--max-model-len", "4096", "--tensor-parallel-size", "8"])))

    # the tail's inspect passes; the watch's own inspect of the first container (its launch) is held
    # until the tail and the new container's inspect have answered with the replacement
    sandbox.call(_hold_inspect(vm, replace))
    db = tmp_path / "history.db"
    code = main(["--config", str(sandbox.config_path), "--db", str(db), "watch", "vllm-flex-b", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert booted and jsonlib.loads(captured.out)["model"] == "Qwen/Qwen3-0.6B"
    new_id = vm.docker.find("vllm").id
    marker = next(line for line in captured.err.splitlines() if line.startswith("container "))
    store = open_history(None, db)
    try:
        launches = {launch.container_id: launch for launch in store.list_launches(node="vllm-flex-b")}
    finally:
        store.close()
    assert set(launches) == {first_id, new_id}
    assert launches[first_id].outcome == "replaced" and launches[first_id].failure_detail == marker
    assert launches[first_id].model == "google/gemma-3-27b-it"             # its own facts, not the new one's
    assert launches[new_id].outcome == "ready" and launches[new_id].model == "Qwen/Qwen3-0.6B"


async def _hold_inspect(vm: SandboxVm, on_held) -> None:
    vm.docker.hold_inspect(skip=1, release_after=2, on_held=on_held)


def test_watch_refuses_an_unknown_host_key_without_a_terminal(sandbox, capsys, monkeypatch) -> None:
    import io

    from console.cli import main

    sandbox.known_hosts_path.write_text("")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with host_keys_unpublished(sandbox, "vllm-v5e-a"):           # else the published key is pinned
        code = main(["--config", str(sandbox.config_path), "watch", "vllm-v5e-a"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    fingerprint = asyncssh.import_public_key(sandbox.vms["vllm-v5e-a"].host_public_key).get_fingerprint("sha256")
    assert f"presented the unknown host key {fingerprint}" in captured.err
    assert sandbox.known_hosts_path.read_text() == ""


def test_watch_accept_new_host_key_records_an_unknown_key_without_a_terminal(sandbox, capsys, monkeypatch) -> None:
    import io

    from console.cli import main

    vm = sandbox.vms["vllm-v5e-a"]
    alias = next(line.split()[0] for line in sandbox.known_hosts_path.read_text().splitlines()
                 if line.split()[2] in vm.host_public_key)
    others = [line for line in sandbox.known_hosts_path.read_text().splitlines() if not line.startswith(f"{alias} ")]
    sandbox.known_hosts_path.write_text("".join(f"{line}\n" for line in others))
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with host_keys_unpublished(sandbox, "vllm-v5e-a"):           # else the published key is pinned
        code = main(["--config", str(sandbox.config_path), "watch", "vllm-v5e-a", "--accept-new-host-key",
                     "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    fingerprint = asyncssh.import_public_key(vm.host_public_key).get_fingerprint("sha256")
    assert f"recording the new host key {fingerprint} of node vllm-v5e-a" in captured.err
    recorded = sandbox.known_hosts_path.read_text().splitlines()
    recorded_alias = recorded[-1].split()[0]                  # gcloud's plain alias (no guest attribute to suffix)
    assert recorded[:-1] == others and recorded_alias == alias
    assert f" as {recorded_alias} in {sandbox.known_hosts_path} (accept-new)" in captured.err
    assert asyncssh.import_public_key(" ".join(recorded[-1].split()[1:])).get_fingerprint("sha256") == fingerprint

    # a changed key is still refused, and the file keeps the recorded line
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    sandbox.known_hosts_path.write_text("".join(f"{line}\n" for line in others) + f"{recorded_alias} {impostor}\n")
    before = sandbox.known_hosts_path.read_text()
    with host_keys_unpublished(sandbox, "vllm-v5e-a"):
        code = main(["--config", str(sandbox.config_path), "watch", "vllm-v5e-a", "--accept-new-host-key"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert "Host key changed" in captured.err and "recording the new host key" not in captured.err
    assert sandbox.known_hosts_path.read_text() == before


def test_watch_unknown_and_ambiguous_names(sandbox, capsys) -> None:
    import copy

    from console.cli import main

    assert main(["--config", str(sandbox.config_path), "watch", "no-such-node"]) == 2
    assert "No node 'no-such-node' in " in capsys.readouterr().err
    world = sandbox.tpu_api.world
    source_project = next(p for p, proj in world.projects.items()
                          if any(n.endswith("/vllm-v5e-a") for n in proj.nodes))
    other, proj = next((p, v) for p, v in world.projects.items() if p != source_project and not v.denied)
    zone = next(z for z in proj.zones if z not in proj.unreachable_zones)
    twin = copy.deepcopy(next(n for k, n in world.projects[source_project].nodes.items()
                              if k.endswith("/vllm-v5e-a")))
    twin["name"] = f"projects/{other}/locations/{zone}/nodes/vllm-v5e-a"
    world.add_node(other, twin)
    assert main(["--config", str(sandbox.config_path), "watch", "vllm-v5e-a"]) == 2
    err = capsys.readouterr().err
    assert "2 nodes are named 'vllm-v5e-a'" in err and "name one as PROJECT/ZONE/NAME" in err
    assert f"{other}/{zone}/vllm-v5e-a (READY" in err and f"{source_project}/us-west4-a/vllm-v5e-a (READY" in err


async def test_terminal_prompt_records_the_key_only_on_yes(make_vm, client_key, tmp_path) -> None:
    import io

    from console.verbs.watch import terminal_host_key_prompt

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    vm = await make_vm()
    known = tmp_path / "kh"
    target = _target(vm, known, client_key)
    fingerprint = asyncssh.import_public_key(vm.host_public_key).get_fingerprint("sha256")
    said = io.StringIO()
    with pytest.raises(HostKeyUnknown):
        await connect(target, accept_new_host_key=terminal_host_key_prompt(target, Tty("\n"), said))
    assert f"Its host key fingerprint is {fingerprint}." in said.getvalue() and not known.exists()
    async with await connect(target, accept_new_host_key=terminal_host_key_prompt(target, Tty("yes\n"), said)):
        pass
    assert known.read_text() == vm.known_hosts_line(ALIAS)


# --- every worker of a multi-host slice --------------------------------------------------

SLICE = "vllm-v5e-16"


async def _plans_of(vms: list[SandboxVm]):
    return [vm.docker.find("vllm").plan for vm in vms]


def test_watch_follows_every_worker_of_a_slice_and_sums_hbm_over_workers(sandbox, capsys) -> None:
    import json as jsonlib

    from console.cli import main

    vms = sandbox.workers[SLICE]
    assert len(vms) == 4 and len({vm.ssh_port for vm in vms}) == 4
    assert len({vm.host_public_key for vm in vms}) == 4                    # each worker its own host key
    plans = sandbox.call(_plans_of(vms))
    code = main(["--config", str(sandbox.config_path), "watch", SLICE, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = jsonlib.loads(captured.out)
    assert summary["ready"] is True and summary["workers"] == 4 and summary["failure_worker"] is None
    assert summary["kv_cache_tokens"] == plans[0].kv_cache_tokens         # worker 0's engine lines
    assert summary["worker_lines_read"] == [len(p.lines) for p in plans]
    assert [len(p.lines) for p in plans[1:]] == [4, 4, 4]                  # TPU info + 3 HBM lines each
    by_stage = {item["stage"]: item for item in summary["slice_hbm"]}
    weights, after_kv, limit = plans[0].weights_gib, plans[0].hbm_after_kv_gib, plans[0].hbm_limit_gib
    assert by_stage["model_loaded"] == {"stage": "model_loaded", "used_gib": round(16 * weights, 2),
                                        "limit_gib": round(16 * limit, 2), "chips": 16, "workers": 4}
    assert by_stage["kv_cache"]["used_gib"] == round(16 * after_kv, 2)
    assert summary["hbm_used_gib"] == [weights] * 4                        # per chip stays per chip
    assert summary["worker_hbm_used_gib"] == [[after_kv] * 4] * 4
    for worker, vm in enumerate(vms):
        assert f"w{worker}| connected to node {SLICE} (127.0.0.1:{vm.ssh_port})" in captured.err
    assert "w0| confirmed: /v1/models on port 8000 serves" in captured.err

    code = main(["--config", str(sandbox.config_path), "watch", SLICE, "--worker", "0", "--json"])
    alone = capsys.readouterr()
    assert code == 0 and "workers" not in jsonlib.loads(alone.out) and "w1|" not in alone.err


def test_watch_of_one_worker_past_0_ends_at_ready_from_worker_0(sandbox, capsys) -> None:
    """Only worker 0's log says ready: ``--worker 2`` follows worker 0 quietly and ends at its ready."""
    import json as jsonlib

    from console.cli import main

    vms = sandbox.workers[SLICE]
    plans = sandbox.call(_plans_of(vms))
    code = main(["--config", str(sandbox.config_path), "watch", SLICE, "--worker", "2", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = jsonlib.loads(captured.out)
    assert summary["ready_on_worker"] == 0 and summary["ready"] is True and summary["phase"] == "ready"
    assert summary["lines_read"] == len(plans[2].lines)                      # worker 2's log, not worker 0's
    assert summary["hbm_after_kv_used_gib"] == [plans[0].hbm_after_kv_gib] * 4          # as every worker prints
    assert f"connected to node {SLICE} (127.0.0.1:{vms[2].ssh_port}); following" in captured.err
    assert f"127.0.0.1:{vms[0].ssh_port}) (worker 0) for its readiness only" in captured.err
    assert "worker 0 says ready" in captured.err and "confirmed: /v1/models on port 8000 serves" in captured.err
    assert "phase: ready" not in captured.err                                # worker 0's lines stay quiet


def test_a_restart_in_place_on_worker_1_gets_its_marker_and_a_fresh_boot_section(sandbox, capsys) -> None:
    import json as jsonlib

    from console.cli import main

    vms = sandbox.workers[SLICE]
    vms[0].boot_s = 6.0                                                   # worker 0 still booting meanwhile
    sandbox.call(_replace(vms[0], ["meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "4"]))
    box = vms[1].docker.find("vllm")
    worker_lines = [line for _, line in box.plan.lines]

    def restart() -> None:                 # on the sandbox loop, after worker 1's 2nd followed line
        vms[1].docker.restart(box, box.plan)

    sandbox.call(_cut_after_with(vms[1], 2, restart))
    code = main(["--config", str(sandbox.config_path), "watch", SLICE, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    markers = re.findall(r"^w(\d)\| container vllm restarted \(restart 1\) at \d\d:\d\d:\d\d UTC; a fresh boot follows$",
                         captured.err, re.M)
    assert markers == ["1"], captured.err
    summary = jsonlib.loads(captured.out)
    assert summary["ready"] is True and summary["workers"] == 4
    assert summary["worker_lines_read"][1] == len(worker_lines)             # the new run's lines alone


def test_a_failure_on_any_worker_fails_the_boot_and_names_the_worker(sandbox, capsys) -> None:
    import json as jsonlib

    from console.cli import main

    vms = sandbox.workers[SLICE]
    vms[0].boot_s = 30.0                                                  # worker 0 still booting
    sandbox.call(_replace(vms[0], ["meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "4"]))
    bad = sandbox.call(_replace(vms[2], ["meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "3"]))
    assert bad.outcome == "failed" and bad.failure_kind == "config_error"
    code = main(["--config", str(sandbox.config_path), "watch", SLICE, "--json"])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    summary = jsonlib.loads(captured.out)
    assert summary["ready"] is False and summary["failure_worker"] == 2
    assert summary["failure"] == "config_error"
    assert summary["failure_detail"].startswith("worker 2: ValueError: Number of devices 4 must be divisible")
    assert "w2| failed: config_error: " in captured.err
    code = main(["--config", str(sandbox.config_path), "watch", SLICE])       # the panel says it too
    panel = capsys.readouterr().out
    assert code == 1 and re.search(r"Failed on\s+worker 2", panel) and re.search(r"Workers\s+4 workers", panel)
