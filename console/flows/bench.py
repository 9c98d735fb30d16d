"""The benchmark steps shared by the ``bench`` verb and the benchmark screen.

Both parse the same parameters (with the same reasons for bad input), reach a node the
same way (SSH to worker 0, forward the config's ``container.port`` to a local port), run
the same ``remote.bench`` functions, price the figures from the config's price table and
record them in the history against the node's current launch. Nothing here prints,
prompts or imports Textual: the callers do that (tables are in :mod:`console.render.bench_tables`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from console.flows.history_access import HistoryAccess, LaunchHistory
from console.render.format import count
from remote.models import Node, chip_generation
from store.errors import StoreError

if TYPE_CHECKING:
    import asyncssh

    from console.config import Config
    from console.flows.ssh_login import LoginResolver
    from console.services import FleetLister
    from remote.bench.longctx import LongCtxResult
    from remote.bench.smoke import SmokeResult
    from remote.bench.throughput import ThroughputResult
    from remote.ssh import SshTarget

    #: One benchmark result of any kind.
    BenchResult = SmokeResult | ThroughputResult | LongCtxResult

KINDS = ("smoke", "throughput", "longctx")

#: ``(target, fingerprint) -> accept?``: asked when a node presents an unknown SSH host key.
HostKeyQuestion = Callable[[Any, str], Awaitable[bool]]


# --- parameters -------------------------------------------------------------------------------


def parse_streams(text: str) -> tuple[int, ...]:
    """``"1,16,64"`` -> ``(1, 16, 64)``: concurrency levels of a sweep.

    Raises:
        ValueError: not comma-separated positive integers (the message says why).
    """
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise ValueError("give one or more concurrency levels, e.g. 1,16,64")
    if min(values) < 1:
        raise ValueError(f"expected positive integers, got {text!r}")
    return values


def parse_depths(text: str) -> tuple[float, ...]:
    """``"0.1,0.5,0.9"`` -> depths of the passphrase, each a fraction of the filler.

    Raises:
        ValueError: not comma-separated numbers within 0.0-1.0.
    """
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"expected comma-separated fractions, got {text!r}") from None
    if not values:
        raise ValueError("give one or more depths, e.g. 0.1,0.5,0.9")
    if not all(0.0 <= v <= 1.0 for v in values):
        raise ValueError(f"depths must be fractions within 0.0-1.0, got {text!r}")
    return values


def parse_positive(text: str, kind: type = int) -> Any:
    """``text`` as a positive ``int`` (or ``float``).

    Raises:
        ValueError: not a number, or not above zero.
    """
    if not text.strip():
        raise ValueError("required")
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"expected a {'whole ' if kind is int else ''}number, got {text!r}") from None
    if value <= 0:
        raise ValueError(f"expected a positive number, got {text!r}")
    return value


@dataclass(frozen=True)
class BenchParams:
    """What to run.

    Attributes:
        kind: one of :data:`KINDS`.
        streams: concurrency levels (throughput sweep).
        prompt_tokens, output_tokens: lengths per throughput request (tokens).
        requests: requests per level, or ``None`` (duration, else ``default_requests``).
        duration_s: seconds per level, or ``None``.
        depths: passphrase depths (longctx), fractions 0.0-1.0.
        context_tokens: longctx filler length (tokens).
        over_limit: longctx adds a probe just over the server's max-model-len.
        model: model name, or ``None`` for the first of ``/v1/models``.
    """

    kind: str
    streams: tuple[int, ...] = (1,)
    prompt_tokens: int = 512
    output_tokens: int = 128
    requests: int | None = None
    duration_s: float | None = None
    depths: tuple[float, ...] = (0.1, 0.5, 0.9)
    context_tokens: int = 16000
    over_limit: bool = False
    model: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.requests is not None and self.duration_s is not None:
            raise ValueError("give either a request count or a duration, not both")

    def to_json(self, concurrency: int | None = None) -> dict[str, Any]:
        """The parameters of this kind for the history (``concurrency``: the sweep level recorded)."""
        out: dict[str, Any] = {"kind": self.kind, "model": self.model}
        if self.kind == "throughput":
            out.update(streams=list(self.streams), concurrency=concurrency, prompt_tokens=self.prompt_tokens,
                       output_tokens=self.output_tokens, requests=self.requests, duration_s=self.duration_s)
        elif self.kind == "longctx":
            out.update(depths=list(self.depths), context_tokens=self.context_tokens, over_limit=self.over_limit)
        return out


# --- cost -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pricing:
    """The price a benchmark's $/Mtok is computed with.

    Attributes:
        price_per_chip_hour_usd: $ per chip-hour, or ``None`` when unknown.
        chips: chips billed, or ``None``.
        generation: chip generation the price was looked up for (``v5e``), or ``None``.
        provisioning_model: ``on-demand``, ``spot``, ``flex-start``..., or ``None``.
    """

    price_per_chip_hour_usd: float | None
    chips: int | None
    generation: str | None = None
    provisioning_model: str | None = None

    @property
    def price_per_hour_usd(self) -> float | None:
        """$ per hour of the whole node (chip price x chips), or ``None``."""
        if self.price_per_chip_hour_usd is None or not self.chips:
            return None
        return self.price_per_chip_hour_usd * self.chips

    def usd_per_mtok(self, output_tokens_per_s: float) -> float | None:
        """$ per million output tokens at that rate; ``None`` without a price or tokens."""
        from remote.bench import usd_per_mtok

        if self.price_per_chip_hour_usd is None or not self.chips or output_tokens_per_s <= 0:
            return None
        return usd_per_mtok(self.price_per_chip_hour_usd, self.chips, output_tokens_per_s)

    def describe(self) -> str:
        """e.g. ``$1.20 per chip-hour x 4 chips = $4.80/h (v5e, on-demand)``."""
        if self.price_per_hour_usd is None:
            what = " ".join(x for x in (self.generation, self.provisioning_model) if x) or "this node"
            return f"no price for {what} in the config's [prices]"
        where = ", ".join(x for x in (self.generation, self.provisioning_model) if x)
        return (f"${self.price_per_chip_hour_usd:.2f} per chip-hour x {count(self.chips or 0, 'chip')} = "
                f"${self.price_per_hour_usd:.2f}/h" + (f" ({where})" if where else ""))


def pricing_for(node: Node, prices: Mapping[str, Mapping[str, float]], *,
                provisioning_model: str | None = None) -> Pricing:
    """The node's price from a ``prices[generation][provisioning_model]`` table ($ per chip-hour).

    Args:
        node: its accelerator type gives the generation and chip count.
        prices: the config's price table.
        provisioning_model: price as this model instead of the node's own.
    """
    generation = chip_generation(node.accelerator_type)
    model = provisioning_model or node.provisioning_model
    return Pricing(prices.get(generation or "", {}).get(model), node.chips, generation, model)


# --- reaching the node -----------------------------------------------------------------------


@dataclass(frozen=True)
class Tunnel:
    """An open SSH forward to a node's vLLM server.

    Attributes:
        node: the node.
        base_url: ``http://127.0.0.1:<local port>``.
        conn: the SSH connection (for ``docker inspect``).
    """

    node: Node
    base_url: str
    conn: asyncssh.SSHClientConnection


@asynccontextmanager
async def open_tunnel(node: Node, target: SshTarget, vllm_port: int, *,
                      accept_new_host_key: HostKeyQuestion | None = None) -> AsyncIterator[Tunnel]:
    """SSH to ``target`` (worker 0 of ``node``) and forward ``vllm_port`` there to a free local port.

    Args:
        node: the node.
        target: its :class:`remote.ssh.SshTarget`, from :mod:`console.flows.ssh_target` (the
            one resolution every connection uses, so the same known-hosts verdict).
        vllm_port: vLLM's port on the node (the config's ``container.port``).
        accept_new_host_key: asked with ``(target, fingerprint)`` for an unknown host key;
            ``None`` refuses unknown keys.

    Raises:
        SshFailure: connecting or forwarding failed (one sentence).
    """
    from remote.ssh import connect, forward_port

    ask = None
    if accept_new_host_key is not None:
        async def ask(fingerprint: str) -> bool:
            return await accept_new_host_key(target, fingerprint)
    conn = await connect(target, accept_new_host_key=ask)
    try:
        listener, local_port = await forward_port(conn, vllm_port)
        try:
            yield Tunnel(node, f"http://127.0.0.1:{local_port}", conn)
        finally:
            listener.close()
    finally:
        conn.close()


def container_api_key(inspect: dict[str, Any] | None) -> str | None:
    """The ``--api-key`` a container's vLLM was started with (``docker inspect`` JSON), else its
    ``VLLM_API_KEY`` env, else ``None``. The key is only sent to that server, never recorded."""
    if not inspect:
        return None
    config = inspect.get("Config") or {}
    argv = [str(a) for a in (config.get("Entrypoint") or []) + (config.get("Cmd") or [])]
    for i, arg in enumerate(argv):
        if arg == "--api-key" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--api-key="):
            return arg.split("=", 1)[1]
    for item in config.get("Env") or []:
        name, _, value = str(item).partition("=")
        if name == "VLLM_API_KEY" and value:
            return value
    return None


def container_tool_calling(inspect: dict[str, Any] | None) -> bool | None:
    """Whether a container's vLLM was started with tool calling (``--enable-auto-tool-choice``
    and ``--tool-call-parser``, see :func:`remote.bench.smoke.tool_calling_enabled`) from its
    ``docker inspect`` JSON; ``None`` without one."""
    from remote.bench.smoke import tool_calling_enabled

    if not inspect:
        return None
    config = inspect.get("Config") or {}
    return tool_calling_enabled([str(a) for a in (config.get("Entrypoint") or []) + (config.get("Cmd") or [])])


@dataclass(frozen=True)
class ServerFlags:
    """What a benchmark needs from how the node's vLLM was started.

    Attributes:
        api_key: the key to send (never recorded), or ``None``.
        tool_calling: started with tool calling; ``None`` when unknown (no container read).
    """

    api_key: str | None = None
    tool_calling: bool | None = None


async def server_flags_for(conn: asyncssh.SSHClientConnection | None, container: str, *, given: str | None = None, label: str = "") -> ServerFlags:
    """The key a benchmark sends (``given`` (``--api-key``), else the operator's ``VLLM_API_KEY``,
    else the running container's, :func:`container_api_key`) and whether the container has tool
    calling (:func:`container_tool_calling`), from one ``docker inspect`` over ``conn``; an
    unreadable container (or ``conn`` ``None``) means no key of its own and ``tool_calling`` unknown.
    """
    import os

    given = given or os.environ.get("VLLM_API_KEY") or None
    if conn is None:
        return ServerFlags(given)
    from remote.container.docker import docker_inspect
    from remote.errors import RemoteError

    try:
        inspect = await docker_inspect(conn, container, label=label)
    except RemoteError:
        return ServerFlags(given)
    return ServerFlags(given or container_api_key(inspect), container_tool_calling(inspect))


async def api_key_for(conn: asyncssh.SSHClientConnection | None, container: str, *, given: str | None = None, label: str = "") -> str | None:
    """The key a benchmark sends: :func:`server_flags_for`'s ``api_key``."""
    return (await server_flags_for(conn, container, given=given, label=label)).api_key


async def current_launch_id(store: LaunchHistory, node: Node, conn: asyncssh.SSHClientConnection | None,
                            container: str) -> int | None:
    """The history launch the benchmark measures, or ``None``.

    The launch with the running container's id (``docker inspect`` over ``conn``); a running
    container the history has not seen becomes a new ``observed`` launch; without a container
    id, the newest launch of the node, else ``None``.
    """
    if store is None:
        return None
    from remote.errors import RemoteError

    container_id = None
    if conn is not None:
        from remote.container.docker import docker_inspect

        try:
            inspect = await docker_inspect(conn, container, label=f"node {node.name}")
        except RemoteError:
            inspect = None
        container_id = str((inspect or {}).get("Id") or "") or None
    if container_id:
        launch = store.find_launch_by_container(node.name, container_id)
        if launch is not None:
            return int(launch.id)
        # A container the history has not seen (started elsewhere): record it as an observed
        # launch, so the benchmark is listed with what it measured.
        from console.flows.launch_recorder import LaunchRecorder
        from remote.container.spec import ContainerSpec, container_start_time

        try:
            spec = ContainerSpec.from_inspect(inspect or {})
        except (ValueError, KeyError, TypeError):
            spec = None
        observed = LaunchRecorder(store, node).observe_container(
            container_id, spec, requested_at=container_start_time(inspect))
        if observed is not None:
            return observed
    newest = store.list_launches(node=node.name, limit=1)
    return int(newest[0].id) if newest else None


# --- running and recording --------------------------------------------------------------------


async def run_benchmark(base_url: str, params: BenchParams, *, on_progress: Callable[[Any], None] | None = None,
                        on_result: Callable[[Any], None] | None = None, api_key: str | None = None,
                        tool_calling: bool | None = None) -> list[Any]:
    """Run ``params`` against ``base_url``; throughput levels run one after the other.

    Args:
        base_url: the vLLM server (``http://127.0.0.1:PORT``).
        params: what to run.
        on_progress: called with each :class:`remote.bench.BenchProgress`.
        on_result: called with each result as soon as it is complete (one per sweep level),
            so a cancelled sweep keeps its finished levels.
        api_key: the server's ``--api-key`` (:func:`server_flags_for`), sent as a Bearer token.
        tool_calling: the server has tool calling (:func:`server_flags_for`); ``False``: the
            smoke test says "not enabled" instead of sending the tool check, ``None``: unknown.

    Returns:
        ``[SmokeResult]``, one ``ThroughputResult`` per level, or ``[LongCtxResult]``.

    Raises:
        VllmHttpError: the server could not be reached. ValueError: arguments the library refuses.
    """
    from remote.bench import run_longctx, run_smoke, run_sweep
    from remote.bench.client import client_scope
    from remote.bench.throughput import REQUEST_TIMEOUT_S

    results: list[Any] = []

    def done(result: Any) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    if params.kind == "smoke":
        done(await run_smoke(base_url, model=params.model, api_key=api_key, tool_calling=tool_calling))
    elif params.kind == "throughput":
        async with client_scope(base_url, None, REQUEST_TIMEOUT_S, connections=max(params.streams),
                                api_key=api_key) as client:
            for level in params.streams:
                (result,) = await run_sweep(
                    base_url, concurrencies=[level], prompt_tokens=params.prompt_tokens,
                    output_tokens=params.output_tokens, requests=params.requests, duration_s=params.duration_s,
                    model=params.model, on_progress=on_progress, client=client)
                done(result)
    else:
        done(await run_longctx(base_url, context_tokens=params.context_tokens, depths=params.depths,
                               model=params.model, on_progress=on_progress, over_limit=params.over_limit,
                               api_key=api_key))
    return results


def every_request_failed(results: Sequence[BenchResult]) -> bool:
    """No request of the run got an answer (the verb's exit 1)."""
    from remote.bench.smoke import SmokeResult
    from remote.bench.throughput import ThroughputResult

    def failed(r: BenchResult) -> bool:
        if isinstance(r, SmokeResult):
            return not r.ok
        if isinstance(r, ThroughputResult):
            return r.metrics.completed == 0
        return all(p.error is not None for p in r.probes)
    return bool(results) and all(failed(r) for r in results)


def result_json(result: BenchResult, pricing: Pricing) -> dict[str, Any]:
    """``remote.bench.to_json(result)``; throughput gains the price used and ``usd_per_mtok``."""
    from remote.bench import to_json
    from remote.bench.throughput import ThroughputResult

    out = to_json(result)
    if isinstance(result, ThroughputResult):
        out["price_per_chip_hour_usd"], out["chips"] = pricing.price_per_chip_hour_usd, pricing.chips
        out["usd_per_mtok"] = pricing.usd_per_mtok(result.metrics.output_throughput)
    return out


def record_result(store: LaunchHistory | None, launch_id: int | None, node: Node | None, params: BenchParams,
                  result: BenchResult,
                  pricing: Pricing) -> int | None:
    """Add one history row for ``result`` (one per sweep level); its id, or ``None`` without a store.

    Raises:
        StoreError / sqlite3.Error: the database could not be written.
    """
    if store is None:
        return None
    concurrency = getattr(result, "concurrency", None)
    extra = ({"node": node.name, "accelerator_type": node.accelerator_type,
              "provisioning_model": node.provisioning_model} if node is not None else {})
    results = result_json(result, pricing)
    return int(store.add_benchmark(launch_id, params.kind, {**params.to_json(concurrency), **extra}, results,
                                   pricing.price_per_hour_usd, results.get("usd_per_mtok")))


# --- the use case ------------------------------------------------------------------------------


@dataclass
class BenchCase:
    """One benchmark of a node's vLLM server: the use case behind ``tpu-console bench NODE`` and the
    benchmark view (``b``).

    It reaches the node the one way every connection does (:func:`console.flows.ssh_target.resolve_target`,
    then :func:`open_tunnel`), finds the launch the results belong to (:func:`current_launch_id`), reads
    the server's flags (API key, tool calling) from its container, runs :func:`run_benchmark` and records
    each result as it completes (a cancelled sweep keeps its finished levels). A history that cannot be
    opened or written is one sentence (``history.problem``) and the benchmark goes on.

    Args:
        node: the READY node.
        config: the console's config (``container``, ``ssh``).
        params: what to run.
        pricing: the $ per chip-hour used for $/Mtok (:func:`pricing_for`).
        history: the history (:class:`~console.flows.history_access.HistoryAccess`).
        fleet: the TPU API (the workers' published host keys), or ``None``.
        worker: the worker whose server is used (0: where vLLM serves).
        api_key: ``--api-key`` given by the operator, else read from the container.
        logins: the resolver of the SSH user (the console's ``Services.logins``), or ``None``: one for
            this run.
    """

    node: Node
    config: Config
    params: BenchParams
    pricing: Pricing
    history: HistoryAccess
    fleet: FleetLister | None = None
    worker: int = 0
    api_key: str | None = None
    recorded: list[int] = field(default_factory=list)
    logins: LoginResolver | None = None

    async def run(self, *, accept_new_host_key: HostKeyQuestion | None = None,
                  on_status: Callable[[str], None] | None = None,
                  on_progress: Callable[[Any], None] | None = None,
                  on_result: Callable[[BenchResult, int | None], None] | None = None) -> list[BenchResult]:
        """Connect, run and record; returns the results (one per sweep level).

        Args:
            accept_new_host_key: asked with ``(target, fingerprint)`` for an unknown host key.
            on_status: a sentence at each stage ("Connecting to ... over SSH…").
            on_progress: each :class:`remote.bench.BenchProgress`.
            on_result: each result as it completes, with its history row id (``None``: not recorded).

        Raises:
            RemoteError: SSH, the forward or the server failed. ValueError: arguments the library refuses.
        """
        from console.flows.ssh_target import resolve_target

        say = on_status or (lambda _sentence: None)
        say(f"Connecting to {self.node.name} over SSH…")
        target = await resolve_target(self.node, self.config, self.worker, self.fleet, logins=self.logins)
        container = self.config.container
        async with open_tunnel(self.node, target, container.port, accept_new_host_key=accept_new_host_key) as tunnel:
            launch_id = await self._launch_id(tunnel.conn)
            flags = await server_flags_for(tunnel.conn, container.name, given=self.api_key, label=target.label)
            say(f"Running {self.params.kind} through {tunnel.base_url} (→ port {container.port} on the node)…")

            def done(result: BenchResult) -> None:
                row = self._record(launch_id, result)
                if on_result is not None:
                    on_result(result, row)

            return await run_benchmark(tunnel.base_url, self.params, on_progress=on_progress, on_result=done,
                                       api_key=flags.api_key, tool_calling=flags.tool_calling)

    async def _launch_id(self, conn: asyncssh.SSHClientConnection) -> int | None:
        store = self.history.get()
        if store is None:
            return None
        try:
            return await current_launch_id(store, self.node, conn, self.config.container.name)
        except StoreError as exc:
            self.history.failed(exc)
            return None

    def _record(self, launch_id: int | None, result: BenchResult) -> int | None:
        store = self.history.get()
        if store is None:
            return None
        try:
            row = record_result(store, launch_id, self.node, self.params, result, self.pricing)
        except StoreError as exc:       # the figures are kept; the history says why not
            self.history.failed(exc)
            return None
        if row is not None:
            self.recorded.append(row)
        return row
