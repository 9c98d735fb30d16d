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
