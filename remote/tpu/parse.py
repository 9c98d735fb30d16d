"""TPU REST JSON (camelCase, v2 / v2alpha1) -> :mod:`remote.models`: the one place that reads it.

Both data paths end here as plain REST JSON dicts:

- the google-cloud-tpu v2 library objects, turned back into REST JSON by :func:`message_to_json`
  (``MessageToDict``: camelCase keys, enum names, int64 ``id`` as a string, RFC 3339 times);
- the raw v2alpha1 REST resources, which keep the flex-start fields that library 1.28 drops.

:func:`merge_v2alpha1` lays the v2alpha1-only fields over the v2 dict (matched by resource
name); :func:`node_from_json` and :func:`queued_resource_from_json` build the models.

Field sources (Cloud TPU REST discovery docs, revision 20261001; see
``../shared/design/research/gcp-tpu-api.md`` §1.3-1.5):

- node: ``schedulingConfig.{spot, preemptible, reserved}`` (v2) and
  ``schedulingConfig.{provisioningModel, terminationTimestamp, reservationName}`` (v2alpha1 only);
- queued resource: ``spot`` / ``guaranteed`` / ``bestEffort`` tiers, ``provisioningModel``
  (v2alpha1 only; ``FLEX_START``) and ``runDuration.{maxRunDuration, terminationTime}``
  (v2alpha1 only); ``state`` is an object ``{state, stateInitiator, failedData: {error}}``.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

from google.protobuf import json_format

from remote.models import Node, QueuedResource, WorkerEndpoint
from remote.names import name_problem
from remote.printable import shown_name

JsonDict = dict[str, Any]

#: Node ``schedulingConfig`` keys that only v2alpha1 has.
NODE_V2ALPHA1_SCHEDULING_KEYS = ("provisioningModel", "terminationTimestamp", "reservationName")
#: Queued-resource keys that only v2alpha1 has.
QR_V2ALPHA1_KEYS = ("provisioningModel", "runDuration", "bestEffort")


def message_to_json(message: Any) -> JsonDict:
    """A google-cloud-tpu (proto-plus) message as the REST JSON the API sent (minus unknown fields).

    Args:
        message: e.g. a ``tpu_v2.Node`` or ``tpu_v2.QueuedResource``.

    Returns:
        camelCase dict; enums as names; unset fields left out, like the REST API does.
    """
    pb = type(message).pb(message) if hasattr(type(message), "pb") else message
    data: dict[str, Any] = json_format.MessageToDict(pb, preserving_proto_field_name=False,
                                                     use_integers_for_enums=False)
    return data


def merge_v2alpha1(v2: JsonDict, alpha: JsonDict | None) -> JsonDict:
    """The v2 resource with the v2alpha1-only flex-start fields of ``alpha`` laid over it.

    Everything else comes from ``v2``. ``alpha=None`` (supplement unavailable) returns a copy of ``v2``.
    """
    out = copy.deepcopy(v2)
    if not alpha:
        return out
    for key in QR_V2ALPHA1_KEYS:
        if key in alpha and "tpu" in alpha:          # queued resource
            out[key] = copy.deepcopy(alpha[key])
    alpha_sc = alpha.get("schedulingConfig")
    if isinstance(alpha_sc, dict) and alpha_sc and "tpu" not in alpha:              # node
        sc = out.setdefault("schedulingConfig", {})
        for key in NODE_V2ALPHA1_SCHEDULING_KEYS:
            if key in alpha_sc:
                sc[key] = alpha_sc[key]
    return out


def parse_time(value: str | None) -> datetime | None:
    """RFC 3339 (``2025-06-01T10:05:31.123456Z``, up to nanoseconds) -> aware UTC datetime, or ``None``."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("z", "Z"))


def parse_duration_s(value: str | None) -> float | None:
    """google-duration (``"14400s"``, ``"1.5s"``) -> seconds, or ``None``."""
    if not value:
        return None
    return float(value.rstrip("s"))


def split_name(name: str) -> tuple[str, str, str]:
    """``projects/P/locations/Z/nodes/N`` -> ``(P, Z, N)`` (any collection)."""
    parts = name.split("/")
    if len(parts) != 6 or parts[0] != "projects" or parts[2] != "locations":
        raise ValueError(f"not a TPU resource name: {name!r}")
    return parts[1], parts[3], parts[5]


