"""The hot-swap steps shared by the ``swap`` verb and the swap screen.

Both read the running container the same way, lint with the same facts from the history,
and record the launch the same way; only the presentation differs (plain text vs Textual).
Nothing here prints, prompts or imports Textual: the callers do that. Nothing here talks to
the TPU API either: a swap only touches the container (``remote.container.swap``).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from console.flows.history_access import LaunchHistory
from remote.container.lint import Finding, lint
from remote.container.spec import MASK, ContainerSpec, container_start_time, is_secret_name, repo_digest
from remote.models import Node, utc_now
from store.records import Launch

if TYPE_CHECKING:
    import asyncssh

    from console.config import ContainerConfig

#: The history as the swap steps use it.
StoreLike = LaunchHistory


@dataclass(frozen=True)
class RunningSpec:
    """What runs on the node now, as a swap's starting point.

    Attributes:
        spec: the running container's spec, or the config template when none runs.
        inspect: the container's ``docker inspect`` JSON, or ``None`` (template).
    """

    spec: ContainerSpec
    inspect: dict[str, Any] | None

    @property
    def container_id(self) -> str | None:
        """The running container's id (64 hex), or ``None``."""
        return str(self.inspect.get("Id") or "") or None if self.inspect else None

    @property
    def started_at(self) -> datetime | None:
        """When the running container was started (``Created`` / ``State.StartedAt``), or ``None``."""
        return container_start_time(self.inspect)

    @property
    def running(self) -> ContainerSpec | None:
        """The spec of the container that a swap replaces, or ``None`` when none runs."""
        return self.spec if self.inspect is not None else None


def template_spec(container: ContainerConfig, environ: Mapping[str, str] | None = None) -> ContainerSpec:
    """The config's ``[container]`` template as a spec (no container runs yet).

    Args:
        container: a ``console.config.ContainerConfig`` (``name``, ``image``, ``model``, ``args``, ``env``).
        environ: where ``$VAR`` env values are looked up (default ``os.environ``).

    Raises:
        ValueError: an unset ``$VAR`` or an invalid template value, with the reason.
    """
    return ContainerSpec.from_template(name=container.name, image=container.image, model=container.model,
                                       args=container.args, env=container.env,
                                       environ=os.environ if environ is None else environ)


async def read_running(conn: asyncssh.SSHClientConnection, container: ContainerConfig, *, label: str,
                       environ: Mapping[str, str] | None = None) -> RunningSpec:
    """Read the running container (``docker inspect`` + ``docker image inspect`` for the digest).

    Args:
        conn: an open SSH connection (``remote.ssh.connect``).
        container: the config's ``ContainerConfig`` (its ``name`` is the container looked up;
            the rest is the template used when no container runs).
        label: the node, for messages.
        environ: for the template's ``$VAR`` values.

    Raises:
        ValueError: the container's command is not a vLLM server, or the template is invalid.
        RemoteError: SSH or docker failed (``DockerError``, ``SshFailure``...).
    """
    from remote.container.docker import container_image_inspect, docker_inspect

    inspect = await docker_inspect(conn, container.name, label=label)
    if inspect is None:
        return RunningSpec(template_spec(container, environ), None)
    image = await container_image_inspect(conn, inspect, label=label)
    return RunningSpec(ContainerSpec.from_inspect(inspect, image), inspect)


async def learn_model_limit(conn: asyncssh.SSHClientConnection, current: RunningSpec,
                            store: LaunchHistory | None, *, label: str) -> int | None:
    """Read the running model's maximum length through its container and remember it.

    Reads ``config.json`` from the container's Hugging Face cache
    (:func:`remote.container.model_config.read_model_limits`) and records it in the history
    (``HistoryStore.record_model_limit``) for later swaps and other models' containers.

    Args:
        conn: an open SSH connection to the node.
        current: what runs now (:func:`read_running`); nothing is read without a container.
        store: the history, or ``None``.
        label: the node, for messages.

    Returns:
        The maximum length in tokens, or ``None`` when it could not be read (no container,
        no config in its cache, docker or SSH failed: the lint then goes without it).
    """
    from remote.container.model_config import read_model_limits
    from remote.errors import RemoteError
    from store import StoreError

    spec = current.running
    if spec is None:
        return None
    try:
        limits = await read_model_limits(conn, spec.name, spec.model, spec.env, label=label)
    except RemoteError:
        return None
    if limits is None:
        return None
    if store is not None:
        try:
            store.record_model_limit(spec.model, limits.max_model_len_tokens, limits.source)
        except StoreError:
            pass          # the lint still gets it; the history is best effort
    return limits.max_model_len_tokens


