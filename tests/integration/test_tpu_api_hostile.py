"""The real google-cloud-tpu client (FleetSource) and the ``nodes`` verb against a hostile TPU API.

A purpose-built loopback server (one ``mode`` per test) answers ``nodes`` lists (v2 and v2alpha1
alike) with a page token it repeats, one that is not a string, a new one on every page, a body
trickled a few bytes at a time, a page with one malformed record, or names GCP never gives.
Every listing must end, say what happened as that zone's (or project's) problem, and show what
could be read.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from console.config import ProjectConfig
from remote.models import FleetSnapshot
from remote.tpu.api import FleetSource
from sandbox.loopback_http import LoopbackHttp

PROJECT = "hostile-proj"
ROOT = Path(__file__).resolve().parents[2]


def node(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": f"projects/{PROJECT}/locations/us-east5-a/nodes/{name}", "state": "READY",
            "acceleratorType": "v6e-8", "networkEndpoints": [{"ipAddress": "10.0.0.2"}],
            "metadata": {"enable-oslogin": "FALSE"}, **extra}


@dataclass
class Hostile:
    mode: str = "repeat"
    trickle_gap_s: float = 0.05
    requests: list[str] = field(default_factory=list)

    def page(self, token: str) -> dict[str, Any]:
        """One page of ``nodes``: the mode's answer to ``pageToken=token``."""
        number = 0 if not token else (int(token[1:]) if token.startswith("t") else 1)
        if self.mode == "repeat":
            return {"nodes": [node(f"vllm-p{number}")], "nextPageToken": "again"}
        if self.mode == "int-token":
            return {"nodes": [node("vllm-a")], "nextPageToken": 7}
        if self.mode == "endless":
            return {"nodes": [node(f"vllm-p{number}")], "nextPageToken": f"t{number + 1}"}
        if self.mode == "malformed":
            return {"nodes": [node("vllm-a"), node("vllm-bad", networkEndpoints="x"), node("vllm-b")]}
        if self.mode == "names":
            return {"nodes": [node("vllm-a"), node("n$(id);`id`"), node("vllm\u200ba"), node("vllm-\u0430"),
                              node("Vllm-a"), node("v" * 64)]}
        return {"nodes": [node("vllm-a")]}


@pytest.fixture
def hostile() -> Iterator[tuple[Hostile, str]]:
    state = Hostile()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            state.requests.append(self.path)
            if state.mode == "trickle-headers":   # the status line, then one header a byte at a time, for 100 s
                try:
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                    for _ in range(2000):
                        self.wfile.write(b"x")
                        self.wfile.flush()
                        time.sleep(state.trickle_gap_s)
                except OSError:
                    self.close_connection = True
                return
            body: dict[str, Any] = {}
            if path.endswith("/nodes"):
                body = state.page(parse_qs(query).get("pageToken", [""])[0])
            data = json.dumps(body).encode()
            if state.mode == "trickle":             # long enough to outlast any timeout given here
                data = b" " * 400 + data
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                if state.mode != "trickle":
                    self.wfile.write(data)
                    return
                for i in range(len(data)):          # headers at once, then the body a byte at a time
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()
                    time.sleep(state.trickle_gap_s)
            except OSError:                         # the client gave up
                self.close_connection = True

    http = LoopbackHttp("hostile-tpu-api")
    url = http.start(Handler)
    yield state, url
    http.stop()


async def list_fleet(url: str, timeout_s: float = 5.0) -> FleetSnapshot:
    import asyncio

    source = FleetSource([ProjectConfig(PROJECT)], api_endpoint=url, timeout_s=timeout_s)
    try:       # a bound to fail on, not a speed goal: a listing that pages forever never returns
        return await asyncio.wait_for(source.list_fleet(), 60)
    finally:
        source.close()


def node_pages(state: Hostile, version: str) -> list[str]:
    return [p for p in state.requests if p.startswith(f"/{version}/projects/{PROJECT}/locations/-/nodes")]


async def test_a_repeated_page_token_stops_the_listing_as_the_projects_problem(hostile) -> None:
    state, url = hostile
    snapshot = await list_fleet(url)
    assert sorted(n.name for n in snapshot.nodes) == ["vllm-p0", "vllm-p1"]     # what was read is shown
    assert len(node_pages(state, "v2")) == 2 and len(node_pages(state, "v2alpha1")) == 2
    assert [(p.project, p.zone, p.code, p.message) for p in snapshot.problems] == [
        (PROJECT, None, 0, f"listing nodes of projects/{PROJECT}/locations/- stopped after 2 pages: the API "
                           "repeated a page token (it would page forever); what was read so far is shown")]


async def test_a_page_token_that_is_not_a_string_stops_the_listing(hostile) -> None:
    state, url = hostile
    state.mode = "int-token"
    snapshot = await list_fleet(url)
    assert [n.name for n in snapshot.nodes] == ["vllm-a"]
    assert len(node_pages(state, "v2alpha1")) == 1
    assert [p.message for p in snapshot.problems] == [
        f"listing nodes of projects/{PROJECT}/locations/- stopped after 1 pages: the API sent a page token that "
        "is not a string (int); what was read so far is shown"]


