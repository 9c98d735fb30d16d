"""Find one node of the fleet by name: the lookup the ``watch``, ``swap`` and ``bench`` verbs share.

A node is named ``NAME``, ``ZONE/NAME`` or ``PROJECT/ZONE/NAME`` (``--project``/``--zone``
narrow it the same way). No match, several matches and (when asked for) a node that is not
READY each raise their own :class:`NodeLookupError` with a one-sentence message; a miss also
names the projects that did not list, since the node may be in one of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from remote.errors import RemoteError
from remote.models import FleetProblem, FleetSnapshot, Node, QueuedResource
from remote.names import name_problem
from remote.printable import shown_name

if TYPE_CHECKING:
    from console.config import Config
    from console.services import FleetLister

#: Node names listed in a "no such node" message at most (the rest are counted).
MAX_NAMES_SHOWN = 8


class NodeLookupError(RemoteError):
    """The node named is not in the fleet, is ambiguous, is not READY, or there is nothing to search.

    ``str()`` is the message alone: it is already a whole sentence naming the node.
    """

    title = "No such node"

    def __str__(self) -> str:
        return self.message


class NodeNotFound(NodeLookupError):
    """No node of the searched projects has that name.

    Attributes:
        problems: the projects (or zones) that did not list; the node may be in one of them.
        unanswered: no searched project listed at all (the TPU API is down or unreachable), so
            the name may well be right.
    """

    title = "No such node"

    def __init__(self, message: str, problems: Sequence[FleetProblem] = (), *, unanswered: bool = False) -> None:
        super().__init__(message)
        self.problems = tuple(problems)
        self.unanswered = unanswered


class NodeAmbiguous(NodeLookupError):
    """Several nodes have that name (in different projects or zones).

    Attributes:
        matches: the nodes named so, sorted by ``(project, zone, name)``.
    """

    title = "Ambiguous node"

    def __init__(self, message: str, matches: Sequence[Node]) -> None:
        super().__init__(message)
        self.matches = tuple(matches)


class NodeNotReady(NodeLookupError):
    """The node exists but is not READY (creating, preempted, stopped ...).

    Attributes:
        node: the node found.
    """

    title = "Node not ready"

    def __init__(self, message: str, node: Node) -> None:
        super().__init__(message)
        self.node = node


def split_node_spec(spec: str) -> tuple[str | None, str | None, str]:
    """``"p/z/n"`` -> ``("p", "z", "n")``, ``"z/n"`` -> ``(None, "z", "n")``, ``"n"`` -> ``(None, None, "n")``.

    Raises:
        NodeLookupError: not ``NAME``, ``ZONE/NAME`` or ``PROJECT/ZONE/NAME``, or a part that breaks
            GCP's naming rule (:func:`check_names`).
    """
    from console.flows.gke_target import is_workload_spec

    if is_workload_spec(spec):
        raise NodeLookupError(f"{shown_name(spec)} is a GKE workload: this action takes TPU nodes only (watch, "
                              "swap, rollback, forward, bench, metrics and history take deploy/NAME).",
                              title="Not a TPU node")
    parts = spec.split("/")
    if not 1 <= len(parts) <= 3 or not all(parts):
        raise NodeLookupError(f"{shown_name(spec)} is not NAME, ZONE/NAME or PROJECT/ZONE/NAME.")
    padded: list[str | None] = [None] * (3 - len(parts)) + list(parts)
    check_names(project=padded[0], zone=padded[1], node=parts[-1])
    return padded[0], padded[1], parts[-1]


def check_names(*, project: str | None = None, zone: str | None = None, node: str | None = None) -> None:
    """Refuse a name from the command line that breaks GCP's naming rule (:mod:`remote.names`):
    such a name names nothing, and it must never reach an API path, a file name or a printed command.

    Raises:
        NodeLookupError: one sentence naming the part and the rule.
    """
    for kind, value in (("project", project), ("zone", zone), ("node", node)):
        if value is not None and (problem := name_problem(kind, value)) is not None:
            raise NodeLookupError(f"{problem}.", title="Bad name")


def pick_node(snapshot: FleetSnapshot, name: str, project: str | None = None, zone: str | None = None, *,
              require_ready: bool = False, searched: Sequence[str] = ()) -> Node:
    """The one node of ``snapshot`` that ``name`` (and ``project``/``zone``, when given) names.

    Args:
        snapshot: one fleet listing.
        name: ``NAME``, ``ZONE/NAME`` or ``PROJECT/ZONE/NAME``.
        project, zone: narrow the match further (``--project``, ``--zone``).
        require_ready: refuse a node whose state is not ``READY``.
        searched: the project ids listed, for the "no such node" message.

    Raises:
        NodeLookupError: ``name`` is not a node spec. NodeNotFound: no match.
        NodeAmbiguous: several matches. NodeNotReady: ``require_ready`` and the node is not READY.
    """
    spec = split_node_spec(name)
    check_names(project=project, zone=zone)
    matches = [n for n in snapshot.nodes
               if all(want is None or have == want for have, want in zip(n.key, spec))
               and project in (None, n.project) and zone in (None, n.zone)]
    if not matches:
        failed = {p.project for p in snapshot.problems if p.zone is None}
        wanted = [spec[0] or project] if (spec[0] or project) else list(searched)
        unanswered = bool(wanted) and not snapshot.nodes and all(p in failed for p in wanted)
        raise NodeNotFound(_not_found(snapshot, name, zone, searched), snapshot.problems, unanswered=unanswered)
    if len(matches) > 1:
        listing = ", ".join(f"{'/'.join(n.key)} ({n.state}, {n.accelerator_type})" for n in matches)
        raise NodeAmbiguous(f"{len(matches)} nodes are named {name!r} ({listing}); name one as "
                            "PROJECT/ZONE/NAME.", matches)
    node = matches[0]
    if require_ready and node.state != "READY":
        raise NodeNotReady(f"Node {node.name} is {node.state}, not READY.", node)
    return node


def _not_found(snapshot: FleetSnapshot, name: str, zone: str | None, searched: Sequence[str]) -> str:
    """``No node 'x' in p1, p2 (zone z); nodes there: a, b. Some projects did not list: ...``."""
    where = ", ".join(searched) or "the configured projects"
    names = sorted({n.name for n in snapshot.nodes})
    shown = ", ".join(names[:MAX_NAMES_SHOWN]) + (f" and {len(names) - MAX_NAMES_SHOWN} more"
                                                  if len(names) > MAX_NAMES_SHOWN else "")
    message = (f"No node {name!r} in {where}" + (f" (zone {zone})" if zone else "")
               + f"; nodes there: {shown or 'none'}.")
    if snapshot.problems:
        failed = "; ".join(f"{p.project}{'/' + p.zone if p.zone else ''}: {p.message}" for p in snapshot.problems)
        message += f" Some projects did not list: {failed}"
    return message


async def find_node(fleet_source: FleetLister, name: str, *, project: str | None = None, zone: str | None = None,
                    require_ready: bool = False) -> Node:
    """List the fleet once and :func:`pick_node` in it.

    Args:
        fleet_source: a ``remote.tpu.api.FleetSource`` (the caller closes it).
        name, project, zone, require_ready: see :func:`pick_node`.

    Raises:
        NodeLookupError and its subclasses (see :func:`pick_node`). CredentialsError: no Google credentials.
    """
    snapshot = await fleet_source.list_fleet()
    searched = [p.id for p in getattr(fleet_source, "projects", ())]
    return pick_node(snapshot, name, project, zone, require_ready=require_ready, searched=searched)


async def find_node_or_request(fleet_source: FleetLister, name: str, *, project: str | None = None,
                               zone: str | None = None) -> tuple[Node | None, QueuedResource | None]:
    """List the fleet once: ``(node, None)`` for a listed node, or ``(None, queued resource)`` when
    no node is named so yet but a queued resource's node spec names it (its node is created later).

    Args:
        fleet_source, name, project, zone: see :func:`find_node`.

    Raises:
        NodeLookupError and its subclasses as :func:`pick_node` (``NodeNotFound`` when neither a node
        nor a node spec of one queued resource has that name; ``NodeAmbiguous`` for several).
    """
    snapshot = await fleet_source.list_fleet()
    searched = [p.id for p in getattr(fleet_source, "projects", ())]
    try:
        return pick_node(snapshot, name, project, zone, searched=searched), None
    except NodeNotFound:
        spec = split_node_spec(name)
        requests = [q for q in snapshot.queued_resources
                    if spec[2] in q.node_ids and spec[0] in (None, q.project) and spec[1] in (None, q.zone)
                    and project in (None, q.project) and zone in (None, q.zone)]
        if len(requests) == 1:
            return None, requests[0]
        if len(requests) > 1:
            listing = ", ".join(f"{'/'.join(q.key)} ({q.state})" for q in requests)
            raise NodeAmbiguous(f"{len(requests)} queued resources create a node named {name!r} ({listing}); "
                                "name one as PROJECT/ZONE/NAME.", ()) from None
        raise


def lookup_exit_code(error: NodeLookupError) -> int:
    """The verbs' exit code for a failed lookup (README table): ``1`` when the fleet could not be
    read (no searched project answered: the API is down) or the node is not READY, ``2`` when the
    name is bad input (unknown in the projects that answered, ambiguous, malformed)."""
    if isinstance(error, NodeNotReady):
        return 1
    if isinstance(error, NodeNotFound) and error.unanswered:
        return 1
    return 2


@contextmanager
def fleet_source_for(config: Config, *, project: str | None = None, zone: str | None = None) -> Iterator[Any]:
    """A ``FleetSource`` over the config's projects (only ``project`` when given), closed on exit.

    A ``project`` missing from the config is listed anyway (in ``zone`` only, when given).

    Raises:
        NodeLookupError: no project to search (none configured and none given), or ``project``
            or ``zone`` breaks GCP's naming rule.
    """
    from console.config import ProjectConfig, config_file_named
    from remote.tpu.api import FleetSource

    check_names(project=project, zone=zone)
    if project:
        known = {p.id: p for p in config.projects}
        projects = [known.get(project) or ProjectConfig(project, (zone,) if zone else ())]
    else:
        projects = list(config.projects)
    if not projects:
        raise NodeLookupError(f"No projects to search: add [[projects]] to {config_file_named(config)} "
                              "or name the node's project.", title="No projects")
    source = FleetSource(projects, api_endpoint=config.api_endpoint, timeout_s=config.request_timeout_s)
    try:
        yield source
    finally:
        source.close()
