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
carry several tokens when a stream runs faster than one chunk per ``CHUNK_INTERVAL_S`` (10 ms),
or when the server runs late (the tokens due meanwhile join the next chunk, as vLLM's output
collector merges outputs the API server has not sent yet). With
``stream_options.continuous_usage_stats`` every chunk carries the running usage, as vLLM's does.

Replies (tool calls, passphrase recall, filler, ``finish_reason``): see
:mod:`sandbox.openai_replies`; the HTTP handler: :mod:`sandbox.openai_http`;
served-request records: :mod:`sandbox.openai_stats`. Their public names stay
importable from here.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from remote.models import chip_generation
from sandbox.engine import model_spec
from sandbox.openai_http import OpenAIApiError, OpenAIHandler, OpenAIHTTPServer
from sandbox.openai_metrics import BLOCK_SIZE, PrefixCache, ServerMetrics
from sandbox.openai_replies import (
    CHARS_PER_TOKEN,
    CHAT_TOKENS_PER_MESSAGE,
    DEFAULT_FILLER_TOKENS,
    PASSPHRASE,
    content_text,
    count_tokens,
)
from sandbox.openai_stats import ServedRequest, ServedStats

__all__ = [
    "CHARS_PER_TOKEN", "CHAT_TOKENS_PER_MESSAGE", "CHUNK_INTERVAL_S", "CONCURRENCY_EXPONENT",
    "DECODE_TOK_S_PER_CHIP", "DEFAULT_FILLER_TOKENS", "PASSPHRASE", "PREFILL_TOK_S_PER_CHIP",
    "TTFT_OVERHEAD_S", "SandboxOpenAIServer", "ServedRequest", "ServedStats", "count_tokens",
]

DECODE_TOK_S_PER_CHIP = {"v5e": 60.0, "v6e": 150.0, "v5p": 120.0}
PREFILL_TOK_S_PER_CHIP = {"v5e": 16_000.0, "v6e": 40_000.0, "v5p": 32_000.0}
CONCURRENCY_EXPONENT = 0.8
TTFT_OVERHEAD_S = 0.015
CHUNK_INTERVAL_S = 0.01


