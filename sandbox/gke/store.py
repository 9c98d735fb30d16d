"""The Kubernetes API stand-in's object store: objects by resource, namespace and name, one
``resourceVersion`` counter for all of them, a bounded log of watch events, label and field selectors.

Shapes follow the real API server: every write bumps the cluster-wide ``metadata.resourceVersion``
(a decimal string); ``metadata.uid`` and ``creationTimestamp`` (RFC 3339, seconds) are set on create;
``metadata.generation`` starts at 1 and grows when a Deployment's or ReplicaSet's ``spec`` changes.
Errors are :class:`ApiError`, which renders the ``Status`` object the API server answers with.

Thread-safe: one :class:`threading.Condition` guards everything; watchers wait on it.
"""

from __future__ import annotations

import copy
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

JsonDict = dict[str, Any]

#: resource -> (apiVersion, kind, namespaced)
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "namespaces": ("v1", "Namespace", False),
    "nodes": ("v1", "Node", False),
    "pods": ("v1", "Pod", True),
    "events": ("v1", "Event", True),
    "services": ("v1", "Service", True),
    "deployments": ("apps/v1", "Deployment", True),
    "replicasets": ("apps/v1", "ReplicaSet", True),
    "leaderworkersets": ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", True),
}
#: Watch events kept for resuming from a resourceVersion; older ones answer 410 Gone.
EVENT_LOG_SIZE = 4000
#: Terms a label or field selector may have.
MAX_SELECTOR_TERMS = 32
_GROUPS = {"apps/v1": "apps", "v1": "", "leaderworkerset.x-k8s.io/v1": "leaderworkerset.x-k8s.io"}


def rfc3339(epoch_s: float | None = None) -> str:
    """``2026-12-02T17:30:00Z`` for ``epoch_s`` (default now), as Kubernetes prints timestamps."""
    return datetime.fromtimestamp(time.time() if epoch_s is None else epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    """An API error answered as a ``Status`` (``code``: HTTP status, ``reason``: Kubernetes' reason word)."""

    def __init__(self, code: int, reason: str, message: str, details: JsonDict | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> JsonDict:
        """The ``Status`` object: ``{"kind": "Status", "status": "Failure", "message", "reason", "code"}``."""
        out: JsonDict = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                         "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            out["details"] = self.details
        return out


def not_found(resource: str, name: str) -> ApiError:
    """404 as the API server words it: ``deployments.apps "x" not found``."""
    api_version = RESOURCES.get(resource, ("v1", "", True))[0]
    group = _GROUPS.get(api_version, api_version.split("/")[0])
    shown = f"{resource}.{group}" if group else resource
    return ApiError(404, "NotFound", f'{shown} "{name}" not found',
                    {"name": name, "group": group, "kind": resource})


def conflict(resource: str, name: str) -> ApiError:
    """409 for a stale ``resourceVersion``, as the API server words it."""
    api_version = RESOURCES[resource][0]
    group = _GROUPS.get(api_version, "")
    shown = f"{resource}.{group}" if group else resource
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {shown} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                    {"name": name, "group": group, "kind": resource})


# --- selectors --------------------------------------------------------------------------------

_TERM = re.compile(r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9._-]*)|\s+(in|notin)\s*\(([^)]*)\))?\s*$")


def _split_terms(text: str) -> list[str]:
    terms, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(text[start:index])
            start = index + 1
    terms.append(text[start:])
    terms = [t for t in terms if t.strip()]
    if len(terms) > MAX_SELECTOR_TERMS:
        raise ApiError(400, "BadRequest", f"too many selector terms ({len(terms)} > {MAX_SELECTOR_TERMS})")
    return terms


@dataclass(frozen=True)
class Selector:
    """A parsed label or field selector: ``(key, operator, values)`` terms, all of which must hold.

    Operators: ``=`` (also ``==``), ``!=``, ``in``, ``notin``, ``exists``, ``!`` (does not exist).
    """

    terms: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    @classmethod
    def parse(cls, text: str, *, fields: bool = False) -> Selector:
        """Parse ``app=vllm,tier in (a,b),!canary``; field selectors take ``=``, ``==`` and ``!=`` only.

        Raises:
            ApiError: 400 with the API server's wording for a term it cannot read.
        """
        terms = []
        for raw in _split_terms(text or ""):
            found = _TERM.match(raw)
            if found is None or (fields and (found.group(5) or found.group(1) or not found.group(3))):
                kind = "field" if fields else "label"
                raise ApiError(400, "BadRequest", f"unable to parse requirement: invalid {kind} selector: {raw!r}")
            negate, key, op, value, set_op, values = found.groups()
            if set_op:
                terms.append((key, set_op, tuple(v.strip() for v in values.split(",") if v.strip())))
            elif op:
                terms.append((key, "!=" if op == "!=" else "=", (value,)))
            else:
                terms.append((key, "!" if negate else "exists", ()))
        return cls(tuple(terms))

    def matches(self, values: dict[str, str]) -> bool:
        """Whether ``values`` (labels, or field path -> value) satisfies every term."""
        for key, op, wanted in self.terms:
            have = values.get(key)
            ok = {"=": have == wanted[0] if wanted else False, "!=": have != wanted[0] if wanted else True,
                  "in": have in wanted, "notin": have not in wanted,
                  "exists": have is not None, "!": have is None}[op]
            if not ok:
                return False
        return True


