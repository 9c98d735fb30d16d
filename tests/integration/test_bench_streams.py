"""The stream parser against a loopback server replaying real vLLM 0.32 stream shapes.

The chunk shapes are copied from a real ``vllm serve`` 0.32 (CPU) answer to
``/v1/chat/completions`` with ``stream_options.include_usage`` (role chunk, content
chunks, the ``choices: []`` usage chunk, ``data: [DONE]``) and its 400 bodies.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from remote.bench import run_throughput
from remote.bench.client import stream_chat

HEAD = {"id": "chatcmpl-81c800daf255ade6", "object": "chat.completion.chunk", "created": 1796120705,
        "model": "tiny"}
ROLE = {**HEAD, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                             "finish_reason": None}], "prompt_token_ids": None, "prompt_text": None}
CONTEXT_400 = {"error": {"message": "This model's maximum context length is 2048 tokens. However, your prompt "
                         "contains at least 2049 input tokens, which exceeds this limit even without any output "
                         "tokens. Please reduce the length of the input prompt. (parameter=input_tokens, "
                         "value=2049)", "type": "BadRequestError", "param": "input_tokens", "code": 400}}


def content(text: str, finish: str | None = None) -> dict[str, Any]:
    return {**HEAD, "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None,
                                 "finish_reason": finish, "token_ids": None}]}


def usage(prompt: int, completion: int) -> dict[str, Any]:
    return {**HEAD, "choices": [], "usage": {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                                             "completion_tokens": completion}}


class Replay:
    """What the loopback server answers: ``events`` as (delay_s, data) SSE lines, or ``status`` + ``body``."""

    def __init__(self) -> None:
        self.events: list[tuple[float, Any]] = []
        self.status = 200
        self.body: Any = None
        self.tokenize: int | None = None     # /tokenize count to answer, None: 404 like a non-vLLM server
        self.chat_posts = 0
        self.hang_up = False
        self.last_body: dict[str, Any] = {}
        self.barrier: threading.Barrier | None = None   # streams wait for each other before their events
        self.written: threading.Semaphore | None = None  # released once per stream whose events were all written
        self.endless: Any = None        # after the events: this event (or comment line) again and again, forever
        self.endless_gap_s = 0.0


@pytest.fixture
def replay() -> Iterator[tuple[Replay, str]]:
    state = Replay()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _json(self, code: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._json(200, {"object": "list", "data": [{"id": "tiny", "object": "model", "max_model_len": 2048}]})

        def do_POST(self) -> None:
            sent = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path == "/tokenize":
                if state.tokenize is None:
                    self._json(404, {"detail": "Not Found"})
                else:   # chat prompts: the configured count; a bare text: one token a word
                    count = state.tokenize if "messages" in sent else len(sent["prompt"].split())
                    self._json(200, {"count": count, "max_model_len": 2048, "tokens": []})
                return
            state.chat_posts += 1
            state.last_body = sent
            if state.hang_up:
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if state.status != 200:
                self._json(state.status, state.body)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if state.barrier is not None:   # every event in one write, once both streams are here
                self.wfile.flush()
                state.barrier.wait(timeout=10)
                lines = [f"data: {d if isinstance(d, str) else json.dumps(d)}\n\n".encode() for _, d in state.events]
                self.wfile.write(b"".join(f"{len(x):x}\r\n".encode() + x + b"\r\n" for x in lines) + b"0\r\n\r\n")
                self.wfile.flush()
                if state.written is not None:
                    state.written.release()
                return
            for delay, data in state.events:
                time.sleep(delay)
                line = f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                self.wfile.flush()
            while state.endless is not None:      # until the client hangs up (BrokenPipe ends the handler)
                time.sleep(state.endless_gap_s)
                data = state.endless
                line = (data.encode() if isinstance(data, str) and data.startswith(":")
                        else f"data: {json.dumps(data)}\n\n".encode())
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def _one(url: str, **kwargs: Any):
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        return await stream_chat(client, {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]},
                                 **kwargs)


async def test_nothing_after_done_is_parsed(replay):
    state, url = replay
    state.events = [(0, ROLE), (0, content(" ignore")), (0, content(" special", "length")), (0, usage(11, 2)),
                    (0, "[DONE]"), (0, content(" LATE")), (0, usage(99, 9))]
    record = await _one(url)
    assert record.success and record.text == " ignore special"
    assert (record.token_chunks, record.prompt_tokens, record.output_tokens) == (2, 11, 2)
    assert record.usage_reported and not record.output_tokens_estimated


def running(event: dict[str, Any], completion: int, prompt: int = 11) -> dict[str, Any]:
    """``event`` with vLLM 0.32's running usage (``continuous_usage_stats``), as it sends it."""
    return {**event, "usage": {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                               "completion_tokens": completion, "completion_tokens_details": None}}


