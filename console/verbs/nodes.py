"""``tpu-console nodes``: print the fleet (TPU nodes, queued resources, problems) once.

Usage: ``tpu-console nodes [--project P]... [--json] [--serving] [--api-endpoint URL]``.

``--json`` prints one object ``{"nodes": [...], "queued_resources": [...], "errors": [...]}``
(keys: :meth:`remote.models.FleetSnapshot.to_json`; times ISO 8601 UTC, missing values null).
``--serving`` samples every READY node once, all at once, each within 5 s (SSH, ``docker
inspect``, vLLM's ``/metrics``: :mod:`console.flows.serving`, as the fleet's serving columns) and
adds ``serving`` to each node (:meth:`~console.flows.serving.ServingSample.to_json`: ``serving``,
``model``, ``running``, ``waiting``, ``queue``, ``reason``...; ``tokens_per_s`` is null: one
sample has no rate; null for a node that is not READY), or SERVING / QUEUE / MODEL columns.
Each node also says whether it needs OS Login: ``"os_login"`` (true/false), ``"os_login_source"``
(``node metadata``, ``project metadata`` or ``default``) and ``"os_login_note"`` (why the decision
is less sure, e.g. the project's metadata answered 403; else null): see :mod:`console.flows.ssh_login`.
With ``[gke]`` in the config, GKE clusters of the same projects are listed too: ``--json`` adds
``"node_pools"`` (:meth:`remote.gke.models.NodePool.to_json`: ``cluster``, ``name``, ``machine_type``,
``accelerator``, ``topology``, ``provisioning_model``, ``node_count``, ``chips``, ``chips_in_use``...) and
``"workloads"`` (:meth:`remote.gke.models.Workload.to_json`: ``cluster``, ``location``, ``project``,
``namespace``, ``kind``, ``name``, ``ready``, ``replicas``, ``image``, ``args``, ``accelerator``,
``topology``, ``provisioning_model``...); a project or cluster that did not answer is one more
``errors`` entry (with ``cluster``).
Without it: two plain-text tables (columns aligned, nothing cut), one line per problem, and per zone the inactive (SUSPENDED /
FAILED) queued resources that may hold quota with their delete commands.

Exit codes: 0 every project answered, 1 some did not (or no credentials), 2 bad arguments or config.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from console.render.format import qr_run_ended, qr_state_label
from console.verbs.common import config_or_exit
from remote.printable import printable

if TYPE_CHECKING:
    from console.config import Config
    from console.verbs.common import Subparsers
    from remote.models import FleetSnapshot
    from remote.tpu.api import FleetSource


def add_parser(subparsers: Subparsers) -> None:
    """Register the ``nodes`` verb."""
    parser = subparsers.add_parser(
        "nodes", help="print TPU nodes and queued resources of every project once",
        description="List TPU nodes and queued resources across projects and zones, once.")
    parser.add_argument("--project", action="append", metavar="P",
                        help="project id to list (repeatable; default: the config's projects)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument("--serving", action="store_true",
                        help="also sample what each READY node serves (SSH + /metrics, 5 s at most)")
    parser.add_argument("--api-endpoint", metavar="URL",
                        help="TPU API endpoint (sandbox or private endpoint); http:// uses anonymous credentials")
    parser.set_defaults(run=run)


def _endpoint_problem(url: str) -> str | None:
    """Why ``url`` is not a usable endpoint, or ``None``."""
    parts = urlsplit(url if "://" in url else f"https://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"API endpoint {url!r}: expected http(s)://HOST[:PORT]"
    try:
        _ = parts.port          # urlsplit checks the port only when asked
    except ValueError:
        return f"API endpoint {url!r}: bad port"
    return None


def run(args: argparse.Namespace) -> int:
    """Run the verb; returns the exit code (see module docstring)."""
    import asyncio
    import json

    from console.config import ProjectConfig, config_file_named
    from remote.errors import CredentialsError
    from remote.models import FleetProblem, FleetSnapshot, utc_now
    from remote.tpu.api import FleetSource

    config = config_or_exit(args)
    if config is None:
        return 2
    from remote.names import name_problem

    for pid in args.project or ():
        if (problem := name_problem("project", pid)) is not None:
            print(f"tpu-console: --project: {problem}", file=sys.stderr)
            return 2
    if args.project:
        configured = {p.id: p for p in config.projects}
        projects = [configured.get(pid, ProjectConfig(pid)) for pid in dict.fromkeys(args.project)]
    else:
        projects = list(config.projects)
    if not projects:
        where = config_file_named(config)
        print(f"tpu-console: no projects to list: pass --project P or add [[projects]] to {where}", file=sys.stderr)
        return 2
    endpoint = args.api_endpoint or config.api_endpoint
    if endpoint and (problem := _endpoint_problem(endpoint)):
        print(f"tpu-console: {problem}", file=sys.stderr)
        return 2

    from dataclasses import replace

    from console.flows.gke_fleet import gke_source, list_gke
    from console.flows.ssh_login import LoginResolver
    from remote.gke.models import GkeFleet

    source = FleetSource(projects, api_endpoint=endpoint, timeout_s=config.request_timeout_s)
    gke = gke_source(config, projects)
    gke_fleet = GkeFleet()
    samples: dict[tuple[str, str, str], Any] = {}
    logins = LoginResolver(replace(config, api_endpoint=endpoint))
    verdicts: list[Any] = []

    async def listing() -> Any:
        nonlocal gke_fleet
        try:
            snapshot, gke_fleet = await asyncio.gather(_list(source, config, samples if args.serving else None),
                                                       list_gke(gke))
        finally:
            if gke is not None:
                await gke.close()
        verdicts.extend(await logins.verdicts(snapshot.nodes))
        return snapshot

    try:
        snapshot = asyncio.run(listing())
    except CredentialsError as exc:
        snapshot = FleetSnapshot(problems=tuple(FleetProblem(p.id, None, 401, exc.message) for p in projects),
                                 fetched_at=utc_now())
        if not args.json:
            print(f"tpu-console: {printable(exc)}", file=sys.stderr)
            return 1
    finally:
        source.close()
        logins.close()

    now = utc_now()
    if args.json:
        data = snapshot.to_json(now)
        if args.serving:
            for node, item in zip(snapshot.nodes, data["nodes"], strict=True):
                sample = samples.get(node.key)
                item["serving"] = sample.to_json() if sample is not None else None
        for node_json, verdict in zip(data["nodes"], verdicts):
            node_json.update(os_login=verdict.enabled, os_login_source=verdict.source, os_login_note=verdict.note)
        if gke is not None:
            data["node_pools"] = [p.to_json() for p in gke_fleet.node_pools]
            data["workloads"] = [w.to_json() for w in gke_fleet.workloads]
            data["errors"] += [p.to_json() for p in gke_fleet.problems]
        print(json.dumps(data, indent=2))
    else:
        _print_tables(snapshot, now, readonly=config.readonly, samples=samples if args.serving else None,
                      verdicts=verdicts)
        if gke is not None:
            _print_gke(gke_fleet)
    return 1 if snapshot.problems or gke_fleet.problems else 0


def _print_gke(fleet: Any) -> None:
    """GKE node pools and workloads as plain-text tables, then one line per GKE problem."""
    from console.flows.gke_fleet import POOL_COLUMNS, WORKLOAD_COLUMNS, pool_row, workload_row
    from console.render.text_table import text_table

    out = sys.stdout
    out.write("\n" + text_table(f"GKE TPU node pools ({len(fleet.node_pools)})", POOL_COLUMNS,
                                [pool_row(p) for p in fleet.node_pools]))
    out.write("\n" + text_table(f"GKE workloads ({len(fleet.workloads)})", WORKLOAD_COLUMNS,
                                [workload_row(w) for w in fleet.workloads]))
    for p in fleet.problems:
        out.write(printable(f"problem: {p.where}: {p.code or 'no answer'}: {p.message}") + "\n")


async def _list(source: FleetSource, config: Config, samples: dict[tuple[str, str, str], Any] | None) -> Any:
    """The fleet once; with ``samples``, one serving sample of every READY node into it (by node key)."""
    from console.flows.serving import sample_nodes, sampler_for

    snapshot = await source.list_fleet()
    if samples is not None:
        ready = [n for n in snapshot.nodes if n.state == "READY"]
        found = await sample_nodes(sampler_for(n, config, source) for n in ready)
        samples.update({n.key: sample for n, sample in zip(ready, found, strict=True)})
    return snapshot


def _span(seconds: float | None) -> str:
    """``7260`` -> ``2h01m``; ``None`` -> ``-``."""
    if seconds is None:
        return "-"
    minutes = int(seconds) // 60
    days, hours, mins = minutes // 1440, minutes // 60 % 24, minutes % 60
    if days:
        return f"{days}d{hours:02d}h"
    return f"{hours}h{mins:02d}m" if hours else f"{mins}m"


def _age(created: datetime | None, now: datetime) -> str:
    return _span((now - created).total_seconds()) if created else "-"


def _print_tables(snapshot: FleetSnapshot, now: datetime, *, readonly: bool = False,
                  samples: dict[tuple[str, str, str], Any] | None = None,
                  verdicts: list[Any] | None = None) -> None:
    """Nodes and queued resources as plain-text tables (:func:`console.render.text_table.text_table`:
    a Rich table took 63 s for 50,000 nodes), with SERVING / QUEUE / MODEL given ``samples``,
    OS LOGIN from ``verdicts``; then one line per problem."""
    from console.render.serving import serving_cells
    from console.render.text_table import text_table

    out = sys.stdout
    serving_columns = ("SERVING", "QUEUE", "MODEL") if samples is not None else ()
    verdicts = verdicts or []
    notes: dict[str, str] = {}
    rows: list[tuple[Any, ...]] = []
    for i, n in enumerate(snapshot.nodes):
        verdict = verdicts[i] if i < len(verdicts) else None
        login = "-" if verdict is None else ("yes" if verdict.enabled else "no")
        if verdict is not None and verdict.note:
            notes.setdefault(n.project, verdict.note)
        health = n.health or "-"
        if n.symptoms:
            health += " (" + ", ".join(n.symptoms) + ")"
        served: tuple[Any, ...] = ()
        if samples is not None:
            serving, _, queue, model = serving_cells(samples.get(n.key))
            served = (str(serving), str(queue), str(model))
        rows.append((n.project, n.zone, n.name, n.state, n.accelerator_type, n.provisioning_model,
                     _span(n.time_left_s(now)), *served, n.external_ip or "-", n.internal_ip or "-", health,
                     n.runtime_version or "-", n.queued_resource or "-", _age(n.create_time, now), login))
    out.write(text_table(f"TPU nodes ({len(snapshot.nodes)})",
                         ("PROJECT", "ZONE", "NAME", "STATE", "TYPE", "PROVISIONING", "LEFT", *serving_columns,
                          "EXTERNAL IP", "INTERNAL IP", "HEALTH", "RUNTIME", "QUEUED RESOURCE", "AGE", "OS LOGIN"),
                         rows))
    for project, note in notes.items():
        out.write(printable(f"os login: {project}: {note}") + "\n")
    qr_rows = [(q.project, q.zone, q.name, qr_state_label(q.state, q.state_initiator), q.provisioning_model,
                q.accelerator_type or "-", _span(q.max_run_duration_s),
                "ended" if qr_run_ended(q.state, q.termination_time) else _span(q.time_left_s(now)),
                _age(q.create_time, now), q.failure or "") for q in snapshot.queued_resources]
    out.write("\n" + text_table(f"Queued resources ({len(snapshot.queued_resources)})",
                                ("PROJECT", "ZONE", "NAME", "STATE", "PROVISIONING", "TYPE", "MAX RUN", "LEFT", "AGE",
                                 "FAILURE"), qr_rows))
    from rich.console import Console

    console = Console(width=None if out.isatty() else 250, highlight=False, markup=False)
    for p in snapshot.problems:
        where = f"{p.project}/{p.zone}" if p.zone else p.project
        console.print(printable(f"problem: {where}: {p.code or 'no answer'}: {p.message}"), markup=False)
    from console.flows.triage import inactive_by_zone

    for zone in inactive_by_zone(snapshot):
        if readonly:                    # as the fleet view: no delete commands in read-only mode
            console.print(printable(f"quota: {zone.headline} (read-only: delete hidden)"), markup=False)
            continue
        console.print(printable(f"quota: {zone.headline}:"), markup=False)
        for command in zone.commands:
            console.print(printable(f"  {command}"), markup=False)
