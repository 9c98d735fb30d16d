"""Config loading: defaults, a full file, and one clear message per kind of mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.config import ConfigError, load_config

FULL = """\
refresh_interval_s = 7
api_endpoint = "http://127.0.0.1:9"

[[projects]]
id = "inference-prod"
zones = ["us-east5-a"]

[[projects]]
id = "research"

[ssh]
user = "alice"
private_key = "/keys/gce"
known_hosts = "/keys/known"
proxy_command = "nc %h %p"

[ssh.hosts]
"vllm-a" = "127.0.0.1:2222"

[container]
name = "serve"
port = 8001
args = ["--max-model-len", "8192"]

[prices.v6e]
spot = 1.5

[keys]
refresh = "ctrl+r"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_full_file_is_typed(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, FULL))
    assert cfg.refresh_interval_s == 7.0
    assert cfg.api_endpoint == "http://127.0.0.1:9"
    assert [(p.id, p.zones) for p in cfg.projects] == [("inference-prod", ("us-east5-a",)), ("research", ())]
    assert cfg.ssh.user == "alice"
    assert cfg.ssh.private_key == Path("/keys/gce")
    assert cfg.ssh.known_hosts == Path("/keys/known")
    assert cfg.ssh.hosts == {"vllm-a": "127.0.0.1:2222"}
    assert cfg.container.name == "serve" and cfg.container.port == 8001
    assert cfg.container.args == ("--max-model-len", "8192")
    assert cfg.price_per_chip_hour("v6e", "spot") == 1.5
    assert cfg.price_per_chip_hour("v6e", "on-demand") == 2.70  # default kept
    assert cfg.keys == {"refresh": "ctrl+r"}


def test_missing_default_file_gives_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("console.config.default_config_path", lambda: tmp_path / "nope.toml")
    cfg = load_config()
    assert cfg.projects == () and cfg.container.name == "vllm" and cfg.ssh.port == 22


def test_named_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "absent.toml")


def test_unknown_key_names_file_key_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "[[projects]]\nid = \"p\"\n\n[ssh]\nuser = \"a\"\nprivate_kee = \"x\"\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}, line 6: key 'ssh.private_kee': unknown key")


def test_wrong_type_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "refresh_interval_s = 5\n[container]\nport = \"8000\"\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}, line 3: key 'container.port': expected an integer, got str '8000'"


def test_toml_syntax_error(tmp_path: Path) -> None:
    path = write(tmp_path, "[ssh\nuser = 1\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}: TOML syntax error:") and "line 1" in str(err.value)


def test_bad_host_override(tmp_path: Path) -> None:
    path = write(tmp_path, "[ssh.hosts]\n\"a\" = \"nohostport\"\n")
    with pytest.raises(ConfigError, match=r"line 2: key 'ssh.hosts.a': expected \"host:port\""):
        load_config(path)


def test_negative_interval(tmp_path: Path) -> None:
    path = write(tmp_path, "refresh_interval_s = -1\n")
    with pytest.raises(ConfigError, match="line 1: key 'refresh_interval_s': must be a positive"):
        load_config(path)


def test_cli_reports_config_error_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from console.cli import main

    path = write(tmp_path, "bogus = 1\n")
    assert main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tpu-console: config error:") and "key 'bogus'" in err and "Traceback" not in err


def test_readme_config_example_loads(tmp_path: Path) -> None:
    """The configuration reference in the README is a valid config."""
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Configuration.*?```toml\n(.*?)```", readme, re.S)
    assert block is not None
    cfg = load_config(write(tmp_path, block.group(1)))
    assert [p.id for p in cfg.projects] == ["inference-prod", "research-sandbox"]
    assert cfg.ssh.known_hosts.name == "google_compute_known_hosts"
    assert cfg.keys == {"refresh": "ctrl+r"}