async def test_running_usage_gives_tokens_per_chunk_and_itl_per_token(replay):
    state, url = replay
    # what vLLM sends when its output collector merged steps: 1 token, then chunks of 3 and 4
    state.events = [(0, running(ROLE, 0)), (0, running(content(" a"), 1)), (0.03, running(content(" b c d"), 4)),
                    (0.04, running(content(" e f g h", "length"), 8)), (0, usage(11, 8)), (0, "[DONE]")]
    record = await _one(url)
    assert record.success and (record.token_chunks, record.output_tokens) == (3, 8)
    assert record.chunk_tokens == [1, 3, 4]
    gaps = record.itl_per_token_s()
    assert len(gaps) == 7 and len(set(gaps[:3])) == 1 and len(set(gaps[3:])) == 1
    assert gaps[0] == pytest.approx(record.itl_s[0] / 3) and gaps[3] == pytest.approx(record.itl_s[1] / 4)
    assert sum(gaps) == pytest.approx(sum(record.itl_s))
    assert record.itl_s[0] == pytest.approx(0.03, abs=0.02) and gaps[0] < 0.02


async def test_the_request_asks_for_running_usage_and_a_stream_without_it_counts_chunks(replay):
    state, url = replay
    state.events = [(0, ROLE), (0, content(" a")), (0.01, content(" b c d")), (0, usage(11, 4)), (0, "[DONE]")]
    record = await _one(url)
    assert state.last_body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert record.chunk_tokens == [] and record.itl_per_token_s() == record.itl_s


async def test_without_usage_tokens_are_flagged_estimated_and_the_prompt_count_kept(replay):
    state, url = replay
    state.events = [(0, ROLE), (0, content(" a")), (0, content(" b c")), (0, content(" d", "length")),
                    (0, "[DONE]")]
    record = await _one(url, prompt_tokens=256)
    assert record.success and not record.usage_reported
    assert record.output_tokens == 3 and record.output_tokens_estimated
    assert record.prompt_tokens == 256            # what /tokenize counted, not 0 unreported


async def test_tpot_ends_at_the_last_token_and_latency_at_the_end_of_the_stream(replay):
    state, url = replay
    # tokens 20 ms apart, then a usage chunk 300 ms late and [DONE] 100 ms after it
    state.events = [(0, ROLE), (0.02, content(" a")), (0.02, content(" b")), (0.02, content(" c", "length")),
                    (0.3, usage(11, 3)), (0.1, "[DONE]")]
    record = await _one(url)
    assert record.success and record.output_tokens == 3
    assert record.tpot_s == pytest.approx(0.02, abs=0.01)        # not (0.3 + 0.04) / 2
    assert record.last_token_s == pytest.approx(record.ttft_s + 0.04, abs=0.015)
    assert record.latency_s >= record.last_token_s + 0.39         # e2e to the end of the stream


async def test_an_error_event_inside_a_200_stream_keeps_type_code_and_partial_text(replay):
    state, url = replay
    state.events = [(0, ROLE), (0, content(" partial")), (0, content(" answer")),
                    (0, {"error": {"object": "error", "message": "EngineCore encountered an issue.",
                                   "type": "InternalServerError", "param": None, "code": 500}})]
    record = await _one(url)
    assert not record.success
    assert (record.error_type, record.error_code) == ("InternalServerError", 500)
    assert record.text == " partial answer"
    assert "EngineCore encountered an issue." in record.error and "InternalServerError" in record.error


