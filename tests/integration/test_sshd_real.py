"""remote.ssh / remote.container.tail against a real OpenSSH sshd (Debian's openssh-server).

The test starts ``/usr/sbin/sshd -D`` on a loopback port with a temporary host key, config and
authorized key. Its sessions get a PATH with a stand-in ``docker`` (a Python script serving
``inspect`` and ``logs -f --timestamps [--since]`` from files the test writes) and a ``sudo``
shim that accepts ``-n``. Skipped when sshd is not installed.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from remote.container.tail import LogTail, TailStatus
from remote.ssh import HostKeyChanged, HostKeyUnknown, SshAuthRefused, SshTarget, connect

SSHD = Path("/usr/sbin/sshd")
pytestmark = pytest.mark.skipif(not SSHD.exists(), reason="OpenSSH sshd not installed at /usr/sbin/sshd "
                                                          "(apt-get install openssh-server)")
ALIAS = "tpu.777-0"
CONTAINER_ID = "c0ffee" * 10 + "abcd"

DOCKER_STANDIN = r'''#!{python}
"""Stand-in docker: inspect and logs -f from files in $STATE_DIR (vLLM writes to stderr)."""
import json, os, sys, time
state_dir = {state_dir!r}
args = sys.argv[1:]
state = json.load(open(os.path.join(state_dir, "state.json")))
if args[:1] == ["inspect"]:
    name = args[-1]
    if name != state["name"]:
        print("[]"); print(f"Error: No such container: {{name}}", file=sys.stderr); sys.exit(1)
    print(json.dumps([{{"Id": state["id"], "Name": "/" + name, "State": {{"Status": state["status"],
          "Running": state["status"] == "running", "ExitCode": state["exit_code"]}}}}]))
    sys.exit(0)
if args[:2] == ["logs", "-f"]:
    since = (args[args.index("--since") + 1] if "--since" in args else "").encode()
    path = os.path.join(state_dir, args[-1] + ".log")
    out = sys.stderr.buffer          # bytes, as docker writes them
    sent = 0
    # Like the real `docker logs -f`, stdin is ignored: a follower ends when its output fails
    # (SIGPIPE / EIO) or on a signal (SIGHUP when its terminal goes), never because its client left.
    while True:
        lines = open(path, "rb").read().split(b"\n")[:-1]
        for line in lines[sent:]:
            if line.split(b" ", 1)[0] >= since:
                out.write(line + b"\n")
        out.flush()
        sent = len(lines)
        if json.load(open(os.path.join(state_dir, "state.json")))["status"] == "exited":
            sys.exit(0)
        time.sleep(0.05)
print("docker: stand-in supports inspect and logs -f only", file=sys.stderr)
sys.exit(1)
'''

SUDO_SHIM = """#!/bin/sh
# stand-in sudo: accepts -n and runs the command as the current user
[ "$1" = "-n" ] && shift
exec "$@"
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RealSshd:
    """A running sshd plus the files it serves."""

    def __init__(self, root: Path, client_key: asyncssh.SSHKey) -> None:
        self.root = root
        self.port = _free_port()
        self.user = getpass.getuser()
        self.host_key = asyncssh.generate_private_key("ssh-ed25519")
        self.state_dir = root / "state"
        self.state_dir.mkdir()
        bin_dir = root / "bin"
        bin_dir.mkdir()
        (bin_dir / "docker").write_text(DOCKER_STANDIN.format(python=sys.executable, state_dir=str(self.state_dir)))
        (bin_dir / "sudo").write_text(SUDO_SHIM)
        for tool in ("docker", "sudo"):
            (bin_dir / tool).chmod(0o755)
        (root / "host_ed25519").write_bytes(self.host_key.export_private_key("openssh"))
        (root / "host_ed25519").chmod(0o600)
        (root / "authorized_keys").write_text(client_key.export_public_key().decode())
        (root / "sshd_config").write_text(f"""
Port {self.port}
ListenAddress 127.0.0.1
HostKey {root}/host_ed25519
PidFile {root}/sshd.pid
AuthorizedKeysFile {root}/authorized_keys
StrictModes no
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowTcpForwarding yes
SetEnv PATH={bin_dir}:/usr/local/bin:/usr/bin:/bin
LogLevel VERBOSE
""")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)   # privilege separation directory
        self.process = subprocess.Popen([str(SSHD), "-D", "-f", str(self.root / "sshd_config"),
                                         "-E", str(self.root / "sshd.log")])
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.025)
        self.stop()
        pytest.skip(f"sshd did not start: {(self.root / 'sshd.log').read_text()[-500:]}")

    def session_pids(self) -> list[int]:
        """Per-connection sshd processes (children of the listener)."""
        assert self.process is not None
        path = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(pid) for pid in path.read_text().split()] if path.exists() else []

    def drop_connections(self) -> None:
        for pid in self.session_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:           # the session ended between the listing and the kill
                pass

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.drop_connections()
            self.process.terminate()
            self.process.wait(timeout=5)

    def write_state(self, status: str, exit_code: int = 0) -> None:
        tmp = self.state_dir / "state.tmp"
        tmp.write_text(json.dumps({"name": "vllm", "id": CONTAINER_ID, "status": status, "exit_code": exit_code}))
        tmp.replace(self.state_dir / "state.json")

    def append_log(self, lines: list[str]) -> None:
        self.append_log_bytes([line.encode() for line in lines])

    def append_log_bytes(self, lines: list[bytes]) -> None:
        with (self.state_dir / f"{CONTAINER_ID}.log").open("ab") as handle:
            handle.write(b"".join(line + b"\n" for line in lines))