def test_unknown_binding_id_in_keys_stops_the_console(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from console.app import binding_ids
    from console.cli import main

    assert {"refresh", "watch", "swap_confirm", "log_follow", "confirm_yes", "bench_run"} <= binding_ids()
    assert {"command", "command_complete", "sort", "sort_reverse", "detail", "copy", "copy_url", "swap_copy"} <= binding_ids()
    path = write(tmp_path, "[[projects]]\nid = \"p\"\n[keys]\nrefresh = \"ctrl+r\"\nbogus_id = \"x\"\n")
    assert main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: [keys] bogus_id = 'x': no binding has the id 'bogus_id'" in err and "Traceback" not in err


@pytest.mark.parametrize(("body", "where", "words"), [
    ('[ssh.hosts]\n"vllm-a" = "127.0.0.1:70000"\n', "line 2: key 'ssh.hosts.vllm-a'", "port 70000 is not a TCP port"),
    ('[ssh.hosts]\nvllm-a = "127.0.0.1:0"\n', "line 2: key 'ssh.hosts.vllm-a'", "port 0 is not a TCP port"),
    ("[ssh]\nport = 65536\n", "line 2: key 'ssh.port'", "65536 is not a TCP port"),
    ("[container]\nport = 99999\n", "line 2: key 'container.port'", "99999 is not a TCP port"),
    ("[forward]\nport = 0\n", "line 2: key 'forward.port'", "0 is not a TCP port"),
    ('[forward.ports]\n"vllm-a" = 70000\n', "line 2: key 'forward.ports.vllm-a'", "70000 is not a TCP port"),
    ('[container]\nname = "vllm; rm -rf /"\n', "line 2: key 'container.name'", "is not a docker container name"),
    ('[container]\nname = "$(id)"\n', "line 2: key 'container.name'", "is not a docker container name"),
    ('[container]\nname = "-vllm"\n', "line 2: key 'container.name'", "is not a docker container name"),
])
def test_ports_and_container_names_are_checked(tmp_path: Path, body: str, where: str, words: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(body)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"{path}, {where}" in str(info.value) and words in str(info.value)


def test_a_good_container_name_and_ports_load(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[container]\nname = "vllm_2.serve-a"\nport = 8000\n[ssh]\nport = 22\n'
                    '[ssh.hosts]\n"vllm-a" = "127.0.0.1:65535"\n')
    config = load_config(path)
    assert config.container.name == "vllm_2.serve-a" and config.ssh.hosts == {"vllm-a": "127.0.0.1:65535"}


def test_services_take_new_ssh_hosts_from_the_config_file(tmp_path) -> None:
    """The sandbox adds an [ssh.hosts] entry for a node it makes READY; the running console takes it."""
    import os

    from console.config import load_config
    from console.services import Services

    path = tmp_path / "config.toml"
    path.write_text('[[projects]]\nid = "p"\n\n[ssh.hosts]\n"vllm-a" = "127.0.0.1:2222"\n')
    services = Services(config=load_config(path), fleet=None, db_path=tmp_path / "h.db")  # type: ignore[arg-type]
    assert services.reload_ssh_hosts() is False                       # unchanged file
    path.write_text('[[projects]]\nid = "p"\n\n[ssh.hosts]\n"vllm-a" = "127.0.0.1:2222"\n"new-b" = "127.0.0.1:3333"\n')
    os.utime(path, ns=(path.stat().st_mtime_ns + 10**9,) * 2)
    assert services.reload_ssh_hosts() is True
    assert services.config.ssh.hosts == {"vllm-a": "127.0.0.1:2222", "new-b": "127.0.0.1:3333"}
    path.write_text('this is not toml [')                              # a broken file is left for later
    os.utime(path, ns=(path.stat().st_mtime_ns + 2 * 10**9,) * 2)
    assert services.reload_ssh_hosts() is False and "new-b" in services.config.ssh.hosts


def test_forward_ports_load(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[forward]\nport = 8005\n[forward.ports]\n"vllm-a" = 8006\n')
    forward = load_config(path).forward
    assert (forward.port, forward.ports) == (8005, {"vllm-a": 8006})


def test_gke_table(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[gke]\napi_endpoint = "http://127.0.0.1:9"\nkubeconfig = "~/kube.yaml"\ncontexts = ["kind-a"]\n')
    gke = load_config(path).gke
    assert (gke.enabled, gke.discover, gke.api_endpoint, gke.contexts) == (True, True, "http://127.0.0.1:9", ("kind-a",))
    assert gke.kubeconfig == Path("~/kube.yaml").expanduser()
    path.write_text("refresh_interval_s = 3\n")
    assert load_config(path).gke.enabled is False      # no [gke]: no GKE calls at all


def test_gke_contexts_need_a_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[gke]\ncontexts = ["a"]\n')
    with pytest.raises(ConfigError, match=r"gke.*contexts.*kubeconfig"):
        load_config(path)
    path.write_text('[gke]\ndiscovr = true\n')
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(path)
