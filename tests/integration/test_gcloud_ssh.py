"""``tpu-console ssh`` held to the real gcloud: for the same sandbox node, ``--dry-run`` prints the
OpenSSH command line ``gcloud compute tpus tpu-vm ssh --dry-run`` prints, field by field (user,
identity file, HostKeyAlias, UserKnownHostsFile, host, the tty flag and gcloud's fixed options); and
without ``--dry-run`` the real OpenSSH client runs it against the sandbox's VM, the published host
key pinned first.

One sandbox for the module (VMs without containers); the gcloud calls run at once (each ~2-5 s).
Skipped, saying why, where gcloud or OpenSSH's client is missing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from console.cli import main
from tests.integration.gcloud_oracle import Gcloud, gcloud_for, ssh_fields, why_no_gcloud

pytestmark = pytest.mark.skipif(why_no_gcloud() is not None, reason=why_no_gcloud() or "")

#: (our arguments, gcloud's arguments) per case: an OS Login node, worker 2 of the v5litepod-16, its internal IP.
CASES = {
    "os_login": (["research-v5e-1"], ["research-v5e-1", "--zone=us-central1-a", "--project=research-sandbox"]),
    "worker_2": (["vllm-v5e-16", "--worker", "2"],
                 ["vllm-v5e-16", "--zone=us-west4-a", "--project=inference-prod", "--worker=2"]),
    "internal_ip": (["vllm-v5e-16", "--worker", "2", "--internal-ip"],
                    ["vllm-v5e-16", "--zone=us-west4-a", "--project=inference-prod", "--worker=2", "--internal-ip"]),
    "all_workers": (["vllm-v5e-16", "--worker", "all", "--command", "uptime"],
                    ["vllm-v5e-16", "--zone=us-west4-a", "--project=inference-prod", "--worker=all",
                     "--command=uptime"]),
}
#: The module's private node: no external IP; reached through gcloud's IAP tunnel and the sandbox's relay.
PRIVATE = "vllm-flex-b"
#: The fields compared (StrictHostKeyChecking is not: gcloud says ``no`` for a key it has not seen,
#: which also lets a changed key through; we pin the published key first and say ``yes``).
FIELDS = ("user", "host", "identity_file", "HostKeyAlias", "UserKnownHostsFile", "tty", "command", "CheckHostIP",
          "HashKnownHosts", "IdentitiesOnly")


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    from sandbox.runner import Sandbox

    box = Sandbox(tmp_path_factory.mktemp("sandbox"), boot=False, private_nodes=(PRIVATE,))
    box.start()
    yield box
    box.stop()


@pytest.fixture(scope="module")
def gcloud(sandbox, tmp_path_factory) -> Gcloud:
    from sandbox.runner import SANDBOX_ACCOUNT

    return gcloud_for(tmp_path_factory.mktemp("gcloud"), tpu=sandbox.api_endpoint,
                      google_apis=sandbox.google_apis_endpoint, account=SANDBOX_ACCOUNT)


@pytest.fixture(scope="module")
def gcloud_lines(gcloud) -> dict[str, list[str]]:
    """Each case's ``ssh`` lines as gcloud prints them (all gcloud calls at once), plus ``iap``."""
    runs = {case: gcloud.start(["compute", "tpus", "tpu-vm", "ssh", *theirs, "--dry-run"])
            for case, (_, theirs) in CASES.items()}
    runs["iap"] = gcloud.start(["alpha", "compute", "tpus", "tpu-vm", "ssh", PRIVATE, "--zone=us-east5-a",
                                "--project=inference-prod", "--tunnel-through-iap", "--dry-run"])
    out = {}
    for case, process in runs.items():
        stdout, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, f"gcloud {case}: {stderr[-800:]}"
        out[case] = [line for line in stdout.splitlines() if "ssh " in line and "@" in line]
    return out


def _config(sandbox, gcloud: Gcloud) -> Path:
    """Our config for the same sandbox, with gcloud's SSH defaults (no [ssh] section, HOME = gcloud's)."""
    from sandbox.runner import SANDBOX_ACCOUNT

    path = gcloud.home / "tpu-console.toml"
    path.write_text(f'api_endpoint = "{sandbox.api_endpoint}"\n'
                    '[[projects]]\nid = "inference-prod"\n[[projects]]\nid = "research-sandbox"\n'
                    f'[os_login]\naccount = "{SANDBOX_ACCOUNT}"\napi_endpoint = "{sandbox.google_apis_endpoint}"\n'
                    f'compute_api_endpoint = "{sandbox.google_apis_endpoint}"\n')
    return path