@pytest.fixture
def client_key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519")


@pytest.fixture
def sshd(tmp_path: Path, client_key: asyncssh.SSHKey) -> Iterator[RealSshd]:
    server = RealSshd(tmp_path, client_key)
    server.write_state("running")
    server.append_log([])
    server.start()
    yield server
    server.stop()


def _target(sshd: RealSshd, known: Path, key: asyncssh.SSHKey) -> SshTarget:
    key_file = sshd.root / "google_compute_engine"
    key_file.write_bytes(key.export_private_key("openssh"))
    key_file.chmod(0o600)
    return SshTarget(host="127.0.0.1", port=sshd.port, user=sshd.user, private_key=key_file, known_hosts=known,
                     host_key_alias=ALIAS, connect_timeout_s=5, node_name="real-sshd")


async def test_key_auth_and_known_hosts(sshd: RealSshd, client_key: asyncssh.SSHKey, tmp_path: Path) -> None:
    known = tmp_path / "google_compute_known_hosts"
    target = _target(sshd, known, client_key)
    with pytest.raises(HostKeyUnknown):
        await connect(target)
    offered: list[str] = []

    async def accept(fingerprint: str) -> bool:
        offered.append(fingerprint)
        return True

    async with await connect(target, accept_new_host_key=accept) as conn:
        result = await conn.run("sudo -n docker inspect --type container vllm", check=False)
        assert result.exit_status == 0 and json.loads(str(result.stdout))[0]["Id"] == CONTAINER_ID
        assert (await conn.run("whoami", check=False)).stdout == f"{sshd.user}\n"
    assert offered == [sshd.host_key.get_fingerprint("sha256")]
    assert known.read_text() == f"{ALIAS} {sshd.host_key.export_public_key().decode().strip()}\n"
    async with await connect(target) as conn:                    # recorded: verified silently
        assert (await conn.run("echo ok", check=False)).stdout == "ok\n"
        # OpenSSH agreed to the cipher the console asks first (a third of ChaCha20's cost per packet)
        assert conn.get_extra_info("recv_cipher") == conn.get_extra_info("send_cipher") == "aes128-gcm@openssh.com"

    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    known.write_text(f"{ALIAS} {impostor}\n")
    with pytest.raises(HostKeyChanged) as changed:
        await connect(target, accept_new_host_key=accept)
    assert f"at line 1 of {known}" in changed.value.message
    assert f"run `ssh-keygen -f {known} -R {ALIAS}`" in changed.value.message
    assert len(offered) == 1

    # ECDSA recorded, sshd offers only ed25519: a changed key with the same details, not a negotiation failure
    ecdsa = asyncssh.generate_private_key("ecdsa-sha2-nistp256")
    known.write_text(f"{ALIAS} {ecdsa.export_public_key().decode().strip()}\n")
    with pytest.raises(HostKeyChanged) as mismatch:
        await connect(target, accept_new_host_key=accept)
    message = mismatch.value.message
    assert f"presented the host key ssh-ed25519 {sshd.host_key.get_fingerprint('sha256')}" in message
    assert f"(ecdsa-sha2-nistp256 {ecdsa.get_fingerprint('sha256')})" in message
    assert f"at line 1 of {known}" in message and f"run `ssh-keygen -f {known} -R {ALIAS}`" in message
    assert len(offered) == 1 and known.read_text().startswith(f"{ALIAS} ecdsa-sha2-nistp256 ")

    known.write_text(f"{ALIAS} {sshd.host_key.export_public_key().decode().strip()}\n")
    stranger = _target(sshd, known, asyncssh.generate_private_key("ssh-ed25519"))
    with pytest.raises(SshAuthRefused, match="ssh-keys metadata"):
        await connect(stranger)


