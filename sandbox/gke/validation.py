"""Validation of Deployments as the API server does it before storing one: 422 ``Invalid`` with
``details.causes`` (``reason`` ``FieldValueRequired`` / ``FieldValueInvalid`` / ``FieldValueNotSupported``,
``field`` as a path, ``message``) and the message ``Deployment.apps "NAME" is invalid: FIELD: MESSAGE``
(several causes: ``[a: x, b: y]``).

Checked: metadata.name (DNS-1123 subdomain), spec.replicas >= 0, spec.selector present and matching the
template's labels, spec.strategy.type (``Recreate`` / ``RollingUpdate``; ``rollingUpdate`` only with the
latter), at least one container, each container's name (DNS-1123 label, unique) and image, quantities
of ``resources`` (and requests <= limits for ``google.com/tpu``), restartPolicy ``Always``.
"""

from __future__ import annotations

import re
from typing import Any

from sandbox.gke.store import ApiError, JsonDict

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


def quantity_value(text: Any) -> float:
    """A Kubernetes quantity (``4``, ``500m``, ``16Gi``) as a number; raises ValueError when malformed."""
    raw = str(text)
    if not _QUANTITY.match(raw):
        raise ValueError(raw)
    scale = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "n": 1e-9, "u": 1e-6,
             "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
    for suffix, factor in scale.items():
        if raw.endswith(suffix) and not raw.endswith(("e" + suffix, "E" + suffix)):
            return float(raw[: -len(suffix)]) * factor
    return float(raw)


def _containers(spec: JsonDict, causes: list[JsonDict], where: str = "spec.template.spec.containers") -> None:
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": where})
        return
    seen: set[str] = set()
    for index, container in enumerate(containers):
        at = f"{where}[{index}]"
        if not isinstance(container, dict):
            causes.append({"reason": "FieldValueInvalid", "message": "Invalid value: must be an object", "field": at})
            continue
        name = container.get("name")
        if not name:
            causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": f"{at}.name"})
        elif not isinstance(name, str) or len(name) > 63 or not _LABEL.match(name):
            causes.append({"reason": "FieldValueInvalid", "field": f"{at}.name",
                           "message": f'Invalid value: "{name}": a lowercase RFC 1123 label must consist of lower '
                                      "case alphanumeric characters or '-', and must start and end with an "
                                      "alphanumeric character"})
        elif name in seen:
            causes.append({"reason": "FieldValueDuplicate", "message": f'Duplicate value: "{name}"',
                           "field": f"{at}.name"})
        else:
            seen.add(name)
        if not container.get("image") or not str(container.get("image")).strip():
            causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": f"{at}.image"})
        for word in ("args", "command"):
            if word in container and not (isinstance(container[word], list)
                                          and all(isinstance(a, str) for a in container[word])):
                causes.append({"reason": "FieldValueInvalid", "field": f"{at}.{word}",
                               "message": "Invalid value: must be a list of strings"})
        _resources(container.get("resources") or {}, f"{at}.resources", causes)


def _resources(resources: JsonDict, at: str, causes: list[JsonDict]) -> None:
    values: dict[str, dict[str, float]] = {}
    for part in ("limits", "requests"):
        for name, raw in (resources.get(part) or {}).items():
            try:
                values.setdefault(part, {})[name] = quantity_value(raw)
            except ValueError:
                causes.append({"reason": "FieldValueInvalid", "field": f"{at}.{part}[{name}]",
                               "message": f'Invalid value: "{raw}": quantities must match the regular '
                                          "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"})
    tpu_request = values.get("requests", {}).get("google.com/tpu")
    tpu_limit = values.get("limits", {}).get("google.com/tpu")
    if tpu_request is not None and tpu_request != tpu_limit:
        causes.append({"reason": "FieldValueInvalid", "field": f"{at}.requests[google.com/tpu]",
                       "message": f"Invalid value: \"{tpu_request:g}\": must be equal to google.com/tpu limit of "
                                  f"{0 if tpu_limit is None else tpu_limit:g}"})


