"""``tpu-console watch deploy/NAME``: the GKE half of the ``watch`` verb (:mod:`console.verbs.watch`).

Finds the workload in the GKE listing (``--cluster`` / ``--namespace``: :mod:`console.flows.gke_target`)
and runs :class:`console.flows.workload_watch.WorkloadWatch` (a Deployment's current pod) or
:class:`console.flows.group_watch.GroupWatch` (``lws/NAME``: every pod of group 0, ``wN| `` before a pod's
sentences): progress on stderr (the pod's state and events until its container runs, then the boot's
phases), the summary on stdout (``--json``: the ``log-summary --json`` object plus ``workload``,
``namespace``, ``cluster``, ``pod`` and ``kubernetes_ready_early``; an LWS's also ``pods``, one per pod,
``slice_hbm`` summed over them and ``recreated``). Exit codes as ``watch``: 0 ready, 1 failed, 2 bad input, no such workload
or no answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING

from console.verbs.common import say

if TYPE_CHECKING:
    from console.config import Config
    from console.flows.gke_target import WorkloadSpec


def run_workload_watch(args: argparse.Namespace, config: Config, spec: WorkloadSpec) -> int:
    """Run ``watch`` on a workload; returns the exit code."""
    if not config.gke.enabled:
        say(f"tpu-console: {spec.ref} is a GKE workload and {config.path or 'the config'} has no [gke] table "
            "(see the README's GKE section)", err=True)
        return 2
    return asyncio.run(_watch(args, config, spec))


async def _watch(args: argparse.Namespace, config: Config, spec: WorkloadSpec) -> int:
    from console.flows.gke_fleet import gke_source
    from console.flows.gke_target import WorkloadSpecError, find_workload
    from console.flows.group_watch import GroupWatch
    from console.flows.workload_watch import WorkloadWatch
    from remote.errors import RemoteError

    source = gke_source(config)
    assert source is not None
    try:
        try:
            workload, kube = await find_workload(source, spec)
        except (WorkloadSpecError, RemoteError) as exc:
            say(f"tpu-console: {exc}", err=True)
            return 2
        say(f"tpu-console: watching {workload.ref} in {workload.project or 'context'}/{workload.location or '-'}/"
            f"{workload.cluster} namespace {workload.namespace}", err=True)
        poll_s = max(0.05, min(args.poll_s, 5.0))
        if workload.kind == "LeaderWorkerSet":          # every pod of group 0, judged as one slice
            outcome = await GroupWatch(workload, kube, on_event=lambda e: say(e.line(), err=True),
                                       poll_s=poll_s).run()
        else:
            outcome = await WorkloadWatch(workload, kube, on_event=lambda e: say(e.text, err=True),
                                          poll_s=poll_s).run()
        from console.flows.history_access import HistoryAccess
        from console.flows.history_store import open_history
        from console.flows.workload_swap import record_watched

        history = HistoryAccess(lambda: open_history(config, getattr(args, "db", None)))
        launch_id = record_watched(history, workload, outcome)
        if history.problem:
            say(f"tpu-console: this watch is not recorded in the history: {history.problem}", err=True)
        history.close()
        if outcome.summary is not None:
            outcome.summary["launch_id"] = launch_id
    finally:
        await source.close()
    if outcome.summary is not None:
        if args.json:
            print(json.dumps(outcome.summary, indent=2))
        else:
            from console.verbs.log_summary import print_summary_panel

            print_summary_panel(f"watch {spec.ref}", outcome.summary)
            _print_pods(outcome.summary.get("pods") or [])
    sys.stdout.flush()
    return outcome.code


def _print_pods(pods: list[dict[str, object]]) -> None:
    """An LWS group's pods, one line each: name, node, what Kubernetes says, the log's readiness, its failure."""
    for pod in pods:
        log = "log ready" if pod.get("log_ready") else f"log {pod.get('phase')}"
        failure = f" · {pod['failure']}" if pod.get("failure") else ""
        say(f"  w{pod.get('worker')} {pod.get('name')} on {pod.get('node') or '-'}: {pod.get('kubernetes')} · "
            f"{log}{failure}")
