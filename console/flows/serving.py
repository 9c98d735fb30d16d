"""What a READY node serves, for the fleet's serving columns: model, state, tok/s and queue.

One :class:`ServingSampler` per node, sampled by the fleet in a background worker each with a
timeout (:data:`SAMPLE_TIMEOUT_S`), so a slow or unreachable node never delays the table. Each
sample reads vLLM's ``/metrics`` (:mod:`remote.vllm_metrics`, vLLM 0.32's names) through the
node's forward in the console's forwards when one is open, else through the sampler's own SSH
connection and a forward on a random local port (kept for the next samples). Where the state
comes from: ``/metrics`` answering means ready; otherwise ``docker inspect`` says whether the
container is not there (``no container``) or exited (``failed``); a running one is ``booting``,
with its phase (``booting 60%``) or a diagnosed failure (``failed``) when a startup view of this
console watched the node (the log as that view last read it).
No Textual here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from remote.errors import RemoteError
from remote.startup import Phase, StartupState

if TYPE_CHECKING:
    from console.config import Config
    from console.flows.ssh_login import LoginResolver
    from console.services import FleetLister
    from remote.models import Node

#: Seconds one sample may take (SSH connect, docker inspect, /metrics) before it is "unreachable".
SAMPLE_TIMEOUT_S = 5.0
#: Seconds between two samples of one node (tok/s is the rate between samples).
SAMPLE_INTERVAL_S = 5.0
#: Nodes the fleet samples at once (each sample is an SSH connection, ``docker inspect`` and a
#: ``/metrics`` read): a fleet of thousands of READY nodes is sampled this many at a time.
SAMPLE_CONCURRENCY = 8
#: The serving state shown before a node's first sample has come back.
PENDING = "…"

#: How far a healthy boot is once it enters a phase, percent (phases, not time: the reader knows
#: no total duration; tpu-inference revisits phases, the furthest one counts).
BOOT_PERCENT = {Phase.STARTING: 0, Phase.LOADING_WEIGHTS: 20, Phase.ALLOCATING_KV_CACHE: 40,
                Phase.COMPILING: 60, Phase.WARMING_UP: 90}


@dataclass(frozen=True)
class ServingSample:
    """One look at what a node serves.

    Attributes:
        serving: ``ready``, ``booting 60%`` (a watched boot), ``booting`` (the container runs,
            ``/metrics`` does not answer yet), ``failed``, ``no container``, ``unreachable``
            or :data:`PENDING`.
        model: the served model name (``/metrics``' ``model_name`` label, else the container's
            ``vllm serve`` model), or ``None``.
        tokens_per_s: generation tokens per second between the last samples, or ``None``.
        running, waiting: ``vllm:num_requests_running`` / ``_waiting`` of the last sample, or ``None``.
        reason: why it is ``unreachable`` / ``failed`` / ``booting`` (a sentence), or ``None``.
        sampled_at: when the sample was taken (UTC), ``None`` for :data:`PENDING`.
    """

    serving: str = PENDING
    model: str | None = None
    tokens_per_s: float | None = None
    running: int | None = None
    waiting: int | None = None
    reason: str | None = None
    sampled_at: datetime | None = None

    @property
    def queue(self) -> int | None:
        """``running + waiting`` requests, or ``None`` without a /metrics sample."""
        if self.running is None and self.waiting is None:
            return None
        return (self.running or 0) + (self.waiting or 0)

    def to_json(self) -> dict[str, Any]:
        """``{"serving", "model", "tokens_per_s", "running", "waiting", "queue", "reason", "sampled_at"}``."""
        return {"serving": self.serving, "model": self.model, "tokens_per_s": self.tokens_per_s,
                "running": self.running, "waiting": self.waiting, "queue": self.queue, "reason": self.reason,
                "sampled_at": self.sampled_at.isoformat() if self.sampled_at else None}


def watched_serving(state: StartupState) -> tuple[str, str | None]:
    """``(serving, reason)`` from a watched boot's state: ``failed`` with the diagnosis, ``ready``, or
    ``booting N%`` by :data:`BOOT_PERCENT` with the phase as the reason."""
    if state.failure is not None and state.failure.fatal:
        return "failed", state.failure.explanation
    if state.ready:
        return "ready", None
    seen = [mark.phase for mark in state.timeline] or [state.phase]
    percent = max(BOOT_PERCENT.get(phase, 0) for phase in seen)
    return f"booting {percent}%", str(state.phase).replace("_", " ")


class ServingSampler:
    """Samples one node's serving state (:meth:`sample`); keeps its SSH connection between samples.

    Args:
        node: the :class:`remote.models.Node` (READY).
        target: ``async () -> SshTarget`` (the one SSH target resolution, called once per connection).
        container: ``config.container.name``.
        container_port: ``config.container.port`` (vLLM's port on the node).
        forward_url: ``() -> URL`` of the node's open forward in the console, or ``None``.
        watched: ``() -> StartupState`` the node's startup view last read (this console), or ``None``.
        connect: ``(target) -> connection`` (``remote.ssh.connect``).
        clock: the current UTC time.
    """

    def __init__(self, node: Node, target: Callable[[], Awaitable[Any]], *, container: str, container_port: int,
                 forward_url: Callable[[], str | None] = lambda: None,
                 watched: Callable[[], StartupState | None] = lambda: None,
                 connect: Callable[..., Awaitable[Any]] | None = None,
                 clock: Callable[[], datetime] | None = None) -> None:
        from remote.models import utc_now
        from remote.vllm_metrics import MetricsWindow

        self.node = node
        self._target = target
        self.container = container
        self.container_port = container_port
        self._forward_url = forward_url
        self._watched = watched
        self._connect = connect
        self._clock = clock or utc_now
        self._conn: Any = None
        self._listener: Any = None
        self._own_url: str | None = None
        self._window = MetricsWindow()
        self._model: str | None = None
        self._http: Any = None

    async def _connection(self) -> Any:
        if self._conn is None or self._conn.is_closed():
            from remote.ssh import connect

            self.close()
            self._conn = await (self._connect or connect)(await self._target())
        return self._conn

    async def _metrics_url(self) -> str:
        url = self._forward_url()
        if url:
            return url
        conn = await self._connection()
        if self._listener is None or self._own_url is None:
            from remote.ssh import forward_port

            self._listener, port = await forward_port(conn, self.container_port, 0)
            self._own_url = f"http://127.0.0.1:{port}"
        return self._own_url

    async def sample(self) -> ServingSample:
        """One sample (bound it with ``asyncio.wait_for``; :data:`SAMPLE_TIMEOUT_S`). Never raises
        for SSH, docker or HTTP failures: they are the sample's ``unreachable`` / ``reason``."""
        import httpx

        from remote.container.docker import docker_inspect
        from remote.container.spec import ContainerSpec
        from remote.vllm_metrics import fetch_metrics

        now = self._clock()
        watched = self._watched()
        try:
            url = await self._metrics_url()
        except RemoteError as exc:
            self.close()
            return ServingSample("unreachable", reason=exc.message, sampled_at=now)
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=SAMPLE_TIMEOUT_S, trust_env=False)
        try:
            metrics = await fetch_metrics(self._http, url)
        except RemoteError as exc:
            metrics_problem = exc.message
        else:
            self._window.add(metrics)
            figures = self._window.figures()
            model = metrics.model_names[0] if metrics.model_names else self._model
            return ServingSample("ready", model=model, tokens_per_s=figures.generation_tokens_per_s,
                                 running=_count(metrics.running), waiting=_count(metrics.waiting), sampled_at=now)
        try:
            inspect = await docker_inspect(await self._connection(), self.container, label=self.node.name)
        except RemoteError as exc:
            self.close()
            return ServingSample("unreachable", model=self._model, reason=exc.message, sampled_at=now)
        if inspect is None:
            return ServingSample("no container", reason=f"no container {self.container!r}", sampled_at=now)
        try:
            self._model = ContainerSpec.from_inspect(inspect).model or self._model
        except ValueError:
            pass
        state = inspect.get("State") or {}
        if not state.get("Running"):
            return ServingSample("failed", model=self._model, sampled_at=now,
                                 reason=f"container {self.container} {state.get('Status', 'stopped')} "
                                        f"(exit code {state.get('ExitCode')})")
        if watched is not None:               # the log, as the startup view last read it
            serving, reason = watched_serving(watched)
            if serving != "ready":
                return ServingSample(serving, model=watched.model or self._model, sampled_at=now,
                                     reason=f"{reason} (the startup view's log)")
        return ServingSample("booting", model=self._model, reason=f"/metrics: {metrics_problem}", sampled_at=now)

    def close(self) -> None:
        """Close the sampler's own listener and connection (a forward of the console's stays)."""
        if self._listener is not None:
            self._listener.close()
        if self._conn is not None:
            self._conn.close()
        self._listener = self._conn = self._own_url = None

    async def aclose(self) -> None:
        """:meth:`close`, and the HTTP client."""
        self.close()
        if self._http is not None:
            await self._http.aclose()
            self._http = None


