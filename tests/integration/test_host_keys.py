"""One host-key verdict for every connection: watch, swap and bench against the sandbox.

gcloud records a worker's host key under ``tpu.<id>-<worker>-<suffix>`` (the suffix is the last 6
characters of the ``ssh-ed25519`` guest attribute). Every verb resolves its target the same way
(console.flows.ssh_target), so a key recorded under the suffixed alias is found by all of them,
and a changed key (or a key of another type) is refused by all of them with the file, the line,
the fingerprint and the exact ``ssh-keygen -R`` command.
"""

from __future__ import annotations

import io
import shlex

import asyncssh
import pytest

from console.cli import main

NODE = "vllm-v5e-a"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    from sandbox.runner import Sandbox

    box = Sandbox(tmp_path_factory.mktemp("sandbox"), boot_s=0.5, fast_boot_s=0.3)
    box.start()
    yield box
    box.stop()


@pytest.fixture
def suffixed(sandbox, monkeypatch):
    """Give NODE gcloud's guest attribute (its real host key); returns ``(alias, plain alias, vm key)``."""
    monkeypatch.setattr("sys.stdin", io.StringIO(""))          # no terminal: unknown keys are refused
    vm = sandbox.vms[NODE]
    node_id = next(n.node_id for n in sandbox.nodes if n.name == NODE)
    body = vm.host_public_key.split()[1]
    world = sandbox.tpu_api.world
    name = next(k for k in world.guest_attributes if k.endswith(f"/nodes/{NODE}"))
    saved = world.guest_attributes[name]
    world.guest_attributes[name] = [[{"namespace": "hostkeys", "key": "ssh-ed25519", "value": body}]]
    before = sandbox.known_hosts_path.read_text()
    yield f"tpu.{node_id}-0-{body[-6:]}", f"tpu.{node_id}-0", asyncssh.import_public_key(vm.host_public_key)
    world.guest_attributes[name] = saved
    sandbox.known_hosts_path.write_text(before)


def _verbs(sandbox) -> dict[str, tuple[list[str], int]]:
    """Each connecting verb and its exit code when it cannot connect."""
    config = ["--config", str(sandbox.config_path)]
    return {
        "watch": (config + ["watch", NODE], 2),
        "swap": (config + ["swap", NODE, "--set", "max-num-seqs=64", "--dry-run"], 1),
        "bench": (config + ["bench", NODE, "--kind", "smoke", "--json"], 1),
    }


@pytest.mark.parametrize("verb", ["watch", "swap", "bench"])
def test_a_key_recorded_under_the_suffixed_alias_is_found_by_every_verb(sandbox, suffixed, capsys, verb):
    alias, _plain, key = suffixed
    sandbox.known_hosts_path.write_text(f"{alias} {key.export_public_key().decode().strip()}\n")
    argv, _ = _verbs(sandbox)[verb]
    code = main(argv)
    err = capsys.readouterr().err
    assert "unknown host key" not in err
    assert code == 0, err
    assert sandbox.known_hosts_path.read_text().count("\n") == 1        # nothing new recorded


@pytest.mark.parametrize("verb", ["watch", "swap", "bench"])
@pytest.mark.parametrize("recorded_type", ["ssh-ed25519", "ecdsa-sha2-nistp256"])
def test_a_changed_key_is_refused_by_every_verb_with_the_fix(sandbox, suffixed, capsys, verb, recorded_type):
    alias, _plain, key = suffixed
    impostor = asyncssh.generate_private_key(recorded_type)
    known = sandbox.known_hosts_path
    text = f"# gcloud\n{alias} {impostor.export_public_key().decode().strip()}\n"
    known.write_text(text)
    argv, failure_code = _verbs(sandbox)[verb]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == failure_code
    err = " ".join(captured.err.split())            # the sentence may be wrapped
    assert f"presented the host key ssh-ed25519 {key.get_fingerprint('sha256')}" in err
    assert f"recorded for {alias} at line 2 of {known}" in err
    assert f"({recorded_type} {impostor.get_fingerprint('sha256')})" in err
    assert f"run `ssh-keygen -f {shlex.quote(str(known))} -R {alias}`" in err
    assert "could not agree" not in err and "unknown host key" not in err
    assert known.read_text() == text                                    # nothing trusted, nothing added
    assert "Replace the container" not in captured.out


