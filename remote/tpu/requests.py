"""Requesting and deleting TPU capacity: create / get / delete of queued resources.

A :class:`QueuedResourceRequest` is the operator's request (name, project, zone, accelerator
type, runtime version, provisioning model, flex-start max run duration, valid-until). It knows
its exact REST body, the REST call it makes and the equivalent
``gcloud alpha compute tpus queued-resources create`` line.

:class:`QueuedResourceService` sends it: through google-cloud-tpu's v2 ``TpuClient``
(``create_queued_resource`` / ``delete_queued_resource``, long-running operations polled by the
library) for spot, on-demand and reserved; a flex-start request carries ``provisioningModel``
and ``runDuration``, which the library drops, so it is POSTed to v2alpha1 (the only v2alpha1
write) and its Operation is then polled with the library's ``get_operation``.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.api_core import operation as gapi_operation
from google.cloud import tpu_v2
from google.longrunning import operations_pb2

from remote.errors import TpuApiError
from remote.models import REQUEST_MODELS, QueuedResource, chip_generation
from remote.tpu.api import FleetSource, base_url
from remote.tpu.parse import JsonDict

#: Flex-start run durations the API accepts, seconds: 10 minutes to 7 days.
FLEX_RUN_RANGE_S = (600.0, 7 * 86400.0)
#: Runtime version used when none is given, by chip generation.
DEFAULT_RUNTIME = {"v5e": "v2-alpha-tpuv5-lite", "v6e": "v2-alpha-tpuv6e", "v5p": "v2-alpha-tpuv5"}

_ID = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_ZONE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration_s(text: str) -> float:
    """``"4h"``, ``"90m"``, ``"1h30m"``, ``"7d"``, ``"600s"`` or ``"600"`` -> seconds.

    Raises:
        ValueError: not a positive duration in those units.
    """
    value = text.strip().lower()
    if value.replace(".", "", 1).isdigit():
        seconds = float(value)
    else:
        parts = _DURATION.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise ValueError(f"{text!r} is not a duration (examples: 4h, 90m, 1h30m, 7d)")
        seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"{text!r}: a duration must be positive")
    return seconds


def format_duration(seconds: float) -> str:
    """Seconds as gcloud writes a duration flag: ``14400`` -> ``4h``, ``5400`` -> ``90m``, ``45`` -> ``45s``."""
    s = int(seconds)
    if s and s % 86400 == 0:
        return f"{s // 86400}d"
    if s and s % 3600 == 0:
        return f"{s // 3600}h"
    if s and s % 60 == 0:
        return f"{s // 60}m"
    return f"{s}s"


@dataclass(frozen=True)
class QueuedResourceRequest:
    """One request for TPU capacity, as the operator typed it.

    Attributes:
        name: queued resource id (``queuedResourceId``), also the node id unless ``node_id``.
        project, zone: where (``zone`` like ``us-west4-a``).
        accelerator_type: e.g. ``v5litepod-1``, ``v6e-8``.
        runtime_version: TPU VM image, e.g. ``v2-alpha-tpuv6e``.
        provisioning_model: one of :data:`REQUEST_MODELS`.
        max_run_duration_s: flex-start run duration in seconds (required for flex-start, only there).
        valid_until_s: ``queueingPolicy.validUntilDuration``: how long it may wait, seconds, or ``None``.
        node_id: the node's id (default: ``name``).
    """

    name: str
    project: str
    zone: str
    accelerator_type: str
    runtime_version: str
    provisioning_model: str
    max_run_duration_s: float | None = None
    valid_until_s: float | None = None
    node_id: str | None = None

    def __post_init__(self) -> None:
        """Check every field; the message says which and what is allowed.

        Raises:
            ValueError: a bad name, zone, accelerator type, model or duration.
        """
        for label, value in (("queued resource name", self.name), ("node id", self.node)):
            if not _ID.match(value):
                raise ValueError(f"{label} {value!r}: 1-63 characters of lower-case letters, digits and hyphens, "
                                 "starting with a letter and not ending with a hyphen")
        if not self.project or any(c.isspace() or c == "/" for c in self.project):
            raise ValueError(f"project {self.project!r} is not a project id")
        if not _ZONE.match(self.zone):
            raise ValueError(f"zone {self.zone!r} is not a zone (for example us-west4-a)")
        if not re.match(r"^v[0-9a-z]+-\d+$", self.accelerator_type):
            raise ValueError(f"accelerator type {self.accelerator_type!r} is not one (for example v5litepod-1, v6e-8)")
        if not self.runtime_version.strip() or any(c.isspace() for c in self.runtime_version):
            raise ValueError(f"runtime version {self.runtime_version!r} is not one (for example v2-alpha-tpuv6e)")
        if self.provisioning_model not in REQUEST_MODELS:
            raise ValueError(f"provisioning model {self.provisioning_model!r}: expected one of "
                             + ", ".join(REQUEST_MODELS))
        if self.provisioning_model == "flex-start":
            low, high = FLEX_RUN_RANGE_S
            if self.max_run_duration_s is None:
                raise ValueError("flex-start needs a max run duration (--max-run-duration, 10m to 7d); "
                                 "it is billed until it ends or is deleted")
            if not low <= self.max_run_duration_s <= high:
                raise ValueError(f"max run duration {format_duration(self.max_run_duration_s)}: flex-start runs "
                                 "10 minutes to 7 days")
        elif self.max_run_duration_s is not None:
            raise ValueError("a max run duration applies only to flex-start")
        if self.valid_until_s is not None and self.valid_until_s < 1:
            raise ValueError("valid-until must be at least 1 second")

    @property
    def node(self) -> str:
        """The node id the request creates."""
        return self.node_id or self.name

    @property
    def parent(self) -> str:
        """``projects/P/locations/Z``."""
        return f"projects/{self.project}/locations/{self.zone}"

    @property
    def api_version(self) -> str:
        """``v2alpha1`` for flex-start (its fields exist only there), else ``v2``."""
        return "v2alpha1" if self.provisioning_model == "flex-start" else "v2"

    def rest_body(self) -> JsonDict:
        """The exact REST body (camelCase QueuedResource) the create call sends."""
        node: JsonDict = {"acceleratorType": self.accelerator_type, "runtimeVersion": self.runtime_version}
        if self.provisioning_model == "reserved":
            node["schedulingConfig"] = {"reserved": True}
        body: JsonDict = {"tpu": {"nodeSpec": [{"parent": self.parent, "nodeId": self.node, "node": node}]}}
        if self.provisioning_model == "spot":
            body["spot"] = {}
        if self.provisioning_model == "flex-start":
            body["provisioningModel"] = "FLEX_START"
            body["runDuration"] = {"maxRunDuration": f"{int(self.max_run_duration_s or 0)}s"}
        if self.valid_until_s is not None:
            body["queueingPolicy"] = {"validUntilDuration": f"{int(self.valid_until_s)}s"}
        return body

    def rest_call(self, api_endpoint: str | None = None) -> str:
        """``POST https://tpu.googleapis.com/v2alpha1/projects/P/locations/Z/queuedResources?queuedResourceId=N``,
        at the endpoint actually used (``api_endpoint`` from the config; the sandbox's is loopback)."""
        return (f"POST {base_url(api_endpoint)}/{self.api_version}/{self.parent}/queuedResources"
                f"?queuedResourceId={self.name}")

    def gcloud_argv(self) -> list[str]:
        """The equivalent ``gcloud alpha compute tpus queued-resources create`` argv."""
        argv = ["gcloud", "alpha", "compute", "tpus", "queued-resources", "create", self.name,
                f"--node-id={self.node}", f"--project={self.project}", f"--zone={self.zone}",
                f"--accelerator-type={self.accelerator_type}", f"--runtime-version={self.runtime_version}"]
        if self.provisioning_model == "spot":
            argv.append("--spot")
        elif self.provisioning_model == "reserved":
            argv.append("--reserved")
        elif self.provisioning_model == "flex-start":
            argv += ["--provisioning-model=flex-start",
                     f"--max-run-duration={format_duration(self.max_run_duration_s or 0)}"]
        if self.valid_until_s is not None:
            argv.append(f"--valid-until-duration={format_duration(self.valid_until_s)}")
        return argv

    def gcloud_line(self) -> str:
        """:meth:`gcloud_argv` quoted for a shell (``shlex.join``)."""
        return shlex.join(self.gcloud_argv())

    def to_json(self, api_endpoint: str | None = None) -> JsonDict:
        """``{"request": {...fields}, "rest_call", "rest_body", "gcloud"}`` for ``--json``
        (``rest_call`` at ``api_endpoint``, see :meth:`rest_call`)."""
        return {"request": {"name": self.name, "project": self.project, "zone": self.zone,
                            "accelerator_type": self.accelerator_type, "runtime_version": self.runtime_version,
                            "provisioning_model": self.provisioning_model, "node_id": self.node,
                            "max_run_duration_s": self.max_run_duration_s, "valid_until_s": self.valid_until_s},
                "rest_call": self.rest_call(api_endpoint), "rest_body": self.rest_body(), "gcloud": self.gcloud_line()}


def default_runtime_version(accelerator_type: str) -> str | None:
    """The usual TPU VM runtime for an accelerator type (``v6e-8`` -> ``v2-alpha-tpuv6e``), or ``None``."""
    return DEFAULT_RUNTIME.get(chip_generation(accelerator_type) or "")


class QueuedResourceService:
    """Create, read and delete queued resources through a :class:`FleetSource`'s clients.

    Args:
        source: the fleet source (its v2 client, v2alpha1 supplement and thread pool are used).
        poll_initial_s: first wait between polls of a long-running operation, seconds.
        poll_max_s: longest wait between polls, seconds.
    """

    def __init__(self, source: FleetSource, *, poll_initial_s: float = 0.2, poll_max_s: float = 2.0) -> None:
        self.source = source
        self.poll_initial_s = poll_initial_s
        self.poll_max_s = poll_max_s

    def _polling(self, timeout_s: float) -> Any:
        return gapi_operation.polling.DEFAULT_POLLING.with_delay(
            initial=self.poll_initial_s, maximum=self.poll_max_s).with_timeout(timeout_s)

    async def create(self, request: QueuedResourceRequest, *, timeout_s: float = 120.0) -> QueuedResource:
        """Send ``request`` and wait for its create operation (the request is accepted, not yet ACTIVE).

        Returns:
            The queued resource as the API now reports it (typically ACCEPTED / WAITING_FOR_RESOURCES).

        Raises:
            TpuApiError: the API refused it (400 invalid / refused, 403, 409 exists, 429 quota...) or the
                operation failed or did not finish within ``timeout_s``.
            CredentialsError: no usable credentials.
        """
        client, alpha = await self.source.clients()
        body = request.rest_body()
        call_timeout_s = self.source.timeout_s
        if request.api_version == "v2":
            message = tpu_v2.QueuedResource.from_json(json.dumps(body))

            def create_v2() -> None:
                op = client.create_queued_resource(parent=request.parent, queued_resource=message,
                                                   queued_resource_id=request.name, timeout=call_timeout_s)
                op.result(timeout=timeout_s, polling=self._polling(timeout_s))

            await self.source.call(create_v2)
        else:
            op_json = await self.source.call(alpha.post, f"{request.parent}/queuedResources", body,
                                             {"queuedResourceId": request.name})
            await self._wait_operation(client, str(op_json.get("name", "")), timeout_s)
        return await self.source.get_queued_resource(request.project, request.zone, request.name)

    async def _wait_operation(self, client: tpu_v2.TpuClient, name: str, timeout_s: float) -> None:
        """Poll the Operation ``name`` with the library's ``get_operation`` until done.

        Raises:
            TpuApiError: the operation ended with an error, or is not done within ``timeout_s``.
        """
        if not name:
            raise TpuApiError("the API answered the create without an operation name")
        deadline = time.monotonic() + timeout_s
        delay = self.poll_initial_s
        while True:
            op: operations_pb2.Operation = await self.source.call(
                lambda: client.get_operation(request=operations_pb2.GetOperationRequest(name=name),
                                             timeout=self.source.timeout_s))
            if op.done:
                if op.HasField("error"):
                    raise TpuApiError(op.error.message or f"operation {name} failed", code=_http_code(op.error.code))
                return
            if time.monotonic() + delay > deadline:
                raise TpuApiError(f"operation {name} not done after {timeout_s:g} s")
            await asyncio.sleep(delay)
            delay = min(self.poll_max_s, delay * 1.5)

    async def get(self, project: str, zone: str, name: str) -> QueuedResource:
        """One queued resource (v2 + v2alpha1 fields).

        Raises:
            TpuApiError: 404 when there is none; any other API failure.
        """
        return await self.source.get_queued_resource(project, zone, name)

    async def delete(self, project: str, zone: str, name: str, *, force: bool = False,
                     timeout_s: float = 300.0) -> None:
        """Delete one queued resource and wait until the API reports it gone.

        ``force`` also deletes the nodes it owns (the API refuses an ACTIVE one without it).

        Raises:
            TpuApiError: 404 no such resource, 400 ACTIVE without ``force``, a failed or slow operation.
        """
        client, _ = await self.source.clients()
        request = tpu_v2.DeleteQueuedResourceRequest(
            name=f"projects/{project}/locations/{zone}/queuedResources/{name}", force=force)
        call_timeout_s = self.source.timeout_s

        def delete_v2() -> None:
            op = client.delete_queued_resource(request=request, timeout=call_timeout_s)
            op.result(timeout=timeout_s, polling=self._polling(timeout_s))

        await self.source.call(delete_v2)

    async def follow(self, project: str, zone: str, name: str, *,
                     on_change: Callable[[QueuedResource, Any], None], until: Callable[[QueuedResource, Any], bool],
                     poll_s: float = 2.0, timeout_s: float = 3600.0) -> tuple[QueuedResource, Any]:
        """Poll a queued resource (and its first node) until ``until(qr, node)`` holds.

        ``on_change(qr, node)`` is called whenever the queued resource's state or its node's
        state changes (``node`` is a :class:`remote.models.Node` or ``None`` before it exists).

        Returns:
            The last ``(queued resource, node or None)``.

        Raises:
            TpuApiError: a read failed, or ``until`` did not hold within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        seen: tuple[str, str | None] | None = None
        while True:
            qr = await self.get(project, zone, name)
            node = None
            if qr.node_ids:
                try:
                    node = await self.source.get_node(project, zone, qr.node_ids[0])
                except TpuApiError as exc:
                    if exc.code != 404:
                        raise
            now_seen = (qr.state, None if node is None else node.state)
            if now_seen != seen:
                seen = now_seen
                on_change(qr, node)
            if until(qr, node):
                return qr, node
            if time.monotonic() + poll_s > deadline:
                raise TpuApiError(f"queued resource {name} still {qr.state} after {timeout_s:g} s")
            await asyncio.sleep(poll_s)


def _http_code(rpc_code: int) -> int:
    """A google.rpc code as the HTTP status the REST API would use (8 RESOURCE_EXHAUSTED -> 429...)."""
    return {3: 400, 5: 404, 6: 409, 7: 403, 8: 429, 9: 400, 14: 503, 4: 504}.get(rpc_code, 500)