def field_values(obj: JsonDict, selector: Selector) -> dict[str, str]:
    """The values of the field paths ``selector`` names (``metadata.name``, ``spec.nodeName``,
    ``involvedObject.uid``...), read from ``obj``; missing fields read as ``""`` as Kubernetes does."""
    out = {}
    for key, _, _ in selector.terms:
        node: Any = obj
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        out[key] = "" if node is None else str(node)
    return out


# --- the store ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class WatchEvent:
    """One write: its resourceVersion, the resource, the object before (None on create; on delete,
    the deleted object at the delete's resourceVersion) and after (None on delete), deep copies."""

    rv: int
    resource: str
    old: JsonDict | None
    new: JsonDict | None


@dataclass
class ObjectStore:
    """Every object of the cluster, by ``(resource, namespace, name)`` (``""`` namespace when cluster-scoped)."""

    objects: dict[tuple[str, str, str], JsonDict] = field(default_factory=dict)
    events: deque[WatchEvent] = field(default_factory=lambda: deque(maxlen=EVENT_LOG_SIZE))
    rv: int = 1000
    closed: bool = False
    cond: threading.Condition = field(default_factory=threading.Condition)

    def _bump(self, obj: JsonDict) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def _record(self, resource: str, old: JsonDict | None, new: JsonDict | None) -> None:
        self.events.append(WatchEvent(self.rv, resource, copy.deepcopy(old), copy.deepcopy(new)))
        self.cond.notify_all()

    def create(self, resource: str, obj: JsonDict) -> JsonDict:
        """Store a new object (sets uid, creationTimestamp, resourceVersion, generation); returns a copy.

        Raises:
            ApiError: 409 AlreadyExists.
        """
        with self.cond:
            meta = obj.setdefault("metadata", {})
            key = (resource, meta.get("namespace", "") if RESOURCES[resource][2] else "", meta["name"])
            if key in self.objects:
                api_version = RESOURCES[resource][0]
                group = _GROUPS.get(api_version, "")
                shown = f"{resource}.{group}" if group else resource
                raise ApiError(409, "AlreadyExists", f'{shown} "{meta["name"]}" already exists',
                               {"name": meta["name"], "group": group, "kind": resource})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", rfc3339())
            if resource in ("deployments", "replicasets", "leaderworkersets"):
                meta["generation"] = 1
            self._bump(obj)
            self.objects[key] = obj
            self._record(resource, None, obj)
            return copy.deepcopy(obj)

    def update(self, resource: str, obj: JsonDict, *, expect_rv: str | None = None) -> JsonDict:
        """Replace a stored object with ``obj`` (same key); bumps generation when ``spec`` changed.

        Raises:
            ApiError: 404 when gone, 409 when ``expect_rv`` is given and is not the stored version.
        """
        with self.cond:
            meta = obj["metadata"]
            key = (resource, meta.get("namespace", "") if RESOURCES[resource][2] else "", meta["name"])
            old = self.objects.get(key)
            if old is None:
                raise not_found(resource, meta["name"])
            if expect_rv is not None and expect_rv != old["metadata"]["resourceVersion"]:
                raise conflict(resource, meta["name"])
            for kept in ("uid", "creationTimestamp"):
                meta[kept] = old["metadata"][kept]
            if resource in ("deployments", "replicasets", "leaderworkersets"):
                meta["generation"] = old["metadata"]["generation"] + (obj.get("spec") != old.get("spec"))
            if obj == old:
                return copy.deepcopy(old)                     # a no-op write keeps its resourceVersion
            self._bump(obj)
            self.objects[key] = obj
            self._record(resource, old, obj)
            return copy.deepcopy(obj)

    def delete(self, resource: str, namespace: str, name: str) -> JsonDict:
        """Remove an object; returns it. Raises ApiError 404 when absent."""
        with self.cond:
            old = self.objects.pop((resource, namespace, name), None)
            if old is None:
                raise not_found(resource, name)
            gone = copy.deepcopy(old)
            self._bump(gone)                                  # a DELETED event carries the final version
            self._record(resource, gone, None)
            return gone

    def get(self, resource: str, namespace: str, name: str) -> JsonDict | None:
        """A deep copy of one object, or ``None``."""
        with self.cond:
            found = self.objects.get((resource, namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def items(self, resource: str, namespace: str | None = None) -> Iterator[JsonDict]:
        """The live objects of ``resource`` (no copies: hold :attr:`cond` while using them), sorted by
        namespace and name as the API server lists them."""
        for (res, ns, _name), obj in sorted(self.objects.items()):
            if res == resource and (namespace is None or ns == namespace):
                yield obj

    def list(self, resource: str, namespace: str | None, labels: Selector, fields: Selector) -> tuple[list[JsonDict], int]:
        """Deep copies of the matching objects and the resourceVersion the list was read at."""
        with self.cond:
            found = [copy.deepcopy(o) for o in self.items(resource, namespace) if selected(o, labels, fields)]
            return found, self.rv


def selected(obj: JsonDict, labels: Selector, fields: Selector) -> bool:
    """Whether ``obj`` matches both selectors."""
    return labels.matches(obj.get("metadata", {}).get("labels") or {}) and fields.matches(field_values(obj, fields))


def parse_rfc3339(text: str) -> float:
    """Epoch seconds of an RFC 3339 timestamp (``2026-12-02T17:30:00Z``, fractions and offsets allowed).

    Raises:
        ValueError: not a timestamp.
    """
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