async def test_accept_new_records_an_unknown_key_and_refuses_a_changed_one(sshd: RealSshd, client_key: asyncssh.SSHKey,
                                                                          tmp_path: Path) -> None:
    from console.flows.ssh_target import accept_new_host_key

    known = tmp_path / "google_compute_known_hosts"
    target = _target(sshd, known, client_key)
    said: list[str] = []
    async with await connect(target, accept_new_host_key=accept_new_host_key(target, said.append)) as conn:
        assert (await conn.run("echo ok", check=False)).stdout == "ok\n"
    fingerprint = sshd.host_key.get_fingerprint("sha256")
    assert said == [f"recording the new host key {fingerprint} of {target.label} as {ALIAS} in {known} (accept-new)"]
    assert known.read_text() == f"{ALIAS} {sshd.host_key.export_public_key().decode().strip()}\n"

    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    known.write_text(f"{ALIAS} {impostor}\n")
    with pytest.raises(HostKeyChanged):
        await connect(target, accept_new_host_key=accept_new_host_key(target, said.append))
    assert len(said) == 1 and known.read_text() == f"{ALIAS} {impostor}\n"


def _ts(n: int) -> str:
    """Fixed-width docker timestamps; every 7th line repeats the previous timestamp."""
    ns = 1_750_000_000 * 10**9 + (n - (n % 7 == 0 and n > 0)) * 1_000_000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9)) + f".{ns % 10**9:09d}Z"


async def test_tail_and_reconnect_after_the_session_is_killed(sshd: RealSshd, client_key: asyncssh.SSHKey,
                                                              tmp_path: Path) -> None:
    known = tmp_path / "kh"
    known.write_text(f"{ALIAS} {sshd.host_key.export_public_key().decode().strip()}\n")
    target = _target(sshd, known, client_key)
    lines = [f"{_ts(n)} INFO line {n % 40}" for n in range(600)]      # repeated texts too
    received: list[str] = []
    statuses: list[TailStatus] = []
    tail = LogTail(lambda: connect(target), "vllm", on_lines=lambda batch: received.extend(t for _, t in batch),
                   on_status=statuses.append, initial_backoff_s=0.05, max_backoff_s=0.5, poll_interval_s=0.1)
    task = asyncio.create_task(tail.run())

    async def until(predicate, timeout_s: float = 20.0) -> None:
        for _ in range(int(timeout_s / 0.02)):
            if predicate():
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"timed out: {statuses[-2:]}, {len(received)} lines")

    sshd.append_log(lines[:250])
    await until(lambda: len(received) >= 250)
    sshd.drop_connections()                                        # kill the sshd session process
    sshd.append_log(lines[250:400])
    await until(lambda: any(s.kind == "reconnecting" for s in statuses))
    await until(lambda: len(received) >= 400)
    sshd.append_log(lines[400:])
    sshd.write_state("exited", 3)
    await until(lambda: statuses[-1].kind == "exited")
    tail.stop()
    await task
    assert received == [line.split(" ", 1)[1] for line in lines]
    # the stand-in's inspect gives no FinishedAt: no time is made up
    assert next(s for s in statuses if s.kind == "exited") == TailStatus(
        "exited", 0, CONTAINER_ID, 3, "waiting: container vllm exited (code 3); polling every 0.1 s")
    assert [s.kind for s in statuses[:2]] == ["connecting", "connected"]


