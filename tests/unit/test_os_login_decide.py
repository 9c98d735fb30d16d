"""The OS Login decision and the login profile's reading (remote.oslogin.decide), gcloud's account, the config."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.config import ConfigError, load_config
from remote.oslogin import (
    gcloud_account,
    os_login_verdict,
    posix_username,
    profile_has_key,
    project_metadata_items,
)

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPk3i3SB8rCw3o8dVZ5XpX6Ck2S1oqIqwq9y1xkFq8kz"


@pytest.mark.parametrize(("node", "project", "enabled", "source"), [
    ({"enable-oslogin": "TRUE"}, {}, True, "node metadata"),
    ({"enable-oslogin": "true"}, None, True, "node metadata"),               # case-insensitive value
    ({"ENABLE-OSLOGIN": "True"}, {}, True, "node metadata"),                 # and key
    ({"enable-oslogin": "FALSE"}, {"enable-oslogin": "TRUE"}, False, "node metadata"),   # node FALSE wins
    ({"enable-oslogin": "no"}, {"enable-oslogin": "TRUE"}, False, "node metadata"),
    ({}, {"enable-oslogin": "TRUE"}, True, "project metadata"),
    (None, {"enable-oslogin": " true "}, True, "project metadata"),
    ({"startup-script": "x"}, {"enable-oslogin": "FALSE"}, False, "project metadata"),
    ({}, {}, False, "default"),
])
def test_node_metadata_first_then_the_project(node, project, enabled, source) -> None:
    verdict = os_login_verdict(node, project)
    assert (verdict.enabled, verdict.source, verdict.note) == (enabled, source, None)


def test_an_unreadable_project_leaves_the_node_to_decide_and_says_so() -> None:
    verdict = os_login_verdict({}, None, project_problem="HTTP 403")
    assert (verdict.enabled, verdict.source) == (False, "node metadata")
    assert verdict.note is not None and "could not be read (HTTP 403)" in verdict.note
    assert os_login_verdict({"enable-oslogin": "TRUE"}, None, project_problem="HTTP 403").note is None


def test_project_metadata_items_from_the_compute_project() -> None:
    project = {"kind": "compute#project", "commonInstanceMetadata": {
        "kind": "compute#metadata", "fingerprint": "x", "items": [
            {"key": "enable-oslogin", "value": "TRUE"}, {"key": "ssh-keys"}, {"value": "orphan"}]}}
    assert project_metadata_items(project) == {"enable-oslogin": "TRUE", "ssh-keys": ""}
    assert project_metadata_items({"name": "p"}) == {}


def test_posix_username_is_the_primary_linux_account() -> None:
    profile = {"posixAccounts": [
        {"username": "win_alice", "operatingSystemType": "WINDOWS", "primary": True},
        {"username": "alice_other", "operatingSystemType": "LINUX"},
        {"username": "alice_example_com", "operatingSystemType": "LINUX", "primary": True}]}
    assert posix_username(profile) == "alice_example_com"
    assert posix_username({"posixAccounts": [{"username": "first_one"}]}) == "first_one"
    assert posix_username({"name": "123"}) is None


def test_profile_key_match_ignores_the_comment() -> None:
    profile = {"sshPublicKeys": {"ab12": {"key": f"{KEY} alice@laptop", "fingerprint": "ab12"}}}
    assert profile_has_key(profile, f"{KEY} root@console")
    assert not profile_has_key(profile, KEY[:-4] + "AAAA")
    assert not profile_has_key({"name": "1"}, KEY)


def test_gcloud_account_reads_the_active_configuration(tmp_path: Path) -> None:
    (tmp_path / "configurations").mkdir()
    (tmp_path / "active_config").write_text("work\n")
    (tmp_path / "configurations" / "config_work").write_text("[core]\naccount = alice@example.com\nproject = p\n")
    (tmp_path / "configurations" / "config_default").write_text("[core]\naccount = other@example.com\n")
    assert gcloud_account({"CLOUDSDK_CONFIG": str(tmp_path)}) == "alice@example.com"
    assert gcloud_account({"CLOUDSDK_CONFIG": str(tmp_path), "CLOUDSDK_CORE_ACCOUNT": "env@example.com"}) \
        == "env@example.com"
    assert gcloud_account({"CLOUDSDK_CONFIG": str(tmp_path / "none")}) is None


def test_config_os_login_table_and_a_configured_user(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[ssh]\nuser = "ops"\n[os_login]\naccount = "alice@example.com"\n'
                    'api_endpoint = "http://127.0.0.1:1"\ncompute_api_endpoint = "http://127.0.0.1:2"\n')
    config = load_config(path)
    assert (config.ssh.user, config.ssh.user_configured) == ("ops", True)
    assert (config.os_login.account, config.os_login.api_endpoint, config.os_login.compute_api_endpoint) == (
        "alice@example.com", "http://127.0.0.1:1", "http://127.0.0.1:2")
    path.write_text("[ssh]\nport = 22\n")
    assert load_config(path).ssh.user_configured is False
    path.write_text('[os_login]\naccount = "alice"\n')
    with pytest.raises(ConfigError, match="line 2: key 'os_login.account': 'alice' is not an email address"):
        load_config(path)
