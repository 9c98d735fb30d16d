"""The sandbox's OpenAI-compatible server, driven by a real httpx client over loopback."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandbox import openai_server
from sandbox.openai_server import TTFT_OVERHEAD_S, SandboxOpenAIServer, count_tokens

CHAT = "/v1/chat/completions"


@pytest.fixture
def server() -> Iterator[SandboxOpenAIServer]:
    srv = SandboxOpenAIServer()
    srv.configure(model="Qwen/Qwen3-0.6B", served_model_name="qwen-small", max_model_len=4096,
                  accelerator_type="v6e-1", chips=1)
    srv.start()
    srv.set_ready(True)
    yield srv
    srv.stop()


def url(srv: SandboxOpenAIServer) -> str:
    return f"http://127.0.0.1:{srv.port}"


def chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": "qwen-small", "messages": [{"role": "user", "content": content}], **extra}


def sse(response: httpx.Response) -> list[dict[str, Any] | str]:
    """Parsed ``data:`` events of a streamed response (``"[DONE]"`` kept as a string)."""
    events: list[dict[str, Any] | str] = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            payload = line[len("data: "):]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


# ---------------------------------------------------------------- readiness and routes
def test_refuses_connections_until_ready_like_a_booting_vllm() -> None:
    srv = SandboxOpenAIServer()
    port = srv.start()
    try:
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
        srv.set_ready(True)
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
        srv.set_ready(False)
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
        srv.set_ready(True)  # same port again for the next boot
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200
    finally:
        srv.stop()


def test_models_lists_the_served_name_with_max_model_len(server: SandboxOpenAIServer) -> None:
    body = httpx.get(url(server) + "/v1/models").json()
    assert body["object"] == "list"
    [model] = body["data"]
    assert (model["id"], model["root"], model["max_model_len"], model["owned_by"]) == (
        "qwen-small", "Qwen/Qwen3-0.6B", 4096, "vllm")


def test_unknown_routes_methods_models_and_bodies_get_vllm_errors(server: SandboxOpenAIServer) -> None:
    with httpx.Client(base_url=url(server)) as client:
        assert client.get("/v2/nothing").status_code == 404
        assert client.get(CHAT).json() == {"detail": "Method Not Allowed"}
        wrong = client.post(CHAT, json={**chat("hi"), "model": "gpt-4"})
        assert wrong.status_code == 404 and wrong.json()["message"] == "The model `gpt-4` does not exist."
        bad = client.post(CHAT, content=b"{not json", headers={"content-type": "application/json"})
        assert bad.status_code == 400 and bad.json()["type"] == "BadRequestError"
    assert [r.status for r in server.stats.served] == [404, 400]


# ---------------------------------------------------------------- completions
def test_chat_completion_usage_follows_the_documented_token_rule(server: SandboxOpenAIServer) -> None:
    # Say(1) something(3) about(2) TPUs(1) ,(1) please(2) .(1) = 11, + 4 for the message; the
    # 4-characters estimate of these 33 characters would say 9
    prompt = "Say something about TPUs, please."
    assert count_tokens(prompt) == 11
    body = httpx.post(url(server) + CHAT, json=chat(prompt, max_tokens=12)).json()
    assert body["object"] == "chat.completion" and body["model"] == "qwen-small"
    [choice] = body["choices"]
    assert choice["finish_reason"] == "length" and choice["message"]["role"] == "assistant"
    assert len(choice["message"]["content"]) == 12 * 4           # 12 output pieces of 4 characters
    assert body["usage"] == {"prompt_tokens": 15, "completion_tokens": 12, "total_tokens": 27,
                             "prompt_tokens_details": None}
    stats = server.stats
    assert (stats.requests, stats.prompt_tokens, stats.completion_tokens) == (1, 15, 12)


def test_streamed_chat_sends_role_deltas_usage_and_done(server: SandboxOpenAIServer) -> None:
    request = chat("Stream me some tokens.", max_tokens=40, stream=True, stream_options={"include_usage": True})
    with httpx.stream("POST", url(server) + CHAT, json=request) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse(response)
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if isinstance(e, dict)]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    # 40 output pieces of the 83-character filler cycle (its 21st piece has 3 characters)
    assert text.startswith("Simulated tokens from the tpu-console sandbox") and len(text) == 40 * 4 - 2
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 40
    assert chunks[-1]["usage"]["prompt_tokens"] == count_tokens("Stream me some tokens.") + 4
    [served] = server.stats.served
    assert (served.stream, served.completion_tokens, len(served.token_times_s)) == (True, 40, 40)


def test_completions_endpoint_streams_and_counts_prompt_text(server: SandboxOpenAIServer) -> None:
    request = {"model": "qwen-small", "prompt": "a" * 100, "max_tokens": 5, "ignore_eos": True}
    body = httpx.post(url(server) + "/v1/completions", json=request).json()
    assert body["object"] == "text_completion"
    assert body["usage"] == {"prompt_tokens": 25, "completion_tokens": 5, "total_tokens": 30,
                             "prompt_tokens_details": None}
    with httpx.stream("POST", url(server) + "/v1/completions", json={**request, "stream": True}) as response:
        events = sse(response)
    assert events[-1] == "[DONE]" and not any(isinstance(e, dict) and "usage" in e for e in events)
    assert "".join(e["choices"][0]["text"] for e in events if isinstance(e, dict)) == body["choices"][0]["text"]


def test_over_max_model_len_gets_vllms_400_body(server: SandboxOpenAIServer) -> None:
    with httpx.Client(base_url=url(server)) as client:
        too_long = client.post("/v1/completions", json={"model": "qwen-small", "prompt": "x" * 16_000,
                                                        "max_tokens": 200})
        no_room = client.post("/v1/completions", json={"model": "qwen-small", "prompt": "x" * 16_384})
    assert too_long.status_code == 400
    assert too_long.json() == {
        "object": "error", "type": "BadRequestError", "param": None, "code": 400,
        "message": "This model's maximum context length is 4096 tokens. However, you requested 4200 tokens "
                   "(4000 in the messages, 200 in the completion). Please reduce the length of the messages "
                   "or completion."}
    assert no_room.status_code == 400 and no_room.json()["message"].startswith(
        "This model's maximum context length is 4096 tokens. However, you requested 4096 tokens in the messages")
    assert server.stats.requests == 0 and server.stats.errors == 2


# ---------------------------------------------------------------- recall and tools
@pytest.mark.parametrize("depth", [0.1, 0.5, 0.9])
def test_passphrase_is_recalled_at_any_depth(server: SandboxOpenAIServer, depth: float) -> None:
    server.configure(model="Qwen/Qwen3-0.6B", served_model_name="qwen-small", max_model_len=40_960,
                     accelerator_type="v6e-1", chips=1)
    filler = "The grass is green. The sky is blue. " * 600
    cut = int(len(filler) * depth)
    prompt = (f"Run {depth}: unique first line.\n{filler[:cut]}The passphrase is amber-falcon-42. "
              f"{filler[cut:]}\nWhat is the passphrase?")
    body = httpx.post(url(server) + CHAT, json=chat(prompt), timeout=10).json()
    assert body["choices"][0]["message"]["content"] == "The passphrase is amber-falcon-42."
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["prompt_tokens"] == count_tokens(prompt) + 4
    # Without a question after it, the needle is just text.
    plain = httpx.post(url(server) + CHAT, json=chat(prompt.rsplit("\n", 1)[0])).json()
    assert "amber-falcon-42" not in plain["choices"][0]["message"]["content"]


ADD_TOOL = {"type": "function", "function": {
    "name": "add_numbers", "description": "Add two numbers and return the sum.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def enable_tools(srv: SandboxOpenAIServer) -> None:
    """As ``vllm serve ... --enable-auto-tool-choice --tool-call-parser hermes``."""
    srv.configure(model="Qwen/Qwen3-0.6B", served_model_name="qwen-small", max_model_len=4096,
                  accelerator_type="v6e-1", chips=1, auto_tool_choice=True, tool_call_parser="hermes")


REFUSED = json.loads((Path(__file__).parent.parent / "fixtures" / "vllm-api" / "tools-refused-0.32.json").read_text())


@pytest.mark.parametrize(("flags", "tool_choice", "refused_as"), [
    ({}, None, "auto"), ({}, "auto", "auto"), ({}, "required", "required"),
    ({}, {"type": "function", "function": {"name": "get_weather"}}, "function"),
    ({"tool_call_parser": "hermes"}, "auto", "auto"),             # the parser alone is not enough for auto
    ({"tool_call_parser": "hermes"}, "required", None),
    ({}, "none", None),
])
def test_tools_are_refused_as_the_real_vllm_refuses_them_unless_started_for_them(
        server: SandboxOpenAIServer, flags: dict[str, Any], tool_choice: Any, refused_as: str | None) -> None:
    server.configure(model="Qwen/Qwen3-0.6B", served_model_name="qwen-small", max_model_len=4096,
                     accelerator_type="v6e-1", chips=1, **flags)
    body = {**chat("What is the weather in Paris?", max_tokens=8), "tools": [WEATHER_TOOL]}
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    answer = httpx.post(url(server) + CHAT, json=body)
    if refused_as is None:
        assert answer.status_code == REFUSED["tool_choice_none_status"] == 200
        return
    expected = REFUSED["by_tool_choice"][refused_as]["error"]
    assert answer.status_code == REFUSED["status"] == 400
    got = answer.json()
    assert (got["message"], got["type"], got["code"]) == (expected["message"], expected["type"], expected["code"])


def test_tool_call_then_the_number_the_tool_returned(server: SandboxOpenAIServer) -> None:
    enable_tools(server)
    question = {"role": "user", "content": "Please add 17.5 and 25 with the tool."}
    first = httpx.post(url(server) + CHAT, json={"model": "qwen-small", "messages": [question],
                                                 "tools": [WEATHER_TOOL, ADD_TOOL]}).json()
    [choice] = first["choices"]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("chatcmpl-tool-")
    assert call["function"]["name"] == "add_numbers"
    assert json.loads(call["function"]["arguments"]) == {"a": 17.5, "b": 25}
    follow_up = [question, {"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": call["id"], "content": '{"sum": 42.5}'}]
    second = httpx.post(url(server) + CHAT, json={"model": "qwen-small", "messages": follow_up,
                                                  "tools": [WEATHER_TOOL, ADD_TOOL]}).json()
    assert second["choices"][0]["message"]["content"] == "The result is 42.5."
    weather = httpx.post(url(server) + CHAT, json={**chat("What is the weather in Paris today?"),
                                                   "tools": [ADD_TOOL, WEATHER_TOOL]}).json()
    [call] = weather["choices"][0]["message"]["tool_calls"]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("get_weather", {"city": "Paris"})


def test_streamed_tool_call_assembles_to_the_same_call(server: SandboxOpenAIServer) -> None:
    enable_tools(server)
    request = {**chat("Add 2 and 3 please."), "tools": [ADD_TOOL], "stream": True}
    with httpx.stream("POST", url(server) + CHAT, json=request) as response:
        events = [e for e in sse(response) if isinstance(e, dict)]
    calls = [c for e in events for c in e["choices"][0]["delta"].get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "add_numbers" and calls[0]["id"].startswith("chatcmpl-tool-")
    assert json.loads("".join(c["function"]["arguments"] for c in calls)) == {"a": 2, "b": 3}
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"


# ---------------------------------------------------------------- timing
async def stream_once(client: httpx.AsyncClient, max_tokens: int, prompt: str = "Go.") -> dict[str, float]:
    """One streamed request, timed by the client like a benchmark would."""
    start = time.monotonic()
    first = last = 0.0
    tokens = 0
    request = chat(prompt, max_tokens=max_tokens, stream=True, ignore_eos=True,
                   stream_options={"include_usage": True})
    async with client.stream("POST", CHAT, json=request) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            if event["choices"] and event["choices"][0]["delta"].get("content"):
                last = time.monotonic()
                first = first or last
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
    return {"start": start, "first": first, "ttft": first - start, "end": last, "tokens": tokens,
            "rate": (tokens - 1) / (last - first)}


async def run_streams(srv: SandboxOpenAIServer, n: int, max_tokens: int, prompt: str = "Go.") -> list[dict[str, float]]:
    async with httpx.AsyncClient(base_url=url(srv), timeout=30) as client:
        return await asyncio.gather(*(stream_once(client, max_tokens, prompt) for _ in range(n)))


async def test_more_streams_give_more_total_and_less_per_stream_throughput(server: SandboxOpenAIServer) -> None:
    server.configure(model="Qwen/Qwen3-8B", served_model_name="qwen-small", max_model_len=4096,
                     accelerator_type="v6e-1", chips=1)  # 150 tok/s for one stream
    results = {}
    for n in (1, 4):
        runs = await run_streams(server, n, max_tokens=60)
        span = max(r["end"] for r in runs) - min(r["start"] for r in runs)
        results[n] = (sum(r["tokens"] for r in runs) / span, sum(r["rate"] for r in runs) / n)
        assert all(r["tokens"] == 60 for r in runs)
    (total_1, per_1), (total_4, per_4) = results[1], results[4]
    assert per_1 == pytest.approx(150, rel=0.15)
    assert per_4 == pytest.approx(150 * 4 ** -0.2, rel=0.15)  # 114 tok/s each
    assert total_4 > 2.2 * total_1 and per_4 < 0.9 * per_1


async def test_stats_match_what_the_client_saw(server: SandboxOpenAIServer) -> None:
    runs = await run_streams(server, 3, max_tokens=200, prompt="Count to thirty.")
    served = sorted(server.stats.ok, key=lambda r: r.token_times_s[0])
    assert len(served) == 3 and all(r.completion_tokens == 200 == len(r.token_times_s) for r in served)
    assert server.stats.prompt_tokens == 3 * (count_tokens("Count to thirty.") + 4)
    # Same process, same monotonic clock: the client reads each token just after the server wrote it
    # (sorted element-wise, which needs no pairing of requests). The server stamps a token after its
    # write returns, so the client may read it a fraction of a millisecond before the stamp.
    for key, index in (("first", 0), ("end", -1)):
        for seen_at, written_at in zip(sorted(r[key] for r in runs), sorted(r.token_times_s[index] for r in served)):
            assert -0.005 <= seen_at - written_at < 0.05
    for seen_ttft, served_ttft in zip(sorted(r["ttft"] for r in runs), sorted(r.ttft_s or 0 for r in served)):
        assert 0 < served_ttft <= seen_ttft
    window = max(r["end"] for r in runs) - min(r["first"] for r in runs)
    served_window = max(r.token_times_s[-1] for r in served) - min(r.token_times_s[0] for r in served)
    assert served_window == pytest.approx(window, rel=0.05)
    assert server.stats.output_tokens_per_s() > 600


async def test_ttft_grows_with_prompt_length_and_queueing(server: SandboxOpenAIServer) -> None:
    """Timed by the server's own records, with bounds that load cannot break: the engine's sleeps
    are never early, so each first token is at least its modelled time after arrival; lateness
    only adds, and the upper bounds leave a second for it. A slow prefill (70B on one v5e chip,
    4,000 tok/s: 0.75 s for 3,000 tokens) keeps the effect far above scheduling noise, so the
    lower bounds fail at once if prefill cost or queueing were not modelled."""
    server.configure(model="meta-llama/Llama-3.1-70B-Instruct", served_model_name="qwen-small",
                     max_model_len=40_960, accelerator_type="v5litepod-1", chips=1)
    prefill_tok_s, slack_s, late_s = 16_000.0 * 0.25, 0.001, 1.0
    await run_streams(server, 1, max_tokens=2)
    await run_streams(server, 1, max_tokens=2, prompt="y" * 12_000)
    short, long = server.stats.ok
    assert long.prompt_tokens >= 2_900 and short.prompt_tokens < 20
    assert short.ttft_s is not None and long.ttft_s is not None
    prefill_s = long.prompt_tokens / prefill_tok_s   # ~0.75 s
    assert prefill_s + TTFT_OVERHEAD_S - slack_s <= long.ttft_s < prefill_s + late_s
    assert short.ttft_s < long.ttft_s - prefill_s / 2   # short may run late by up to 0.37 s

    server.reset_stats()   # two at once: the second prefill waits for the first
    await run_streams(server, 2, max_tokens=2, prompt="y" * 12_000)
    first, second = sorted(server.stats.ok, key=lambda r: r.token_times_s[0])
    earliest_arrival = min(first.arrival_s, second.arrival_s)
    both_prefills_s = (first.prompt_tokens + second.prompt_tokens) / prefill_tok_s
    assert first.token_times_s[0] - earliest_arrival < prefill_s + late_s
    assert (both_prefills_s + TTFT_OVERHEAD_S - slack_s <= second.token_times_s[0] - earliest_arrival
            < both_prefills_s + late_s)


def test_not_ready_cuts_in_flight_streams_and_records_the_abort(server: SandboxOpenAIServer) -> None:
    server.configure(model="Qwen/Qwen3-8B", served_model_name="qwen-small", max_model_len=4096,
                     accelerator_type="v5litepod-1", chips=1)  # 60 tok/s: 600 tokens take 10 s
    lines: list[str] = []
    server.set_access_log(lines.append)
    with pytest.raises(httpx.HTTPError), httpx.stream(
            "POST", url(server) + CHAT, json=chat("long", max_tokens=600, stream=True), timeout=5) as response:
        for index, _ in enumerate(response.iter_lines()):
            if index == 3:
                server.set_ready(False)
    deadline = time.monotonic() + 3
    while not server.stats.served and time.monotonic() < deadline:
        time.sleep(0.01)
    [record] = server.stats.served
    assert record.finish_reason == "abort" and 0 < record.completion_tokens < 600
    assert math.isclose(len(record.token_times_s), record.completion_tokens)
    assert lines and lines[0].startswith("INFO:     127.0.0.1:") and lines[0].endswith(
        '"POST /v1/chat/completions HTTP/1.1" 200 OK')


def test_running_usage_per_chunk_and_a_late_step_merges_the_tokens_due(server: SandboxOpenAIServer,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's ``continuous_usage_stats``: every chunk carries the running usage. A decode step that
    wakes 50 ms late (a loaded machine) sends the tokens due meanwhile in that one chunk, as vLLM's
    output collector merges outputs, instead of a burst of back-to-back chunks."""
    server.configure(model="Qwen/Qwen3-8B", served_model_name="qwen-small", max_model_len=4096,
                     accelerator_type="v6e-1", chips=1)     # ~147 tok/s: 1 token per 6.8 ms chunk
    sleeps = [0]

    def late_once(deadline: float) -> None:
        sleeps[0] += 1
        time.sleep(max(0.0, deadline - time.monotonic()) + (0.05 if sleeps[0] == 4 else 0.0))

    monkeypatch.setattr(openai_server, "_sleep_until", late_once)
    request = chat("Go.", max_tokens=40, stream=True, ignore_eos=True,
                   stream_options={"include_usage": True, "continuous_usage_stats": True})
    with httpx.stream("POST", url(server) + CHAT, json=request) as response:
        events = [e for e in sse(response) if isinstance(e, dict)]
    running = [e["usage"]["completion_tokens"] for e in events if e["choices"]]
    assert running[0] == 0 and running[-1] == 40 == events[-1]["usage"]["completion_tokens"]
    sizes = [b - a for a, b in zip(running[1:], running[2:])]
    # 50 ms late at ~147 tok/s: 7 more tokens due, sent in that chunk (more load only merges more)
    assert sizes[2] >= 1 + 6 and len(running) - 1 <= 40 - 6
    assert sum(sizes) + 1 == 40


def test_a_client_that_resets_its_connection_prints_no_traceback(server: SandboxOpenAIServer,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``vllm bench serve`` resets its keep-alive connections when it ends: not an error to print."""
    import socket
    import struct

    for _ in range(3):
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))   # close = RST
    err = ""
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and "Traceback" not in err:
        err += capsys.readouterr().err
        time.sleep(0.02)
    assert "Traceback" not in err and "ConnectionResetError" not in err
    assert httpx.get(url(server) + "/health", timeout=2).status_code == 200