def _strategy(spec: JsonDict, causes: list[JsonDict]) -> None:
    strategy = spec.get("strategy") or {}
    kind = strategy.get("type", "RollingUpdate")
    if kind not in ("Recreate", "RollingUpdate"):
        causes.append({"reason": "FieldValueNotSupported", "field": "spec.strategy.type",
                       "message": f'Unsupported value: "{kind}": supported values: "Recreate", "RollingUpdate"'})
    elif kind == "Recreate" and strategy.get("rollingUpdate") is not None:
        causes.append({"reason": "FieldValueForbidden", "field": "spec.strategy.rollingUpdate",
                       "message": "Forbidden: may not be specified when strategy `type` is 'Recreate'"})


def _mapping(value: Any) -> JsonDict:
    return value if isinstance(value, dict) else {}


def _name(obj: JsonDict, causes: list[JsonDict], limit: int = 253) -> str:
    name = str(_mapping(obj.get("metadata")).get("name") or "")
    if not _SUBDOMAIN.match(name) or len(name) > limit:
        causes.append({"reason": "FieldValueInvalid", "field": "metadata.name",
                       "message": f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of '
                                  "lower case alphanumeric characters, '-' or '.'"})
    return name


def validate_deployment(obj: JsonDict) -> None:
    """Raise :class:`ApiError` 422 when ``obj`` is not a valid apps/v1 Deployment."""
    causes: list[JsonDict] = []
    name = _name(obj, causes)
    spec = _mapping(obj.get("spec"))
    replicas = spec.get("replicas", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        causes.append({"reason": "FieldValueInvalid", "field": "spec.replicas",
                       "message": f"Invalid value: {replicas}: must be greater than or equal to 0"})
    template = _mapping(spec.get("template"))
    selector = _mapping(spec.get("selector")).get("matchLabels")
    labels = _mapping(_mapping(template.get("metadata")).get("labels"))
    if not selector:
        causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": "spec.selector"})
    elif any(labels.get(k) != v for k, v in selector.items()):
        causes.append({"reason": "FieldValueInvalid", "field": "spec.template.metadata.labels",
                       "message": f"Invalid value: {labels}: `selector` does not match template `labels`"})
    _strategy(spec, causes)
    pod_spec = _mapping(template.get("spec"))
    _containers(pod_spec, causes)
    restart = pod_spec.get("restartPolicy", "Always")
    if restart != "Always":
        causes.append({"reason": "FieldValueNotSupported", "field": "spec.template.spec.restartPolicy",
                       "message": f'Unsupported value: "{restart}": supported values: "Always"'})
    if causes:
        raise invalid("Deployment", "apps", name, causes)


def invalid(kind: str, group: str, name: str, causes: list[JsonDict]) -> ApiError:
    """The 422 ``Invalid`` Status for ``causes``."""
    parts = [f"{c['field']}: {c['message']}" for c in causes]
    shown = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {shown}',
                    {"name": name, "group": group, "kind": kind, "causes": causes})


def validate_lws(obj: JsonDict) -> None:
    """Raise :class:`ApiError` 422 when ``obj`` is not a valid ``leaderworkerset.x-k8s.io/v1``
    LeaderWorkerSet: replicas >= 0, ``leaderWorkerTemplate.size`` >= 1, a worker template (and the leader
    template, when given) with valid containers."""
    causes: list[JsonDict] = []
    name = _name(obj, causes, limit=63)               # pod names NAME-G-W must stay DNS labels
    spec = _mapping(obj.get("spec"))
    replicas = spec.get("replicas", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        causes.append({"reason": "FieldValueInvalid", "field": "spec.replicas",
                       "message": f"Invalid value: {replicas}: must be greater than or equal to 0"})
    lwt = _mapping(spec.get("leaderWorkerTemplate"))
    size = lwt.get("size", 1)
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        causes.append({"reason": "FieldValueInvalid", "field": "spec.leaderWorkerTemplate.size",
                       "message": f"Invalid value: {size}: must be greater than or equal to 1"})
    if "workerTemplate" not in lwt:
        causes.append({"reason": "FieldValueRequired", "message": "Required value",
                       "field": "spec.leaderWorkerTemplate.workerTemplate"})
    for part in ("leaderTemplate", "workerTemplate"):
        if part in lwt:
            _containers(_mapping(_mapping(lwt[part]).get("spec")), causes,
                        f"spec.leaderWorkerTemplate.{part}.spec.containers")
    if causes:
        raise invalid("LeaderWorkerSet", "leaderworkerset.x-k8s.io", name, causes)
