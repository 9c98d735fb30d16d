"""Live progress of a running benchmark, for the console's progress panel and the CLI."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class BenchProgress:
    """A snapshot of a running benchmark.

    Attributes:
        kind: ``"smoke"``, ``"throughput"`` or ``"longctx"``.
        requests_done: requests finished so far (successful or not).
        requests_total: requests planned, or ``None`` for a duration-bound run.
        output_tokens: output tokens streamed so far (token chunks while streaming,
            the server's ``usage.completion_tokens`` once a request ends).
        elapsed_s: seconds since the run (or sweep level) started.
        output_tokens_per_s: ``output_tokens / elapsed_s``.
        concurrency: streams in flight for throughput runs, else ``None``.
    """

    kind: str
    requests_done: int
    requests_total: int | None
    output_tokens: int
    elapsed_s: float
    output_tokens_per_s: float
    concurrency: int | None


ProgressCallback = Callable[[BenchProgress], None]


class ProgressTracker:
    """Counts tokens and requests and calls the callback at most every ``interval_s`` seconds.

    Request completions always report (so the last snapshot is exact).
    """

    def __init__(self, kind: str, callback: ProgressCallback | None, *, requests_total: int | None,
                 concurrency: int | None = None, interval_s: float = 0.2) -> None:
        self.kind = kind
        self.callback = callback
        self.requests_total = requests_total
        self.concurrency = concurrency
        self.interval_s = interval_s
        self.started = time.perf_counter()
        self.requests_done = 0
        self.output_tokens = 0
        self._last_emit = 0.0

    def token(self, count: int = 1) -> None:
        """``count`` token chunks arrived."""
        self.output_tokens += count
        if time.perf_counter() - self._last_emit >= self.interval_s:
            self.emit()

    def request_done(self, streamed_chunks: int, output_tokens: int) -> None:
        """A request ended; replace its streamed chunk count by the server's token count."""
        self.requests_done += 1
        self.output_tokens += output_tokens - streamed_chunks
        self.emit()

    def emit(self) -> None:
        """Call the callback with the current snapshot."""
        now = time.perf_counter()
        self._last_emit = now
        if self.callback is None:
            return
        elapsed = now - self.started
        self.callback(BenchProgress(
            kind=self.kind,
            requests_done=self.requests_done,
            requests_total=self.requests_total,
            output_tokens=self.output_tokens,
            elapsed_s=elapsed,
            output_tokens_per_s=self.output_tokens / elapsed if elapsed > 0 else 0.0,
            concurrency=self.concurrency,
        ))
