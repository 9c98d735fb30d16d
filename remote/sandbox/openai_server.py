"""Loopback OpenAI-compatible server standing in for vLLM's API server (sandbox).

Stdlib ``ThreadingHTTPServer`` in a daemon thread, independent of any asyncio loop.
Shapes follow vLLM 0.29: ``GET /v1/models``, ``GET /health``, ``POST /v1/chat/completions``
and ``POST /v1/completions``, streaming (SSE ``data: {...}``, ``data: [DONE]``, chunked
transfer encoding, ``stream_options.include_usage``) and not.

Readiness: before :meth:`SandboxOpenAIServer.set_ready` ``(True)`` the port is bound but not
listening, so connections are refused, exactly like a booting vLLM whose uvicorn has not
started. ``set_ready(False)`` (container gone) closes the listener and cuts in-flight
requests; the port stays reserved for the next boot.

Tokens (deterministic, no tokenizer): a text is ``ceil(len(text) / 4)`` tokens; a chat
prompt is the sum over messages of its content's tokens plus 4 per message (template),
plus ``ceil(len(json.dumps(tools)) / 4)`` when tools are given. Output tokens are 4-char
pieces of the reply. A request whose prompt plus ``max_tokens`` exceeds max-model-len gets
vLLM's HTTP 400.

Timing: per-chip single-stream decode rate ``DECODE_TOK_S_PER_CHIP`` (8B model, scaled
by ``(8 / params_b) ** 0.7`` within [0.25, 4]); with ``c`` streams decoding, total rate =
base x chips x c ** 0.8 and per stream = total / c, re-evaluated at every chunk. Prefill
runs one prompt at a time at ``PREFILL_TOK_S_PER_CHIP`` x chips (same model scaling), so
TTFT = queueing + prompt / prefill rate + ``TTFT_OVERHEAD_S`` + one decode step. Chunks
carry several tokens when a stream runs faster than one chunk per ``CHUNK_INTERVAL_S`` (10 ms, so ITL stays close to TPOT as with vLLM's per-token streaming).

Replies (first rule that applies):
1. last message has role ``tool``: "The result is N." with the first number in it;
2. ``tools`` given (``tool_choice`` not ``"none"``), last message from the user: a call to
   the named ``tool_choice``, else the tool sharing most words (3+ letters, common ones and
   a plural ``s`` dropped; from its name and description) with the user's text; number/integer parameters take the numbers of
   the text in order, strings the first quoted text, else the word after " in ", else the
   last capitalised word; enums the first value named in the text;
3. the prompt contains ``The passphrase is WORD.`` (WORD: letters, digits, ``-``, ``_``) and
   the word "passphrase" appears again after it: "The passphrase is WORD.";
4. otherwise filler text.
A reply stops at its natural end (``finish_reason`` ``stop``) unless ``max_tokens`` is set
for a filler reply or ``ignore_eos`` is true, in which case exactly ``max_tokens`` tokens
come back (``length``); ``max_tokens`` always caps.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from remote.models import chip_generation
from remote.sandbox.engine import model_spec

CHARS_PER_TOKEN = 4
CHAT_TOKENS_PER_MESSAGE = 4
DECODE_TOK_S_PER_CHIP = {"v5e": 60.0, "v6e": 150.0, "v5p": 120.0}
PREFILL_TOK_S_PER_CHIP = {"v5e": 16_000.0, "v6e": 40_000.0, "v5p": 32_000.0}
CONCURRENCY_EXPONENT = 0.8
TTFT_OVERHEAD_S = 0.015
CHUNK_INTERVAL_S = 0.01
DEFAULT_FILLER_TOKENS = 16
PASSPHRASE = re.compile(r"The passphrase is ([A-Za-z0-9_-]+)\.")
_FILLER = "Simulated tokens from the tpu-console sandbox, standing in for a vLLM TPU server. "
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def count_tokens(text: str) -> int:
    """Sandbox token count of ``text``: ``ceil(len(text) / 4)``."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass(frozen=True)
