"""Record what a startup watch learns into the history, as it learns it.

The startup view and ``tpu-console watch`` both call :meth:`LaunchRecorder.observe_container`
when the tail finds a container (after :func:`console.flows.startup_watch.read_followed`)
and :meth:`LaunchRecorder.record` as the log moves on; only changed fields are written (one
small transaction each). Whoever sees the end of a boot writes it: a launch left ``running``
or ``interrupted`` by a process that is gone (a closed console), or ``unwatched`` by a verb
that exited after ``docker run`` (swap, rollback, request --image), is claimed by the next watch of its container, which completes it with ``ready`` or ``failed``.
Secrets never go in: the serve arguments and the container spec come masked from
:class:`remote.container.spec.ContainerSpec`, and the store scrubs every value again.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from console.flows.history_access import LaunchHistory
from remote.container.spec import ContainerSpec, repo_digest
from remote.models import Node, utc_now
from remote.startup import Phase, PhaseMark, StartupState
from store.errors import StoreError

_T = TypeVar("_T")


def phase_durations(timeline: tuple[PhaseMark, ...]) -> dict[str, float]:
    """Seconds spent in each phase (summed when tpu-inference revisits one), from the stamped marks.

    A phase counts only when it and the next mark both carry a time; the current phase
    (no next mark yet) is left out.
    """
    out: dict[str, float] = {}
    for mark, following in zip(timeline, timeline[1:]):
        if mark.started_at is None or following.started_at is None:
            continue
        seconds = (following.started_at - mark.started_at).total_seconds()
        out[mark.phase.value] = round(out.get(mark.phase.value, 0.0) + max(0.0, seconds), 3)
    return out


def hbm_record(state: StartupState) -> list[dict[str, Any]]:
    """The history's ``hbm`` list: one ``{stage, label, used_gib, limit_gib}`` per snapshot (GiB per chip)."""
    return [{"stage": s.stage, "label": s.label, "used_gib": list(s.used_gib), "limit_gib": list(s.limit_gib)}
            for s in state.hbm_snapshots]


def _mark_time(state: StartupState, phase: Phase) -> datetime | None:
    for mark in reversed(state.timeline):
        if mark.phase is phase:
            return mark.started_at
    return None