def _followers(sshd: RealSshd) -> list[int]:
    """PIDs of stand-in ``docker logs -f`` processes of this sshd (by their script path)."""
    script = str(sshd.root / "bin" / "docker")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if script.encode() in argv and b"logs" in argv:
            found.append(int(entry.name))
    return found


async def test_no_follower_outlives_its_channel(sshd: RealSshd, client_key: asyncssh.SSHKey, tmp_path: Path) -> None:
    """Five killed sessions and a stop leave no `docker logs -f` on the host, even on a quiet log
    (nothing is written that would make an orphan fail): the follower dies with its tty."""
    known = tmp_path / "kh"
    known.write_text(f"{ALIAS} {sshd.host_key.export_public_key().decode().strip()}\n")
    target = _target(sshd, known, client_key)
    received: list[str] = []
    statuses: list[TailStatus] = []
    tail = LogTail(lambda: connect(target), "vllm", on_lines=lambda batch: received.extend(t for _, t in batch),
                   on_status=statuses.append, initial_backoff_s=0.05, max_backoff_s=0.2, poll_interval_s=0.1)
    task = asyncio.create_task(tail.run())

    async def until(predicate, what: str, timeout_s: float = 20.0) -> None:
        for _ in range(int(timeout_s / 0.02)):
            if predicate():
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"timed out waiting for {what}: {statuses[-2:]}, followers {_followers(sshd)}")

    sshd.append_log([f"{_ts(n)} INFO line {n}" for n in range(50)])
    await until(lambda: len(received) >= 50 and len(_followers(sshd)) == 1, "the first follower")
    for round_ in range(5):
        connected = sum(s.kind == "connected" for s in statuses)
        sshd.drop_connections()                               # the session dies; the log stays quiet
        await until(lambda c=connected: sum(s.kind == "connected" for s in statuses) > c, f"reconnect {round_}")
        await until(lambda: len(_followers(sshd)) == 1, f"one follower after reconnect {round_}", timeout_s=5)
    await asyncio.sleep(0.3)
    assert len(_followers(sshd)) == 1                         # the current one only
    tail.stop()
    await task
    await until(lambda: _followers(sshd) == [], "no follower after stop", timeout_s=5)
    assert received == [f"INFO line {n}" for n in range(50)]  # and nothing lost or doubled meanwhile


async def test_a_line_docker_split_into_16_kib_records_arrives_whole(sshd: RealSshd, client_key: asyncssh.SSHKey,
                                                                     tmp_path: Path) -> None:
    """docker/cli#4941: a 256-chip line comes as records with timestamps spliced in, the first border
    cutting a multi-byte character; the tail delivers exactly the text vLLM printed."""
    from remote.container.docker_records import DOCKER_RECORD_BYTES

    known = tmp_path / "kh"
    known.write_text(f"{ALIAS} {sshd.host_key.export_public_key().decode().strip()}\n")
    target = _target(sshd, known, client_key)
    devices = ", ".join(f"TpuDevice(id={i}, process_index={i // 4}, coords=({i % 4},{i // 4 % 8},{i // 32}), "
                        f"core_on_chip=0)" for i in range(256))
    text = (f"INFO 11-30 10:00:00 [tpu_worker.py:471] Init worker | rank=0 | hbm=[(0.0, 31.25)]GiB | "
            f"total devices=[{devices}] │ end").encode()
    text = text[:DOCKER_RECORD_BYTES - 1] + "│".encode() + text[DOCKER_RECORD_BYTES - 1:]
    records = [text[i:i + DOCKER_RECORD_BYTES] for i in range(0, len(text), DOCKER_RECORD_BYTES)]
    printed = b"".join(f"{_ts(1)[:-4]}{n:03d}Z ".encode() + record for n, record in enumerate(records))
    received: list[str] = []
    tail = LogTail(lambda: connect(target), "vllm", on_lines=lambda batch: received.extend(t for _, t in batch),
                   on_status=lambda status: None, poll_interval_s=0.1)
    task = asyncio.create_task(tail.run())
    sshd.append_log_bytes([f"{_ts(0)} INFO before".encode(), printed, f"{_ts(2)} INFO after".encode()])
    for _ in range(500):
        if len(received) >= 3:
            break
        await asyncio.sleep(0.02)
    tail.stop()
    await task
    assert len(records) >= 2
    assert received == ["INFO before", text.decode(), "INFO after"]