class ServedRequest:
    """One completion request as the server answered it (times from ``time.monotonic()``).

    Attributes:
        endpoint: ``/v1/chat/completions`` or ``/v1/completions``.
        status: HTTP status sent (200, 400, 404).
        prompt_tokens / completion_tokens: as in the response's usage.
        arrival_s: when the request body had been read.
        ttft_s: arrival to the first output token written (None when none was).
        token_times_s: when each output token was written (tokens of one chunk share a time).
        finish_reason: ``stop``, ``length``, ``tool_calls``, ``abort`` or None for errors.
    """

    endpoint: str
    stream: bool
    status: int
    prompt_tokens: int
    completion_tokens: int
    arrival_s: float
    ttft_s: float | None
    token_times_s: tuple[float, ...]
    finish_reason: str | None


@dataclass(frozen=True)
class ServedStats:
    """What the server actually served since start or :meth:`SandboxOpenAIServer.reset_stats`."""

    served: tuple[ServedRequest, ...] = ()

    @property
    def ok(self) -> tuple[ServedRequest, ...]:
        return tuple(r for r in self.served if r.status == 200)

    @property
    def requests(self) -> int:
        """Completion requests answered with HTTP 200."""
        return len(self.ok)

    @property
    def errors(self) -> int:
        return len(self.served) - self.requests

    @property
    def prompt_tokens(self) -> int:
        return sum(r.prompt_tokens for r in self.ok)

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.ok)

    def output_tokens_per_s(self) -> float:
        """Completion tokens / (last token written - first arrival), 0.0 when nothing was served."""
        times = [t for r in self.ok for t in r.token_times_s]
        if not times:
            return 0.0
        span = max(times) - min(r.arrival_s for r in self.ok)
        return self.completion_tokens / span if span > 0 else 0.0


@dataclass(frozen=True)
class _Reply:
    pieces: tuple[str, ...]
    finish: str
    tool_call: dict[str, Any] | None = None


