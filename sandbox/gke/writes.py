"""Writes to the Kubernetes API stand-in: ``POST`` / ``PUT`` / ``PATCH`` / ``DELETE`` of Deployments and
LeaderWorkerSets (validated, with the API server's defaults), ``DELETE`` of pods (gracefully: ``Terminating``
first), ``deployments/NAME/scale``.

A PATCH takes ``application/json-patch+json``, ``application/merge-patch+json`` or
``application/strategic-merge-patch+json`` (:mod:`.patches`); a JSON patch op that fails is 422 with no
details (as the API server answers it), a ``metadata.resourceVersion`` in the result that is not the stored
one 409 Conflict, an invalid Deployment 422 Invalid (:mod:`.validation`); ``dryRun=All`` stores nothing.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from sandbox.gke.patches import PatchFailed, json_patch, merge_patch, strategic_merge_patch
from sandbox.gke.store import RESOURCES, ApiError, JsonDict, ObjectStore, conflict, not_found, rfc3339
from sandbox.gke.validation import validate_deployment, validate_lws

_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json",
                "application/strategic-merge-patch+json")


def typed(resource: str, obj: JsonDict) -> JsonDict:
    """``obj`` with ``apiVersion`` and ``kind`` first, as single objects and watch events carry them."""
    api_version, kind, _ = RESOURCES[resource]
    return {"apiVersion": api_version, "kind": kind, **{k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}}


def write(store: ObjectStore, method: str, resource: str, namespace: str, name: str | None,
          query: dict[str, str], body: bytes, content_type: str) -> tuple[int, JsonDict]:
    """POST / PUT / PATCH / DELETE; returns ``(status code, body)``. Raises ApiError."""
    if method == "DELETE" and name is not None and resource in ("pods", *_WORKLOADS):
        return 200, _delete(store, resource, namespace, name)
    if resource not in _WORKLOADS or (method == "POST") != (name is None):
        raise ApiError(405, "MethodNotAllowed", f"the sandbox does not {method} {resource}")
    try:
        payload = json.loads(body or b"null")
    except ValueError as exc:
        raise ApiError(400, "BadRequest", f"the body is not JSON: {exc}") from None
    dry = query.get("dryRun") == "All"
    if method == "PATCH":
        assert name is not None
        return 200, _patch(store, resource, namespace, name, payload, content_type.split(";")[0], dry)
    if not isinstance(payload, dict):
        raise ApiError(400, "BadRequest", f"the body must be a {RESOURCES[resource][1]} object")
    payload.setdefault("metadata", {})["namespace"] = namespace
    deployment = _WORKLOADS[resource][0](payload)
    _WORKLOADS[resource][1](deployment)
    if method == "POST":
        deployment.pop("status", None)
        return 201, typed(resource, deployment if dry else store.create(resource, deployment))
    assert name is not None
    if deployment["metadata"].get("name") != name:
        raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
    with store.cond:
        current = store.get(resource, namespace, name)
        if current is None:
            raise not_found(resource, name)
        deployment["status"] = current.get("status", {})
        expect = deployment["metadata"].get("resourceVersion") or None
        return 200, typed(resource, deployment if dry else store.update(resource, deployment, expect_rv=expect))

def _patch(store: ObjectStore, resource: str, namespace: str, name: str, patch: Any, content_type: str,
           dry: bool) -> JsonDict:
    with store.cond:
        current = store.get(resource, namespace, name)
        if current is None:
            raise not_found(resource, name)
        patched = _patched(typed(resource, current), patch, content_type)
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
            raise ApiError(400, "BadRequest", "the patch does not leave an object")
        meta = patched["metadata"]
        if meta.get("name") != name or meta.get("namespace") != namespace:
            raise ApiError(400, "BadRequest", "the patch may not change the object's name or namespace")
        expect = meta.get("resourceVersion")
        if expect != current["metadata"]["resourceVersion"]:
            raise conflict(resource, name)
        patched = _WORKLOADS[resource][0](patched)
        _WORKLOADS[resource][1](patched)
        patched["status"] = current.get("status", {})
        patched.pop("apiVersion", None)
        patched.pop("kind", None)
        return typed(resource, patched if dry else store.update(resource, patched))

def _delete(store: ObjectStore, resource: str, namespace: str, name: str) -> JsonDict:
    with store.cond:
        current = store.get(resource, namespace, name)
        if current is None:
            raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
        if resource == "pods":
            if not current["metadata"].get("deletionTimestamp"):
                current["metadata"]["deletionTimestamp"] = rfc3339()
                current["metadata"]["deletionGracePeriodSeconds"] = int(
                    current["spec"].get("terminationGracePeriodSeconds", 30))
                current = store.update("pods", current)
            return typed("pods", current)
        store.delete(resource, namespace, name)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": RESOURCES[resource][0].rpartition("/")[0], "kind": resource,
                            "uid": current["metadata"]["uid"]}}


def _scale_of(deployment: JsonDict) -> JsonDict:
    meta = deployment["metadata"]
    selector = ",".join(f"{k}={v}" for k, v in (deployment["spec"].get("selector") or {}).get("matchLabels", {}).items())
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")},
            "spec": {"replicas": deployment["spec"].get("replicas", 1)},
            "status": {"replicas": (deployment.get("status") or {}).get("replicas", 0), "selector": selector}}


def scale(store: ObjectStore, method: str, namespace: str, name: str, body: bytes, content_type: str) -> JsonDict:
    """``deployments/NAME/scale`` (an ``autoscaling/v1`` Scale): GET, PATCH (any of the three patch types)
    or PUT; a write sets the Deployment's ``spec.replicas``. Raises ApiError (404, 409, 422)."""
    with store.cond:
        current = store.get("deployments", namespace, name)
        if current is None:
            raise ApiError(404, "NotFound", f'deployments.apps "{name}" not found')
        doc = _scale_of(current)
        if method == "GET":
            return doc
        try:
            given = json.loads(body or b"null")
            wanted = _patched(doc, given, content_type.split(";")[0]) if method == "PATCH" else given
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"the body is not JSON: {exc}") from None
        replicas = (wanted.get("spec") or {}).get("replicas") if isinstance(wanted, dict) else None
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise ApiError(422, "Invalid", f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: '
                           f"{replicas}: must be greater than or equal to 0")
        expect = (wanted.get("metadata") or {}).get("resourceVersion")
        if expect and expect != current["metadata"]["resourceVersion"]:
            raise conflict("deployments", name)
        current["spec"]["replicas"] = replicas
        return _scale_of(store.update("deployments", current))