def test_the_plain_alias_is_used_when_only_it_is_recorded(sandbox, suffixed, capsys):
    _alias, plain, _key = suffixed
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    sandbox.known_hosts_path.write_text(f"{plain} {impostor}\n")
    argv, code = _verbs(sandbox)["swap"]
    assert main(argv) == code
    err = " ".join(capsys.readouterr().err.split())
    assert f"recorded for {plain} at line 1 of" in err and f"-R {plain}`" in err


# --- host keys pinned from the guest attributes, as gcloud pins them ------------------------

SLICE = "vllm-v5e-16"


def _node_id(sandbox, name: str) -> str:
    return next(n.node_id for n in sandbox.nodes if n.name == name)


def test_each_worker_publishes_its_real_host_key_in_its_guest_attributes(sandbox):
    world = sandbox.tpu_api.world
    name = next(k for k in world.guest_attributes if k.endswith(f"/nodes/{SLICE}"))
    for worker, vm in enumerate(sandbox.workers[SLICE]):
        items = world.guest_attributes[name][worker]
        published = {i["key"]: i["value"] for i in items if i.get("namespace") == "hostkeys"}
        assert published == {"ssh-ed25519": vm.host_public_key.split()[1]}
        assert "SandboxHostKey" not in str(items)


@pytest.mark.parametrize("verb", ["watch", "swap", "bench"])
def test_a_first_connection_is_pinned_from_the_guest_attributes_without_a_question(sandbox, capsys,
                                                                                  monkeypatch, verb):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))          # no terminal: an unknown key would be refused
    before = sandbox.known_hosts_path.read_text()
    sandbox.known_hosts_path.unlink()
    try:
        argv, _ = _verbs(sandbox)[verb]
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 0, err
        assert "unknown host key" not in err
        body = sandbox.vms[NODE].host_public_key.split()[1]
        alias = f"tpu.{_node_id(sandbox, NODE)}-0-{body[-6:]}"
        assert sandbox.known_hosts_path.read_text() == f"{alias} ssh-ed25519 {body}\n"
        assert oct(sandbox.known_hosts_path.stat().st_mode & 0o777) == "0o600"
    finally:
        sandbox.known_hosts_path.write_text(before)


def test_a_pinned_key_is_never_overwritten_by_the_guest_attributes(sandbox, capsys, monkeypatch):
    """A recorded key that differs (the node recreated, or an impostor) is kept and refused, not replaced."""
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    before = sandbox.known_hosts_path.read_text()
    body = sandbox.vms[NODE].host_public_key.split()[1]
    alias = f"tpu.{_node_id(sandbox, NODE)}-0-{body[-6:]}"
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    sandbox.known_hosts_path.write_text(f"{alias} {impostor}\n")
    try:
        argv, code = _verbs(sandbox)["swap"]
        assert main(argv) == code
        assert "differs from the one recorded" in " ".join(capsys.readouterr().err.split())
        assert sandbox.known_hosts_path.read_text() == f"{alias} {impostor}\n"
    finally:
        sandbox.known_hosts_path.write_text(before)


def test_watch_of_a_slice_keeps_following_the_workers_whose_key_is_not_refused(sandbox, capsys, monkeypatch):
    import json

    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    before = sandbox.known_hosts_path.read_text()
    node_id = _node_id(sandbox, SLICE)
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    lines = [line for line in before.splitlines() if not line.startswith(f"tpu.{node_id}-2 ")]
    sandbox.known_hosts_path.write_text("\n".join([*lines, f"tpu.{node_id}-2 {impostor}"]) + "\n")
    try:
        code = main(["--config", str(sandbox.config_path), "watch", SLICE, "--json"])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        summary = json.loads(captured.out)
        assert summary["ready"] is True and summary["refused_workers"] == [2]
        assert "w2| tpu-console: " in captured.err and "Worker 2 is not followed; the others are." in captured.err
        assert "following 3 workers of vllm-v5e-16 (not worker 2: host key refused)" in captured.err
        for worker in (0, 1, 3):
            assert f"w{worker}| connected to node {SLICE}" in captured.err
        assert summary["worker_lines_read"][2] == 0 and all(summary["worker_lines_read"][w] for w in (0, 1, 3))
    finally:
        sandbox.known_hosts_path.write_text(before)