def history_facts(store: LaunchHistory | None, node: Node, spec: ContainerSpec) -> dict[str, Any]:
    """Lint inputs from past launches (keyword arguments of ``remote.container.lint.lint``).

    ``last_kv_cache_tokens``: KV cache tokens at the newest launch on this node that logged it;
    ``predicted_boot_s``: median seconds to ready of launches with this accelerator type and
    model; ``known_failures``: up to 3 failures with the same type, model and flags;
    ``model_max_len``: the model's maximum length the history remembers
    (:func:`learn_model_limit`, or a failed boot's log); ``hbm_failures``: up to 3 boots on this
    accelerator type that failed loading compiled programs (``hbm_oom_after_compile``), as
    ``(when, serve args, failure detail)``. ``{}`` without a store.
    """
    if store is None:
        return {}
    mine = store.list_launches(node=node.name, limit=50)
    kv = next((x.kv_cache_tokens for x in mine if x.kv_cache_tokens), None)
    same = store.list_launches(accelerator_type=node.accelerator_type, model=spec.model, limit=50)
    boots = [x.time_to_ready_s for x in same if x.ready_at and x.time_to_ready_s]
    failures = store.known_failures(node.accelerator_type, spec.model, spec.serve_args())
    limit = store.model_limit(spec.model)
    return {"last_kv_cache_tokens": kv, "predicted_boot_s": statistics.median(boots) if boots else None,
            "known_failures": [(f.failed_at or f.requested_at, f.failure_kind or "failed", f.failure_detail or "")
                               for f in failures[:3]],
            "model_max_len": limit[0] if limit else None,
            "hbm_failures": [(f.failed_at or f.requested_at, f.serve_args, f.failure_detail or "")
                             for f in store.failures_of_kind(node.accelerator_type, "hbm_oom_after_compile")]}


def lint_spec(node: Node, spec: ContainerSpec, running: ContainerSpec | None, facts: Mapping[str, Any],
              now: datetime | None = None) -> list[Finding]:
    """``remote.container.lint.lint`` of ``spec`` about to run on ``node``.

    Args:
        node: the node (accelerator type, flex-start time left at ``now``).
        spec: the spec to lint.
        running: the running spec (its image digest is offered for a floating tag), or ``None``.
        facts: :func:`history_facts`.
        now: the current time (default: now).
    """
    digest = running.image_digest if running and running.image_digest and "@" in running.image_digest else None
    return lint(spec, accelerator_type=node.accelerator_type, time_left_s=node.time_left_s(now),
                running_image_digest=digest, **facts)


def launch_fields(node: Node, spec: ContainerSpec) -> dict[str, Any]:
    """The launch fields a node and a spec give (node, project, zone, type, image, model, spec, args...)."""
    return _launch_fields(node, spec)


def _launch_fields(node: Node, spec: ContainerSpec) -> dict[str, Any]:
    length = spec.serve_flags.get("max-model-len")
    return dict(node=node.name, project=node.project, zone=node.zone, accelerator_type=node.accelerator_type,
                provisioning_model=node.provisioning_model, image=spec.image, model=spec.model,
                served_model_name=spec.serve_flags.get("served-model-name"), container_spec=spec.to_dict(),
                serve_args=spec.serve_args(), max_model_len=int(length) if length and length.isdigit() else None)


def record_attempt(store: LaunchHistory | None, node: Node, spec: ContainerSpec,
                   replaced_container_id: str | None = None, *, replaced_spec: ContainerSpec | None = None,
                   replaced_requested_at: datetime | None = None, ssh_user: str | None = None,
                   extra: Mapping[str, Any] | None = None) -> int | None:
    """Record a launch before the swap's first remote step; returns its id (``None`` without a store).

    The launch is ``running`` from now on (with this process as its writer: a console that dies
    mid-swap leaves it to be marked ``interrupted`` at the next open) and names the launch of the
    container it is to replace (``replaced_launch_id``, found by the container's id). When the
    history does not know that container and ``replaced_spec`` is given, it is recorded first as an
    ``observed`` launch (outcome ``unwatched``: seen running, followed by no one; requested at
    ``replaced_requested_at``; its image digest kept only as ``repo@sha256:...``), so a console
    restarted later can still roll back to it. :func:`record_replaced` marks it ``replaced`` once
    ``docker rm -f`` removed it; :func:`record_outcome` completes the new launch. Secrets are masked
    (``to_dict``). ``ssh_user``: the user the console logged in as. ``extra``: more launch fields (a GKE
    swap's ``cluster``, ``namespace``, ``workload``), in the same insert.
    """
    if store is None:
        return None
    replaced = None
    if replaced_container_id:
        old = store.find_launch_by_container(node.name, replaced_container_id)
        replaced = old.id if old else None
        if old is None and replaced_spec is not None:
            replaced = store.start_launch(**_launch_fields(node, replaced_spec), origin="observed",
                                          outcome="unwatched", container_id=replaced_container_id,
                                          image_digest=replaced_spec.repo_digest,
                                          requested_at=replaced_requested_at or utc_now())
    return store.start_launch(**_launch_fields(node, spec), origin="console", replaced_launch_id=replaced,
                              ssh_user=ssh_user, **dict(extra or {}))