async def test_a_lost_connection_says_when_and_how_many_lines_were_caught_up(
        sshd: RealSshd, client_key: asyncssh.SSHKey, tmp_path: Path) -> None:
    known = tmp_path / "kh"
    known.write_text(f"{ALIAS} {sshd.host_key.export_public_key().decode().strip()}\n")
    target = _target(sshd, known, client_key)
    received: list[str] = []
    statuses: list[TailStatus] = []
    tail = LogTail(lambda: connect(target), "vllm", on_lines=lambda batch: received.extend(t for _, t in batch),
                   on_status=statuses.append, initial_backoff_s=0.8, max_backoff_s=0.8, poll_interval_s=0.1)
    task = asyncio.create_task(tail.run())

    async def until(predicate, what: str, timeout_s: float = 20.0) -> None:
        for _ in range(int(timeout_s / 0.02)):
            if predicate():
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"timed out waiting for {what}: {statuses[-3:]}")

    sshd.append_log([f"{_ts(n)} INFO line {n}" for n in range(1, 41)])
    await until(lambda: len(received) >= 40, "the first lines")
    sshd.drop_connections()
    await until(lambda: statuses[-1].kind == "reconnecting", "the drop")
    sshd.append_log([f"{_ts(n)} INFO line {n}" for n in range(41, 71)])    # written while nobody follows
    await until(lambda: "caught up" in statuses[-1].message, "the catch-up report")
    tail.stop()
    await task
    last_before = time.strftime("%H:%M:%S UTC", time.gmtime(1_750_000_000 + 40 // 1000))
    lost = next(s for s in statuses if s.kind == "reconnecting")
    assert lost.message.startswith(f"connection lost (last line {last_before}); reconnecting (attempt 1)")
    assert statuses[-1].kind == "connected"
    assert statuses[-1].message == f"resumed following container vllm: 30 lines caught up since {last_before}"
    assert received == [f"INFO line {n}" for n in range(1, 71)]


class BlackholeProxy:
    """A loopback TCP relay in front of sshd that can blackhole its connections: the client side
    is reset (the tail sees the link die) while the sshd side stays open and unread, so sshd,
    like one behind a dead NAT entry or a vanished peer, never notices and keeps the session."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._pairs: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter, list[asyncio.Task[None]]]] = []
        self.held: list[asyncio.StreamWriter] = []     # sshd sides left hanging

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.IncompleteReadError):
                pass
            dst.close()

        tasks = [asyncio.create_task(pump(client_r, up_w)), asyncio.create_task(pump(up_r, client_w))]
        self._pairs.append((client_w, up_w, tasks))

    def blackhole(self) -> int:
        """Reset every client side, keep every sshd side open and silent; returns how many."""
        import struct

        count = 0
        for client_w, up_w, tasks in self._pairs:
            for task in tasks:
                task.cancel()
            sock = client_w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client_w.transport.abort()                 # RST to the client, nothing to sshd
            self.held.append(up_w)
            count += 1
        self._pairs = []
        return count

    async def stop(self) -> None:
        for _, up_w, tasks in self._pairs:
            for task in tasks:
                task.cancel()
            up_w.close()
        for up_w in self.held:
            up_w.close()
        if self._server is not None:
            self._server.close()


async def test_the_old_follower_is_stopped_on_every_reconnect_even_after_a_blackholed_link(
        sshd: RealSshd, client_key: asyncssh.SSHKey, tmp_path: Path) -> None:
    """3 blackholed links (sshd keeps those sessions) + 5 killed sessions + quit: no follower of
    ours left on the host, and the operator's own `docker logs -f` of the same container still runs."""
    import dataclasses

    known = tmp_path / "kh"
    known.write_text(f"{ALIAS} {sshd.host_key.export_public_key().decode().strip()}\n")
    proxy = BlackholeProxy(sshd.port)
    await proxy.start()
    target = dataclasses.replace(_target(sshd, known, client_key), port=proxy.port)
    operator = subprocess.Popen([str(sshd.root / "bin" / "docker"), "logs", "-f", "--timestamps", CONTAINER_ID],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    received: list[str] = []
    statuses: list[TailStatus] = []
    tail = LogTail(lambda: connect(target), "vllm", on_lines=lambda batch: received.extend(t for _, t in batch),
                   on_status=statuses.append, initial_backoff_s=0.05, max_backoff_s=0.2, poll_interval_s=0.1)

    def ours() -> list[int]:
        return [pid for pid in _followers(sshd) if pid != operator.pid]

    async def until(predicate, what: str, timeout_s: float = 20.0) -> None:
        for _ in range(int(timeout_s / 0.02)):
            if predicate():
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"timed out waiting for {what}: {statuses[-2:]}, our followers {ours()}")

    def connects() -> int:
        return sum(s.kind == "connected" and s.message.startswith("following") for s in statuses)

    task = asyncio.create_task(tail.run())
    stopped = False
    try:
        sshd.append_log([f"{_ts(n)} INFO line {n}" for n in range(50)])
        await until(lambda: len(received) >= 50 and len(ours()) == 1, "the first follower")
        for round_ in range(3):
            before, old = connects(), ours()
            assert proxy.blackhole() == 1
            await until(lambda b=before: connects() > b, f"reconnect after blackhole {round_}")
            await until(lambda o=old: (now := ours()) != o and len(now) == 1, f"one follower after blackhole {round_}",
                        timeout_s=5)
            await asyncio.sleep(0.3)                          # an orphan would still be there
            assert len(ours()) == 1 and tail.followers_stopped == round_ + 1, (ours(), old)
        assert len(proxy.held) == 3                           # sshd still holds those three sessions
        for round_ in range(5):
            before = connects()
            sshd.drop_connections()                           # killed sessions: the pty ends those
            await until(lambda b=before: connects() > b, f"clean reconnect {round_}")
            await until(lambda: len(ours()) == 1, f"one follower after clean reconnect {round_}", timeout_s=5)
        await asyncio.sleep(0.3)
        assert len(ours()) == 1
        tail.stop()
        await task
        stopped = True
        await until(lambda: ours() == [], "no follower of ours after quit", timeout_s=5)
        assert operator.poll() is None and operator.pid in _followers(sshd)     # the operator's stays
        assert received == [f"INFO line {n}" for n in range(50)]
    finally:
        if not stopped:
            tail.stop()
            await task
        operator.terminate()
        operator.wait(timeout=5)
        await proxy.stop()


async def test_a_watched_forward_reports_each_client_refused_in_sshds_words_or_carried(
        sshd: RealSshd, client_key: asyncssh.SSHKey, tmp_path: Path) -> None:
    """forward_port_watched through a real sshd: a client to a port nothing listens on is reported
    with sshd's reason (the client gets an empty reply, as through ``ssh -L``); one to a listening
    port is reported open and its bytes go both ways."""
    from remote.ssh import forward_port_watched

    known = tmp_path / "kh"
    known.write_text(f"{ALIAS} {sshd.host_key.export_public_key().decode().strip()}\n")

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write((await reader.readline()).upper())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    open_port = server.sockets[0].getsockname()[1]
    reports: list[str | None] = []
    async with await connect(_target(sshd, known, client_key)) as conn:
        for port, line in ((_free_port(), b""), (open_port, b"PING\n")):
            listener, local = await forward_port_watched(conn, port, on_connection=reports.append)
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", local)
                writer.write(b"ping\n")
                await writer.drain()
                assert await asyncio.wait_for(reader.read(), 10) == line     # refused: closed, nothing read
                writer.close()
            finally:
                listener.close()
    server.close()
    assert reports == ["Connection refused", None]