class SandboxOpenAIServer:
    """vLLM's OpenAI-compatible API on loopback, for the sandbox and tests.

    Thread-safe. Usage: ``configure(...)``, ``port = start()``, ``set_ready(True)``, then any
    OpenAI client against ``http://127.0.0.1:<port>/v1``; ``stop()`` at the end.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host, self._port = host, port
        self._lock = threading.Lock()
        self._httpd: OpenAIHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._listening = False
        self._ready = False
        self._epoch = 0
        self._conns: set[socket.socket] = set()
        self._served: list[ServedRequest] = []
        self._active = 0
        self._prefill_free_at = 0.0
        self._access_log: Callable[[str], None] | None = None
        #: vLLM's automatic prefix caching (on by default in V1), as far as ``/metrics`` shows it
        self.prefix_cache = PrefixCache()
        #: False: a server that ignores ``ignore_eos`` (stops at its own EOS, a quarter of ``max_tokens``)
        self.honours_ignore_eos = True
        self.configure(model="Qwen/Qwen3-8B", served_model_name=None, max_model_len=40960,
                       accelerator_type="v6e-1", chips=1)

    # ---------------------------------------------------------------- control
    def configure(self, *, model: str, served_model_name: str | None, max_model_len: int,
                  accelerator_type: str, chips: int, kv_cache_tokens: int | None = None,
                  gpu_memory_utilization: float | None = None, block_size: int | None = None,
                  api_key: str | None = None,
                  auto_tool_choice: bool = False, tool_call_parser: str | None = None) -> None:
        """Set what is served: model id, max-model-len (tokens), chip generation and chip count, and
        the engine's KV cache size in tokens (default: 8 requests at max-model-len), its
        ``--gpu-memory-utilization`` (default tpu-inference's 0.92) and KV block size in tokens
        (default :data:`~sandbox.openai_metrics.BLOCK_SIZE`) for ``/metrics``, as the engine's log printed them.

        ``api_key`` is vLLM's ``--api-key``: every ``/v1`` route then answers 401 unless the
        request carries ``Authorization: Bearer <api_key>`` (``/health`` stays open).
        ``auto_tool_choice`` / ``tool_call_parser`` are vLLM's ``--enable-auto-tool-choice`` /
        ``--tool-call-parser``: without them a request with ``tools`` gets vLLM 0.32's 400 (see
        :meth:`tools_refusal`).

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
            self._api_key = api_key or None
            self._auto_tool_choice, self._tool_call_parser = auto_tool_choice, tool_call_parser or None
            self._max_model_len = max_model_len
            self._decode_base: float = DECODE_TOK_S_PER_CHIP[generation] * chips * scale
            self._prefill_rate: float = PREFILL_TOK_S_PER_CHIP[generation] * chips * scale
            self._metrics = ServerMetrics(self._served_name, kv_cache_tokens or 8 * max_model_len, max_model_len,
                                          0.92 if gpu_memory_utilization is None else gpu_memory_utilization,
                                          block_size or BLOCK_SIZE)

    def metrics_text(self) -> bytes:
        """``GET /metrics``: vLLM's Prometheus text for what this server carries now."""
        return self._metrics.render()

    def authorized(self, authorization: str | None) -> bool:
        """Whether a request with this ``Authorization`` header may use the ``/v1`` routes."""
        with self._lock:
            key = self._api_key
        return key is None or authorization == f"Bearer {key}"

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
        httpd = OpenAIHTTPServer((self._host, self._port), OpenAIHandler, bind_and_activate=False)
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
                raise OpenAIApiError(400, "prompt must be a string, a list of one string, or a list of token ids")
            return prompt, count_tokens(prompt)
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            raise OpenAIApiError(400, "messages must be a non-empty list")
        texts = [content_text(m.get("content")) for m in messages if isinstance(m, dict)]
        tools = request.get("tools")
        extra = count_tokens(json.dumps(tools)) if tools else 0
        return "\n".join(texts), sum(count_tokens(t) for t in texts) + CHAT_TOKENS_PER_MESSAGE * len(texts) + extra

    def tools_refusal(self, request: dict[str, Any]) -> str | None:
        """vLLM 0.32's 400 message for a request with ``tools`` this server was not started for, or
        ``None``: ``tool_choice`` ``"auto"`` (the default) needs ``--enable-auto-tool-choice`` and
        ``--tool-call-parser``, ``"required"`` or a named function needs the parser, ``"none"``
        nothing (texts as the real server says them: tests/fixtures/vllm-api/tools-refused-0.32.json)."""
        if not request.get("tools"):
            return None
        with self._lock:
            auto, parser = self._auto_tool_choice, self._tool_call_parser
        choice = request.get("tool_choice", "auto")
        if choice == "none":
            return None
        if choice == "auto":
            if auto and parser:
                return None
            return '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
        if parser:
            return None
        if choice == "required":
            return 'tool_choice="required" requires --tool-call-parser to be set'
        name = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else choice
        return f'tool_choice=function "{name}" requires --tool-call-parser to be set'

    def _check(self, request: dict[str, Any], prompt_tokens: int) -> int | None:
        """Validate model, tools and length like vLLM; return max_tokens (None when unset)."""
        with self._lock:
            limit, names = self._max_model_len, {self._served_name, self._model}
        model = request.get("model")
        if model is not None and model not in names:
            raise OpenAIApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
        if (refusal := self.tools_refusal(request)) is not None:
            raise OpenAIApiError(400, refusal)
        max_tokens = request.get("max_completion_tokens", request.get("max_tokens"))
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise OpenAIApiError(400, f"max_tokens must be at least 1, got {max_tokens}.")
        if max_tokens is None and prompt_tokens >= limit:
            raise OpenAIApiError(400, f"This model's maximum context length is {limit} tokens. However, you "
                            f"requested {prompt_tokens} tokens in the messages, Please reduce the length of "
                            "the messages.")
        if max_tokens is not None and prompt_tokens + max_tokens > limit:
            raise OpenAIApiError(400, f"This model's maximum context length is {limit} tokens. However, you "
                            f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
                            f"{max_tokens} in the completion). Please reduce the length of the messages or "
                            "completion.")
        return max_tokens

    def _admit(self, prompt_tokens: int, cached_tokens: int = 0) -> float:
        """Queue the prefill (``cached_tokens`` of it found in the prefix cache, counted as hits);
        return the monotonic time the first token is due."""
        self._metrics.admitted(prompt_tokens, max(0, cached_tokens))
        with self._lock:
            now = time.monotonic()
            start = max(now, self._prefill_free_at)
            self._prefill_free_at = start + prompt_tokens / self._prefill_rate
            first_step = float((self._active + 1) ** (1 - CONCURRENCY_EXPONENT)) / self._decode_base
            return self._prefill_free_at + TTFT_OVERHEAD_S + first_step

    def _decode(self, pieces: tuple[str, ...], first_at: float, emit: Callable[[int, int], None],
                times: list[float], *, prompt_tokens: int = 0, arrival_s: float | None = None) -> None:
        """Emit ``pieces`` in timed chunks via ``emit(start, end)``, appending each token's write time."""
        epoch = self._epoch
        metrics, started, last_at = self._metrics, False, 0.0
        try:
            _sleep_until(first_at)
            with self._lock:
                self._active += 1
            now = time.monotonic()
            metrics.started(prompt_tokens, now - (arrival_s if arrival_s is not None else now))
            started, last_at = True, now
            self._decode_steps(pieces, first_at, emit, times, epoch, metrics, last_at)
        finally:
            metrics.finished(prompt_tokens + len(times), started=started)
            if started:
                with self._lock:
                    self._active -= 1

    def _decode_steps(self, pieces: tuple[str, ...], first_at: float, emit: Callable[[int, int], None],
                      times: list[float], epoch: int, metrics: ServerMetrics, last_at: float) -> None:
        """The decode loop: chunks as the concurrency allows, each token into the metrics."""
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
                # Behind (a loaded machine): the tokens due meanwhile join this chunk instead of
                # following in back-to-back chunks, as vLLM's output collector merges the outputs
                # a slow API server has not sent yet; the rate holds and no gap collapses to 0.
                behind = min(len(pieces) - i - n, int((time.monotonic() - due) * per_stream))
                if behind > 0:
                    n += behind
                    due += behind / per_stream
            emit(i, i + n)
            now = time.monotonic()
            times.extend([now] * n)
            metrics.tokens(n, None if i == 0 else now - last_at)
            last_at = now
            i += n

    def _record(self, record: ServedRequest) -> None:
        with self._lock:
            self._served.append(record)


def _sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        time.sleep(delay)
