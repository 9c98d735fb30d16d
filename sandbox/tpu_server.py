"""Loopback stand-in for the Cloud TPU REST API (``v2`` and ``v2alpha1``), stdlib only.

Serves, for every project of a :class:`~sandbox.fleet_data.SandboxWorld`:

- ``GET /{v}/projects/P/locations`` (zones, paginated like the real ``ListLocations``),
- ``GET /{v}/projects/P/locations/{zone|-}/nodes`` and ``.../queuedResources`` (paginated with
  ``nextPageToken``; ``pageSize`` honoured; ``unreachable`` zones on ``-``),
- ``GET /{v}/projects/P/locations/{zone}/acceleratorTypes`` (the zone's offered types,
  :data:`sandbox.capacity.OFFERED_TYPES`),
- ``GET .../nodes/N`` and ``.../queuedResources/Q``,
- ``POST .../nodes/N:getGuestAttributes`` (body ``{"queryPath", "workerIds"}``),
- ``POST .../queuedResources?queuedResourceId=ID`` (create; the body is a QueuedResource) and
  ``DELETE .../queuedResources/Q[?force=true]``: both answer a long-running Operation, read back
  with ``GET .../operations/OP``; the request then moves through its states over time
  (:mod:`sandbox.queued_lifecycle`) as the zone's capacity allows (:mod:`sandbox.capacity`).

``v2`` answers leave out the v2alpha1-only fields (``provisioningModel``, ``runDuration``,
``schedulingConfig.terminationTimestamp`` / ``provisioningModel`` / ``reservationName``), like
the real API. Errors use the real envelope ``{"error": {"code", "message", "status", ...}}``.
Enums are sent as strings (the client asks for ``enum-encoding=int`` but parses both).

Deleting a queued resource is what an operator asks for, so it is served (an ACTIVE one only
with ``force=true``, like the API); every other destructive call (node delete, stop, reset,
patch, node create) answers 403 "sandbox refuses destructive calls". Every request is
recorded in ``requests`` so tests can prove what was asked.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sandbox.capacity import accelerator_types_json, answer_request
from sandbox.fleet_data import JsonDict, SandboxWorld
from sandbox.loopback_http import LoopbackHttp
from sandbox.queued_lifecycle import QueuedResourceLifecycle, duration_s

_LIST = re.compile(r"^/(v2|v2alpha1)/projects/([^/]+)/locations/([^/]+)/(nodes|queuedResources|acceleratorTypes)$")
_GET = re.compile(r"^/(v2|v2alpha1)/projects/([^/]+)/locations/([^/]+)/(nodes|queuedResources)/([^/:]+)$")
_GUEST = re.compile(r"^/(v2|v2alpha1)/projects/([^/]+)/locations/([^/]+)/nodes/([^/:]+):getGuestAttributes$")
_LOCATIONS = re.compile(r"^/(v2|v2alpha1)/projects/([^/]+)/locations$")
_OPERATION = re.compile(r"^/(v2|v2alpha1)/projects/([^/]+)/locations/([^/]+)/operations/([^/:]+)$")
_RESOURCE_ID = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")

_STATUS_WORD = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 409: "ALREADY_EXISTS",
                503: "UNAVAILABLE"}
#: Flex-start run durations the API accepts: 10 minutes to 7 days.
FLEX_RUN_RANGE_S = (600.0, 7 * 86400.0)


def strip_v2alpha1_fields(item: JsonDict) -> JsonDict:
    """A copy of a node or queued resource without the fields the v2 API does not have."""
    out = copy.deepcopy(item)
    out.pop("provisioningModel", None)
    out.pop("runDuration", None)
    out.pop("bestEffort", None)
    scheduling_configs = [out.get("schedulingConfig")]
    for spec in (out.get("tpu") or {}).get("nodeSpec", []):
        scheduling_configs.append((spec.get("node") or {}).get("schedulingConfig"))
    for sc in scheduling_configs:
        if isinstance(sc, dict):
            for key in ("terminationTimestamp", "provisioningModel", "reservationName"):
                sc.pop(key, None)
    return out


class _ApiError(Exception):
    def __init__(self, code: int, message: str, *, reason: str = "", permission: str = "", status: str = "") -> None:
        super().__init__(message)
        body: JsonDict = {"code": code, "message": message, "status": status or _STATUS_WORD.get(code, "UNKNOWN")}
        if reason:
            body["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                                "domain": "tpu.googleapis.com", "metadata": {"permission": permission}}]
        self.code = code
        self.body = {"error": body}


class SandboxTpuApi:
    """The sandbox TPU REST API server on ``127.0.0.1`` (random port), in a daemon thread.

    Args:
        world: the fleet to serve (read on every request, so edits show up at once).
        latency_s: seconds added to every response (benchmarks, timeouts).
        refuse_wildcard_qr: answer 400 to ``locations/-/queuedResources`` (both API versions),
            to exercise the zone-by-zone fallback.
        refuse_v2alpha1: answer 404 to every ``/v2alpha1`` call (an endpoint without the alpha API).
        page_size: items per page when the client sends no ``pageSize``.
        time_scale: factor on every queued-resource state duration (1.0: the documented seconds).
        clock: monotonic seconds the queued-resource states follow (tests pass one they step).

    Attributes:
        requests: ``(method, path with query)`` of every request received, in order.
        lifecycle: the created and deleted queued resources as they move through their states.
    """

    def __init__(self, world: SandboxWorld, *, latency_s: float = 0.0, refuse_wildcard_qr: bool = False,
                 refuse_v2alpha1: bool = False, page_size: int = 3, time_scale: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.world = world
        self.lifecycle = QueuedResourceLifecycle(world, time_scale=time_scale, clock=clock)
        self.latency_s = latency_s
        self.refuse_wildcard_qr = refuse_wildcard_qr
        self.refuse_v2alpha1 = refuse_v2alpha1
        self.page_size = page_size
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._http = LoopbackHttp("sandbox-tpu-api")

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT`` (only valid after :meth:`start`)."""
        return self._http.endpoint

    def start(self) -> str:
        """Start serving; returns the endpoint ``http://127.0.0.1:PORT``."""
        api = self

        class Handler(_Handler):
            sandbox = api

        return self._http.start(Handler)

    def stop(self) -> None:
        """Stop serving and free the port (idempotent)."""
        self._http.stop()

    def record(self, method: str, path: str) -> None:
        """Append one request to :attr:`requests` (thread-safe)."""
        with self._lock:
            self.requests.append((method, path))

    # --- request handling (called from handler threads) -------------------------------------

    def answer(self, method: str, raw_path: str, body: bytes) -> tuple[int, JsonDict]:
        """The status and JSON body for one request."""
        parts = urlsplit(raw_path)
        path, query = parts.path, parse_qs(parts.query)
        try:
            create = method == "POST" and (m := _LIST.match(path)) is not None and m.group(4) == "queuedResources"
            delete = method == "DELETE" and (m := _GET.match(path)) is not None and m.group(4) == "queuedResources"
            if method != "GET" and not (_GUEST.match(path) or create or delete):
                raise _ApiError(403, "sandbox refuses destructive calls")
            self.lifecycle.advance()
            match = (_LOCATIONS.match(path) or _LIST.match(path) or _GET.match(path) or _GUEST.match(path)
                     or _OPERATION.match(path))
            if not match:
                raise _ApiError(404, f"Method not found: {path}")
            version, project_id = match.group(1), match.group(2)
            if version == "v2alpha1" and self.refuse_v2alpha1:
                raise _ApiError(404, f"Method not found: {path}")
            project = self._project(project_id, path)
            if match.re is _LOCATIONS:
                zones = [{"name": f"projects/{project_id}/locations/{z}", "locationId": z} for z in project.zones]
                page, token = self._page(zones, query)
                return 200, {"locations": page, **({"nextPageToken": token} if token else {})}
            zone = match.group(3)
            if zone != "-" and zone not in project.zones:
                raise _ApiError(404, f"Location projects/{project_id}/locations/{zone} not found")
            if zone in project.unreachable_zones:
                raise _ApiError(503, f"The zone {zone} is currently unreachable")
            if create:
                return 200, self._create(version, project_id, zone, query, body)
            if delete:
                return 200, self._delete(version, project_id, zone, path, query)
            if match.re is _OPERATION:
                op = self.lifecycle.operation_json(path.split("/", 2)[2], version)
                if op is None:
                    raise _ApiError(404, f'Operation "{path.split("/", 2)[2]}" not found')
                if version == "v2" and "@type" in op.get("response", {}):
                    op["response"] = strip_v2alpha1_fields(op["response"])
                return 200, op
            if match.re is _LIST:
                return 200, self._list(version, project_id, zone, match.group(4), query)
            if match.re is _GET:
                return 200, self._get(version, project_id, match.group(4), path)
            return 200, self._guest_attributes(project_id, path, body)
        except _ApiError as exc:
            return exc.code, exc.body

    def _project(self, project_id: str, path: str):
        project = self.world.projects.get(project_id)
        if project is None:
            raise _ApiError(403, f"Permission denied on resource project {project_id}.",
                            reason="CONSUMER_INVALID")
        if project.denied:
            collection = "queuedResources" if "queuedResources" in path else "nodes"
            verb = "list" if path.endswith(("/nodes", "/queuedResources")) else "get"
            permission = f"tpu.{collection}.{verb}" if "/locations/" in path else "tpu.locations.list"
            resource = path.split("/", 2)[2]
            raise _ApiError(403, f"Permission '{permission}' denied on '{resource}'",
                            reason="IAM_PERMISSION_DENIED", permission=permission)
        return project

    def _page(self, items: list[Any], query: dict[str, list[str]]) -> tuple[list[Any], str | None]:
        size = self.page_size
        if query.get("pageSize") and query["pageSize"][0].isdigit() and int(query["pageSize"][0]) > 0:
            size = int(query["pageSize"][0])
        start = 0
        if query.get("pageToken"):
            try:
                start = int(base64.urlsafe_b64decode(query["pageToken"][0].encode()).decode().split(":")[1])
            except (ValueError, IndexError):
                raise _ApiError(400, "Invalid page token") from None
        end = start + size
        token = base64.urlsafe_b64encode(f"offset:{end}".encode()).decode() if end < len(items) else None
        return items[start:end], token

    def _list(self, version: str, project_id: str, zone: str, collection: str,
              query: dict[str, list[str]]) -> JsonDict:
        if zone == "-" and collection == "queuedResources" and self.refuse_wildcard_qr:
            raise _ApiError(400, "Invalid location '-': queued resources must be listed per zone")
        if collection == "acceleratorTypes":
            if zone == "-":
                raise _ApiError(400, "Invalid location '-': accelerator types are listed per zone")
            page, token = self._page(accelerator_types_json(project_id, zone), query)
            return {collection: page, **({"nextPageToken": token} if token else {})}
        items, unreachable = self.world.list(project_id, collection, None if zone == "-" else zone)
        if version == "v2":
            items = [strip_v2alpha1_fields(i) for i in items]
        page, token = self._page(items, query)
        out: JsonDict = {collection: page}
        if token:
            out["nextPageToken"] = token
        elif unreachable:
            out["unreachable"] = unreachable   # on the last page
        return out

    def _get(self, version: str, project_id: str, collection: str, path: str) -> JsonDict:
        name = path.split("/", 2)[2]
        item = self.world.get(project_id, collection, name)
        if item is None:
            kind = "TPU node" if collection == "nodes" else "Queued resource"
            raise _ApiError(404, f'{kind} "{name}" not found')
        return strip_v2alpha1_fields(item) if version == "v2" else item

    def _create(self, version: str, project_id: str, zone: str, query: dict[str, list[str]],
                body: bytes) -> JsonDict:
        """``POST .../queuedResources?queuedResourceId=ID``: validate, store, answer the Operation."""
        qr_id = (query.get("queuedResourceId") or [""])[0]
        if zone == "-":
            raise _ApiError(400, "A queued resource must be created in one zone, not locations/-")
        if not _RESOURCE_ID.match(qr_id):
            raise _ApiError(400, f"Invalid queued resource id {qr_id!r}: 1-63 characters, lower-case letters, "
                                 "digits and hyphens, starting with a letter")
        try:
            qr = json.loads(body or b"{}")
        except ValueError:
            raise _ApiError(400, "Invalid JSON payload received.") from None
        if not isinstance(qr, dict):
            raise _ApiError(400, "Invalid JSON payload received: expected a QueuedResource object.")
        if version == "v2":
            qr = strip_v2alpha1_fields(qr)
        parent = f"projects/{project_id}/locations/{zone}"
        name = f"{parent}/queuedResources/{qr_id}"
        specs = (qr.get("tpu") or {}).get("nodeSpec")
        if not isinstance(specs, list) or not specs:
            raise _ApiError(400, "Field tpu.node_spec is required: a queued resource needs at least one node spec.")
        for spec in specs:
            if spec.get("parent") != parent:
                raise _ApiError(400, f"tpu.node_spec.parent must be {parent!r}, got {spec.get('parent')!r}")
            if not _RESOURCE_ID.match(spec.get("nodeId") or ""):
                raise _ApiError(400, f"Invalid node id {spec.get('nodeId')!r}")
            if not (spec.get("node") or {}).get("acceleratorType"):
                raise _ApiError(400, "Field tpu.node_spec.node.accelerator_type is required.")
            if not (spec.get("node") or {}).get("runtimeVersion"):
                raise _ApiError(400, "Field tpu.node_spec.node.runtime_version is required.")
            if self.world.get(project_id, "nodes", f"{parent}/nodes/{spec['nodeId']}") is not None:
                raise _ApiError(409, f'TPU node "{parent}/nodes/{spec["nodeId"]}" already exists')
        if self.world.get(project_id, "queuedResources", name) is not None:
            raise _ApiError(409, f'Queued resource "{name}" already exists')
        tier = _tier_of(qr)
        if tier == "flex-start":
            run_s = duration_s((qr.get("runDuration") or {}).get("maxRunDuration"))
            low, high = FLEX_RUN_RANGE_S
            if run_s is None or not low <= run_s <= high:
                raise _ApiError(400, "runDuration.maxRunDuration is required for FLEX_START and must be between "
                                     f"{low:g}s (10 minutes) and {high:g}s (7 days)")
        accelerator = specs[0]["node"]["acceleratorType"]
        answer = answer_request(zone, accelerator, tier)
        if answer.outcome == "refuse":
            raise _ApiError(400, answer.message, status="FAILED_PRECONDITION")
        if answer.outcome == "region_quota":
            raise _ApiError(429, answer.message, status="RESOURCE_EXHAUSTED")
        qr["name"] = name
        return self.lifecycle.create(project_id, zone, qr, answer, version)

    def _delete(self, version: str, project_id: str, zone: str, path: str,
                query: dict[str, list[str]]) -> JsonDict:
        """``DELETE .../queuedResources/Q[?force=true]``: an ACTIVE one needs ``force``."""
        name = path.split("/", 2)[2]
        item = self.world.get(project_id, "queuedResources", name)
        if item is None:
            raise _ApiError(404, f'Queued resource "{name}" not found')
        state = (item.get("state") or {}).get("state", "")
        force = (query.get("force") or ["false"])[0].lower() == "true"
        if state in ("ACTIVE", "PROVISIONING") and not force:
            raise _ApiError(400, f'Queued resource "{name}" is {state} and has TPU nodes: delete them first, '
                                 "or delete with force=true", status="FAILED_PRECONDITION")
        return self.lifecycle.delete(project_id, zone, name, version)

    def _guest_attributes(self, project_id: str, path: str, body: bytes) -> JsonDict:
        name = path.split("/", 2)[2].rsplit(":", 1)[0]
        if self.world.get(project_id, "nodes", name) is None:
            raise _ApiError(404, f'TPU node "{name}" not found')
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            raise _ApiError(400, "Invalid JSON payload received.") from None
        with self.world.lock:
            per_worker = copy.deepcopy(self.world.guest_attributes.get(name, []))
        # gcloud asks ``workerIds: [""]`` for every worker (its default worker id is the empty string)
        wanted = [w for w in request.get("workerIds") or [] if str(w) != ""] or [str(w) for w in range(len(per_worker))]
        out = []
        for worker in wanted:
            if not str(worker).isdigit() or int(worker) >= len(per_worker):
                raise _ApiError(400, f"Invalid worker id {worker!r}")
            out.append({"queryPath": request.get("queryPath", ""), "queryValue": {"items": per_worker[int(worker)]}})
        return {"guestAttributes": out}


def _tier_of(qr: JsonDict) -> str:
    """The provisioning tier a create body asks for: one of :data:`sandbox.capacity.TIERS`."""
    specs = (qr.get("tpu") or {}).get("nodeSpec") or [{}]
    scheduling = ((specs[0].get("node") or {}).get("schedulingConfig") or {})
    if qr.get("provisioningModel") == "FLEX_START":
        tier = "flex-start"
    elif "spot" in qr or scheduling.get("spot"):
        tier = "spot"
    elif (qr.get("guaranteed") or {}).get("reserved") or scheduling.get("reserved") or qr.get("reservationName"):
        tier = "reserved"
    else:
        tier = "on-demand"
    return tier


class _Handler(BaseHTTPRequestHandler):
    sandbox: SandboxTpuApi
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True   # headers and body go out as separate writes: no 40 ms delayed-ACK stall

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.sandbox.record(self.command, self.path)
        if self.sandbox.latency_s:
            time.sleep(self.sandbox.latency_s)
        status, payload = self.sandbox.answer(self.command, self.path, body)
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            self.close_connection = True

    do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _handle

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request stderr log."""