class ResolvedTargets:
    """The SSH targets the serving samples resolved (worker 0 of each node), kept while the node and the
    config are the ones they were resolved with: each resolution asks the TPU API for the worker's guest
    attributes, and a fleet of thousands sampled every :data:`SAMPLE_INTERVAL_S` asked it for every
    sample (~40 requests/s from the console at 5,000 unreachable nodes). A failed resolution is not kept.
    """

    def __init__(self) -> None:
        self._targets: dict[tuple[str, str, str], tuple[Node, Config, Any]] = {}

    async def target(self, node: Node, config: Config, resolve: Callable[[], Awaitable[Any]]) -> Any:
        """``node``'s target: the one kept for this node and config, else ``await resolve()`` (kept).

        Raises:
            what ``resolve`` raises (nothing is kept then).
        """
        held = self._targets.get(node.key)
        if held is not None and held[0] == node and held[1] is config:
            return held[2]
        target = await resolve()
        self._targets[node.key] = (node, config, target)
        return target

    def keep(self, keys: Iterable[tuple[str, str, str]]) -> None:
        """Forget the targets of nodes not in ``keys`` (the READY nodes now)."""
        wanted = set(keys)
        self._targets = {k: v for k, v in self._targets.items() if k in wanted}

    def __len__(self) -> int:
        return len(self._targets)


