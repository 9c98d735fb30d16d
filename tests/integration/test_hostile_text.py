"""Hostile text from the TPU API, logs, containers and servers through every CLI verb.

Each verb shows :data:`tests.hostile.HOSTILE` as :data:`tests.hostile.SHOWN` (markup literal, no
control bytes, newline as ``\\n``) and exits with its usual code, never a traceback; ``--json``
keeps the data.
"""

from __future__ import annotations

import json

import pytest

from console.cli import main
from remote.models import utc_now
from tests.hostile import HOSTILE, HOSTILE_NAME, SHOWN, SHOWN_NAME, assert_clean, hostile_world


@pytest.fixture(scope="module")
def hostile_api():
    from sandbox.tpu_server import SandboxTpuApi

    server = SandboxTpuApi(hostile_world(utc_now()))
    yield server.start()
    server.stop()


def test_nodes_table_shows_hostile_api_fields_literally(hostile_api, capsys) -> None:
    code = main(["nodes", "--api-endpoint", hostile_api, "--project", "inference-prod"])
    captured = capsys.readouterr()
    assert code == 1, captured.err                        # the hostile-named node is a problem line
    assert_clean(captured.out)
    assert SHOWN in captured.out                          # the RUNTIME column (no wrapping)
    problem = " ".join(line.strip("│ ") for line in captured.out.splitlines() if "unreadable node" in line)
    assert f"'{SHOWN_NAME}' is not a node name" in problem  # GCP's name rule: not a row, one unreadable line
    failure = " ".join(line.strip("│ ") for line in captured.out.splitlines() if "qr-failed" in line or "│" in line)
    assert "[/x][link=http://e.x]L[/link]" in failure    # FAILURE (wraps: its first part)


def test_nodes_json_keeps_the_data(hostile_api, capsys) -> None:
    assert main(["nodes", "--api-endpoint", hostile_api, "--project", "inference-prod", "--json"]) == 1
    out = capsys.readouterr().out
    assert_clean(out)                                     # JSON escapes the controls...
    data = json.loads(out)
    node = next(n for n in data["nodes"] if n["name"] == "vllm-v5e-a")
    assert node["runtime_version"] == HOSTILE             # ... and keeps them
    assert not any(n["name"] == HOSTILE_NAME for n in data["nodes"])     # a name GCP never gives: unreadable
    assert any(f"'{SHOWN_NAME}' is not a node name" in p["message"] for p in data["errors"])
    assert next(q for q in data["queued_resources"] if q["name"] == "qr-failed")["failure"] == HOSTILE


# --- log lines: log-summary and watch ---------------------------------------------------------

#: A log line cannot hold a newline (it ends the line); the rest of HOSTILE can.
HOSTILE_LINE = HOSTILE.replace("\n", " ")
SECRET = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123"


def _hostile_failure_log(tmp_path) -> str:
    from pathlib import Path

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-logs"   # a copy of the corpus file
    text = (fixtures / "15-tpujax-maxtext3574-v5e-tp4-config-crash.log").read_text()
    assert "ValueError: Resource axis" in text
    path = tmp_path / "hostile.log"
    path.write_text(text.replace("ValueError: Resource axis", f"ValueError: {HOSTILE_LINE} token={SECRET} axis"))
    return str(path)


def test_log_summary_shows_a_hostile_failure_line_literally(tmp_path, capsys) -> None:
    from remote.printable import printable
    from remote.vllm_log.reader import read_log, summary_json

    path = _hostile_failure_log(tmp_path)
    assert main(["log-summary", path]) == 0
    out = capsys.readouterr().out
    assert_clean(out)
    detail = summary_json(read_log(path))["failure_detail"]
    # the reader drops ANSI sequences itself; NUL, the markup and the secret reach the summary
    assert detail.startswith("ValueError: [/x][link=http://e.x]L[/link] forged\x00! token=*** axis")
    # the panel folds long values: join the value column's lines
    shown = "".join(line[22:].rstrip(" │") + " " for line in out.splitlines()[1:-1])
    expected = printable(detail)
    assert expected.startswith("ValueError: [/x][link=http://e.x]L[/link] forged! token=*** axis")
    assert " ".join(expected.split()) in " ".join(shown.split())
    assert SECRET not in out


