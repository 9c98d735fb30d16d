"""Docker command building and quoting, docker timestamps, the tail's resume rule, gcloud targets,
and the sandbox shell and ``docker run`` parser (no network)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from remote.container.docker import docker_command, docker_missing, logs_follow_args
from remote.container.tail import _Position, parse_docker_timestamp
from remote.models import Node, WorkerEndpoint
from remote.ssh import CommandResult, SshFailure, SshTarget, command_line, sudo_failure, target_for
from sandbox.docker_args import normalize_ref, parse_run_args, parse_since, render_template
from sandbox.vm import _refuse_unsupported, split_shell

HOSTILE = ["; rm -rf /", "$(reboot)", "`id`", "it's \"quoted\"", "two\nlines", "a && b", "|", "*"]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_round_trip_as_one_argument(value: str) -> None:
    command = docker_command(["run", "-d", "--name", "vllm", "img", "vllm", "serve", "--served-model-name", value])
    assert command.startswith("sudo -n docker run -d --name vllm img vllm serve --served-model-name ")
    assert shlex.split(command)[-1] == value
    assert len(shlex.split(command)) == 12


def test_hostile_values_are_not_shell_operators_for_the_sandbox_shell() -> None:
    command = command_line(["docker", "logs", *HOSTILE], sudo=True) + " 2>&1"
    segments = split_shell(command)
    assert len(segments) == 1
    _refuse_unsupported(segments[0][1])       # quoted: accepted
    assert shlex.split(segments[0][1])[4:-1] == HOSTILE


def test_sandbox_shell_splits_and_refuses_unquoted_operators() -> None:
    assert split_shell("a && b || c; d") == [(";", "a "), ("&&", " b "), ("||", " c"), (";", " d")]
    for bad in ("echo a | sh", "echo $(id)", "echo `id`", "cat < /etc/passwd", "echo x > /tmp/y"):
        with pytest.raises(ValueError):
            _refuse_unsupported(bad)
    _refuse_unsupported("docker logs vllm 2>&1")


def test_logs_follow_args() -> None:
    assert logs_follow_args("vllm") == ["logs", "-f", "--timestamps", "vllm"]
    assert logs_follow_args("abc", since="2025-06-01T14:05:31.123456789Z") == [
        "logs", "-f", "--timestamps", "--since", "2025-06-01T14:05:31.123456789Z", "abc"]
    assert docker_command(["rm", "-f", "vllm"], sudo=False) == "docker rm -f vllm"


def test_sudo_and_docker_missing_sentences() -> None:
    sudo = CommandResult(1, "", "sudo: a password is required\n", "sudo -n docker ps")
    error = sudo_failure(sudo, "node a")
    assert error is not None and "needs a password" in error.message and "sudo: a password is required" in error.message
    assert sudo_failure(CommandResult(1, "", "Error: No such container: x\n", "c")) is None
    bash = docker_missing(CommandResult(127, "", "bash: line 1: docker: command not found\n", "docker ps"))
    via_sudo = docker_missing(CommandResult(1, "", "sudo: docker: command not found\n", "sudo -n docker ps"))
    assert bash is not None and via_sudo is not None and "not installed" in via_sudo.message
    assert docker_missing(CommandResult(0, "ok", "", "docker ps")) is None


def test_docker_timestamps() -> None:
    assert parse_docker_timestamp("1970-01-01T00:00:01.000000002Z") == 1_000_000_002
    assert parse_docker_timestamp("2025-06-01T14:05:31Z") == 1748786731 * 10**9
    assert parse_docker_timestamp("2025-06-01T16:05:31.5+02:00") == 1748786731 * 10**9 + 500_000_000
    assert parse_docker_timestamp("INFO") is None
    assert parse_since("1748786731.25", 0) == 1748786731_250_000_000
    assert parse_since("10s", 20 * 10**9) == 10 * 10**9


def test_resume_drops_exactly_the_lines_already_delivered_at_the_boundary() -> None:
    ts1, ts2, ts3 = "2025-06-01T14:05:31.000000001Z", "2025-06-01T14:05:31.000000002Z", "2025-06-01T14:05:32.1Z"
    first = [f"{ts1} a", f"{ts2} same", f"{ts2} same"]
    position = _Position()
    delivered = [position.accept(line) for line in first]
    assert [d[1] for d in delivered if d] == ["a", "same", "same"]
    # docker --since ts2 repeats every line at ts2 (three "same" now: one is new) and continues
    position.begin_resume()
    again = [f"{ts2} same", f"{ts2} same", f"{ts2} same", f"{ts3} next"]
    resumed = [d for d in (position.accept(line) for line in again) if d]
    assert [text for _, text in resumed] == ["same", "next"]
    assert position.last_raw == ts3
    assert resumed[1][0] is not None and resumed[1][0].microsecond == 100000


def test_lines_without_timestamp_are_kept() -> None:
    assert _Position().accept("no timestamp here") == (None, "no timestamp here")


def _node(**kw: object) -> Node:
    base = dict(project="p", zone="z", name="vllm-a", state="READY", accelerator_type="v6e-8",
                node_id="1234567890123456789",
                workers=(WorkerEndpoint(0, "10.0.0.2", "34.1.2.3"), WorkerEndpoint(1, "10.0.0.3", None)))
    base.update(kw)
    return Node(**base)  # type: ignore[arg-type]


class _Ssh:
    user = "alice"
    private_key = Path("/keys/google_compute_engine")
    known_hosts = Path("/keys/google_compute_known_hosts")
    proxy_command = ""
    port = 22
    connect_timeout_s = 7.0
    hosts: dict[str, str] = {}


def test_target_like_gcloud() -> None:
    target = target_for(_node(), _Ssh())
    assert (target.host, target.port, target.user) == ("34.1.2.3", 22, "alice")
    assert target.host_key_alias == "tpu.1234567890123456789-0"
    worker1 = target_for(_node(), _Ssh(), worker=1, host_key_suffix="AAAAC3NzaC1lZDI1NTE5AAAAIabcdef")
    assert worker1.host == "10.0.0.3" and worker1.host_key_alias == "tpu.1234567890123456789-1-abcdef"
    ssh = _Ssh()
    ssh.hosts = {"vllm-a": "127.0.0.1:2222"}
    override = target_for(_node(), ssh)
    assert (override.host, override.port) == ("127.0.0.1", 2222)
    with pytest.raises(SshFailure, match="has 2 worker"):           # a host override does not add workers
        target_for(_node(), ssh, worker=3)
    with pytest.raises(SshFailure, match="has 2 worker"):
        target_for(_node(), _Ssh(), worker=2)
    with pytest.raises(SshFailure, match="no IP address"):
        target_for(_node(workers=(WorkerEndpoint(0, None, None),)), _Ssh())


def test_known_hosts_name_without_alias() -> None:
    target = target_for(_node(node_id=None), _Ssh())
    assert target.known_hosts_name == "34.1.2.3"
    ssh = _Ssh()
    ssh.hosts = {"vllm-a": "127.0.0.1:2222"}
    assert target_for(_node(node_id=None), ssh).known_hosts_name == "[127.0.0.1]:2222"


def test_docker_run_parser() -> None:
    spec = parse_run_args(["-d", "--name", "vllm", "--restart", "unless-stopped", "--privileged", "--net=host",
                           "--shm-size", "16G", "-e", "HF_TOKEN=x", "-v", "/a:/b:ro", "vllm/vllm-tpu:v1",
                           "vllm", "serve", "m", "-e", "--max-model-len", "1024"])
    assert (spec.name, spec.restart, spec.privileged, spec.network) == ("vllm", "unless-stopped", True, "host")
    assert spec.shm_size == 16 * 1024**3 and spec.env == ["HF_TOKEN=x"] and spec.volumes == ["/a:/b:ro"]
    assert spec.image == "vllm/vllm-tpu:v1"
    assert spec.command == ["vllm", "serve", "m", "-e", "--max-model-len", "1024"]   # after the image: verbatim
    with pytest.raises(ValueError, match="unknown flag: --bogus"):
        parse_run_args(["--bogus", "img"])
    with pytest.raises(ValueError, match="requires at least 1 argument"):
        parse_run_args(["-d", "--name", "x"])


def test_image_refs_and_templates() -> None:
    assert normalize_ref("vllm/vllm-tpu") == "vllm/vllm-tpu:latest"
    assert normalize_ref("docker.io/vllm/vllm-tpu:nightly") == "vllm/vllm-tpu:nightly"
    assert normalize_ref("localhost:5000/x") == "localhost:5000/x:latest"
    data = {"Id": "abc", "State": {"Status": "exited", "ExitCode": 1, "Running": False}}
    assert render_template("{{.Id}} {{.State.Status}} {{.State.ExitCode}} {{.State.Running}}", data) == \
        "abc exited 1 false"
    assert render_template("{{json .State}}", data) == '{"Status": "exited", "ExitCode": 1, "Running": false}'


@pytest.mark.parametrize("address", ["-oProxyCommand=touch /tmp/x", "1.2.3.4 -p 22", "a;b", "host\x1b[2J",
                                     "", "x" * 300, "[::1]"])
def test_an_address_from_the_api_that_is_not_one_is_refused(address: str) -> None:
    node = _node(workers=(WorkerEndpoint(0, "10.0.0.2", address),))
    if not address:
        assert target_for(node, _Ssh()).host == "10.0.0.2"          # no external IP: the internal one
        return
    with pytest.raises(SshFailure, match="not an IP address or host name") as info:
        target_for(node, _Ssh())
    assert repr(address) in info.value.message


@pytest.mark.parametrize("address", ["34.1.2.3", "2001:db8::1", "t1v-n-abc-w-0.c.proj.internal"])
def test_addresses_and_host_names_pass(address: str) -> None:
    assert target_for(_node(workers=(WorkerEndpoint(0, "10.0.0.2", address),)), _Ssh()).host == address


def test_the_proxy_command_gets_the_host_as_one_word() -> None:
    from remote.ssh.connect import proxy_argv

    ssh = _Ssh()
    ssh.proxy_command = "gcloud compute start-iap-tunnel %h %p --listen-on-stdin --x=100%%"
    target = target_for(_node(), ssh)
    assert proxy_argv(target) == ["gcloud", "compute", "start-iap-tunnel", "34.1.2.3", "22",
                                  "--listen-on-stdin", "--x=100%"]
    hostile = SshTarget(host="1.2.3.4 --flag", port=22, user="u", private_key=None, known_hosts=Path("/k"),
                        host_key_alias=None, proxy_command="nc %h %p")
    with pytest.raises(SshFailure, match="not an IP address or host name"):
        proxy_argv(hostile)


@pytest.mark.parametrize(("suffix", "alias"), [
    ("AAAAC3NzaC1lZDI1NTE5AAAAIabcdef", "tpu.1234567890123456789-0-abcdef"),
    ("AAAA*", "tpu.1234567890123456789-0"),                 # a known-hosts pattern: ignored
    ("abc de f", "tpu.1234567890123456789-0"),
    ("ab,c,de", "tpu.1234567890123456789-0"),
])
def test_a_suffix_that_is_not_base64_is_ignored(suffix: str, alias: str) -> None:
    assert target_for(_node(), _Ssh(), host_key_suffix=suffix).host_key_alias == alias


@pytest.mark.parametrize("node_id", ["1 2", "*", "12,tpu.9-0", "!1", "1\n2"])
def test_a_node_id_that_would_be_a_known_hosts_pattern_is_refused(node_id: str) -> None:
    with pytest.raises(SshFailure, match="not a plain id"):
        target_for(_node(node_id=node_id), _Ssh())


def test_the_follower_names_its_pid_and_only_our_follower_matches() -> None:
    from remote.container.follower import follower_command, follower_pid, is_our_follower

    cid = "ab" * 32
    command = follower_command(["logs", "-f", "--timestamps", cid])
    assert command == f"echo 'tpu-console follower pid' $$; exec sudo -n docker logs -f --timestamps {cid} 2>&1"
    assert follower_pid("tpu-console follower pid 4242") == 4242
    assert follower_pid("tpu-console follower pid 42 43") is None and follower_pid("INFO pid 42") is None
    ours = b"\0".join([b"sudo", b"-n", b"docker", b"logs", b"-f", b"--timestamps", b"--since",
                       b"2025-06-01T14:05:31.123456789Z", cid.encode()]) + b"\0"
    assert is_our_follower(ours, cid)
    assert not is_our_follower(ours, "cd" * 32)                                  # another container
    assert not is_our_follower(b"sudo\0-n\0docker\0logs\0" + cid.encode() + b"\0", cid)   # not following
    assert not is_our_follower(b"python3\0-m\0http.server\0", cid)               # a recycled pid
    assert not is_our_follower(b"", cid)
