"""OS Login against the sandbox: the real google-cloud-tpu, google-cloud-compute and google-cloud-os-login
clients against its loopback APIs, asyncssh against its OS Login VM (research-v5e-1: its project's metadata
says enable-oslogin=TRUE, and the VM lets in only alice_example_com with a key imported into the profile)."""

from __future__ import annotations

import dataclasses
import getpass
import json
import sqlite3
from pathlib import Path

import asyncssh
import pytest

from console.cli import main
from console.config import load_config
from console.flows.node_lookup import fleet_source_for
from console.flows.ssh_login import LoginResolver
from console.flows.ssh_target import choose_target
from remote.oslogin import OsLoginError, key_material
from remote.ssh import SshAuthRefused, connect, run_command
from sandbox.runner import Sandbox

OS_LOGIN_NODE = "research-v5e-1"
POSIX_NAME = "alice_example_com"


@pytest.fixture
def box(tmp_path: Path):
    sandbox = Sandbox(tmp_path / "sandbox", boot=False, fast_boot_s=0.5)
    sandbox.start()
    yield sandbox
    sandbox.stop()


async def _node(config, name: str):
    with fleet_source_for(config) as source:
        snapshot = await source.list_fleet()
    return next(n for n in snapshot.nodes if n.name == name)


def _imports(box: Sandbox) -> list[str]:
    return [path for method, path in box.google_apis.requests if method == "POST" and ":importSshPublicKey" in path]


async def _echo(target) -> str:
    async with await connect(target) as conn:
        return (await run_command(conn, ["echo", "logged-in"])).stdout.strip()


async def test_os_login_node_refuses_the_local_user_and_the_unimported_key_then_accepts_the_posix_name(box) -> None:
    config = load_config(box.config_path)
    node = await _node(config, OS_LOGIN_NODE)
    resolver = LoginResolver(config)
    verdict = await resolver.verdict(node)
    assert (verdict.enabled, verdict.source, verdict.note) == (True, "project metadata", None)

    # the local user (what a console without OS Login would use) is refused, naming OS Login
    local = dataclasses.replace(config.ssh, user=getpass.getuser())
    from console.flows.ssh_login import SshLogin

    as_local = choose_target(node, local, login=SshLogin(getpass.getuser(), "local user", verdict))
    with pytest.raises(SshAuthRefused) as refused:
        await _echo(as_local)
    message = refused.value.message
    assert "uses OS Login" in message and "roles/compute.osLogin" in message and "roles/compute.osAdminLogin" in message
    assert "add its .pub to the node's ssh-keys metadata" not in message
    # the POSIX name with a key the profile does not list yet is refused too
    as_posix = choose_target(node, config.ssh, login=SshLogin(POSIX_NAME, "test", verdict))
    with pytest.raises(SshAuthRefused):
        await _echo(as_posix)
    assert _imports(box) == []

    # the resolver reads the profile, imports the key (the profile did not list it) and names the POSIX user
    login = await resolver.login(node)
    assert login.user == POSIX_NAME
    assert login.source == "OS Login profile of alice@example.com"
    assert login.notes == ("imported the SSH public key into the OS Login profile of alice@example.com",)
    assert len(_imports(box)) == 1
    ours = asyncssh.read_private_key(str(box.key_path)).export_public_key().decode()
    assert [key_material(k) for k in box.google_apis.imported["alice@example.com"]] == [key_material(ours)]
    target = choose_target(node, config.ssh, login=login)
    assert (target.user, target.os_login) == (POSIX_NAME, True)
    assert await _echo(target) == "logged-in"                  # on the first try
    assert box.vms[OS_LOGIN_NODE].auth_users[-1] == POSIX_NAME

    # a second console finds the key in the profile: no second import
    again = await LoginResolver(config).login(node)
    assert (again.user, again.notes) == (POSIX_NAME, ())
    assert len(_imports(box)) == 1
    resolver.close()


async def test_node_metadata_decides_before_the_project(box) -> None:
    project = box.world.projects["research-sandbox"]
    name = f"projects/research-sandbox/locations/us-central1-a/nodes/{OS_LOGIN_NODE}"
    project.nodes[name]["metadata"] = {"Enable-OSLogin": "false"}    # node FALSE over project TRUE (any case)
    prod = box.world.projects["inference-prod"]
    prod.nodes["projects/inference-prod/locations/us-west4-a/nodes/vllm-v5e-a"]["metadata"] = {"enable-oslogin": "True"}
    config = load_config(box.config_path)
    resolver = LoginResolver(config)

    node = await _node(config, OS_LOGIN_NODE)
    login = await resolver.login(node)
    assert (login.verdict.enabled, login.verdict.source) == (False, "node metadata")
    assert (login.user, login.source) == (getpass.getuser(), "local user")

    on = await resolver.verdict(await _node(config, "vllm-v5e-a"))          # node TRUE, project unset
    assert (on.enabled, on.source) == (True, "node metadata")
    assert not any("/projects/inference-prod" in path for _, path in box.google_apis.requests)  # never asked
    resolver.close()