async def test_a_context_length_400_gets_a_kind_and_advice(replay):
    state, url = replay
    state.status, state.body = 400, CONTEXT_400
    record = await _one(url)
    assert not record.success and record.status_code == 400
    assert record.error_kind == "context_length"
    assert (record.error_type, record.error_code) == ("BadRequestError", 400)
    assert "the longest prompt this server takes is 2048 tokens" in record.error
    assert "this one needed 2049" in record.error


async def test_after_the_engine_dies_the_remaining_requests_are_not_sent(replay):
    state, url = replay
    state.hang_up = True            # every chat request: the connection drops without an answer
    result = await run_throughput(url, concurrency=1, prompt_tokens=64, output_tokens=8, requests=20)
    assert state.chat_posts == 3 and result.requests_sent == 3
    assert result.stopped is not None and "3 requests in a row failed" in result.stopped
    assert "engine log" in result.stopped
    assert not result.prompt_tokens_exact    # this server has no /tokenize: the estimate, and it says so


async def test_prompts_counted_by_tokenize_when_the_server_has_it(replay):
    state, url = replay
    state.tokenize = 64
    # two chunks, three tokens (a chunk may carry several): no usage, so the tokenizer counts the text
    state.events = [(0, ROLE), (0, content(" a")), (0, content(" b c", "length")), (0, "[DONE]")]
    result = await run_throughput(url, concurrency=2, prompt_tokens=64, output_tokens=3, requests=4)
    assert result.prompt_tokens_exact and result.prompt_tokens_sent == 64
    assert result.metrics.total_input_tokens == 4 * 64          # no usage chunk: the /tokenize count
    assert result.metrics.total_output_tokens == 4 * 3 and result.metrics.output_tokens_estimated == 0
    # ... and says so: the counts are the tokenizer's, not the server's usage
    from remote.bench import to_json

    assert result.output_tokens_tokenized == 4 and to_json(result)["output_tokens_counted_by"] == "tokenize"
    assert "4 requests without usage: output tokens counted by /tokenize, not reported by the server" \
        in result.caveats()


def test_the_bench_verb_says_the_prompts_are_estimates_and_why_it_stopped(replay, capsys):
    from console.cli import main

    state, url = replay
    state.hang_up = True
    code = main(["bench", "--url", url, "--kind", "throughput", "--streams", "1", "--requests", "10",
                 "--prompt-tokens", "64", "--output-tokens", "8"])
    out = capsys.readouterr().out
    assert code == 1                                     # every request sent failed
    assert "sized by estimate (4 characters per token): the server has no /tokenize" in out
    assert "stopped after 3 requests in a row failed" in out and state.chat_posts == 3


async def test_a_stream_with_chunks_buffered_lets_the_other_streams_be_read_between_them(replay):
    """Two streams (the benchmark's stream clients) whose 200 chunks each arrive in one write: the parser yields to the event loop
    after every token chunk, so the other stream is read (and stamped) between them, not after
    all of them (at 64 streams back-to-back parsing made the median ITL 0.02 ms). Without the
    yield one stream's 200 callbacks always come in one run. The first token's callback holds the loop until
    the server has written both streams whole (the server's threads share the GIL with the loop, so the
    second write could otherwise come after the first stream's whole parse)."""
    import asyncio

    from remote.bench.client import make_stream_client

    state, url = replay
    chunks = 200
    state.events = [(0, ROLE), *[(0, content(f" t{i}")) for i in range(chunks)], (0, usage(11, chunks)),
                    (0, "[DONE]")]
    state.barrier, state.written = threading.Barrier(2), threading.Semaphore(0)
    order: list[str] = []

    def took(stream: str) -> None:
        if not order:                   # both bodies in the sockets before the first is parsed on
            assert state.written is not None
            assert state.written.acquire(timeout=10) and state.written.acquire(timeout=10)
        order.append(stream)

    timeout = httpx.Timeout(10.0)
    async with make_stream_client(url, timeout) as one, make_stream_client(url, timeout) as two:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
        a, b = await asyncio.gather(stream_chat(one, body, on_token=lambda n: took("a")),
                                    stream_chat(two, body, on_token=lambda n: took("b")))
    assert a.token_chunks == b.token_chunks == chunks and len(order) == 2 * chunks
    longest = max(len(run) for run in "".join(order).replace("ab", "a b").replace("ba", "b a").split())
    assert longest < chunks, "".join(order)