def sampler_for(node: Node, config: Config, fleet: FleetLister, *, forward_url: Callable[[], str | None] = lambda: None,
                watched: Callable[[], StartupState | None] = lambda: None,
                clock: Callable[[], datetime] | None = None, logins: LoginResolver | None = None,
                targets: ResolvedTargets | None = None) -> ServingSampler:
    """The :class:`ServingSampler` of ``node`` under ``config`` (worker 0 through the one SSH target
    resolution, :func:`console.flows.ssh_target.resolve_target`, with ``fleet`` for gcloud's
    host-key alias and ``logins`` for the user; ``config.container``'s name and port); ``targets``
    keeps the resolved target for the node's next samplers."""
    from console.flows.ssh_target import resolve_target

    async def resolve() -> Any:
        return await resolve_target(node, config, 0, fleet, logins=logins)

    async def target() -> Any:
        return await (resolve() if targets is None else targets.target(node, config, resolve))

    return ServingSampler(node, target, container=config.container.name, container_port=config.container.port,
                          forward_url=forward_url, watched=watched, clock=clock)


async def sample_within(sampler: ServingSampler, timeout_s: float, *, model: str | None = None,
                        now: Callable[[], datetime] | None = None) -> ServingSample:
    """One :meth:`ServingSampler.sample` bounded by ``timeout_s`` seconds: past it the sample is
    ``unreachable`` ("no answer within N s", keeping ``model``, the last one known) and the
    sampler's connection is dropped so the next sample connects afresh. The fleet's loop and
    ``nodes --serving`` both sample this way."""
    from remote.models import utc_now

    try:
        return await asyncio.wait_for(sampler.sample(), timeout_s)
    except TimeoutError:
        sampler.close()
        return ServingSample("unreachable", model=model, reason=f"no answer within {timeout_s:g} s",
                             sampled_at=(now or utc_now)())