def record_replaced(store: LaunchHistory | None, launch_id: int | None) -> None:
    """``docker rm -f`` removed the old container: the launch ``launch_id`` replaced is ``replaced``
    (when it was running, ready or unwatched; a failed or interrupted one keeps its outcome)."""
    if store is None or launch_id is None:
        return
    launch = store.get_launch(launch_id)
    old = store.get_launch(launch.replaced_launch_id) if launch and launch.replaced_launch_id else None
    if old is not None and old.outcome in ("running", "ready", "unwatched"):
        store.update_launch(old.id, outcome="replaced")


def record_outcome(store: LaunchHistory | None, launch_id: int | None, *, ok: bool, container_id: str | None = None,
                   image_digest: str | None = None, failure_detail: str | None = None,
                   failure_kind: str = "docker run failed", unwatched: bool = False) -> None:
    """Complete the launch recorded by :func:`record_attempt`: started, or failed with the reason.

    ``unwatched``: the caller exits without following the boot, so a started launch ends
    ``unwatched`` (what was seen: the container started) rather than ``running``.
    ``failure_kind``: ``docker pull failed``, ``docker rm failed``, ``docker run failed``.
    """
    if store is None or launch_id is None:
        return
    if ok:
        fields = {"started_at": utc_now(), "container_id": container_id, "image_digest": repo_digest(image_digest),
                  "outcome": "unwatched" if unwatched else None}
    else:
        fields = {"outcome": "failed", "failed_at": utc_now(), "failure_kind": failure_kind,
                  "failure_detail": failure_detail}
    store.update_launch(launch_id, **{k: v for k, v in fields.items() if v is not None})


def record_interrupted(store: LaunchHistory | None, launch_id: int | None, where: str) -> None:
    """The console quit while the swap ran: the launch is ``interrupted``, ``where`` says at which step."""
    if store is None or launch_id is None:
        return
    store.update_launch(launch_id, outcome="interrupted", failed_at=utc_now(), failure_kind="interrupted",
                        failure_detail=where)


# ---- rollback from the history (after a restart of the console) ---------------------------


def spec_from_launch(launch: Launch, current: ContainerSpec | None) -> ContainerSpec:
    """Rebuild the spec of a recorded launch (``Launch.container_spec`` + ``serve_args``).

    The history keeps secrets masked; a masked env value is taken from ``current`` (the
    running spec, same name) when it has one, else stays ``***`` for the operator to type.

    Raises:
        ValueError: the launch has no container spec, or it does not make a valid spec.
    """
    from remote.container.parse import parse_serve_args

    data = launch.container_spec
    if not isinstance(data, dict) or not data.get("image"):
        raise ValueError(f"launch {launch.id} recorded no container spec")
    known = current.env if current else {}
    env = {k: (known.get(k, v) if v == MASK and is_secret_name(k) else v) for k, v in (data.get("env") or {}).items()}
    serve = parse_serve_args(list(launch.serve_args or ()))
    spec = ContainerSpec(
        name=data.get("name") or (current.name if current else "vllm"), image=data["image"],
        model=serve.model or data.get("model") or launch.model or "", image_digest=data.get("image_digest"),
        env=env, volumes=tuple(data.get("volumes") or ()), ports=tuple(data.get("ports") or ()),
        network=data.get("network") or "host", privileged=bool(data.get("privileged", True)),
        shm_size=data.get("shm_size"), serve_flags=serve.flags, extra_args=serve.extra)
    if data.get("launcher"):
        spec = replace(spec, launcher=tuple(data["launcher"]),
                       launcher_in_entrypoint=bool(data.get("launcher_in_entrypoint")))
    spec.validate()
    return spec


def previous_from_history(store: LaunchHistory | None, node: Node,
                          current: RunningSpec) -> tuple[ContainerSpec, Launch] | None:
    """The spec to roll back to from the history: ``(spec, launch)`` or ``None``.

    The launch the running container replaced (``replaced_launch_id``), else the newest
    launch on this node with a different container and a recorded spec.
    """
    if store is None:
        return None
    launches = store.list_launches(node=node.name, limit=50)
    cid = current.container_id
    mine = store.find_launch_by_container(node.name, cid) if cid else None
    candidates = []
    if mine is not None and mine.replaced_launch_id:
        candidates.append(store.get_launch(mine.replaced_launch_id))
    candidates += [x for x in launches if (mine is None or x.id < mine.id) and x.container_spec
                   and (not cid or not x.container_id or not cid.startswith(x.container_id[:12]))]
    for launch in candidates:
        if launch is None or not launch.container_spec:
            continue
        try:
            return spec_from_launch(launch, current.running), launch
        except ValueError:
            continue
    return None


__all__ = [
    "RunningSpec", "StoreLike", "history_facts", "learn_model_limit", "lint_spec", "previous_from_history",
    "read_running", "record_attempt", "record_interrupted", "record_outcome", "record_replaced", "spec_from_launch",
    "template_spec",
]