async def test_two_stream_clients_stamp_each_chunk_when_it_arrives(replay):
    """The benchmark's per-stream clients (aiohttp's transport): chunks the server sends 20 ms
    apart on two streams at once are timed 20 ms apart on both, not together at the end."""
    import asyncio

    from remote.bench.client import make_stream_client

    state, url = replay
    state.events = [(0, ROLE), *[(0.02, content(f" t{i}")) for i in range(8)], (0, usage(11, 8)), (0, "[DONE]")]
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    timeout = httpx.Timeout(10.0)
    async with make_stream_client(url, timeout) as one, make_stream_client(url, timeout) as two:
        a, b = await asyncio.gather(stream_chat(one, body), stream_chat(two, body))
    for record in (a, b):
        assert record.success and record.token_chunks == 8 and record.output_tokens == 8
        assert len(record.itl_s) == 7 and min(record.itl_s) > 0.012, record.itl_s
        assert record.ttft_s is not None and record.ttft_s > 0.015


async def test_a_stream_client_says_a_refused_connection_was_refused():
    """aiohttp's connection errors reach the reader as httpx's, so the message is the same."""
    import socket

    from remote.bench.client import make_stream_client

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with make_stream_client(f"http://127.0.0.1:{port}", httpx.Timeout(5.0)) as client:
        record = await stream_chat(client, {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
    assert not record.success and record.status_code == 0
    assert "the connection was refused" in record.error, record.error


async def test_a_stream_client_says_a_server_that_hung_up_hung_up(replay):
    from remote.bench.client import make_stream_client

    state, url = replay
    state.hang_up = True
    async with make_stream_client(url, httpx.Timeout(5.0)) as client:
        record = await stream_chat(client, {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
    assert not record.success and record.status_code == 0
    assert "it hung up without answering" in record.error, record.error


# --- streams that never end: the whole request has a deadline, and an overrun fails ------------


async def test_a_stream_far_past_max_tokens_fails_that_request(replay):
    """Asked for 16 tokens, the server streams tokens without end (no [DONE], no finish_reason)."""
    state, url = replay
    state.events = [(0, ROLE)]
    state.endless = content(" tok")
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        record = await asyncio.wait_for(stream_chat(client, {"model": "tiny", "messages": [], "max_tokens": 16}),
                                        timeout=20)
    assert not record.success
    assert record.error.startswith("the stream ran far past max_tokens (16 asked, 49 tokens so far)")
    assert record.status_code == 200 and record.text == " tok" * 49


async def test_a_stream_that_only_pings_fails_at_its_deadline(replay):
    """Keep-alive comments forever: no read ever waits long, so only a deadline on the whole request ends it."""
    state, url = replay
    state.events = [(0, ROLE), (0, content(" a"))]
    state.endless, state.endless_gap_s = ": ping\n\n", 0.05
    async with httpx.AsyncClient(base_url=url, timeout=1.0) as client:   # read timeout = the deadline
        started = time.perf_counter()
        record = await asyncio.wait_for(stream_chat(client, {"model": "tiny", "messages": []}), timeout=20)
    assert not record.success and time.perf_counter() - started < 10
    assert record.error == "the stream did not end within 1 s (timed out; 1 tokens, no [DONE] or finish_reason)"
    assert record.text == " a"


def test_the_bench_verb_ends_a_level_with_n_failed_against_an_endless_stream(replay, capsys):
    from console.cli import main

    state, url = replay
    state.tokenize = 20
    state.events = [(0, ROLE)]
    state.endless = content(" tok")
    code = main(["bench", "--url", url, "--kind", "throughput", "--streams", "2", "--requests", "2",
                 "--prompt-tokens", "20", "--output-tokens", "16"])
    out = capsys.readouterr()
    assert code == 1, out
    assert "2 streams: 2 failed: the stream ran far past max_tokens (16 asked" in out.out + out.err