async def sample_nodes(samplers: Iterable[ServingSampler], timeout_s: float = SAMPLE_TIMEOUT_S,
                       ) -> list[ServingSample]:
    """One sample of each sampler at once (each bounded by ``timeout_s``), in their order; every
    sampler is closed after."""
    samplers = list(samplers)
    try:
        return list(await asyncio.gather(*(sample_within(s, timeout_s) for s in samplers)))
    finally:
        for sampler in samplers:
            await sampler.aclose()


class SamplingQueue:
    """Which READY nodes the fleet samples next: at most ``limit`` at once, the rows on screen first,
    and no node more often than every ``period_s`` (its last sample's start to the next one's).

    The fleet tells it the READY nodes after each refresh (:meth:`set_nodes`) and the rows on screen
    as they scroll (:meth:`set_visible`); :meth:`take` hands out the keys to start now and marks
    them running until :meth:`finished`. Order among due nodes: visible ones in screen order, then
    nodes never sampled in the fleet's order, then the longest unsampled.

    Args:
        limit: samples running at once (:data:`SAMPLE_CONCURRENCY`).
        period_s: seconds between two samples of one node (:data:`SAMPLE_INTERVAL_S`).
        clock: monotonic seconds (tests pass one they step).
    """

    def __init__(self, limit: int = SAMPLE_CONCURRENCY, period_s: float = SAMPLE_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = max(1, limit)
        self.period_s = period_s
        self._clock = clock
        self._nodes: dict[str, None] = {}           # READY node keys, in the fleet's order
        self._fresh: dict[str, None] = {}           # READY nodes never sampled, in the fleet's order
        self._visible: tuple[str, ...] = ()
        self._started: dict[str, float] = {}        # key -> when its last sample started, oldest first
        self.running: set[str] = set()

    def set_nodes(self, keys: Iterable[str]) -> None:
        """The READY nodes now (their order is the order never-sampled nodes are taken in); a node
        no longer READY is forgotten (a sample of it still running stays counted until finished)."""
        self._nodes = dict.fromkeys(keys)
        self._started = {k: t for k, t in self._started.items() if k in self._nodes}
        self._fresh = {k: None for k in self._nodes if k not in self._started}

    def set_visible(self, keys: Sequence[str]) -> None:
        """The node rows on screen, top to bottom (keys that are not READY nodes are ignored)."""
        self._visible = tuple(keys)

    def take(self) -> list[str]:
        """The keys to sample now (at most ``limit`` minus the running ones), marked running.

        Costs the visible rows plus the keys taken (the started ones are kept oldest first)."""
        free = self.limit - len(self.running)
        if free <= 0:
            return []
        now = self._clock()
        due_by = now - self.period_s
        chosen: dict[str, None] = {}
        for key in self._visible:
            if len(chosen) == free:
                break
            started = self._started.get(key)
            if key in self._nodes and key not in self.running and (started is None or started <= due_by):
                chosen[key] = None
        for key in self._fresh:
            if len(chosen) == free:
                break
            if key not in self.running:
                chosen.setdefault(key, None)
        for key, started in self._started.items():
            if len(chosen) == free or started > due_by:
                break
            if key not in self.running:
                chosen.setdefault(key, None)
        for key in chosen:
            self._fresh.pop(key, None)
            self._started.pop(key, None)
            self._started[key] = now
            self.running.add(key)
        return list(chosen)

    def finished(self, key: str) -> None:
        """The sample of ``key`` is over (whatever it said)."""
        self.running.discard(key)


def _count(value: float | None) -> int | None:
    return None if value is None else int(value)
