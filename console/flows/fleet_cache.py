"""The last fleet on disk, so the console's first frame has a fleet before the first TPU API list.

One JSON file (``$XDG_STATE_HOME/tpu-console/fleet-cache.json`` by default), rewritten after
each successful refresh and read once at start. It holds the fields the fleet tables show for
every node, queued resource and problem (the shapes of :mod:`remote.models`), the time it was
saved and the ``source`` it came from (``"demo"`` or the config file), so the sandbox's fleet is
never shown as a real one. The nodes' and requests' raw REST JSON is not kept (node metadata
may carry startup scripts with tokens); free-text fields go through
:func:`remote.secrets.scrub_text`. A file that is missing, unreadable, not JSON, of another
version or of another source is ignored (``None``): the console says "loading fleet…" instead.

File shape (version 1)::

    {"version": 1, "source": "demo", "saved_at": "2026-12-01T13:00:00+00:00",
     "nodes": [{...Node fields, times as ISO 8601, workers as lists...}],
     "queued_resources": [{...}], "problems": [{...}]}
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from remote.models import FleetProblem, FleetSnapshot, Node, QueuedResource, WorkerEndpoint, utc_now
from remote.secrets import scrub_text

VERSION = 1
#: The file's name under the XDG state folder of tpu-console.
FILE_NAME = "fleet-cache.json"
#: The sandbox's fleet (``--demo``) has a file of its own, so a demo run never overwrites the cache
#: of the operator's real fleet (a mismatched source is never shown, so that cache was lost).
DEMO_FILE_NAME = "fleet-cache-demo.json"
_TIME_FIELDS = ("termination_time", "create_time")
_TEXT_FIELDS = ("health_description", "failure")
_IDENTITY = ("project", "zone", "name", "state", "provisioning_model")


def default_cache_path(*, demo: bool = False) -> Path:
    """``$XDG_STATE_HOME/tpu-console/fleet-cache.json`` (platformdirs' user state path);
    ``fleet-cache-demo.json`` for the sandbox's fleet."""
    import platformdirs

    return platformdirs.user_state_path("tpu-console") / (DEMO_FILE_NAME if demo else FILE_NAME)


@dataclass(frozen=True)
class CachedFleet:
    """A fleet read back from the cache.

    Attributes:
        snapshot: the nodes, queued resources and problems as last listed (no ``raw`` JSON).
        saved_at: when it was written (UTC).
    """

    snapshot: FleetSnapshot
    saved_at: datetime


def _item_json(item: Node | QueuedResource) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(item):
        if f.name == "raw":
            continue
        value = getattr(item, f.name)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif f.name in _TEXT_FIELDS and isinstance(value, str):
            value = scrub_text(value)
        elif f.name == "workers":
            value = [[w.worker, w.internal_ip, w.external_ip] for w in value]
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


def _time(value: Any) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError("time is not a string")
    return datetime.fromisoformat(value)


def _check_text(item: Node | QueuedResource) -> None:
    """Every field that is text in the model is text (or ``None``) in what was read back."""
    for f in dataclasses.fields(item):
        value = getattr(item, f.name)
        if f.name in ("raw", "workers", "symptoms", "node_ids", "max_run_duration_s") or isinstance(value, datetime):
            continue
        if not (isinstance(value, str) or (value is None and f.name not in _IDENTITY)):
            raise TypeError(f"{f.name} is not text")
    if isinstance(item, Node) and not isinstance(item.accelerator_type, str):
        raise TypeError("accelerator_type is not text")
    for w in getattr(item, "workers", ()):
        if not all(v is None or isinstance(v, str) for v in (w.internal_ip, w.external_ip)):
            raise TypeError("worker address is not text")


#: The fields read back (computed once: ``dataclasses.fields`` per record was most of a 50,000-node load).
_NODE_FIELDS = frozenset(f.name for f in dataclasses.fields(Node)) - {"raw"}
_QR_FIELDS = frozenset(f.name for f in dataclasses.fields(QueuedResource)) - {"raw"}


def _node(data: dict[str, Any]) -> Node:
    fields = {k: v for k, v in data.items() if k in _NODE_FIELDS}
    for name in _TIME_FIELDS:
        fields[name] = _time(fields.get(name))
    fields["symptoms"] = tuple(str(s) for s in fields.get("symptoms") or ())
    fields["workers"] = tuple(WorkerEndpoint(int(w), i, e) for w, i, e in fields.get("workers") or ())
    node = Node(**fields)
    _check_text(node)
    return node


def _queued(data: dict[str, Any]) -> QueuedResource:
    fields = {k: v for k, v in data.items() if k in _QR_FIELDS}
    for name in _TIME_FIELDS:
        fields[name] = _time(fields.get(name))
    fields["node_ids"] = tuple(str(s) for s in fields.get("node_ids") or ())
    if fields.get("max_run_duration_s") is not None:
        fields["max_run_duration_s"] = float(fields["max_run_duration_s"])
    qr = QueuedResource(**fields)
    _check_text(qr)
    return qr


#: Temporary files a save writes before renaming; one left by a process that ended mid-save (the
#: console leaves with ``os._exit``, :func:`console.tui.leave_now`) is removed by a later save.
TEMP_PREFIX = ".fleet-cache."
#: Age (seconds) past which a temporary file is a leftover, not another process's save in flight.
STALE_TEMP_S = 300.0


def _remove_stale_temporaries(folder: Path, now_s: float) -> None:
    """Remove ``TEMP_PREFIX*`` files in ``folder`` older than :data:`STALE_TEMP_S` (errors ignored)."""
    for leftover in folder.glob(TEMP_PREFIX + "*"):
        try:
            if now_s - leftover.stat().st_mtime > STALE_TEMP_S:
                leftover.unlink()
        except OSError:
            pass


@dataclass(frozen=True)
class FleetCache:
    """Where the last fleet is kept, and whose fleet it is.

    Attributes:
        path: the JSON file (:func:`default_cache_path` in production).
        source: whose fleet: ``"demo"`` for the sandbox, else the config file's path.
    """

    path: Path
    source: str

    def save(self, snapshot: FleetSnapshot, now: datetime | None = None) -> None:
        """Write ``snapshot`` (atomically: a temporary file renamed over the old one).

        Raises:
            OSError: the folder or file cannot be written.
        """
        data = {
            "version": VERSION, "source": self.source, "saved_at": (now or utc_now()).isoformat(),
            "nodes": [_item_json(n) for n in snapshot.nodes],
            "queued_resources": [_item_json(q) for q in snapshot.queued_resources],
            "problems": [p.to_json() for p in snapshot.problems],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _remove_stale_temporaries(self.path.parent, now_s=time.time())
        fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def read(self) -> CacheFile | None:
        """The file parsed, its records not read yet (:class:`CacheFile`: the fleet screen reads a
        screenful first, the rest a chunk at a time); ``None`` as :meth:`load`. Never raises."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or data.get("version") != VERSION or data.get("source") != self.source:
                return None
            saved_at = _time(data["saved_at"])
            if saved_at is None or not isinstance(data["nodes"], list) or not isinstance(
                    data["queued_resources"], list):
                return None
            problems = tuple(FleetProblem(str(p["project"]), p.get("zone"), int(p.get("code") or 0),
                                          str(p.get("message") or "")) for p in data["problems"])
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
            return None
        return CacheFile(saved_at, data["nodes"], data["queued_resources"], problems)

    def load(self) -> CachedFleet | None:
        """The cached fleet, or ``None`` when there is none usable (missing, unreadable, corrupt,
        another version or another ``source``). Never raises."""
        file = self.read()
        if file is None:
            return None
        try:
            snapshot = file.snapshot(len(file.node_records), len(file.qr_records))
        except UNREADABLE:
            return None
        return CachedFleet(snapshot, file.saved_at)


#: What reading a cached record may raise (a file edited or of another shape): the cache is not used.
UNREADABLE = (ValueError, KeyError, TypeError, AttributeError)


@dataclass(frozen=True)
class CacheFile:
    """A cache file parsed as JSON; its records are read on demand (a slice at a time).

    Attributes:
        saved_at: when it was written (UTC).
        node_records, qr_records: the nodes' and queued resources' JSON objects, in the fleet's order.
        problems: the problems listed with them.
    """

    saved_at: datetime
    node_records: list[Any]
    qr_records: list[Any]
    problems: tuple[FleetProblem, ...]

    def nodes(self, start: int, stop: int) -> list[Node]:
        """Nodes ``start:stop``.

        Raises:
            ValueError, KeyError, TypeError, AttributeError (:data:`UNREADABLE`): a record is not a node.
        """
        return [_node(n) for n in self.node_records[start:stop]]

    def queued_resources(self, start: int, stop: int) -> list[QueuedResource]:
        """Queued resources ``start:stop``; raises as :meth:`nodes`."""
        return [_queued(q) for q in self.qr_records[start:stop]]

    def snapshot(self, nodes: int, queued_resources: int) -> FleetSnapshot:
        """The first ``nodes`` nodes and ``queued_resources`` queued resources; raises as :meth:`nodes`."""
        return FleetSnapshot(tuple(self.nodes(0, nodes)), tuple(self.queued_resources(0, queued_resources)),
                             self.problems, fetched_at=self.saved_at)


def cache_for(config_path: Path | None, *, demo: bool, path: Path | None = None) -> FleetCache:
    """The production cache: ``path`` (default :func:`default_cache_path`) for the sandbox's fleet
    (``demo``, its own file) or the fleet of the config file at ``config_path`` (``None``: the
    default config; configs share one file and each sees only its own fleet)."""
    source = "demo" if demo else str(config_path.resolve() if config_path is not None else "default config")
    return FleetCache(path or default_cache_path(demo=demo), source)
