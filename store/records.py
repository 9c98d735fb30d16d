"""What the history holds: launches and benchmarks as frozen dataclasses, plus compile keys.

No I/O here. Times are ISO 8601 UTC strings (``2026-05-01T12:00:00Z``) exactly as stored;
durations are seconds (``_s``/``_seconds``), memory is GiB (``_gib``), sizes are tokens.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from remote.secrets import scrub_value

#: A launch's outcome: ``running`` while it boots, then ready/failed; ``interrupted`` when
#: the console that watched it died before the end; ``unwatched`` when a verb (swap, rollback,
#: request --image) started the container and exited without following its boot (a later
#: ``watch`` completes it); ``replaced`` after a swap replaced it.
OUTCOMES = ("running", "ready", "failed", "interrupted", "unwatched", "replaced")
#: Who started the container: this console, or someone else (noticed by a new container id).
ORIGINS = ("console", "observed")
#: Benchmark kinds (see the benchmarks issue).
BENCHMARK_KINDS = ("smoke", "throughput", "longctx")

#: ``vllm serve`` flags that change the XLA compilation, hence the compile cache key.
COMPILE_FLAGS = (
    "max-model-len", "max-num-batched-tokens", "tensor-parallel-size",
    "kv-cache-dtype", "quantization", "max-num-seqs",
)
#: Flags that do not change whether or how a launch boots; ignored by :func:`behaviour_flags`.
IRRELEVANT_FLAGS = frozenset({
    "host", "port", "served-model-name", "api-key", "disable-log-requests", "disable-log-stats",
    "uvicorn-log-level", "enable-log-requests", "hf-token",
})


def parse_flags(serve_args: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Normalize ``vllm serve`` arguments to ``{flag: value}``.

    ``--max_model_len=4096``, ``--max-model-len 4096`` both give ``{"max-model-len": "4096"}``;
    a flag without a value maps to ``"true"``; ``--no-x`` maps ``x`` to ``"false"``. Positional
    arguments (``vllm``, ``serve``, the model) are skipped. A repeated flag keeps its last value.

    Args:
        serve_args: arguments as given to the container (with or without ``vllm serve MODEL``).

    Returns:
        Flag names without dashes (``_`` turned into ``-``) mapped to their string values.
    """
    flags: dict[str, str] = {}
    args = [str(a) for a in serve_args]
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("--"):
            continue
        name, eq, value = arg[2:].partition("=")
        name = name.replace("_", "-").lower()
        if not eq:
            if i < len(args) and not args[i].startswith("--"):
                value = args[i]
                i += 1
            elif name.startswith("no-"):
                name, value = name[3:], "false"
            else:
                value = "true"
        flags[name] = value.strip()
    return flags


def behaviour_flags(serve_args: list[str] | tuple[str, ...]) -> dict[str, str]:
    """The flags that can make a launch fail or behave differently (``parse_flags`` minus
    :data:`IRRELEVANT_FLAGS`); used to match a new launch against past failures."""
    return {k: v for k, v in parse_flags(serve_args).items() if k not in IRRELEVANT_FLAGS}


def compile_key(accelerator_type: str, model: str, serve_args: list[str] | tuple[str, ...]) -> str:
    """The key under which compile times are comparable.

    Args:
        accelerator_type: e.g. ``v6e-8`` (chip count matters: it changes sharding).
        model: model id as served, e.g. ``Qwen/Qwen3-8B``.
        serve_args: ``vllm serve`` arguments; only :data:`COMPILE_FLAGS` count, values
            compared case-insensitively, order and ``--a=b``/``--a b`` spelling ignored.

    Returns:
        ``"<accelerator_type>:<16 hex digits>"``, e.g. ``"v6e-8:3f1c9a0b5d2e7f64"``.
    """
    flags = parse_flags(serve_args)
    relevant = {name: flags[name].lower() for name in COMPILE_FLAGS if name in flags}
    payload = json.dumps([accelerator_type, model, relevant], sort_keys=True)
    return f"{accelerator_type}:{hashlib.sha256(payload.encode()).hexdigest()[:16]}"


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except (ValueError, TypeError):
        return None


