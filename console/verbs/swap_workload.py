"""``tpu-console swap deploy/NAME``: the GKE half of the ``swap`` verb (:mod:`console.verbs.swap`).

Finds the workload (``--cluster`` / ``--namespace``), and through
:class:`console.flows.workload_swap.WorkloadSwapCase` edits the serving container's args (``--set``,
``--unset``) and image (``--image``), prints the lint findings and the JSON patch, asks (``--yes``: don't),
records the launch, patches (guarded by a ``test`` of ``metadata.resourceVersion``) and follows the rollout
to the new pod's ready, as ``watch deploy/NAME`` prints it.

``--json``: text on stderr, one object on stdout: ``{"workload", "cluster", "namespace", "plan": {"old",
"new", "args", "patch", "lint"}, "dry_run", "confirmed", "outcome": {"patched", "launch_id", "revision",
"code", "error", "summary"} or null}``.

Exit codes as ``swap``: 0 swapped and ready (or ``--dry-run`` without lint errors), 1 refused, not
confirmed, the patch refused or the new pod failed, 2 bad input or no such workload.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING, Any

from console.verbs.common import say

if TYPE_CHECKING:
    from console.config import Config
    from console.flows.gke_target import WorkloadSpec
    from console.flows.workload_swap import WorkloadPreview


def run_workload_swap(args: argparse.Namespace, config: Config, spec: WorkloadSpec,
                      changes: dict[str, str | None]) -> int:
    """Run ``swap`` on a workload; returns the exit code."""
    if not config.gke.enabled:
        say(f"tpu-console: {spec.ref} is a GKE workload and {config.path or 'the config'} has no [gke] table", err=True)
        return 2
    return asyncio.run(_swap(args, config, spec, changes))


def _plan_json(preview: WorkloadPreview) -> dict[str, Any]:
    return {"old": preview.old.to_dict(), "new": preview.spec.to_dict(), "old_args": preview.old_args,
            "args": preview.args, "restores_revision": preview.restores_revision,
            "new_revision": preview.new_revision,
            "patch": preview.patch,
            "lint": [{"rule_id": f.rule_id, "severity": f.severity, "message": f.message, "fix": f.fix}
                     for f in preview.findings]}


def run_workload_rollback(args: argparse.Namespace, config: Config, spec: WorkloadSpec) -> int:
    """Run ``rollback`` on a workload (the previous revision's template, as ``kubectl rollout undo``); returns
    the exit code: 0 rolled back and ready (or ``--dry-run``), 1 nothing to roll back to, refused, not
    confirmed or failed, 2 bad input or no such workload."""
    if not config.gke.enabled:
        say(f"tpu-console: {spec.ref} is a GKE workload and {config.path or 'the config'} has no [gke] table", err=True)
        return 2
    return asyncio.run(_swap(args, config, spec, None))


async def _swap(args: argparse.Namespace, config: Config, spec: WorkloadSpec,
                changes: dict[str, str | None] | None) -> int:
    """A swap (``changes``) or a rollback (``changes`` is ``None``) of the workload ``spec`` names."""
    from console.flows.gke_fleet import gke_source
    from console.flows.gke_target import WorkloadSpecError, pick_workload
    from console.flows.history_access import HistoryAccess
    from console.flows.history_store import open_history
    from console.flows.policy import ReadOnlyRefused
    from console.flows.workload_swap import WorkloadSwapCase
    from remote.errors import RemoteError

    err = bool(args.json)
    report: dict[str, Any] = {"workload": spec.ref, "cluster": None, "namespace": spec.namespace, "plan": None,
                              "dry_run": bool(args.dry_run), "confirmed": False, "outcome": None}
    source = gke_source(config)
    assert source is not None
    history = HistoryAccess(lambda: open_history(config, getattr(args, "db", None)))
    try:
        try:
            fleet = await source.list_fleet()
            workload = pick_workload(fleet, spec)
        except (WorkloadSpecError, RemoteError) as exc:
            say(f"tpu-console: {exc}", err=True)
            return 2
        report["cluster"] = workload.cluster
        ref = next(c.ref for c in fleet.clusters if c.ref.name == workload.cluster and c.ref.project == workload.project)
        pool = next((p for p in fleet.node_pools if p.cluster == workload.cluster and p.name == workload.node_pool), None)
        try:
            case = WorkloadSwapCase(workload, source.client(ref), config, history, pool=pool,
                                    preview_only=bool(args.dry_run), verb="swap" if changes is not None else "rollback")
            preview = case.preview(changes, args.image) if changes is not None else await case.preview_rollback()
        except (ReadOnlyRefused, ValueError, RemoteError) as exc:
            say(f"tpu-console: {exc}; nothing was changed.", err=True)
            return 2 if isinstance(exc, ValueError) and changes is not None else 1
        report["plan"] = _plan_json(preview)
        _print_plan(preview, workload.ref, err)
        code = await _decide_and_run(args, case, preview, report, err)
    finally:
        await source.close()
        if history.problem:
            say(f"tpu-console: {history.problem}", err=True)
        history.close()
    if args.json:
        print(json.dumps(report, indent=2))
    return code


def _print_plan(preview: WorkloadPreview, ref: str, err: bool) -> None:
    head = f"swap {ref}" if preview.restores_revision is None else (
        f"rollback {ref} to revision {preview.restores_revision} (it becomes revision {preview.new_revision})")
    say(f"{head}: {preview.old.image} -> {preview.spec.image}" if preview.image else f"{head}:", err=err)
    if preview.args is not None:
        say(f"  args: {' '.join(preview.old_args)}", err=err)
        say(f"     -> {' '.join(preview.args)}", err=err)
    for f in preview.findings:
        say(f"  lint {f.severity}: {f.rule_id}: {f.message}", err=err)
    from remote.gke.edit import patch_lines

    say(f"  JSON patch: [{', '.join(patch_lines(preview.patch))}]", err=err)


async def _decide_and_run(args: argparse.Namespace, case: Any, preview: WorkloadPreview, report: dict[str, Any],
                          err: bool) -> int:
    from console.verbs.swap import ask

    refused = case.refusal(preview, force=bool(args.force))
    if args.dry_run:
        return 1 if preview.errors else 0
    if refused:
        say(f"tpu-console: {refused}", err=True)
        return 1
    what = "Patch" if preview.restores_revision is None else f"Roll back (revision {preview.restores_revision})"
    if not args.yes and not await ask(f"{what} {case.workload.ref} in {case.workload.cluster}/{case.workload.namespace}?"):
        say("tpu-console: not confirmed (--yes to skip the question); nothing was changed.", err=True)
        return 1
    report["confirmed"] = True
    from console.flows.group_watch import GroupEvent

    outcome = await case.run(preview, force=bool(args.force), on_event=lambda e: say(
        e.line() if isinstance(e, GroupEvent) else e.text, err=True))
    rollout = outcome.rollout
    report["outcome"] = {"patched": outcome.patched, "launch_id": outcome.launch_id, "revision": outcome.revision,
                         "code": rollout.code if rollout else None, "error": outcome.error,
                         "summary": rollout.summary if rollout else None}
    if not outcome.patched:
        say(f"tpu-console: the patch was refused: {outcome.error}; nothing was changed.", err=True)
        return 1
    say(f"{'patched' if preview.restores_revision is None else 'rolled back'} {case.workload.ref} (revision {outcome.revision or '?'}, launch {outcome.launch_id or '-'})", err=err)
    return 0 if rollout is not None and rollout.code == 0 else 1