def checked_name(name: object, kind: str) -> tuple[str, str, str]:
    """``projects/P/locations/Z/{nodes|queuedResources}/N`` -> ``(P, Z, N)``, each checked against
    GCP's naming rule (:mod:`remote.names`; ``kind`` is ``"node"`` or ``"queued resource"``).

    Raises:
        ValueError: not such a name, or a part breaks its rule (the sentence says which).
    """
    if not isinstance(name, str):
        raise ValueError(f"the {kind}'s name is not a string")
    project, zone, short = split_name(name)
    for part_kind, value in (("project", project), ("zone", zone), (kind, short)):
        problem = name_problem(part_kind, value)
        if problem is not None:
            raise ValueError(problem)
    return project, zone, short


def qr_provisioning_model(qr: JsonDict) -> str:
    """Provisioning model of a queued resource (JSON), one of ``remote.models.PROVISIONING_MODELS``.

    ``provisioningModel`` FLEX_START -> flex-start; SPOT, the ``spot`` tier or a spot node spec ->
    spot; ``bestEffort`` tier or a preemptible node spec -> preemptible; RESERVATION_BOUND,
    ``guaranteed.reserved``, a ``reservationName`` or a reserved node spec -> reserved; else on-demand.
    """
    model = qr.get("provisioningModel")
    specs = [(s.get("node") or {}).get("schedulingConfig") or {} for s in (qr.get("tpu") or {}).get("nodeSpec", [])]
    if model == "FLEX_START":
        return "flex-start"
    if model == "SPOT" or "spot" in qr or any(sc.get("spot") for sc in specs):
        return "spot"
    if "bestEffort" in qr or any(sc.get("preemptible") for sc in specs):
        return "preemptible"
    if (model == "RESERVATION_BOUND" or (qr.get("guaranteed") or {}).get("reserved") or qr.get("reservationName")
            or any(sc.get("reserved") for sc in specs)):
        return "reserved"
    return "on-demand"


def node_provisioning_model(node: JsonDict, owner: QueuedResource | None = None) -> str:
    """Provisioning model of a node (JSON), given its owning queued resource when known.

    A node owned by a flex-start queued resource is flex-start; then the node's
    ``schedulingConfig``: SPOT / ``spot`` -> spot, ``preemptible`` -> preemptible,
    RESERVATION_BOUND / ``reserved`` -> reserved; a ``terminationTimestamp`` without any of
    those -> flex-start (the node enum has no FLEX_START value); else on-demand.
    """
    if owner is not None and owner.provisioning_model == "flex-start":
        return "flex-start"
    sc = node.get("schedulingConfig") or {}
    model = sc.get("provisioningModel")
    if model == "FLEX_START":
        return "flex-start"
    if model == "SPOT" or sc.get("spot"):
        return "spot"
    if sc.get("preemptible"):
        return "preemptible"
    if model == "RESERVATION_BOUND" or sc.get("reserved"):
        return "reserved"
    if sc.get("terminationTimestamp"):
        return "flex-start"
    return "on-demand"


def queued_resource_from_json(qr: JsonDict) -> QueuedResource:
    """A :class:`QueuedResource` from its REST JSON (v2, or v2 merged with v2alpha1).

    Raises:
        ValueError, KeyError, TypeError: the JSON lacks a usable ``name`` or has malformed values.
    """
    project, zone, name = checked_name(qr["name"], "queued resource")
    state = qr.get("state") or {}
    specs = (qr.get("tpu") or {}).get("nodeSpec", [])
    run = qr.get("runDuration") or {}
    node_ids = []
    for spec in specs:
        params = spec.get("multisliceParams") or spec.get("multiNodeParams") or {}
        node_ids.append(spec.get("nodeId") or params.get("nodeIdPrefix") or "")
    error = (state.get("failedData") or {}).get("error") or {}
    return QueuedResource(
        project=project, zone=zone, name=name,
        state=state.get("state") or "STATE_UNSPECIFIED",
        provisioning_model=qr_provisioning_model(qr),
        state_initiator=state.get("stateInitiator"),
        accelerator_type=((specs[0].get("node") or {}).get("acceleratorType") if specs else None),
        max_run_duration_s=parse_duration_s(run.get("maxRunDuration")),
        termination_time=parse_time(run.get("terminationTime")),
        create_time=parse_time(qr.get("createTime")),
        failure=error.get("message") or None,
        node_ids=tuple(n for n in node_ids if n),
        raw=qr,
    )


def _node_id(value: Any) -> str | None:
    """int64 ``id`` (JSON string or int) as a canonical decimal string; 0 or missing -> ``None``.

    The library leaves a zero id out entirely, so raw ``"000..."`` must mean "none" too.
    """
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return str(number) if number else None