@dataclass(frozen=True)
class Launch:
    """One container launch on a node, as recorded in the history.

    Attributes:
        id: row id.
        node: node short name.
        project, zone: where the node lives.
        accelerator_type: e.g. ``v6e-8``.
        provisioning_model: ``on-demand``, ``spot``, ``flex-start``...
        origin: ``console`` or ``observed`` (:data:`ORIGINS`).
        container_id, image, image_digest: the container and its image (digest ``sha256:...``).
        model, served_model_name: ``vllm serve`` model and ``--served-model-name``.
        container_spec: ``{image, env (secrets masked), volumes, network, restart_policy, ports}``.
        serve_args: ``vllm serve`` arguments (secrets masked).
        requested_at, started_at, ready_at, failed_at: ISO 8601 UTC strings.
        outcome: one of :data:`OUTCOMES`.
        phase_durations: ``{phase: seconds}`` (e.g. ``{"weights": 41.2, "compile": 380.0}``).
        compile_seconds, engine_init_seconds: XLA compile and engine init time, seconds.
        hbm: per stage ``{"label": str, "used_gib": [per chip], "limit_gib": [per chip]}``.
        kv_cache_tokens: KV cache size in tokens.
        max_concurrency: vLLM's "maximum concurrency for N tokens per request" figure.
        max_model_len: context length in tokens.
        failure_kind, failure_detail: diagnosis when failed (e.g. ``RESOURCE_EXHAUSTED``).
        replaced_launch_id: the launch this one replaced (a swap), or ``None``.
        compile_key: see :func:`compile_key`.
        notes: operator's notes.
        restart_count: docker's ``RestartCount`` when the container restarted in place (its
            row then describes the newest boot), else ``None``.
        ssh_user: the user the console logged in to the node as (e.g. the OS Login POSIX name
            ``alice_example_com``), or ``None`` when not recorded.
        metrics_kv_cache_tokens / metrics_max_concurrency / metrics_engines /
        metrics_gpu_memory_utilization: what the server's ``/metrics`` said once it served (the
            authority after ready; summed over a data-parallel server's engines), else ``None``.
        cluster / namespace / workload / revision: a GKE launch's cluster, namespace, ``deploy/NAME``
            and the Deployment revision it made (``None`` for a TPU VM's launch).
    """

    id: int
    node: str
    requested_at: str
    outcome: str = "running"
    origin: str = "console"
    project: str | None = None
    zone: str | None = None
    accelerator_type: str | None = None
    provisioning_model: str | None = None
    container_id: str | None = None
    image: str | None = None
    image_digest: str | None = None
    model: str | None = None
    served_model_name: str | None = None
    container_spec: dict[str, Any] | None = None
    serve_args: tuple[str, ...] = ()
    started_at: str | None = None
    ready_at: str | None = None
    failed_at: str | None = None
    phase_durations: dict[str, float] = field(default_factory=dict)
    compile_seconds: float | None = None
    engine_init_seconds: float | None = None
    hbm: tuple[dict[str, Any], ...] = ()
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_model_len: int | None = None
    failure_kind: str | None = None
    failure_detail: str | None = None
    replaced_launch_id: int | None = None
    compile_key: str | None = None
    notes: str | None = None
    restart_count: int | None = None
    ssh_user: str | None = None
    metrics_kv_cache_tokens: int | None = None
    metrics_max_concurrency: float | None = None
    metrics_engines: int | None = None
    metrics_gpu_memory_utilization: float | None = None
    cluster: str | None = None
    namespace: str | None = None
    workload: str | None = None
    revision: str | None = None

    @property
    def time_to_ready_s(self) -> float | None:
        """Seconds from the earlier of request and container start to ready, or ``None``.

        An observed launch is recorded when the console first sees it, after its container
        started; its container start is then the better origin.
        """
        starts = [t for t in (self.requested_at, self.started_at) if t]
        return _seconds_between(min(starts) if starts else None, self.ready_at)

    def to_json(self) -> dict[str, Any]:
        """The launch as a JSON-ready dict (the ``history --json`` object, without benchmarks).

        Nested values (``container_spec``, ``hbm`` entries...) are shared, not copied.
        """
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["serve_args"] = list(self.serve_args)
        data["hbm"] = list(self.hbm)
        return data