def _patched(doc: JsonDict, patch: Any, content_type: str) -> Any:
    if content_type not in _PATCH_TYPES:
        raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                       f"accepted media types include: {', '.join(_PATCH_TYPES)}")
    try:
        if content_type == _PATCH_TYPES[0]:
            return json_patch(doc, patch)
        if content_type == _PATCH_TYPES[1]:
            return merge_patch(doc, patch)
        return strategic_merge_patch(doc, patch)
    except PatchFailed:               # as the API server answers: 422 with no details
        raise ApiError(422, "Invalid", "the server rejected our request due to an error in our request") from None


def with_defaults(deployment: JsonDict) -> JsonDict:
    """A Deployment with the API server's defaults filled in (replicas 1, RollingUpdate 25%/25%,
    revisionHistoryLimit 10, progressDeadlineSeconds 600, restartPolicy Always, ...)."""
    out = copy.deepcopy(deployment)
    spec = out.setdefault("spec", {})
    if not isinstance(spec, dict):
        return out
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    strategy = spec.setdefault("strategy", {})
    if isinstance(strategy, dict):
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            strategy.setdefault("rollingUpdate", {"maxUnavailable": "25%", "maxSurge": "25%"})
    template = spec.get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        pod = template["spec"]
        for key, value in (("restartPolicy", "Always"), ("terminationGracePeriodSeconds", 30),
                           ("dnsPolicy", "ClusterFirst"), ("schedulerName", "default-scheduler")):
            pod.setdefault(key, value)
    return out


def lws_with_defaults(lws: JsonDict) -> JsonDict:
    """A LeaderWorkerSet with the LWS webhook's defaults (replicas 1, size 1, restartPolicy
    RecreateGroupOnPodRestart, startupPolicy LeaderCreated, rolloutStrategy RollingUpdate 1/0)."""
    out = copy.deepcopy(lws)
    spec = out.setdefault("spec", {})
    if not isinstance(spec, dict):
        return out
    spec.setdefault("replicas", 1)
    spec.setdefault("startupPolicy", "LeaderCreated")
    spec.setdefault("rolloutStrategy", {"type": "RollingUpdate",
                                        "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}})
    template = spec.get("leaderWorkerTemplate")
    if isinstance(template, dict):
        template.setdefault("size", 1)
        template.setdefault("restartPolicy", "RecreateGroupOnPodRestart")
    return out


#: resource -> (defaults, validation) of the workloads the sandbox takes writes of
_WORKLOADS = {"deployments": (with_defaults, validate_deployment),
              "leaderworkersets": (lws_with_defaults, validate_lws)}