class _ApiError(Exception):
    def __init__(self, code: int, message: str, kind: str = "BadRequestError", param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.kind, self.param = code, message, kind, param

    def body(self) -> dict[str, Any]:
        return {"object": "error", "message": self.message, "type": self.kind, "param": self.param,
                "code": self.code}


def _text(content: Any) -> str:
    """Message content as text: a string, or the ``text`` parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _pieces(text: str) -> tuple[str, ...]:
    return tuple(text[i:i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN))


def _filler(n: int, offset: int = 0) -> tuple[str, ...]:
    cycle = _pieces(_FILLER)
    return tuple(cycle[(offset + i) % len(cycle)] for i in range(n))


def _tool_arguments(tool: dict[str, Any], text: str) -> dict[str, Any]:
    params = (tool.get("parameters") or {}).get("properties") or {}
    numbers = iter(_NUMBER.findall(text))
    quoted = re.search(r"['\"]([^'\"]+)['\"]", text)
    after_in = re.search(r"\bin ([A-Z][\w-]*(?: [A-Z][\w-]*)*)", text)
    capitals = re.findall(r"\b[A-Z][a-z][\w-]*", text)
    args: dict[str, Any] = {}
    for name, schema in params.items():
        kind = schema.get("type") if isinstance(schema, dict) else None
        if isinstance(schema, dict) and schema.get("enum"):
            args[name] = next((v for v in schema["enum"] if str(v).lower() in text.lower()), schema["enum"][0])
        elif kind in ("number", "integer"):
            raw = next(numbers, "0")
            value = float(raw)
            args[name] = int(value) if kind == "integer" or value.is_integer() else value
        elif kind == "boolean":
            args[name] = False
        else:
            args[name] = (quoted.group(1) if quoted else after_in.group(1) if after_in
                          else capitals[-1] if capitals else "")
    return args


_COMMON = frozenset("the and for with please what which this that from you are can use using tool tools "
                    "give tell how".split())


def _words(text: str) -> set[str]:
    """Words of 3+ letters, lower-cased, without a plural ``s``, minus common ones."""
    return {w.removesuffix("s") for w in re.findall(r"[a-z]{3,}", text.lower()) if w not in _COMMON}


def _pick_tool(tools: list[dict[str, Any]], choice: Any, text: str) -> dict[str, Any] | None:
    functions = [t.get("function", {}) for t in tools if isinstance(t, dict)]
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return next((f for f in functions if f.get("name") == name), None)
    words = _words(text)
    best, best_score = None, 0
    for function in functions:
        own = _words(f"{function.get('name', '')} {function.get('description', '')}".replace("_", " "))
        if len(words & own) > best_score:
            best, best_score = function, len(words & own)
    return best if best is not None or choice != "required" else (functions[0] if functions else None)


def _reply(request: dict[str, Any], prompt_text: str, max_tokens: int | None) -> _Reply:
    messages = request.get("messages") or []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    tools = request.get("tools") or []
    natural: tuple[str, ...] | None = None
    tool_call = None
    if last.get("role") == "tool":
        found = _NUMBER.search(_text(last.get("content")))
        natural = _pieces(f"The result is {found.group(0) if found else _text(last.get('content')).strip()}.")
    elif tools and request.get("tool_choice", "auto") != "none" and last.get("role") == "user":
        function = _pick_tool(tools, request.get("tool_choice", "auto"), _text(last.get("content")))
        if function is not None:
            arguments = json.dumps(_tool_arguments(function, _text(last.get("content"))))
            tool_call = {"id": f"chatcmpl-tool-{secrets.token_hex(16)}", "type": "function",
                         "function": {"name": function.get("name", ""), "arguments": arguments}}
            natural = _pieces(function.get("name", "") + arguments)
    if natural is None:
        needles = list(PASSPHRASE.finditer(prompt_text))
        if needles and "passphrase" in prompt_text[needles[-1].end():].lower():
            natural = _pieces(f"The passphrase is {needles[-1].group(1)}.")
    if natural is None:
        natural = _filler(max_tokens if max_tokens is not None else DEFAULT_FILLER_TOKENS)
        if max_tokens is not None:
            return _Reply(natural, "length")
    if request.get("ignore_eos") and max_tokens is not None and tool_call is None:
        return _Reply(natural[:max_tokens] + _filler(max(0, max_tokens - len(natural))), "length")
    if max_tokens is not None and len(natural) > max_tokens:
        return _Reply(natural[:max_tokens], "length", None)
    return _Reply(natural, "tool_calls" if tool_call else "stop", tool_call)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 256
    app: SandboxOpenAIServer


class SandboxOpenAIServer:
    """vLLM's OpenAI-compatible API on loopback, for the sandbox and tests.

    Thread-safe. Usage: ``configure(...)``, ``port = start()``, ``set_ready(True)``, then any
    OpenAI client against ``http://127.0.0.1:<port>/v1``; ``stop()`` at the end.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host, self._port = host, port
        self._lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._listening = False
        self._ready = False
        self._epoch = 0
        self._conns: set[socket.socket] = set()
        self._served: list[ServedRequest] = []
        self._active = 0
        self._prefill_free_at = 0.0
        self._access_log: Callable[[str], None] | None = None
        self.configure(model="Qwen/Qwen3-8B", served_model_name=None, max_model_len=40960,
                       accelerator_type="v6e-1", chips=1)

    # ---------------------------------------------------------------- control
    def configure(self, *, model: str, served_model_name: str | None, max_model_len: int,
                  accelerator_type: str, chips: int) -> None:
        """Set what is served: model id, max-model-len (tokens), chip generation and chip count.

        Raises:
            ValueError: a non-positive ``max_model_len`` or ``chips``, or an unknown chip generation.
        """
        generation = chip_generation(accelerator_type) or ""
        if generation not in DECODE_TOK_S_PER_CHIP or chips <= 0 or max_model_len <= 0:
            raise ValueError(f"cannot serve {model!r} on {chips} x {accelerator_type!r} with "
                             f"max_model_len={max_model_len}")
        scale = min(4.0, max(0.25, (8.0 / model_spec(model).params_b) ** 0.7))
        with self._lock:
            self._model, self._served_name = model, served_model_name or model
            self._max_model_len = max_model_len
            self._decode_base = DECODE_TOK_S_PER_CHIP[generation] * chips * scale
            self._prefill_rate = PREFILL_TOK_S_PER_CHIP[generation] * chips * scale

    def set_access_log(self, sink: Callable[[str], None] | None) -> None:
        """Receive one uvicorn-style access line per request (``INFO:     ip:port - "GET ..." 200 OK``)."""
        self._access_log = sink

    def start(self) -> int:
        """Bind (listening only once ready) and return the port."""
        with self._lock:
            if self._httpd is None:
                self._bind()
                if self._ready:
                    self._listen()
            return self._port

    def stop(self) -> None:
        """Close the listener and cut every in-flight request."""
        with self._lock:
            self._close()

    def set_ready(self, ready: bool) -> None:
        """Ready: accept connections. Not ready: refuse them (see the module docstring)."""
        with self._lock:
            self._ready = ready
            if self._httpd is None:
                return
            if ready and not self._listening:
                self._listen()
            elif not ready and self._listening:
                self._close()
                self._bind()

    @property
    def port(self) -> int:
        return self._port

    @property
    def stats(self) -> ServedStats:
        """A snapshot of what was served."""
        with self._lock:
            return ServedStats(tuple(self._served))

    def reset_stats(self) -> None:
        with self._lock:
            self._served.clear()

    def _bind(self) -> None:
        httpd = _HTTPServer((self._host, self._port), _Handler, bind_and_activate=False)
        httpd.app = self
        try:
            httpd.server_bind()
        except OSError:
            httpd.server_close()
            raise
        self._port = httpd.server_address[1]
        self._httpd = httpd

    def _listen(self) -> None:
        assert self._httpd is not None
        self._httpd.server_activate()
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"sandbox-openai-{self._port}", daemon=True)
        self._thread.start()
        self._listening = True

    def _close(self) -> None:
        if self._httpd is not None:
            if self._listening:
                self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd, self._thread, self._listening = None, None, False
        self._epoch += 1
        for conn in list(self._conns):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # ---------------------------------------------------------------- serving
    def _models(self) -> dict[str, Any]:
        with self._lock:
            return {"object": "list", "data": [{
                "id": self._served_name, "object": "model", "created": int(time.time()), "owned_by": "vllm",
                "root": self._model, "parent": None, "max_model_len": self._max_model_len,
                "permission": []}]}

    def _prompt(self, path: str, request: dict[str, Any]) -> tuple[str, int]:
        if path == "/v1/completions":
            prompt = request.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1:
                prompt = prompt[0]
            if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                return "", len(prompt)
            if not isinstance(prompt, str):
                raise _ApiError(400, "prompt must be a string, a list of one string, or a list of token ids")
            return prompt, count_tokens(prompt)
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _ApiError(400, "messages must be a non-empty list")
        texts = [_text(m.get("content")) for m in messages if isinstance(m, dict)]
        tools = request.get("tools")
        extra = count_tokens(json.dumps(tools)) if tools else 0
        return "\n".join(texts), sum(count_tokens(t) for t in texts) + CHAT_TOKENS_PER_MESSAGE * len(texts) + extra

    def _check(self, request: dict[str, Any], prompt_tokens: int) -> int | None:
        """Validate model and length like vLLM; return max_tokens (None when unset)."""
        with self._lock:
            limit, names = self._max_model_len, {self._served_name, self._model}
        model = request.get("model")
        if model is not None and model not in names:
            raise _ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
        max_tokens = request.get("max_completion_tokens", request.get("max_tokens"))
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise _ApiError(400, f"max_tokens must be at least 1, got {max_tokens}.")
        if max_tokens is None and prompt_tokens >= limit:
            raise _ApiError(400, f"This model's maximum context length is {limit} tokens. However, you "
                            f"requested {prompt_tokens} tokens in the messages, Please reduce the length of "
                            "the messages.")
        if max_tokens is not None and prompt_tokens + max_tokens > limit:
            raise _ApiError(400, f"This model's maximum context length is {limit} tokens. However, you "
                            f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
                            f"{max_tokens} in the completion). Please reduce the length of the messages or "
                            "completion.")
        return max_tokens

    def _admit(self, prompt_tokens: int) -> float:
        """Queue the prefill; return the monotonic time the first token is due."""
        with self._lock:
            now = time.monotonic()
            start = max(now, self._prefill_free_at)
            self._prefill_free_at = start + prompt_tokens / self._prefill_rate
            first_step = (self._active + 1) ** (1 - CONCURRENCY_EXPONENT) / self._decode_base
            return self._prefill_free_at + TTFT_OVERHEAD_S + first_step

    def _decode(self, pieces: tuple[str, ...], first_at: float, emit: Callable[[int, int], None],
                times: list[float]) -> None:
        """Emit ``pieces`` in timed chunks via ``emit(start, end)``, appending each token's write time."""
        epoch = self._epoch
        _sleep_until(first_at)
        with self._lock:
            self._active += 1
        try:
            due, i = first_at, 0
            while i < len(pieces):
                if self._epoch != epoch:
                    raise ConnectionAbortedError("server stopped")
                with self._lock:
                    per_stream = self._decode_base * self._active ** CONCURRENCY_EXPONENT / self._active
                n = 1 if i == 0 else max(1, min(len(pieces) - i, round(per_stream * CHUNK_INTERVAL_S)))
                if i:
                    due += n / per_stream
                    _sleep_until(due)
                emit(i, i + n)
                times.extend([time.monotonic()] * n)
                i += n
        finally:
            with self._lock:
                self._active -= 1

    def _record(self, record: ServedRequest) -> None:
        with self._lock:
            self._served.append(record)