async def test_paging_stops_at_the_most_pages_one_listing_may_take(hostile, monkeypatch) -> None:
    import remote.tpu.api

    state, url = hostile
    state.mode = "endless"
    monkeypatch.setattr(remote.tpu.api, "MAX_PAGES_PER_LISTING", 5)
    snapshot = await list_fleet(url)
    assert sorted(n.name for n in snapshot.nodes) == [f"vllm-p{i}" for i in range(5)]
    assert len(node_pages(state, "v2")) == 5 and len(node_pages(state, "v2alpha1")) == 5
    assert [p.message for p in snapshot.problems] == [
        f"listing nodes of projects/{PROJECT}/locations/- stopped at 5 pages (the most one listing may take); "
        "what was read so far is shown"]


async def test_one_malformed_node_is_one_unreadable_line_and_the_others_list(hostile) -> None:
    state, url = hostile
    state.mode = "malformed"
    snapshot = await list_fleet(url)
    assert sorted(n.name for n in snapshot.nodes) == ["vllm-a", "vllm-b"]
    assert [(p.project, p.zone, p.code) for p in snapshot.problems] == [(PROJECT, None, 0)]
    message = snapshot.problems[0].message
    assert message.startswith(f"unreadable node 'projects/{PROJECT}/locations/us-east5-a/nodes/vllm-bad': ")
    assert "networkEndpoints" in message


async def test_names_gcp_never_gives_are_unreadable_lines(hostile) -> None:
    state, url = hostile
    state.mode = "names"
    snapshot = await list_fleet(url)
    assert [n.name for n in snapshot.nodes] == ["vllm-a"]
    messages = sorted(p.message.split(": ", 1)[1] for p in snapshot.problems)
    rule = ("(lowercase letters, digits and hyphens, starting with a letter, not ending with a hyphen, "
            "at most 63 characters)")
    assert messages == sorted([
        f"'n$(id);`id`' is not a node name {rule}",
        f"'vllm\\u200ba' is not a node name {rule}",         # the zero-width space made visible
        f"'vllm-\\u0430' is not a node name {rule}",         # a Cyrillic a cannot pass for a Latin one
        f"'Vllm-a' is not a node name {rule}",
        f"'{'v' * 64}' is not a node name {rule}"])


async def test_a_trickling_answer_times_out_on_the_whole_call_and_leaves_no_thread_behind(hostile) -> None:
    """Headers at once, then a byte every 50 ms: no read waits 1 s, yet the call must end at 1 s."""
    state, url = hostile
    state.mode = "trickle"
    source = FleetSource([ProjectConfig(PROJECT)], api_endpoint=url, timeout_s=1.0)
    try:
        snapshot = await source.list_fleet()
    finally:
        source.close()
    assert snapshot.nodes == ()
    assert [(p.project, p.zone, p.code, p.message) for p in snapshot.problems] == [
        (PROJECT, None, 0, f"no answer within 1 s (timed out) from {url}")]   # the endpoint named
    others = [t for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    assert others == []               # nothing that would keep a verb's process from exiting


async def test_trickled_headers_time_out_on_the_whole_call_too(hostile) -> None:
    """The status line, then a header a byte every 50 ms: each read is quick, the headers never end."""
    state, url = hostile
    state.mode = "trickle-headers"
    snapshot = await list_fleet(url, timeout_s=1.0)
    assert snapshot.nodes == ()
    assert [(p.project, p.zone, p.code, p.message) for p in snapshot.problems] == [
        (PROJECT, None, 0, f"no answer within 1 s (timed out) from {url}")]   # the endpoint named


@pytest.mark.parametrize("mode", ["repeat", "int-token", "trickle"])
def test_the_nodes_verb_exits_against_a_hostile_api(hostile, tmp_path: Path, mode: str) -> None:
    """In its own process, as an operator runs it: it prints the problem and exits (it paged forever,
    or printed its result and never exited while a pool thread kept paging)."""
    state, url = hostile
    state.mode = mode
    config = tmp_path / "config.toml"
    config.write_text(f'request_timeout_s = 2\napi_endpoint = "{url}"\n[[projects]]\nid = "{PROJECT}"\n')
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_DATA_HOME": str(tmp_path / "data"), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin",
           "NO_COLOR": "1", "COLUMNS": "200"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "console.cli", "--config", str(config), "nodes"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    print(f"nodes against {mode}: {time.monotonic() - started:.2f} s")       # the figure, for the report
    assert done.returncode == 1, done.stderr
    expected = {"repeat": "repeated a page token", "int-token": "page token that is not a string",
                "trickle": "no answer within 2 s (timed out)"}[mode]
    assert expected in " ".join(done.stdout.split()), done.stdout
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("call", ["project_metadata", "login_profile"])
async def test_os_login_and_compute_calls_time_out_on_a_trickling_answer(hostile, call: str) -> None:
    """Compute ``projects.get`` (httplib2) and OS Login ``loginProfile`` (REST): headers at once, then a
    byte every 50 ms; each call ends at its timeout with a sentence, and leaves no thread behind."""
    from remote.oslogin.api import OsLoginApi, OsLoginError

    state, url = hostile
    state.mode = "trickle"
    api = OsLoginApi(oslogin_endpoint=url, compute_endpoint=url, timeout_s=1.0)
    try:
        with pytest.raises(OsLoginError) as err:
            if call == "project_metadata":
                await api.project_metadata(PROJECT)
            else:
                await api.login_profile("alice@example.com", PROJECT)
    finally:
        api.close()
    assert err.value.code == 0 and "timed out" in err.value.message, err.value.message
    others = [t for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    assert others == []