@dataclass(frozen=True)
class BenchmarkRecord:
    """One benchmark run, as recorded in the history.

    Attributes:
        id: row id.
        launch_id: the launch it measured, or ``None`` (a bare ``--url`` run).
        kind: one of :data:`BENCHMARK_KINDS`.
        started_at: ISO 8601 UTC.
        params: what was asked (streams, prompt/output tokens, depths...).
        results: what was measured (the benchmarks issue defines the keys).
        price_per_hour_usd: $ per hour of the whole node used for the cost figure.
        usd_per_mtok: $ per million output tokens.
        concurrency, output_tokens_per_s, ttft_median_ms, tpot_median_ms: plot scalars
            taken from ``params``/``results`` (``None`` when absent).
    """

    id: int
    launch_id: int | None
    kind: str
    started_at: str
    params: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    price_per_hour_usd: float | None = None
    usd_per_mtok: float | None = None
    concurrency: int | None = None
    output_tokens_per_s: float | None = None
    ttft_median_ms: float | None = None
    tpot_median_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The benchmark as a JSON-ready dict (``params``/``results`` are shared, not copied)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: Launch columns a caller may set (everything but ``id``).
LAUNCH_FIELDS = tuple(f.name for f in fields(Launch) if f.name != "id")
_JSON_FIELDS = frozenset({"container_spec", "serve_args", "phase_durations", "hbm"})
_TIME_FIELDS = frozenset({"requested_at", "started_at", "ready_at", "failed_at"})


def iso_time(value: datetime | str) -> str:
    """Normalize a time to the stored form ``2026-05-01T12:00:00.123Z`` (UTC, milliseconds).

    Naive datetimes (and strings without an offset) are taken as UTC. The fixed width
    makes string order equal time order.

    Raises:
        ValueError: ``value`` is not an ISO 8601 time.
    """
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def benchmark_plot_columns(params: dict[str, Any], results: dict[str, Any]) -> dict[str, Any]:
    """The plot columns of a benchmark row, from its JSON.

    Accepts our keys and ``vllm bench serve``'s: concurrency from ``params.concurrency``/
    ``params.streams`` (else ``results.max_concurrency``), ``output_tokens_per_s``/
    ``output_throughput``, ``ttft_median_ms``/``median_ttft_ms``, ``tpot_median_ms``/``median_tpot_ms``.
    """
    def first(source: dict[str, Any], *keys: str) -> Any:
        return next((source[k] for k in keys if isinstance(source.get(k), (int, float))), None)
    return {
        "concurrency": first(params, "concurrency", "streams") or first(results, "max_concurrency"),
        "output_tokens_per_s": first(results, "output_tokens_per_s", "output_throughput"),
        "ttft_median_ms": first(results, "ttft_median_ms", "median_ttft_ms"),
        "tpot_median_ms": first(results, "tpot_median_ms", "median_tpot_ms"),
    }


def launch_row(values: dict[str, Any]) -> dict[str, Any]:
    """Launch fields as a database row: times normalized (:func:`iso_time`), JSON fields
    encoded, every value scrubbed of secrets (:func:`remote.secrets.scrub_value`).

    Raises:
        ValueError: unknown field, outcome or origin, or a time that is not ISO 8601.
    """
    unknown = sorted(set(values) - set(LAUNCH_FIELDS))
    if unknown:
        raise ValueError(f"unknown launch fields: {', '.join(unknown)}")
    if values.get("outcome", "running") not in OUTCOMES:
        raise ValueError(f"outcome must be one of {OUTCOMES}, got {values['outcome']!r}")
    if values.get("origin", "console") not in ORIGINS:
        raise ValueError(f"origin must be one of {ORIGINS}, got {values['origin']!r}")
    row: dict[str, Any] = {}
    for name, value in values.items():
        if value is not None and name in _TIME_FIELDS:
            value = iso_time(value)
        elif name in _JSON_FIELDS:
            value = None if value is None else json.dumps(scrub_value(value))
        else:
            value = scrub_value(value)
        row[name] = value
    return row


def launch_from_row(row: dict[str, Any]) -> Launch:
    """A :class:`Launch` from a ``launches`` row (JSON fields decoded)."""
    data = dict(row)
    for name in _JSON_FIELDS:
        data[name] = json.loads(data[name]) if data[name] else None
    data["serve_args"] = tuple(data["serve_args"] or ())
    data["hbm"] = tuple(data["hbm"] or ())
    data["phase_durations"] = data["phase_durations"] or {}
    return Launch(**data)


def benchmark_from_row(row: dict[str, Any]) -> BenchmarkRecord:
    """A :class:`BenchmarkRecord` from a ``benchmarks`` row (JSON fields decoded)."""
    data = dict(row)
    data["params"] = json.loads(data["params"]) if data["params"] else {}
    data["results"] = json.loads(data["results"]) if data["results"] else {}
    return BenchmarkRecord(**data)