def _sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        time.sleep(delay)


_COMPLETIONS = ("/v1/chat/completions", "/v1/completions")


class _Handler(BaseHTTPRequestHandler):
    """One connection; HTTP/1.1 keep-alive, chunked SSE for streams."""

    protocol_version = "HTTP/1.1"
    #: TCP_NODELAY like uvicorn: otherwise back-to-back SSE writes wait for the client's delayed ACK.
    disable_nagle_algorithm = True
    server: _HTTPServer

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

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
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

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._send(200, b"", None)
        elif path == "/v1/models":
            self._json(200, self.server.app._models())
        elif path in _COMPLETIONS:
            self._json(405, {"detail": "Method Not Allowed"})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        app, path = self.server.app, self.path.split("?", 1)[0]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if path not in _COMPLETIONS:
            self._json(405 if path in ("/health", "/v1/models") else 404,
                       {"detail": "Method Not Allowed" if path in ("/health", "/v1/models") else "Not Found"})
            return
        arrival, stream = time.monotonic(), False
        try:
            try:
                request = json.loads(body or b"null")
            except ValueError:
                raise _ApiError(400, "The request body is not valid JSON.") from None
            if not isinstance(request, dict):
                raise _ApiError(400, "The request body must be a JSON object.")
            stream = bool(request.get("stream"))
            prompt_text, prompt_tokens = app._prompt(path, request)
            max_tokens = app._check(request, prompt_tokens)
        except _ApiError as error:
            # Recorded before the answer leaves, so a client that got it also finds it in the stats.
            app._record(ServedRequest(path, stream, error.code, 0, 0, arrival, None, (), None))
            self._json(error.code, error.body())
            return
        chat = path == "/v1/chat/completions"
        reply = _reply(request if chat else {}, prompt_text, max_tokens)
        self._complete(chat, stream, request, reply, prompt_tokens, arrival)

    def _complete(self, chat: bool, stream: bool, request: dict[str, Any], reply: _Reply, prompt_tokens: int,
                  arrival: float) -> None:
        app = self.server.app
        head = {"id": ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(16),
                "object": "chat.completion.chunk" if chat else "text_completion", "created": int(time.time()),
                "model": request.get("model") or app._served_name}
        sent = [0]
        name = reply.tool_call["function"]["name"] if reply.tool_call else ""
        arguments = reply.tool_call["function"]["arguments"] if reply.tool_call else ""

        def choice(start: int, end: int) -> dict[str, Any]:
            finish = reply.finish if end == len(reply.pieces) else None
            text = "".join(reply.pieces[start:end])
            if not chat:
                return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
            if reply.tool_call:
                cut = slice(max(0, start * CHARS_PER_TOKEN - len(name)), max(0, end * CHARS_PER_TOKEN - len(name)))
                call: dict[str, Any] = {"index": 0, "function": {"arguments": arguments[cut]}}
                if start == 0:
                    call = {"index": 0, "id": reply.tool_call["id"], "type": "function",
                            "function": {"name": name, "arguments": arguments[cut]}}
                delta: dict[str, Any] = {"tool_calls": [call]}
            else:
                delta = {"content": text}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

        def emit(start: int, end: int) -> None:
            if stream:
                if start == 0 and chat:
                    self._chunk({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                      "logprobs": None, "finish_reason": None}]})
                self._chunk({**head, "choices": [choice(start, end)]})
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
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
            app._decode(reply.pieces, app._admit(prompt_tokens), emit, times)
            usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + len(reply.pieces),
                     "completion_tokens": len(reply.pieces), "prompt_tokens_details": None}
            # Every token is out (or, unstreamed, about to go in one body): record before the
            # last bytes leave, so a client that has its answer also finds it in the stats.
            record(finish)
            if stream:
                if (request.get("stream_options") or {}).get("include_usage"):
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
                self._json(200, {**head, "choices": [{**choice(0, len(reply.pieces)), "prompt_logprobs": None}],
                                 "usage": usage})
        except OSError:
            self.close_connection = True
            if not recorded:
                record("abort")