async def test_unreadable_project_metadata_falls_back_to_the_node_and_says_so(box) -> None:
    box.google_apis.denied_projects.add("research-sandbox")
    config = load_config(box.config_path)
    resolver = LoginResolver(config)
    verdict = await resolver.verdict(await _node(config, OS_LOGIN_NODE))
    assert (verdict.enabled, verdict.source) == (False, "node metadata")
    assert verdict.note == ("project research-sandbox's metadata could not be read (HTTP 403), so only the "
                            "node's metadata was checked (it does not set enable-oslogin)")
    resolver.close()


def test_nodes_json_notes_an_unreadable_project(box, capsys) -> None:
    box.google_apis.denied_projects.add("research-sandbox")
    assert main(["--config", str(box.config_path), "nodes", "--json"]) == 1   # denied-project's 403 as before
    nodes = {n["name"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert (nodes[OS_LOGIN_NODE]["os_login"], nodes[OS_LOGIN_NODE]["os_login_source"]) == (False, "node metadata")
    assert "project research-sandbox's metadata could not be read (HTTP 403)" in nodes[OS_LOGIN_NODE]["os_login_note"]
    assert main(["--config", str(box.config_path), "nodes"]) == 1             # the table says it once too
    out = capsys.readouterr().out
    assert out.count("os login: research-sandbox: project research-sandbox's metadata could not be read") == 1


def test_nodes_json_says_which_nodes_need_os_login(box, capsys) -> None:
    main(["--config", str(box.config_path), "nodes", "--json"])
    nodes = json.loads(capsys.readouterr().out)["nodes"]
    assert {n["name"] for n in nodes if n["os_login"]} == {OS_LOGIN_NODE}
    assert all(n["os_login"] is False for n in nodes if n["name"] != OS_LOGIN_NODE)
    mine = next(n for n in nodes if n["name"] == OS_LOGIN_NODE)
    assert (mine["os_login_source"], mine["os_login_note"]) == ("project metadata", None)


async def test_ssh_user_in_the_config_and_the_user_flag_override_os_login(box, tmp_path: Path) -> None:
    text = box.config_path.read_text().replace("[ssh]\n", '[ssh]\nuser = "ops"\n', 1)
    configured = tmp_path / "configured.toml"
    configured.write_text(text)
    config = load_config(configured)
    node = await _node(config, OS_LOGIN_NODE)
    login = await LoginResolver(config).login(node)
    assert (login.user, login.source, login.verdict.enabled) == ("ops", "[ssh] user", True)
    flagged = await LoginResolver(config).login(node, user="bob")
    assert (flagged.user, flagged.source) == ("bob", "--user")
    assert not any("loginProfile" in path for _, path in box.google_apis.requests)   # no profile needed
    # the override is used as given: the OS Login node refuses it, and the message names OS Login
    with pytest.raises(SshAuthRefused, match="uses OS Login .* roles/compute.osLogin"):
        await _echo(choose_target(node, config.ssh, login=login))


def test_watch_user_flag_is_refused_on_the_os_login_node_with_the_roles(box, capsys) -> None:
    code = main(["--config", str(box.config_path), "watch", OS_LOGIN_NODE, "--user", "root"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines()[0] == "logging in as root (--user; OS Login on (project metadata))"
    assert "uses OS Login and refused the SSH key" in err and "roles/compute.osLogin" in err
    assert main(["--config", str(box.config_path), "watch", OS_LOGIN_NODE, "--user", "x y"]) == 2
    assert "is not a user name" in capsys.readouterr().err


def test_watch_logs_in_as_the_posix_user_and_records_it_with_the_launch(tmp_path: Path, capsys) -> None:
    with Sandbox(tmp_path / "sandbox", boot_s=0.5, fast_boot_s=0.5) as box:
        code = main(["--config", str(box.config_path), "watch", OS_LOGIN_NODE])
        err = capsys.readouterr().err
        assert code == 0, err
        assert err.splitlines()[0] == (
            "logging in as alice_example_com (OS Login profile of alice@example.com; OS Login on (project "
            "metadata)); imported the SSH public key into the OS Login profile of alice@example.com")
        assert set(box.vms[OS_LOGIN_NODE].auth_users) == {POSIX_NAME}     # every connection on the first try
        with sqlite3.connect(box.db_path) as db:
            rows = db.execute("SELECT node, ssh_user, outcome FROM launches").fetchall()
        assert rows == [(OS_LOGIN_NODE, POSIX_NAME, "ready")]


async def test_a_posix_name_that_is_not_a_user_name_is_refused_before_ssh(box) -> None:
    box.google_apis.usernames["alice@example.com"] = "alice -oProxyCommand=x\n"
    config = load_config(box.config_path)
    with pytest.raises(OsLoginError, match="gives the POSIX name .* which is not a user name"):
        await LoginResolver(config).login(await _node(config, OS_LOGIN_NODE))
    assert box.vms[OS_LOGIN_NODE].auth_users == []


async def test_an_os_login_api_refusal_names_the_role(box) -> None:
    box.google_apis.accounts.discard("alice@example.com")          # the API answers 404 for the account
    config = load_config(box.config_path)
    with pytest.raises(OsLoginError) as refused:
        await LoginResolver(config).login(await _node(config, OS_LOGIN_NODE))
    message = refused.value.message
    assert message.startswith("Node research-v5e-1 uses OS Login (project metadata), but reading the OS Login "
                              "profile of alice@example.com failed (HTTP 404): User alice@example.com not found.")
    assert "roles/compute.osLogin on project research-sandbox" in message


def test_a_swap_on_the_os_login_node_records_the_posix_user(tmp_path: Path, capsys) -> None:
    with Sandbox(tmp_path / "sandbox", boot_s=0.5, fast_boot_s=0.5) as box:
        code = main(["--config", str(box.config_path), "swap", OS_LOGIN_NODE, "--set", "max-model-len=8192", "--yes"])
        assert code == 0, capsys.readouterr().err
        with sqlite3.connect(box.db_path) as db:
            rows = db.execute("SELECT origin, ssh_user FROM launches WHERE origin = 'console'").fetchall()
        assert rows == [("console", POSIX_NAME)]
        assert set(box.vms[OS_LOGIN_NODE].auth_users) == {POSIX_NAME}


def test_a_rollback_on_the_os_login_node_records_the_posix_user_as_swap_does(tmp_path: Path, capsys) -> None:
    with Sandbox(tmp_path / "sandbox", boot_s=0.5, fast_boot_s=0.5) as box:
        config = ["--config", str(box.config_path)]
        assert main([*config, "swap", OS_LOGIN_NODE, "--set", "max-model-len=8192", "--yes"]) == 0, \
            capsys.readouterr().err
        code = main([*config, "rollback", OS_LOGIN_NODE, "--yes"])
        assert code == 0, capsys.readouterr().err
        with sqlite3.connect(box.db_path) as db:
            rows = db.execute("SELECT origin, ssh_user, max_model_len FROM launches WHERE origin = 'console' "
                              "ORDER BY id").fetchall()
        assert [(origin, user) for origin, user, _ in rows] == [("console", POSIX_NAME)] * 2
        assert rows[0][2] == 8192 and rows[1][2] != 8192                    # the second is the rollback


async def test_an_os_login_user_without_sudo_is_told_about_os_admin_login(box) -> None:
    from remote.ssh import SudoPasswordRequired

    box.vms[OS_LOGIN_NODE].sudo_password_required = True           # roles/compute.osLogin without osAdminLogin
    config = load_config(box.config_path)
    node = await _node(config, OS_LOGIN_NODE)
    target = choose_target(node, config.ssh, login=await LoginResolver(config).login(node))
    async with await connect(target) as conn:
        with pytest.raises(SudoPasswordRequired, match="roles/compute.osAdminLogin"):
            await run_command(conn, ["docker", "ps"], sudo=True)


async def test_the_console_shares_one_resolver_and_a_call_without_one_caches_nothing(box, tmp_path) -> None:
    """No process-wide registry: the console's ``Services.logins`` is its one resolver (the profile is
    read once for every screen), a verb makes its own, and ``logins=None`` keeps nothing between calls."""
    from console.flows.ssh_target import login_target
    from console.services import build_services

    def profile_reads() -> int:
        return sum(1 for method, path in box.google_apis.requests if method == "GET" and "/loginProfile" in path)

    config = load_config(box.config_path)
    node = await _node(config, OS_LOGIN_NODE)
    services = build_services(config, db_path=tmp_path / "history.db")
    try:
        resolver = services.logins
        assert services.logins is resolver
        first = await login_target(node, services.config, 0, services.fleet, logins=services.logins)
        reads = profile_reads()
        second = await login_target(node, services.config, 0, services.fleet, logins=services.logins)
        assert first[1].user == second[1].user == POSIX_NAME and first[0] == second[0]
        assert profile_reads() == reads >= 1                         # the second came from the shared cache
        for _ in range(2):                                           # each call its own resolver, closed after it
            assert (await login_target(node, config, 0, services.fleet))[1].user == POSIX_NAME
        assert profile_reads() == reads + 2
        assert LoginResolver(config) is not LoginResolver(config)
    finally:
        services.close()
    assert services._logins is None and resolver.api._pool._closed        # closed with the console's services