def test_log_summary_json_does_not_echo_a_token(tmp_path, capsys) -> None:
    assert main(["log-summary", _hostile_failure_log(tmp_path), "--json"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out)
    assert SECRET not in out and "token=***" in data["failure_detail"] and "token=***" in data["failure_evidence"]
    assert "[/x][link=http://e.x]L[/link] forged\x00!" in data["failure_detail"]       # the data, JSON-escaped


async def test_watch_prints_hostile_log_lines_and_status_literally(tmp_path) -> None:
    import dataclasses
    import io

    import asyncssh

    from console.verbs.watch import watch_target
    from remote.ssh import SshTarget
    from sandbox.engine import plan_startup
    from sandbox.vm import SandboxVm

    def plan_for(argv, accel, boot_s):
        plan = plan_startup(argv, accel, boot_s=boot_s)
        lines = tuple((t, line.replace("for ModelConfig", f"for ModelConfig {HOSTILE_LINE} --api-key {SECRET}")) for t, line in plan.lines)
        return dataclasses.replace(plan, lines=lines)

    key = asyncssh.generate_private_key("ssh-ed25519")
    vm = SandboxVm(node_name="vllm-a", accelerator_type="v5litepod-4", authorized_client_key=key, boot_s=0.5,
                   plan_for=plan_for)
    port = await vm.start()
    try:
        known = tmp_path / "kh"
        known.write_text(vm.known_hosts_line("tpu.1-0"))
        await vm.boot_container(["Qwen/Qwen3-8B", "--max-model-len", "1000000", "--tensor-parallel-size", "4"])
        target = SshTarget(host="127.0.0.1", port=port, user="operator", private_key=None, known_hosts=known,
                           host_key_alias="tpu.1-0", client_keys=(key,), node_name="vllm-a")
        progress = io.StringIO()
        code, summary = await watch_target(target, container="vllm", progress=progress, probe=False)
    finally:
        await vm.stop()
    assert code == 1 and summary is not None
    said = progress.getvalue()
    assert_clean(said)
    failed = next(line for line in said.splitlines() if line.startswith("failed: "))
    # shown literally, the secret masked (the diagnosis now also quotes vLLM's "Value error" line after it)
    assert "[/x][link=http://e.x]L[/link] forged! --api-key ***" in failed, failed
    assert SECRET not in said and SECRET not in json.dumps(summary)            # watch --json prints summary
    # --json: the diagnosis quotes vLLM's own "Value error" line (issue 14), not the hostile header
    assert summary["failure"] == "max_model_len_too_large" and "Value error" in summary["failure_evidence"]


# --- servers: bench -------------------------------------------------------------------------


@pytest.fixture
def hostile_vllm():
    """A ready sandbox vLLM whose served model name is HOSTILE."""
    from sandbox.openai_server import SandboxOpenAIServer

    srv = SandboxOpenAIServer()
    srv.configure(model="Qwen/Qwen3-8B", served_model_name=HOSTILE, max_model_len=32768,
                  accelerator_type="v6e-1", chips=1)
    srv.start()
    srv.set_ready(True)
    yield f"http://127.0.0.1:{srv.port}"
    srv.stop()


@pytest.mark.parametrize("kind", ["smoke", "throughput"])
def test_bench_shows_a_hostile_served_model_name_literally(hostile_vllm, capsys, kind) -> None:
    argv = ["bench", "--url", hostile_vllm, "--kind", kind]
    if kind == "throughput":
        argv += ["--streams", "1", "--requests", "2", "--prompt-tokens", "32", "--output-tokens", "8"]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert_clean(captured.out + captured.err)
    flat = " ".join(captured.out.split())
    assert f"{SHOWN} at {hostile_vllm}" in flat                 # the table's title
    if kind == "smoke":
        assert f"served model │ {SHOWN}" in flat or f"served model {SHOWN}" in flat


def test_bench_json_keeps_the_served_model_name(hostile_vllm, capsys) -> None:
    assert main(["bench", "--url", hostile_vllm, "--kind", "smoke", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["results"][0]["model"] == HOSTILE


# --- the history: history list and history show -------------------------------------------


@pytest.fixture
def hostile_db(tmp_path):
    from store.history import HistoryStore

    path = tmp_path / "history.db"
    with HistoryStore(path) as store:
        launch = store.start_launch(node=HOSTILE_NAME, accelerator_type="v6e-8", model=HOSTILE,
                                    serve_args=["--served-model-name", HOSTILE], requested_at="2026-05-01T10:00:00Z")
        store.update_launch(launch, outcome="failed", failure_kind="config_error", failure_detail=HOSTILE)
    return path


def test_history_list_and_show_print_hostile_values_literally(hostile_db, capsys) -> None:
    assert main(["--db", str(hostile_db), "history"]) == 0
    out = capsys.readouterr().out
    assert_clean(out)
    assert SHOWN_NAME in out and "[/x][link=http://e.x]L[/link]" in out
    assert main(["--db", str(hostile_db), "history", "show", "1"]) == 0
    out = capsys.readouterr().out
    assert_clean(out)
    lines = {line.split(None, 1)[0]: line.split(None, 1)[1].rstrip() for line in out.splitlines() if line.strip()
             and not line.startswith(" ")}
    assert lines["node"] == SHOWN_NAME
    assert lines["model"] == SHOWN
    assert lines["failure_detail"] == SHOWN
    assert main(["--db", str(hostile_db), "history", "show", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["failure_detail"] == HOSTILE


# --- docker inspect values: the swap plan ----------------------------------------------------


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    from sandbox.runner import Sandbox

    box = Sandbox(tmp_path_factory.mktemp("sandbox"), boot_s=0.5, fast_boot_s=0.3)
    box.start()
    yield box
    box.stop()


async def _boot_hostile(vm) -> None:
    vm.docker.remove(vm.docker.find("vllm"))
    await vm.boot_container(["Qwen/Qwen3-0.6B", "--served-model-name", HOSTILE], env=[f"NOTE={HOSTILE}"])


def test_swap_plan_shows_hostile_container_values_on_their_own_lines(sandbox, capsys, monkeypatch) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    sandbox.call(_boot_hostile(sandbox.vms["vllm-v5e-a"]))
    code = main(["--config", str(sandbox.config_path), "swap", "vllm-v5e-a", "--set", "max-num-seqs=64",
                 "--dry-run"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert_clean(captured.out)
    lines = captured.out.splitlines()
    assert not [line for line in lines if line.startswith("forged")]       # no value adds a line
    (run,) = [line for line in lines if "docker run" in line]
    assert "--served-model-name '[/x][link=http://e.x]L[/link]]52;c;QQ==[2J\\nforged!'" in run
    assert "-e 'NOTE=[/x][link=http://e.x]L[/link]]52;c;QQ==[2J\\nforged!'" in run
    assert lines[-1] == "Dry run: nothing was changed."


# --- exit codes when the TPU API does not answer ---------------------------------------------


@pytest.mark.parametrize("argv", [["swap", "vllm-a", "--set", "max-num-seqs=8", "--dry-run"],
                                  ["bench", "vllm-a", "--kind", "smoke"]])
def test_swap_and_bench_exit_1_when_the_api_is_down(tmp_path, capsys, argv) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]                    # closed once the block ends
    config = tmp_path / "config.toml"
    config.write_text(f'api_endpoint = "http://127.0.0.1:{port}"\nrequest_timeout_s = 3\n'
                      '[[projects]]\nid = "inference-prod"\n')
    code = main(["--config", str(config), *argv])
    err = capsys.readouterr().err
    assert code == 1, err                               # unreachable, per the README table; not 2 (bad input)
    assert "No node 'vllm-a'" in err and "did not list" in err


# --- bench against a key-protected vLLM ------------------------------------------------------

KEYED_NODE = "vllm-reserved-d"
API_KEY = "s3cret-bench-key-4711"


async def _boot_keyed(vm) -> None:
    vm.docker.remove(vm.docker.find("vllm"))
    await vm.boot_container(["Qwen/Qwen3-0.6B", "--api-key", API_KEY])


def _ready(sandbox, node: str) -> str:
    import time

    import httpx

    url = f"http://127.0.0.1:{sandbox.vms[node].openai_port}"
    for _ in range(400):
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return url
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError("the keyed vLLM never became ready")


def test_bench_sends_the_running_containers_api_key(sandbox, capsys, monkeypatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    sandbox.call(_boot_keyed(sandbox.vms[KEYED_NODE]))
    url = _ready(sandbox, KEYED_NODE)
    config = ["--config", str(sandbox.config_path)]
    # without the key the server refuses, as vLLM does with --api-key
    assert main(["bench", "--url", url, "--kind", "smoke"]) == 1
    assert "401" in capsys.readouterr().err
    # through the node: the key comes from the running container's spec
    code = main(config + ["bench", KEYED_NODE, "--kind", "smoke", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["results"][0]["ok"] is True and API_KEY not in captured.out
    # --url mode: --api-key, or the operator's VLLM_API_KEY
    assert main(["bench", "--url", url, "--kind", "smoke", "--api-key", API_KEY, "--json"]) == 0
    monkeypatch.setenv("VLLM_API_KEY", API_KEY)
    assert main(["bench", "--url", url, "--kind", "smoke", "--json"]) == 0
    capsys.readouterr()
    assert API_KEY.encode() not in sandbox.db_path.read_bytes()          # never recorded
