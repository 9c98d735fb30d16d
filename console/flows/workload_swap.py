"""Swap on a GKE workload: the same policy as :class:`console.flows.swap_case.SwapCase` (read-only refusal,
the same flag lints and gate, record before act), with a Kubernetes backend.

:class:`WorkloadSwapCase`:

- refuses in read-only mode when made and again before its first remote step
  (:func:`console.flows.policy.refuse_in_readonly`);
- :meth:`~WorkloadSwapCase.preview` applies ``--set`` / ``--unset`` / ``--image`` to the serving container
  (values checked by :meth:`ContainerSpec.with_changes`, args edited in place by
  :func:`remote.gke.edit.edited_args`) and lints it: the VM swap's flag rules
  (:func:`console.flows.swap.lint_spec`, on the chips of the pod: ``v6e-4``...) with the history's facts,
  plus the workload's own (:func:`remote.gke.edit.workload_lints`);
- :meth:`~WorkloadSwapCase.refusal` is the lint gate: an ``error`` needs ``--force`` or the typed name;
- :meth:`~WorkloadSwapCase.run` records the launch (cluster, namespace, workload) before the JSON patch,
  patches guarded by a ``test`` on ``metadata.resourceVersion``, records the revision the patch made, and
  follows the rollout to the new pod's ready (:class:`console.flows.workload_watch.WorkloadWatch`),
  completing the launch with what the log said. A LeaderWorkerSet's leader and worker templates change in
  ONE patch (:func:`remote.gke.edit.lws_swap_patch`), followed to every new pod's ready
  (:class:`console.flows.group_watch.GroupWatch`).

Textual-free; the verb collects input and prints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from console.flows import swap as swap_flow
from console.flows.gke_target import accelerator_type_of as accelerator_type_of  # re-exported (moved)
from console.flows.gke_target import lint_node
from console.flows.group_watch import GroupEvent, GroupWatch
from console.flows.history_access import HistoryAccess
from console.flows.policy import HasReadonly, refuse_in_readonly
from console.flows.slice_watch import SliceOutcome
from console.flows.workload_watch import WorkloadEvent, WorkloadWatch
from remote.container.lint import Finding
from remote.container.spec import SPEC_KEYS, ContainerSpec
from remote.gke.edit import (
    container_index,
    edited_args,
    lws_swap_patch,
    pod_spec_of,
    previous_template,
    rollback_patch,
    spec_of,
    swap_patch,
    workload_lints,
)
from remote.gke.kube import KubeClient
from remote.gke.models import NodePool, Workload
from remote.gke.parse import REVISION_ANNOTATION, selector_of, workload_from_json
from remote.models import Node
from store.errors import StoreError


@dataclass(frozen=True)
class WorkloadPreview:
    """A swap about to be made: the new spec, the container's new args, the patch and the lint findings."""

    spec: ContainerSpec
    old: ContainerSpec
    old_args: list[str]
    args: list[str] | None
    image: str | None
    patch: list[dict[str, Any]]
    findings: list[Finding]
    #: a rollback's revisions: the one whose template is restored, and the one the rollout makes
    restores_revision: int | None = None
    new_revision: int | None = None
    #: a LeaderWorkerSet's rollback (it keeps no ReplicaSets to read): the history's launch whose spec it restores
    restores_launch: int | None = None

    @property
    def restores(self) -> str | None:
        """What a rollback restores (``revision 2``, ``launch 14 from the history``); ``None`` for a swap."""
        if self.restores_revision is not None:
            return f"revision {self.restores_revision}"
        return None if self.restores_launch is None else f"launch {self.restores_launch} from the history"

    @property
    def errors(self) -> list[Finding]:
        """The ``error`` findings."""
        return [f for f in self.findings if f.severity == "error"]