class LaunchRecorder:
    """Writes one node's launches (one per container id) into a ``store.HistoryStore``.

    Args:
        store: the history store, or ``None`` (then nothing is recorded).
        node: the node (``name``, ``project``, ``zone``, ``accelerator_type``, ``provisioning_model``).
        clock: current UTC time, used when the log gives no time for ready/failed.
        ssh_user: the user the connection logged in as, recorded with each launch (``None``: not known).

    Attributes:
        launch_id: the launch being written, once a container is known.
        error: a sentence when the store refused a write (recording then stops), else ``None``.
    """

    def __init__(self, store: LaunchHistory | None, node: Node, *, clock: Callable[[], datetime] = utc_now,
                 ssh_user: str | None = None) -> None:
        self.store = store
        self.ssh_user = ssh_user
        self.node = node
        self.clock = clock
        self.launch_id: int | None = None
        self.container_id: str | None = None
        self.error: str | None = None
        self._written: dict[str, Any] = {}
        self.model: str | None = None
        self._limit_recorded = False
        self._restart_count: int | None = None
        #: Container id -> the state its launch should get once that launch is known (records that
        #: arrived before the container's inspect finished).
        self._early: dict[str, StartupState] = {}
        #: Container id -> (final state, detail) of a replaced container whose launch was not known
        #: yet when the replacement appeared: closed when its inspect finishes.
        self._pending_close: dict[str, tuple[StartupState, str]] = {}

    @property
    def _db(self) -> LaunchHistory:
        """The store, inside a write that :meth:`_guard` runs (never ``None`` there)."""
        if self.store is None:
            raise StoreError("no history")
        return self.store

    def _guard(self, write: Callable[[], _T]) -> _T | None:
        if self.store is None or self.error is not None:
            return None
        try:
            return write()
        except StoreError as exc:     # a sentence for the status line, never a traceback
            self.error = f"the history database refused a write, so this launch is not recorded: {exc}"
            return None

    def observe_container(self, container_id: str, spec: ContainerSpec | None = None, *,
                          requested_at: datetime | None = None) -> int | None:
        """Start following ``container_id``: its existing launch, or a new ``observed`` one.

        An existing launch still ``running``, ``unwatched`` or ``interrupted`` (its end not seen yet) is
        claimed: it becomes ``running`` again with this process as its writer, and its
        missing image digest is filled in. Finished launches are left as they are.

        Args:
            container_id: full docker id.
            spec: its :class:`~remote.container.spec.ContainerSpec` (from ``docker inspect``), or ``None``.
            requested_at: when the container was asked to run (``docker inspect`` ``Created`` /
                ``State.StartedAt``), the requested time of a new observed launch; default now.

        Returns:
            The launch id, or ``None`` without a store.
        """
        if container_id in self._pending_close:      # replaced before its inspect finished
            return self._close_late(container_id, spec, requested_at)
        if container_id == self.container_id and self.launch_id is not None:
            return self.launch_id
        if self.container_id is not None and self.container_id != container_id:   # another container
            self._restart_count = None
        self.container_id = container_id
        self.model = spec.model if spec is not None else None
        self._limit_recorded = False
        self._written = {}
        self.launch_id = None
        store = self._db

        def write() -> int:
            found = store.find_launch_by_container(self.node.name, container_id)
            if found is not None:
                if found.outcome in ("running", "interrupted", "unwatched"):
                    claim: dict[str, Any] = {"outcome": "running"}
                    if not found.image_digest and spec is not None and spec.repo_digest:
                        claim["image_digest"] = spec.repo_digest
                    if not found.ssh_user and self.ssh_user:
                        claim["ssh_user"] = self.ssh_user
                    store.update_launch(found.id, **claim)
                return int(found.id)
            fields: dict[str, Any] = dict(
                node=self.node.name, project=self.node.project, zone=self.node.zone,
                accelerator_type=self.node.accelerator_type, provisioning_model=self.node.provisioning_model,
                origin="observed", container_id=container_id, ssh_user=self.ssh_user)
            if requested_at is not None:
                fields["requested_at"] = requested_at
            if spec is not None:
                fields.update(image=spec.image, image_digest=repo_digest(spec.image_digest), model=spec.model,
                              served_model_name=spec.serve_flags.get("served-model-name"),
                              container_spec=spec.to_dict(), serve_args=spec.serve_args())
                if spec.flag("max-model-len"):
                    fields["max_model_len"] = int(str(spec.flag("max-model-len")))
            launch_id: int = store.start_launch(**fields)
            return launch_id

        self.launch_id = self._guard(write)
        early = self._early.pop(container_id, None)
        if early is not None:
            self.record(early, container_id)
        return self.launch_id

    def _find_or_start(self, container_id: str, spec: ContainerSpec | None, requested_at: datetime | None) -> int | None:
        """The launch of ``container_id`` (found, or a new observed one), without following it."""
        store = self._db

        def write() -> int:
            found = store.find_launch_by_container(self.node.name, container_id)
            if found is not None:
                return int(found.id)
            fields: dict[str, Any] = dict(
                node=self.node.name, project=self.node.project, zone=self.node.zone,
                accelerator_type=self.node.accelerator_type, provisioning_model=self.node.provisioning_model,
                origin="observed", container_id=container_id)
            if requested_at is not None:
                fields["requested_at"] = requested_at
            if spec is not None:
                fields.update(image=spec.image, image_digest=repo_digest(spec.image_digest), model=spec.model,
                              container_spec=spec.to_dict(), serve_args=spec.serve_args())
            return int(store.start_launch(**fields))

        return self._guard(write)

    def _close_late(self, container_id: str, spec: ContainerSpec | None, requested_at: datetime | None) -> int | None:
        """The inspect of a container replaced meanwhile finished: write what was seen of it and
        close its launch ``replaced`` (unless it showed ready or a fatal failure), leaving the
        launch being followed as it is."""
        state, detail = self._pending_close.pop(container_id)
        launch_id = self._find_or_start(container_id, spec, requested_at)
        if launch_id is None:
            return None
        fields = self.fields_of(state, restart_count=None)
        if fields.get("outcome") not in ("ready", "failed"):
            fields.update(outcome="replaced", failure_detail=detail[:500])
        self._guard(lambda: self._db.update_launch(launch_id, **fields))
        return launch_id

    def fields_of(self, state: StartupState, *, restart_count: int | bool | None = True) -> dict[str, Any]:
        """The launch fields ``state`` supports (``None`` values left out); the restart count is the
        followed container's unless ``restart_count`` gives another (``None``: none)."""
        fields: dict[str, Any] = {
            "hbm": hbm_record(state) or None,
            "kv_cache_tokens": state.kv_cache_tokens,
            "max_concurrency": state.max_concurrency,
            "max_model_len": state.max_model_len,
            "compile_seconds": state.compile_seconds,
            "engine_init_seconds": state.engine_init_seconds,
            "phase_durations": phase_durations(state.timeline) or None,
            "started_at": state.timeline[0].started_at if state.timeline else None,
            "restart_count": self._restart_count if restart_count is True else restart_count,
        }
        if state.ready:
            fields["outcome"] = "ready"
            fields["ready_at"] = _mark_time(state, Phase.READY) or state.last_line_at or self.clock()
        elif state.failure is not None and state.failure.fatal:
            fields["outcome"] = "failed"
            fields["failed_at"] = state.failure.at or state.last_line_at or self.clock()
            fields["failure_kind"] = state.failure.kind.value
            fields["failure_detail"] = state.failure.message[:500]
        return {k: v for k, v in fields.items() if v is not None}

    def _remember_model_limit(self, state: StartupState) -> None:
        """A boot refused for max_model_len above the model's derived maximum states that maximum:
        remember it for the model (the next swap's lint uses it)."""
        failure, model = state.failure, self.model or state.model
        if self._limit_recorded or failure is None or not model:
            return
        derived = failure.numbers.get("derived_max_model_len")
        if derived:
            self._limit_recorded = True
            self._guard(lambda: self._db.record_model_limit(model, int(derived), "boot log"))

    def record(self, state: StartupState, container_id: str | None = None) -> dict[str, Any]:
        """Write the fields that changed since the last call; returns what was written.

        ``container_id``: the container ``state`` is of. A state of another container than the
        launch being written (its inspect not finished yet) is kept for that container's launch
        (:meth:`observe_container` writes it), never written into this one.
        """
        if container_id is not None and container_id != self.container_id:
            self._early[container_id] = state
            return {}
        if self.launch_id is None:
            if container_id is not None:
                self._early[container_id] = state
            return {}
        self._remember_model_limit(state)
        fields = self.fields_of(state)
        changed = {k: v for k, v in fields.items() if self._written.get(k) != v}
        if "ready_at" in self._written and "ready_at" in changed:
            del changed["ready_at"]        # the first ready time stands
        if not changed:
            return {}
        launch_id = self.launch_id
        self._guard(lambda: self._db.update_launch(launch_id, **changed))
        if self.error is None:
            self._written.update(changed)
            return changed
        return {}

    def record_served(self, kv_cache_tokens: int | None, max_concurrency: float | None, engines: int,
                      gpu_memory_utilization: float | None) -> dict[str, Any]:
        """What the server's ``/metrics`` said after ready (``vllm:cache_config_info`` summed over its
        engines: KV cache tokens as stated, never derived; max concurrency; engines; utilization):
        written to the followed launch's ``metrics_*`` columns when it changed; returns what was written."""
        fields = {"metrics_kv_cache_tokens": kv_cache_tokens, "metrics_max_concurrency": max_concurrency,
                  "metrics_engines": engines, "metrics_gpu_memory_utilization": gpu_memory_utilization}
        changed = {k: v for k, v in fields.items() if v is not None and self._written.get(k) != v}
        if self.launch_id is None or not changed:
            return {}
        launch_id = self.launch_id
        self._guard(lambda: self._db.update_launch(launch_id, **changed))
        if self.error is None:
            self._written.update(changed)
            return changed
        return {}

    def record_replaced(self, state: StartupState, detail: str, container_id: str | None = None) -> dict[str, Any]:
        """The followed container was replaced by another: write what its log gave, then, unless
        it already showed ready or a fatal failure, close its launch as ``replaced`` with ``detail``
        (a sentence: by which container, when). Call before :meth:`observe_container` of the new one.

        ``container_id``: the replaced container. When its launch is not known yet (its inspect
        has not finished), the close waits for it: :meth:`observe_container` of that id, whenever
        it comes, closes the launch instead of following it, so the close never depends on the
        inspect finishing first.
        """
        if container_id is not None and (container_id != self.container_id or self.launch_id is None):
            self._early.pop(container_id, None)
            self._pending_close[container_id] = (state, detail)
            if container_id == self.container_id:
                self.container_id = None         # its observe, still running, now closes it
            return {}
        written = self.record(state)
        if self.launch_id is None or self._written.get("outcome") in ("ready", "failed"):
            return written
        end = {"outcome": "replaced", "failure_detail": detail[:500]}
        launch_id = self.launch_id
        self._guard(lambda: self._db.update_launch(launch_id, **end))
        if self.error is None:
            self._written.update(end)
        return {**written, **end}

    def record_restart(self, state: StartupState, restart_count: int) -> dict[str, Any]:
        """The container restarted in place: write what the ended boot's log gave, then the restart
        count; the launch keeps its row (same container, same spec: one launch retrying) and the
        fields the new boot's log gives are written over the old boot's from now on (its outcome
        goes back to ``running`` until the new boot is ready or fails). Before the container's
        launch is known (its inspect still running), the count is written with the next record."""
        written = self.record(state)
        self._restart_count = int(restart_count)
        if self.launch_id is None:
            return written
        again = {"restart_count": self._restart_count, "outcome": "running"}
        launch_id = self.launch_id
        self._guard(lambda: self._db.update_launch(launch_id, **again))
        if self.error is None:
            self._written = dict(again)
            return written | again
        return written

    def record_exit(self, state: StartupState, exit_code: int | None) -> dict[str, Any]:
        """The container exited: write what the log gave, then, unless the log already showed
        ready or a fatal failure, the launch ``failed`` with kind ``container_exited``."""
        written = self.record(state)
        if self.launch_id is None or self._written.get("outcome") in ("ready", "failed"):
            return written
        end = {"outcome": "failed", "failed_at": state.last_line_at or self.clock(),
               "failure_kind": "container_exited",
               "failure_detail": f"the container exited with code {exit_code} before the log said it was ready"}
        launch_id = self.launch_id
        self._guard(lambda: self._db.update_launch(launch_id, **end))
        if self.error is None:
            self._written.update(end)
            return written | end
        return written