def _ours(sandbox, gcloud, monkeypatch, capsys, args: list[str]) -> list[str]:
    monkeypatch.setenv("HOME", str(gcloud.home))         # gcloud's ~/.ssh/google_compute_* are ours too
    code = main(["--config", str(_config(sandbox, gcloud)), "ssh", *args, "--dry-run"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out.splitlines()


@pytest.mark.parametrize("case", list(CASES))
def test_the_dry_run_agrees_with_gcloud_field_by_field(sandbox, gcloud, gcloud_lines, monkeypatch, capsys, case):
    ours = _ours(sandbox, gcloud, monkeypatch, capsys, CASES[case][0])
    theirs = gcloud_lines[case]
    assert len(ours) == len(theirs) >= 1
    for mine, gclouds in zip(ours, theirs, strict=True):
        a, b = ssh_fields(mine), ssh_fields(gclouds)
        assert {f: a.get(f) for f in FIELDS} == {f: b.get(f) for f in FIELDS}
        assert a["HostKeyAlias"].startswith("tpu.") and len(a["HostKeyAlias"].rsplit("-", 1)[-1]) == 6
    if case == "os_login":
        assert ssh_fields(ours[0])["user"] == "alice_example_com"
    if case == "internal_ip":
        assert ssh_fields(ours[0])["host"].startswith("10.")


def test_the_iap_dry_run_names_the_instance_project_and_zone_gcloud_names(sandbox, gcloud, gcloud_lines,
                                                                        monkeypatch, capsys):
    ours = _ours(sandbox, gcloud, monkeypatch, capsys, [PRIVATE, "--tunnel-through-iap"])
    theirs = gcloud_lines["iap"]
    tunnel = re.compile(r"start-iap-tunnel '?([a-z0-9-]+)'? '?%p'? --listen-on-stdin --project=(\S+) --zone=(\S+)")
    assert tunnel.search(ours[0]).groups() == tunnel.search(theirs[0]).groups()
    a, b = ssh_fields(ours[0]), ssh_fields(theirs[0].split(" -o ProxyCommand ")[0] + " " + theirs[0].split()[-1])
    assert {f: a.get(f) for f in ("user", "host", "HostKeyAlias", "UserKnownHostsFile")} == \
        {f: b.get(f) for f in ("user", "host", "HostKeyAlias", "UserKnownHostsFile")}
    assert a["ProxyUseFdpass"] == "no" and "ProxyUseFdpass=no" in theirs[0].replace(" ", "=")


@pytest.mark.skipif(shutil.which("ssh") is None, reason="OpenSSH's client (ssh) is not installed here")
def test_without_dry_run_openssh_runs_the_command_with_the_published_key_pinned(sandbox):
    """The sandbox's own config ([ssh.hosts] to its VMs, its key); a fresh known-hosts file."""
    known = sandbox.known_hosts_path
    saved = known.read_text()
    known.unlink()
    try:
        done = subprocess.run([sys.executable, "-c", "import sys; from console.cli import main; sys.exit(main())",
                               "--config", str(sandbox.config_path), "ssh", "vllm-v5e-16", "--worker", "3",
                               "--command", "hostname"], capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "t1v-n-vllm-v5e-16-w-3\n"
        body = sandbox.workers["vllm-v5e-16"][3].host_public_key.split()[1]
        node_id = next(n.node_id for n in sandbox.nodes if n.name == "vllm-v5e-16")
        assert known.read_text() == f"tpu.{node_id}-3-{body[-6:]} ssh-ed25519 {body}\n"
    finally:
        known.write_text(saved)


def _run_verb(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "import sys; from console.cli import main; sys.exit(main())", *args],
                          capture_output=True, text=True, timeout=90, check=False)


@pytest.mark.skipif(shutil.which("ssh") is None, reason="OpenSSH's client (ssh) is not installed here")
def test_a_private_node_is_said_so_and_reached_through_gcloud_iap_tunnel(sandbox):
    """No [ssh.hosts] entry, no external IP: OpenSSH, gcloud's start-iap-tunnel, the sandbox's relay, the VM."""
    assert f'"{PRIVATE}"' not in sandbox.config_path.read_text()
    before = sandbox.iap_relay.tunnels
    done = _run_verb("--config", str(sandbox.config_path), "ssh", PRIVATE, "--command", "hostname")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"t1v-n-{PRIVATE}-w-0\n"
    said = " ".join(done.stderr.split())
    assert f"Node {PRIVATE} has no external IP (network default, subnetwork default): connecting through an IAP " \
           "tunnel (gcloud compute start-iap-tunnel t1v-n-" in said
    assert sandbox.iap_relay.tunnels == before + 1


async def test_every_asyncssh_path_takes_the_same_iap_tunnel(sandbox):
    """login_target (watch, swap, bench, forward, metrics, the serving column) gives the private node the
    IAP ProxyCommand; asyncssh runs it and the command runs on the VM."""
    from console.config import load_config
    from console.flows.node_lookup import find_node, fleet_source_for
    from console.flows.ssh_target import login_target
    from remote.ssh import connect

    config = load_config(sandbox.config_path)
    before = sandbox.iap_relay.tunnels
    with fleet_source_for(config) as source:
        node = await find_node(source, PRIVATE, require_ready=True)
        target, _login = await login_target(node, config, 0, source)
    assert target.proxy_command and "start-iap-tunnel %i %p" in target.proxy_command
    assert target.instance.startswith("t1v-n-") and target.host.startswith("10.")
    async with await connect(target) as conn:
        assert (await conn.run("hostname", timeout=30)).stdout == f"t1v-n-{PRIVATE}-w-0\n"
    assert sandbox.iap_relay.tunnels == before + 1


def test_iap_never_says_the_internal_ip_is_only_reachable_from_the_vpc(sandbox, tmp_path):
    config = tmp_path / "never.toml"
    config.write_text(sandbox.config_path.read_text().replace("[ssh]\n", '[ssh]\niap = "never"\n', 1))
    done = _run_verb("--config", str(config), "ssh", PRIVATE, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "ProxyCommand" not in done.stdout and "@10." in done.stdout
    assert "its internal IP is reachable only from inside its VPC network" in " ".join(done.stderr.split())