@dataclass(frozen=True)
class WorkloadSwapOutcome:
    """How a swap ended: ``patched`` (the server took the patch), ``launch_id``, ``revision``, the rollout's
    :class:`SliceOutcome` (``None`` when not followed), ``error`` (one sentence) when the patch was refused."""

    patched: bool
    launch_id: int | None
    revision: str | None
    rollout: SliceOutcome | None
    error: str | None = None


@dataclass
class WorkloadSwapCase:
    """One swap of a GKE workload's serving container.

    Args:
        workload: the workload as listed (its ``resource_version`` guards the patch).
        kube: its cluster's client.
        config: what the policy reads (``readonly``).
        history: the history (:class:`HistoryAccess`).
        pool: the node pool it runs on (chips per node for the rolling-update lint), or ``None``.
        preview_only: only :meth:`preview` will be used (``--dry-run``): allowed in read-only mode.
        verb: ``swap`` or ``rollback`` (what read-only mode names when it refuses).

    Raises:
        ReadOnlyRefused: read-only mode is on (and not ``preview_only``).
    """

    workload: Workload
    kube: KubeClient
    config: HasReadonly
    history: HistoryAccess
    pool: NodePool | None = None
    preview_only: bool = False
    verb: str = "swap"
    _facts: dict[str, Any] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if not self.preview_only:
            refuse_in_readonly(self.config, self.verb)

    @property
    def node(self) -> Node:
        """The workload as a lint node."""
        return lint_node(self.workload)

    def preview(self, changes: Mapping[str, str | None], image: str | None) -> WorkloadPreview:
        """The new spec, args and patch with their lint findings.

        Raises:
            ValueError: a bad value (the spec's sentence), a key a workload swap cannot change yet
                (``env.*``, ``volume:*``, ``name``...), or a container with no model.
        """
        for key in changes:
            if key.startswith(("env.", "volume:")) or (key in SPEC_KEYS and key not in ("image", "model")):
                raise ValueError(f"{key}: a GKE swap changes the container's flags and image only so far")
        old = spec_of(self.workload)
        spec = old.with_changes(dict(changes), image=image)
        index = container_index(self.workload)
        container = pod_spec_of(self.workload)["containers"][index]
        flags = {k: v for k, v in changes.items() if k != "image"}
        args = edited_args(list(container.get("args") or []), flags) if flags else None
        new_image = image or changes.get("image") or None
        patch = (lws_swap_patch(self.workload, flags, new_image) if self.workload.kind == "LeaderWorkerSet"
                 else swap_patch(self.workload, index, args=args, image=new_image))
        findings = self._findings(spec, old, self.workload)
        return WorkloadPreview(spec=spec, old=old, old_args=list(container.get("args") or []), args=args, image=new_image, patch=patch, findings=findings)

    def _findings(self, spec: ContainerSpec, old: ContainerSpec, workload: Workload) -> list[Finding]:
        """The VM swap's flag lints on the pod's chips, then the workload's own (on ``workload``, as patched)."""
        node = self.node
        facts = self._history_facts(node, spec)
        findings = [f for f in (swap_flow.lint_spec(node, spec, old, facts) if node.accelerator_type else [])
                    if f.rule_id != "compile-cache"]        # the VM's rule: the workload's own reads the volumes
        boot = facts.get("predicted_boot_s")
        return findings + workload_lints(workload, self.pool.chips_per_node if self.pool else None,
                                         boot if isinstance(boot, int | float) else None)

    async def preview_rollback(self) -> WorkloadPreview:
        """The rollback, as ``kubectl rollout undo`` makes it: the Deployment's ReplicaSets read, the previous
        revision's pod template (:func:`remote.gke.edit.previous_template`) as a guarded ``replace`` of
        ``spec.template``, its container's args and image beside the running ones, linted as a swap is.

        Raises:
            ValueError: not a Deployment, nothing to roll back to (one revision; or the previous template is
                the running one), or a template with no serving container / model.
            KubeApiError: the ReplicaSets could not be listed.
        """
        w = self.workload
        if w.kind == "LeaderWorkerSet":
            return self._preview_group_rollback()
        if w.kind != "Deployment":
            raise ValueError(f"{w.ref}: rollback restores Deployments and LeaderWorkerSets only")
        replica_sets = await self.kube.list_all("apps/v1", "replicasets", namespace=w.namespace,
                                                label_selector=selector_of(w.raw))
        found = previous_template(replica_sets, w.name)
        if found is None:
            raise ValueError(f"Nothing to roll back to: {w.ref} has one revision only")
        current, previous, template = found
        if _semantic((w.raw.get("spec") or {}).get("template")) == _semantic(template):
            raise ValueError(f"Nothing to roll back to: {w.ref} already runs the template of revision {previous}")
        restored = replace(w, raw={**w.raw, "spec": {**(w.raw.get("spec") or {}), "template": template}})
        old, spec = spec_of(w), spec_of(restored)
        index = container_index(w)
        old_args = list(w.raw["spec"]["template"]["spec"]["containers"][index].get("args") or [])
        new_container = template["spec"]["containers"][container_index(restored)]
        args = list(new_container.get("args") or [])
        return WorkloadPreview(spec=spec, old=old, old_args=old_args, args=args if args != old_args else None,
                               image=spec.image if spec.image != old.image else None,
                               patch=rollback_patch(w, template), findings=self._findings(spec, old, restored),
                               restores_revision=previous, new_revision=current + 1)

    def _preview_group_rollback(self) -> WorkloadPreview:
        """A LeaderWorkerSet's rollback: its API keeps no ReplicaSets to undo to, so the spec comes from the
        history, as a TPU VM's rollback does (:func:`previous_recorded`): the newest launch of this workload
        whose serving container differed from the running one and did not fail, applied to the leader and
        worker templates as a swap's flag and image edits (:func:`flag_changes`).

        Raises:
            ValueError: no such launch, or one whose arguments differ in ways the swap cannot express.
        """
        w, current = self.workload, spec_of(self.workload)
        found = previous_recorded(self.history, self.node.name, current)
        if found is None:
            raise ValueError(f"Nothing to roll back to: the history has no earlier launch of {w.ref} in "
                             f"{w.cluster}/{w.namespace} with another container spec")
        spec, launch_id = found
        preview = self.preview(flag_changes(current, spec), spec.image if spec.image != current.image else None)
        return replace(preview, restores_launch=launch_id)

    def _history_facts(self, node: Node, spec: ContainerSpec) -> dict[str, Any]:
        store = self.history.get()
        if store is None:
            return {}
        try:
            return dict(swap_flow.history_facts(store, node, spec))
        except StoreError as exc:
            self.history.failed(exc)
            return {}

    def refusal(self, preview: WorkloadPreview, *, force: bool = False, typed_name: str | None = None) -> str | None:
        """The lint gate: ``None`` when the swap may run, else why not (one sentence)."""
        if not preview.errors or force or typed_name == self.workload.name:
            return None
        rules = ", ".join(dict.fromkeys(f.rule_id for f in preview.errors))
        return (f"Refused: {len(preview.errors)} lint error{'s' if len(preview.errors) != 1 else ''} ({rules}); "
                "apply the fixes shown, or confirm by typing the workload's name (--force for the verb). "
                "Nothing was changed.")

    async def run(self, preview: WorkloadPreview, *, force: bool = False, follow: bool = True,
                  on_event: Callable[[WorkloadEvent | GroupEvent], None] | None = None,
                  poll_s: float = 2.0) -> WorkloadSwapOutcome:
        """Record, patch, and (``follow``) follow the rollout to the new pod's ready (a LeaderWorkerSet's: every
        pod of its new group 0, :class:`~console.flows.group_watch.GroupWatch`).

        Raises:
            ReadOnlyRefused: read-only mode is on (checked again: no door can skip it).
            ValueError: the lint gate refused.
        """
        from remote.errors import KubeApiError

        refuse_in_readonly(self.config, self.verb)
        refused = self.refusal(preview, force=force)
        if refused:
            raise ValueError(refused)
        if preview.new_revision is None and self.workload.kind == "Deployment":
            preview = replace(preview, new_revision=await self._next_revision())
        launch_id = self._record(preview)
        w = self.workload
        try:
            patched = await self._guarded_patch(preview.patch)
        except KubeApiError as exc:
            now = await self._resource_version() if exc.code in (409, 422) else None
            changed = now is not None and now != w.resource_version
            why = (f"{w.ref} changed since it was read (resourceVersion {w.resource_version}, now {now}): the "
                   "guard refused the patch; list it again and retry" if changed else str(exc))
            self._update(launch_id, outcome="failed", failure_kind="patch refused", failure_detail=why)
            return WorkloadSwapOutcome(False, launch_id, None, None, error=why)
        revision = (str(preview.new_revision) if preview.new_revision is not None else "") \
            or str(((patched.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION) or "") \
            or str((patched.get("metadata") or {}).get("resourceVersion") or "")
        self._update(launch_id, revision=revision or None)
        if not follow:
            self._update(launch_id, outcome="unwatched")
            return WorkloadSwapOutcome(True, launch_id, revision, None)
        new = workload_from_json(patched, _ref_of(w), [self.pool] if self.pool else [])
        followed = replace(new, container=w.container) if new else w
        said = on_event or (lambda _: None)
        if w.kind == "LeaderWorkerSet":            # every pod of the new group, to each one's ready
            rollout = await GroupWatch(followed, self.kube, on_event=said, poll_s=poll_s).run()
        else:
            rollout = await WorkloadWatch(followed, self.kube, on_event=said, poll_s=poll_s).run()
        self._complete(launch_id, rollout)
        return WorkloadSwapOutcome(True, launch_id, revision, rollout)

    async def _guarded_patch(self, patch: list[dict[str, Any]], tries: int = 3) -> dict[str, Any]:
        """The patch, guarded by its ``test`` of the resourceVersion read. The controllers' status updates
        bump the resourceVersion too (a pod turning Ready): when the guard refuses and the object's ``spec``
        is still the one read, the same patch is sent again on the new resourceVersion (at most ``tries``
        in all); a changed spec (someone else's edit) is refused.

        Raises:
            KubeApiError: the API refused the patch (the guard when the spec changed).
        """
        from remote.errors import KubeApiError

        w = self.workload
        for attempt in range(tries):
            try:
                return await self.kube.json_patch(w.namespace, w.name, patch, kind=w.kind)
            except KubeApiError as exc:
                now = await self._current() if exc.code in (409, 422) and attempt + 1 < tries else None
                version = str(((now or {}).get("metadata") or {}).get("resourceVersion") or "")
                if now is None or now.get("spec") != w.raw.get("spec") or not version:
                    raise
                patch = [{**op, "value": version} if op.get("op") == "test"
                         and op.get("path") == "/metadata/resourceVersion" else op for op in patch]
        raise AssertionError("unreachable: the last try returns or raises")

    async def _next_revision(self) -> int | None:
        """The revision the Deployment controller gives the template a patch makes: the highest revision of
        its ReplicaSets + 1 (a new ReplicaSet, or an old one of the same template renumbered), as the
        controller's ``MaxRevision + 1``; ``None`` when the ReplicaSets cannot be listed. (The patch's answer
        still carries the revision before it: the controller writes the new one afterwards.)"""
        from remote.errors import KubeApiError

        w = self.workload
        try:
            sets = await self.kube.list_all("apps/v1", "replicasets", namespace=w.namespace,
                                            label_selector=selector_of(w.raw))
        except KubeApiError:
            return None
        revisions = [int(r) for rs in sets if any(o.get("kind") == "Deployment" and o.get("name") == w.name
                                                   for o in (rs.get("metadata") or {}).get("ownerReferences") or [])
                     if str(r := ((rs.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION, "")).isdigit()]
        return max(revisions) + 1 if revisions else None

    async def _current(self) -> dict[str, Any] | None:
        """The object as the API has it now, or ``None`` when it cannot be read."""
        from remote.errors import KubeApiError

        w = self.workload
        version = "apps/v1" if w.kind == "Deployment" else "leaderworkerset.x-k8s.io/v1"
        try:
            return await self.kube.get(version, "deployments" if w.kind == "Deployment" else "leaderworkersets",
                                       w.namespace, w.name)
        except KubeApiError:
            return None

    async def _resource_version(self) -> str | None:
        """The object's resourceVersion now (``None`` when it cannot be read): why a guarded patch failed."""
        obj = await self._current()
        return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "") or None

    def _record(self, preview: WorkloadPreview) -> int | None:
        """The launch, before the first remote step (``None`` when the history cannot be written)."""
        w, store = self.workload, self.history.get()
        if store is None:
            return None
        try:
            extra = {"cluster": w.cluster, "namespace": w.namespace, "workload": w.ref}
            if w.kind == "LeaderWorkerSet":
                self._keep_replaced(store, preview.old, extra)
            if preview.new_revision is not None:         # a rollback knows the revision it makes, a swap reads it
                extra["revision"] = str(preview.new_revision)
            return swap_flow.record_attempt(store, self.node, preview.spec, extra=extra)
        except StoreError as exc:
            self.history.failed(exc)
            return None

    def _keep_replaced(self, store: Any, old: ContainerSpec, extra: dict[str, str]) -> None:
        """A LeaderWorkerSet's rollback reads the spec it restores from the history (its API keeps no revisions):
        the running spec a swap replaces is recorded first (``observed``, ``replaced``) when no launch of the
        workload holds it, as the VM swap records a container it did not start."""
        newest = store.list_launches(node=self.node.name, limit=1)
        if newest and newest[0].container_spec:
            try:
                if _same_container(swap_flow.spec_from_launch(newest[0], old), old):
                    return
            except ValueError:
                pass
        store.start_launch(**swap_flow.launch_fields(self.node, old), origin="observed", outcome="replaced", **extra)

    def _update(self, launch_id: int | None, **fields: Any) -> None:
        store = self.history.get()
        if store is None or launch_id is None:
            return
        try:
            store.update_launch(launch_id, **fields)
        except StoreError as exc:
            self.history.failed(exc)

    def _complete(self, launch_id: int | None, rollout: SliceOutcome) -> None:
        complete_launch(self.history, launch_id, rollout)


def _arg_flags(spec: ContainerSpec) -> dict[str, str]:
    """Every ``--flag`` of the spec's serve line, known or not: ``{name: value}``, ``""`` for a bare switch."""
    from remote.container.parse import parse_serve_args

    flags = {name: "" if value is None else str(value) for name, value in spec.serve_flags.items()}
    extra = parse_serve_args(["-", *spec.extra_args]).extra_flags
    return flags | {name: "" if value is None else str(value) for name, value in extra.items()}


def _same_container(a: ContainerSpec, b: ContainerSpec) -> bool:
    """The same image, model and serve flags (known or not): what a workload's swap and rollback change."""
    return (a.image, a.model, _arg_flags(a)) == (b.image, b.model, _arg_flags(b))


def flag_changes(current: ContainerSpec, target: ContainerSpec) -> dict[str, str | None]:
    """The edits that turn ``current``'s serve flags into ``target``'s (:func:`remote.gke.edit.edited_args`'
    form: ``{flag: value}``, ``None`` removes, ``""`` a bare switch), the model included when it differs."""
    have, want = _arg_flags(current), _arg_flags(target)
    changes: dict[str, str | None] = {name: None for name in have if name not in want}
    changes.update({name: value for name, value in want.items() if have.get(name) != value})
    if target.model and target.model != current.model:
        changes["model"] = target.model
    return changes


def previous_recorded(history: HistoryAccess, node_name: str,
                      current: ContainerSpec) -> tuple[ContainerSpec, int] | None:
    """The newest launch of ``node_name`` (a workload's lint node name) with a container spec other than
    ``current``'s (image, model or serve flags) and not ``failed``: ``(spec, launch id)``; ``None`` when the
    history has none or cannot be read (its problem kept in ``history``). At most 50 launches are read."""
    store = history.get()
    if store is None:
        return None
    try:
        launches = store.list_launches(node=node_name, limit=50)
    except StoreError as exc:
        history.failed(exc)
        return None
    for launch in launches:
        if not launch.container_spec or launch.outcome == "failed":
            continue
        try:
            spec = swap_flow.spec_from_launch(launch, current)
        except ValueError:
            continue
        if not _same_container(spec, current):
            return spec, launch.id
    return None


def complete_launch(history: HistoryAccess, launch_id: int | None, rollout: SliceOutcome) -> None:
    """Complete a GKE launch with what its watch said: outcome, ready time, KV cache, concurrency, pod."""
    store = history.get()
    if store is None or launch_id is None:
        return
    summary = rollout.summary or {}
    timeline = summary.get("phase_timeline") or []
    ready_at = next((m.get("started_at") for m in timeline if m.get("phase") == "ready"), None)
    fields: dict[str, Any] = {
        "outcome": {0: "ready", 1: "failed"}.get(rollout.code, "unwatched"),
        "kv_cache_tokens": summary.get("kv_cache_tokens"), "max_concurrency": summary.get("max_concurrency"),
        "compile_seconds": summary.get("compile_seconds"),
        "container_id": summary.get("container_id") or summary.get("pod")}     # an LWS leader's: NAME@UID
    if rollout.code == 0 and ready_at:
        fields["ready_at"] = ready_at
    if timeline and timeline[0].get("started_at"):  # the container's start: an observed launch's origin
        fields["started_at"] = timeline[0]["started_at"]
    if rollout.code == 1:
        fields.update(failure_kind=summary.get("failure") or "failed", failure_detail=summary.get("failure_detail"))
    try:
        store.update_launch(launch_id, **{k: v for k, v in fields.items() if v is not None})
    except StoreError as exc:
        history.failed(exc)


def record_watched(history: HistoryAccess, workload: Workload, rollout: SliceOutcome) -> int | None:
    """Record what a ``watch deploy/NAME`` saw: the launch of the followed pod (found by the pod's name, as the
    VM path finds a container by id), completed; a pod no launch names is recorded as ``observed``.
    Returns the launch id, ``None`` without a history or a pod."""
    store = history.get()
    pod = (rollout.summary or {}).get("container_id") or (rollout.summary or {}).get("pod")
    if store is None or not pod:
        return None
    node = lint_node(workload)
    try:
        found = store.find_launch_by_container(node.name, pod)
        launch_id = found.id if found is not None else store.start_launch(
            **swap_flow.launch_fields(node, spec_of(workload)), origin="observed", container_id=pod,
            cluster=workload.cluster, namespace=workload.namespace, workload=workload.ref,
            revision=workload.revision or workload.resource_version or None)
    except (StoreError, ValueError) as exc:
        if isinstance(exc, StoreError):
            history.failed(exc)
        return None
    complete_launch(history, launch_id, rollout)
    return launch_id


def _semantic(value: Any) -> Any:
    """``value`` without nulls and empty maps or lists (a template read back from a ReplicaSet and the
    Deployment's own compare equal when only such defaults differ)."""
    if isinstance(value, dict):
        kept = {k: _semantic(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_semantic(v) for v in value]
    return value


def _ref_of(w: Workload) -> Any:
    from remote.gke.models import ClusterRef

    return ClusterRef(w.project, w.location, w.cluster)
