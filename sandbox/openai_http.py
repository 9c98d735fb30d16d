"""HTTP side of the sandbox's OpenAI-compatible server: request handler and wire formats.

Stdlib ``BaseHTTPRequestHandler`` with HTTP/1.1 keep-alive: vLLM 0.29's JSON bodies and error
bodies, streaming as SSE (``data: {...}``, ``data: [DONE]``) in chunked transfer encoding,
and uvicorn-style access lines. State, validation and timing live in
:class:`sandbox.openai_server.SandboxOpenAIServer`.
"""

from __future__ import annotations

import json
import secrets
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from sandbox.openai_replies import CHARS_PER_TOKEN, Reply, make_reply
from sandbox.openai_stats import ServedRequest

if TYPE_CHECKING:
    from sandbox.openai_server import SandboxOpenAIServer


class OpenAIApiError(Exception):
    def __init__(self, code: int, message: str, kind: str = "BadRequestError", param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.kind, self.param = code, message, kind, param

    def body(self) -> dict[str, Any]:
        return {"object": "error", "message": self.message, "type": self.kind, "param": self.param,
                "code": self.code}


class OpenAIHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 256
    app: SandboxOpenAIServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (reset, broken pipe: ``vllm bench serve`` resets its keep-alive
        connections when it ends) is not an error to print; anything else is, as the stdlib does."""
        import sys

        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

_COMPLETIONS = ("/v1/chat/completions", "/v1/completions")


class OpenAIHandler(BaseHTTPRequestHandler):
    """One connection; HTTP/1.1 keep-alive, chunked SSE for streams."""

    protocol_version = "HTTP/1.1"
    #: TCP_NODELAY like uvicorn: otherwise back-to-back SSE writes wait for the client's delayed ACK.
    disable_nagle_algorithm = True
    server: OpenAIHTTPServer

    def setup(self) -> None:
        super().setup()
        with self.server.app._lock:
            self.server.app._conns.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.app._lock:
                self.server.app._conns.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the stdlib's stderr log; access lines go to the configured sink."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        sink = self.server.app._access_log
        if sink is not None:
            phrase = self.responses.get(int(code), ("",))[0] if str(code).isdigit() else ""
            sink(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{self.command} '
                 f'{self.path} HTTP/1.1" {code} {phrase}')

    def _send(self, code: int, body: bytes, content_type: str | None = "application/json") -> None:
        self.send_response(code)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, payload: Any) -> None:
        self._send(code, json.dumps(payload).encode())

    def _chunk(self, payload: Any) -> None:
        data = (f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n").encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def _refused(self, path: str) -> bool:
        """vLLM's ``--api-key`` check: ``/v1`` routes without the key get 401 ``Unauthorized``."""
        if path.startswith("/v1/") and not self.server.app.authorized(self.headers.get("Authorization")):
            self._json(401, {"error": "Unauthorized"})
            return True
        return False

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if self._refused(path):
            return
        if path == "/health":
            self._send(200, b"", None)
        elif path == "/v1/models":
            self._json(200, self.server.app._models())
        elif path == "/metrics":
            self._send(200, self.server.app.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
        elif path in _COMPLETIONS:
            self._json(405, {"detail": "Method Not Allowed"})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        app, path = self.server.app, self.path.split("?", 1)[0]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self._refused(path):
            return
        if path == "/tokenize":
            self._tokenize(body)
            return
        if path not in _COMPLETIONS:
            self._json(405 if path in ("/health", "/v1/models") else 404,
                       {"detail": "Method Not Allowed" if path in ("/health", "/v1/models") else "Not Found"})
            return
        arrival, stream = time.monotonic(), False
        try:
            request = json_object(body)
            stream = bool(request.get("stream"))
            prompt_text, prompt_tokens = app._prompt(path, request)
            max_tokens = app._check(request, prompt_tokens)
        except OpenAIApiError as error:
            # Recorded before the answer leaves, so a client that got it also finds it in the stats.
            app._record(ServedRequest(path, stream, error.code, 0, 0, arrival, None, (), None))
            self._json(error.code, error.body())
            return
        chat = path == "/v1/chat/completions"
        reply = make_reply(request if chat else {}, prompt_text, max_tokens)
        if not app.honours_ignore_eos and request.get("ignore_eos") and reply.finish == "length" \
                and len(reply.pieces) > 1:
            reply = Reply(reply.pieces[:max(1, len(reply.pieces) // 4)], "stop")   # stops at its own EOS
        self._complete(chat, stream, request, reply, prompt_tokens, arrival, app.prefix_cache.hit_tokens(prompt_text))

    def _tokenize(self, body: bytes) -> None:
        """vLLM's ``POST /tokenize``: ``{"model", "prompt"}`` or ``{"model", "messages"}`` ->
        ``{"count", "max_model_len", "tokens", "token_strs"}``, counted as the completions count."""
        app = self.server.app
        try:
            request = json_object(body)
            path = "/v1/chat/completions" if "messages" in request else "/v1/completions"
            _, count = app._prompt(path, request)
        except OpenAIApiError as error:
            self._json(error.code, error.body())
            return
        self._json(200, {"count": count, "max_model_len": app._max_model_len, "tokens": list(range(count)),
                         "token_strs": None})

    def _complete(self, chat: bool, stream: bool, request: dict[str, Any], reply: Reply, prompt_tokens: int,
                  arrival: float, cached_tokens: int = 0) -> None:
        """Answer a completion as vLLM does: ``reply``'s pieces decoded at the engine's pace, streamed
        as SSE chunks (``stream``) or sent in one body; the request is recorded in the stats once
        every token is out (``"abort"`` when the client hung up before)."""
        app = self.server.app
        head = {"id": ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(16),
                "object": "chat.completion.chunk" if chat else "text_completion", "created": int(time.time()),
                "model": request.get("model") or app._served_name}
        sent = [0]
        options = request.get("stream_options") or {}
        running = bool(options.get("include_usage") and options.get("continuous_usage_stats"))

        def so_far(tokens: int) -> dict[str, Any]:
            """vLLM's running usage (``continuous_usage_stats``): completion tokens sent so far."""
            return {"usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + tokens,
                              "completion_tokens": tokens}} if running else {}

        def emit(start: int, end: int) -> None:
            if stream:
                if start == 0 and chat:
                    self._chunk({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                      "logprobs": None, "finish_reason": None}], **so_far(0)})
                self._chunk({**head, "choices": [_choice(reply, chat, start, end)], **so_far(end)})
            sent[0] = end

        times: list[float] = []
        finish: str | None = reply.finish
        recorded: list[bool] = []

        def record(how: str | None) -> None:
            recorded.append(True)
            app._record(ServedRequest(
                "/v1/chat/completions" if chat else "/v1/completions", stream, 200, prompt_tokens, sent[0],
                arrival, times[0] - arrival if times else None, tuple(times), how))

        try:
            if stream:
                self._start_stream()
            app._decode(reply.pieces, app._admit(prompt_tokens, min(cached_tokens, prompt_tokens - 1)), emit, times, prompt_tokens=prompt_tokens,
                        arrival_s=arrival)
            # Every token is out (or, unstreamed, about to go in one body): record before the
            # last bytes leave, so a client that has its answer also finds it in the stats.
            record(finish)
            self._end_completion(chat, stream, bool(options.get("include_usage")), reply, head, prompt_tokens)
        except OSError:
            self.close_connection = True
            if not recorded:
                record("abort")

    def _start_stream(self) -> None:
        """The head of a streamed answer: 200, SSE in chunked transfer encoding."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _end_completion(self, chat: bool, stream: bool, include_usage: bool, reply: Reply,
                        head: dict[str, object], prompt_tokens: int) -> None:
        """Send what follows the last token: a stream's usage chunk (with ``include_usage``, the
        request's ``stream_options.include_usage``), ``[DONE]`` and its last chunk; or the whole
        unstreamed body (``chat.completion`` with the message, or ``text_completion``), each with
        vLLM's usage."""
        usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + len(reply.pieces),
                 "completion_tokens": len(reply.pieces), "prompt_tokens_details": None}
        if stream:
            if include_usage:
                self._chunk({**head, "choices": [], "usage": usage})
            self._chunk("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
        elif chat:
            content = None if reply.tool_call else "".join(reply.pieces)
            message = {"role": "assistant", "content": content, "reasoning_content": None,
                       "tool_calls": [reply.tool_call] if reply.tool_call else []}
            self._json(200, {**head, "object": "chat.completion", "choices": [{
                "index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish,
                "stop_reason": None}], "usage": usage, "prompt_logprobs": None})
        else:
            self._json(200, {**head, "choices": [{**_choice(reply, chat, 0, len(reply.pieces)),
                                                  "prompt_logprobs": None}], "usage": usage})


def _choice(reply: Reply, chat: bool, start: int, end: int) -> dict[str, object]:
    """The choice carrying ``reply``'s pieces ``start:end``: a chat delta (its content, or its tool
    call's arguments cut at the same characters, the call's id, type and name in the first) or a
    completion's text; the finish reason with the last piece."""
    finish = reply.finish if end == len(reply.pieces) else None
    text = "".join(reply.pieces[start:end])
    if not chat:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
    delta: dict[str, object]
    if reply.tool_call:
        name = reply.tool_call["function"]["name"]
        arguments = reply.tool_call["function"]["arguments"]
        cut = slice(max(0, start * CHARS_PER_TOKEN - len(name)), max(0, end * CHARS_PER_TOKEN - len(name)))
        call: dict[str, object] = {"index": 0, "function": {"arguments": arguments[cut]}}
        if start == 0:
            call = {"index": 0, "id": reply.tool_call["id"], "type": "function",
                    "function": {"name": name, "arguments": arguments[cut]}}
        delta = {"tool_calls": [call]}
    else:
        delta = {"content": text}
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}


def json_object(body: bytes) -> dict[str, Any]:
    """A request body as the JSON object vLLM's endpoints take.

    Raises:
        OpenAIApiError: 400, the body is not JSON or not an object.
    """
    try:
        request = json.loads(body or b"null")
    except ValueError:
        raise OpenAIApiError(400, "The request body is not valid JSON.") from None
    if not isinstance(request, dict):
        raise OpenAIApiError(400, "The request body must be a JSON object.")
    return request
