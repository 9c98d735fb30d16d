"""How a worker is reached (console.flows.ssh_target.route_for) and the proxy command's placeholders
(remote.ssh.connect.proxy_argv, console.flows.ssh_shell.openssh_argv)."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.config import SshConfig
from console.flows.ssh_shell import openssh_argv
from console.flows.ssh_target import choose_target, route_for
from remote.models import Node, WorkerEndpoint
from remote.ssh import SshFailure
from remote.ssh.connect import proxy_argv

ATTRS = {"hostname": "t1v-n-abc-w-0"}


def _node(external: str | None = None, name: str = "vllm-a") -> Node:
    return Node(project="inference-prod", zone="us-east5-a", name=name, state="READY", accelerator_type="v6e-8",
                node_id="42", workers=(WorkerEndpoint(0, "10.0.0.2", external),),
                raw={"networkConfig": {"network": "projects/p/global/networks/vpc-a",
                                       "subnetwork": "projects/p/regions/r/subnetworks/sub-a"}})


def _ssh(**kw: object) -> SshConfig:
    return SshConfig(user="alice", private_key=Path("/k/id"), known_hosts=Path("/k/known"), **kw)  # type: ignore[arg-type]


def test_auto_takes_iap_for_a_private_node_only() -> None:
    private = route_for(_node(), _ssh(), 0, ATTRS)
    assert private.kind == "iap" and private.instance == "t1v-n-abc-w-0"
    assert "Node vllm-a has no external IP (network vpc-a, subnetwork sub-a): connecting through an IAP" in private.note
    assert route_for(_node("34.1.2.3"), _ssh(), 0, ATTRS).kind == "external"
    assert route_for(_node("34.1.2.3"), _ssh(iap="always"), 0, ATTRS).kind == "iap"
    assert route_for(_node("34.1.2.3"), _ssh(), 0, ATTRS, tunnel_through_iap=True).kind == "iap"
    never = route_for(_node(), _ssh(iap="never"), 0, ATTRS)
    assert never.kind == "internal" and "reachable only from inside its VPC network" in never.note
    assert route_for(_node("34.1.2.3"), _ssh(), 0, ATTRS, internal_ip=True) .kind == "internal"
    assert route_for(_node(), _ssh(hosts={"vllm-a": "127.0.0.1:2222"}), 0, ATTRS).kind == "override"
    assert route_for(_node(), _ssh(proxy_command="ssh -W %h:%p bastion"), 0, ATTRS).kind == "proxy"


def test_iap_without_an_instance_name_is_refused_as_gcloud_refuses_it() -> None:
    with pytest.raises(SshFailure, match="Currently unable to connect to worker 0 of node vllm-a through an IAP"):
        route_for(_node(), _ssh(), 0, {})


def test_the_iap_proxy_command_gets_instance_project_and_zone() -> None:
    ssh = _ssh(gcloud="/usr/bin/gcloud", iap_tunnel_url="wss://127.0.0.1:9")
    target = choose_target(_node(), ssh, 0, route=route_for(_node(), ssh, 0, ATTRS))
    assert proxy_argv(target) == ["/usr/bin/gcloud", "compute", "start-iap-tunnel", "t1v-n-abc-w-0", "22",
                                  "--listen-on-stdin", "--project=inference-prod", "--zone=us-east5-a",
                                  "--verbosity=warning", "--iap-tunnel-url-override=wss://127.0.0.1:9"]
    argv = openssh_argv(target, command=None, strict="yes")
    assert argv[argv.index("-o", argv.index("UserKnownHostsFile=/k/known")) + 1] == (
        "ProxyCommand /usr/bin/gcloud compute start-iap-tunnel t1v-n-abc-w-0 %p --listen-on-stdin "
        "--project=inference-prod --zone=us-east5-a --verbosity=warning "
        "--iap-tunnel-url-override=wss://127.0.0.1:9")                     # %p left to OpenSSH
    assert argv[-1] == "alice@10.0.0.2"


def test_every_placeholder_and_a_bad_name_refused() -> None:
    ssh = _ssh(proxy_command="jump %n/%w %z %P %i %h:%p 100%%")
    target = choose_target(_node(), ssh, 0, route=route_for(_node(), ssh, 0, ATTRS))
    assert proxy_argv(target) == ["jump", "vllm-a/0", "us-east5-a", "inference-prod", "t1v-n-abc-w-0",
                                  "10.0.0.2:22", "100%"]
    hostile = _node(name="Bad Name")
    with pytest.raises(SshFailure, match="Refusing to put the node 'Bad Name' into the proxy command"):
        proxy_argv(choose_target(hostile, ssh, 0, route=route_for(hostile, ssh, 0, ATTRS)))


def test_the_config_takes_iap_modes_and_refuses_others(tmp_path: Path) -> None:
    from console.config import ConfigError, load_config

    path = tmp_path / "c.toml"
    path.write_text('[[projects]]\nid = "p1"\n[ssh]\niap = "always"\niap_tunnel_url = "wss://127.0.0.1:9"\n')
    config = load_config(path)
    assert (config.ssh.iap, config.ssh.iap_tunnel_url) == ("always", "wss://127.0.0.1:9")
    path.write_text('[[projects]]\nid = "p1"\n[ssh]\niap = "sometimes"\n')
    with pytest.raises(ConfigError, match=r"line 4: key 'ssh.iap': expected one of 'auto', 'always', 'never'"):
        load_config(path)