def find_owner(node: JsonDict, queued_resources: dict[tuple[str, str], QueuedResource]) -> QueuedResource | None:
    """The queued resource owning ``node``: by its ``queuedResource`` name, else by a node spec's id.

    Args:
        node: node JSON.
        queued_resources: the project's queued resources keyed by ``(zone, short name)``.
    """
    _, zone, name = split_name(node["name"])
    if node.get("queuedResource"):
        found = queued_resources.get((zone, node["queuedResource"].rsplit("/", 1)[-1]))
        if found is not None:
            return found
    for (qr_zone, _), qr in queued_resources.items():
        if qr_zone == zone and name in qr.node_ids:
            return qr
    return None


def node_from_json(node: JsonDict, owner: QueuedResource | None = None) -> Node:
    """A :class:`Node` from its REST JSON (v2, or v2 merged with v2alpha1).

    Args:
        node: node JSON.
        owner: its queued resource when known (see :func:`find_owner`); gives flex-start and
            the termination-time fallbacks.

    Termination time: ``schedulingConfig.terminationTimestamp``, else the owner's
    ``runDuration.terminationTime``, else ``createTime`` + the owner's ``maxRunDuration``.

    Raises:
        ValueError, KeyError, TypeError: malformed JSON, or a name that breaks GCP's naming rule
            (:func:`checked_name`).
    """
    project, zone, name = checked_name(node["name"], "node")
    sc = node.get("schedulingConfig") or {}
    create_time = parse_time(node.get("createTime"))
    termination = parse_time(sc.get("terminationTimestamp"))
    if termination is None and owner is not None:
        termination = owner.termination_time
        if termination is None and owner.max_run_duration_s and create_time and owner.state == "ACTIVE":
            termination = create_time + timedelta(seconds=owner.max_run_duration_s)
    workers = tuple(
        WorkerEndpoint(worker=i, internal_ip=ep.get("ipAddress") or None,
                       external_ip=(ep.get("accessConfig") or {}).get("externalIp") or None)
        for i, ep in enumerate(node.get("networkEndpoints") or []))
    qr_name = node.get("queuedResource")
    return Node(
        project=project, zone=zone, name=name,
        state=node.get("state") or "STATE_UNSPECIFIED",
        accelerator_type=node.get("acceleratorType") or "",
        provisioning_model=node_provisioning_model(node, owner),
        termination_time=termination,
        health=node.get("health"),
        health_description=node.get("healthDescription"),
        symptoms=tuple(s.get("symptomType", "") for s in node.get("symptoms") or []),
        runtime_version=node.get("runtimeVersion"),
        queued_resource=qr_name.rsplit("/", 1)[-1] if qr_name else (owner.name if owner else None),
        create_time=create_time,
        node_id=_node_id(node.get("id")),
        workers=workers,
        raw=node,
    )


def project_from_json(v2_nodes: list[JsonDict], alpha_nodes: list[JsonDict], v2_qrs: list[JsonDict],
                      alpha_qrs: list[JsonDict]) -> tuple[list[Node], list[QueuedResource], list[str]]:
    """One project's listings (v2 primary, v2alpha1 supplement matched by name) as models.

    Every v2 item yields a row; a v2alpha1 item only adds its flex-start fields. Nodes get their
    owning queued resource (:func:`find_owner`) for the provisioning model and termination time.

    Returns:
        ``(nodes, queued resources, messages)``; one message per item that could not be read
        (never dropped silently).
    """
    unreadable: list[str] = []
    qrs: dict[tuple[str, str], QueuedResource] = {}
    alpha_by_name = {item.get("name"): item for item in alpha_qrs}
    for item in v2_qrs:
        try:
            qr = queued_resource_from_json(merge_v2alpha1(item, alpha_by_name.get(item.get("name"))))
            qrs[(qr.zone, qr.name)] = qr
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            unreadable.append(f"unreadable queued resource {shown_name(item.get('name'))}: {_reason(exc)}")
    nodes: list[Node] = []
    alpha_by_name = {item.get("name"): item for item in alpha_nodes}
    for item in v2_nodes:
        try:
            merged = merge_v2alpha1(item, alpha_by_name.get(item.get("name")))
            nodes.append(node_from_json(merged, find_owner(merged, qrs)))
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            unreadable.append(f"unreadable node {shown_name(item.get('name'))}: {_reason(exc)}")
    return nodes, list(qrs.values()), unreadable


def _reason(exc: BaseException) -> str:
    """Why a record could not be read, in words: a sentence of ours as it is, a library's
    exception with its type (``KeyError: 'name'``)."""
    if isinstance(exc, ValueError) and exc.args and isinstance(exc.args[0], str):
        return exc.args[0]
    return f"{type(exc).__name__}: {exc}"
