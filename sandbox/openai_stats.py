"""What the sandbox's OpenAI-compatible server served: per-request records and totals."""

from __future__ import annotations

from dataclasses import dataclass


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
