"""A GKE workload's serving container as a :class:`~remote.container.spec.ContainerSpec`, a swap's JSON patch,
and the lints only a workload has. Pure functions.

- :func:`spec_of` reads the container (image, plain ``env`` values, ``command`` + ``args``) into the spec the
  VM path lints, so the same flag rules apply (:func:`remote.container.lint.lint`).
- :func:`edited_args` applies ``--set`` / ``--unset`` to the container's ``args`` in the style they are
  written in (``--flag=value`` or ``--flag value``), leaving every other word as it was.
- :func:`swap_patch` is the JSON patch (RFC 6902): a ``test`` of ``metadata.resourceVersion`` first (the
  server refuses the patch with 422 when the object changed since it was read), then the container's
  ``args`` and ``image``. A merge patch of ``containers`` would replace the whole list.
- :func:`lws_swap_patch`: a LeaderWorkerSet's in ONE patch (one new revision, one group replacement): the
  same ``test``, then the serving container of the leader template and of the worker template (each
  template's own container index; args edited in each template that runs vLLM with flags, the image in both).
- :func:`workload_lints`: a rolling update that cannot schedule on full TPU nodes (the new pod waits for
  chips the old one holds: ``Recreate`` or ``maxSurge: 0``), no ``VLLM_XLA_CACHE_PATH`` (every pod
  compiles from nothing), a startupProbe shorter than the boot the history expects (vllm#17386).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from remote.container.lint import Finding
from remote.container.parse import parse_serve_args
from remote.container.spec import ContainerSpec
from remote.gke.models import Workload
from remote.gke.parse import serving_container

JsonDict = dict[str, Any]
#: The launcher a ``command``-less vLLM TPU image runs (its entrypoint), ``--model`` form.
API_SERVER = ("python3", "-m", "vllm.entrypoints.openai.api_server")


def pod_spec_of(workload: Workload) -> JsonDict:
    """The pod spec of a Deployment's template (or an LWS's leader / worker template), ``{}`` when absent."""
    spec = workload.raw.get("spec") or {}
    if workload.kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        template = lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {}
    else:
        template = spec.get("template") or {}
    pod = template.get("spec") if isinstance(template, dict) else None
    return pod if isinstance(pod, dict) else {}


def container_index(workload: Workload) -> int:
    """The serving container's index in the pod spec's ``containers``.

    Raises:
        ValueError: the workload has no such container.
    """
    containers = pod_spec_of(workload).get("containers") or []
    for i, c in enumerate(containers[:100]):
        if isinstance(c, dict) and c.get("name") == workload.container:
            return i
    raise ValueError(f"{workload.ref} has no container named {workload.container!r}")


def spec_of(workload: Workload) -> ContainerSpec:
    """The serving container as a :class:`ContainerSpec` (for the lint and the diff).

    Raises:
        ValueError: no model in its command line, or values the spec refuses.
    """
    container = serving_container(pod_spec_of(workload))
    command = [w for w in container.get("command") or [] if isinstance(w, str)]
    args = [w for w in container.get("args") or [] if isinstance(w, str)]
    words = command + args
    launcher: tuple[str, ...]
    if "serve" in words:                       # vllm serve MODEL ...
        tail, launcher = words[words.index("serve") + 1:], ("vllm", "serve")
    elif "vllm.entrypoints.openai.api_server" in words:
        tail, launcher = words[words.index("vllm.entrypoints.openai.api_server") + 1:], API_SERVER
    else:
        tail, launcher = args, API_SERVER
    serve = parse_serve_args(tail if tail[:1] and not tail[0].startswith("-") else ["-", *tail])
    if not serve.model:
        raise ValueError(f"{workload.ref}: the container's command line names no model (no --model, no serve MODEL)")
    env = {e["name"]: e["value"] for e in container.get("env") or []
           if isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("value"), str)}
    return ContainerSpec(name=str(container.get("name") or "vllm"), image=str(container.get("image") or ""),
                         model=serve.model, env=env, network="pod", privileged=False, shm_size=None,
                         serve_flags=serve.flags, extra_args=serve.extra, launcher=launcher)


def _flag_at(word: str, flag: str) -> bool:
    name = word.split("=", 1)[0].lstrip("-").replace("_", "-").lower()
    return word.startswith("--") and name == flag


def edited_args(args: list[str], changes: Mapping[str, str | None]) -> list[str]:
    """``args`` with each ``flag -> value`` set (``None``: removed; ``""``: a bare switch), written as the
    flag was (``--flag=value`` or ``--flag value``), a new flag appended as ``--flag=value``."""
    out = list(args)
    for key, value in changes.items():
        flag = key.lstrip("-").replace("_", "-").lower()
        i = next((n for n, w in enumerate(out) if _flag_at(w, flag)), None)
        joined = i is None or "=" in out[i]
        span = 1
        if i is not None and "=" not in out[i] and i + 1 < len(out) and not out[i + 1].startswith("--"):
            span = 2
        if value is None:
            if i is not None:
                del out[i:i + span]
            continue
        words = [f"--{flag}"] if value == "" else [f"--{flag}={value}"] if joined else [f"--{flag}", value]
        if i is None:
            out += words
        else:
            out[i:i + span] = words
    return out


def swap_patch(workload: Workload, index: int, *, args: list[str] | None, image: str | None) -> list[JsonDict]:
    """The JSON patch of a swap: ``test`` resourceVersion, then ``args`` and/or ``image`` of container ``index``."""
    base = "/spec/template/spec" if workload.kind == "Deployment" else "/spec/leaderWorkerTemplate/workerTemplate/spec"
    ops: list[JsonDict] = [{"op": "test", "path": "/metadata/resourceVersion", "value": workload.resource_version}]
    if args is not None:
        ops.append({"op": "add", "path": f"{base}/containers/{index}/args", "value": args})
    if image is not None:
        ops.append({"op": "replace", "path": f"{base}/containers/{index}/image", "value": image})
    return ops


LWS_PARTS = ("leaderTemplate", "workerTemplate")


def lws_template_containers(workload: Workload) -> list[tuple[str, int, JsonDict]]:
    """``(part, index, container)`` of the serving container (named ``workload.container``) in each template
    a LeaderWorkerSet has: ``leaderTemplate`` (when given) then ``workerTemplate``."""
    lwt = (workload.raw.get("spec") or {}).get("leaderWorkerTemplate") or {}
    found = []
    for part in LWS_PARTS:
        template = lwt.get(part)
        containers = ((template or {}).get("spec") or {}).get("containers") or [] if isinstance(template, dict) else []
        for i, c in enumerate(containers[:100]):
            if isinstance(c, dict) and c.get("name") == workload.container:
                found.append((part, i, c))
                break
    return found


def _serves_with_flags(container: Mapping[str, Any]) -> bool:
    """The container's ``args`` carry vLLM's flags (``--model``, ``serve MODEL``): a Ray worker's do not."""
    words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
    return any(w == "--model" or w.startswith("--model=") for w in words) or "serve" in words


def lws_swap_patch(workload: Workload, flags: Mapping[str, str | None], image: str | None) -> list[JsonDict]:
    """The JSON patch of a LeaderWorkerSet swap: ``test`` resourceVersion, then for each template's serving
    container its ``args`` (``flags`` applied by :func:`edited_args`, where it runs vLLM with flags) and
    ``image``.

    Raises:
        ValueError: no template has the serving container.
    """
    parts = lws_template_containers(workload)
    if not parts:
        raise ValueError(f"{workload.ref} has no container named {workload.container!r} in its templates")
    ops: list[JsonDict] = [{"op": "test", "path": "/metadata/resourceVersion", "value": workload.resource_version}]
    for part, index, container in parts:
        base = f"/spec/leaderWorkerTemplate/{part}/spec/containers/{index}"
        if flags and _serves_with_flags(container):
            ops.append({"op": "add", "path": f"{base}/args",
                        "value": edited_args(list(container.get("args") or []), flags)})
        if image is not None:
            ops.append({"op": "replace", "path": f"{base}/image", "value": image})
    return ops


def _probe_budget_s(probe: object) -> float | None:
    """Seconds a startupProbe allows before the kubelet kills the container, or ``None`` without one."""
    if not isinstance(probe, dict):
        return None
    def num(key: str, default: float) -> float:
        value = probe.get(key)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default
    return num("initialDelaySeconds", 0) + num("periodSeconds", 10) * num("failureThreshold", 3)


def _cache_problem(container: Mapping[str, Any], pod_spec: Mapping[str, Any]) -> str:
    """Why the XLA compile cache does not outlive the pod (``""`` when it does): no ``VLLM_XLA_CACHE_PATH``,
    or one on no volume / on an ``emptyDir`` (gone with the pod)."""
    env = {e.get("name"): e.get("value") for e in container.get("env") or [] if isinstance(e, dict)}
    path = env.get("VLLM_XLA_CACHE_PATH")
    if not isinstance(path, str) or not path:
        return ("no VLLM_XLA_CACHE_PATH in the container's env: every new pod compiles XLA from nothing; point it "
                "at a volume that outlives the pod (a PVC or GCS FUSE)")
    mounts = [m for m in container.get("volumeMounts") or [] if isinstance(m, dict)
              and isinstance(m.get("mountPath"), str) and (path + "/").startswith(m["mountPath"].rstrip("/") + "/")]
    if not mounts:
        return f"VLLM_XLA_CACHE_PATH {path} is on no volume: the cache dies with the container; mount a PVC or GCS FUSE there"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    volume = next((v for v in pod_spec.get("volumes") or [] if isinstance(v, dict) and v.get("name") == mount.get("name")), {})
    if "emptyDir" in volume:
        return (f"VLLM_XLA_CACHE_PATH {path} is on emptyDir volume {mount.get('name')}, which dies with the pod: every "
                "rollout compiles XLA again; use a PVC or GCS FUSE volume")
    return ""


def workload_lints(workload: Workload, pool_chips: int | None, predicted_boot_s: float | None) -> list[Finding]:
    """The workload's own lints (see the module docstring); ``pool_chips`` the chips of one node of its pool."""
    findings: list[Finding] = []
    spec = workload.raw.get("spec") or {}
    strategy = spec.get("strategy") or {}
    rolling = (strategy.get("rollingUpdate") or {}) if isinstance(strategy, dict) else {}
    surge = str(rolling.get("maxSurge", "25%"))
    if (workload.kind == "Deployment" and workload.strategy != "Recreate" and surge not in ("0", "0%")
            and workload.chips and pool_chips and workload.chips > pool_chips // 2):
        findings.append(Finding("gke-rolling-update-tpu", "warning",
                                f"{workload.ref} rolls out with maxSurge {surge}: the new pod needs {workload.chips} "
                                f"google.com/tpu that the old pod holds on a full {pool_chips}-chip node, so it stays "
                                "Pending (Insufficient google.com/tpu); use strategy Recreate or maxSurge 0"))
    container = serving_container(pod_spec_of(workload))
    problem = _cache_problem(container, pod_spec_of(workload))
    if problem:
        findings.append(Finding("gke-compile-cache", "warning", problem))
    budget = _probe_budget_s(container.get("startupProbe"))
    if budget is not None and predicted_boot_s is not None and budget < predicted_boot_s:
        findings.append(Finding("gke-startup-probe-short", "error",
                                f"the startupProbe gives up after {budget:g} s but this boot took "
                                f"{predicted_boot_s:g} s before: the kubelet would kill the container mid-compile "
                                "(vllm#17386); raise failureThreshold or periodSeconds"))
    return findings


def previous_template(replica_sets: list[JsonDict], owner: str) -> tuple[int, int, JsonDict] | None:
    """What ``kubectl rollout undo deploy/OWNER`` restores: the pod template of the ReplicaSet of the previous
    revision (the highest ``deployment.kubernetes.io/revision`` below the newest), without its
    ``pod-template-hash`` label.

    Args:
        replica_sets: the namespace's ReplicaSets (JSON); only those owned by Deployment ``owner`` count.
        owner: the Deployment's name.

    Returns:
        ``(current revision, previous revision, template)``, or ``None`` when there is one revision only.
    """
    import copy

    from remote.gke.parse import REVISION_ANNOTATION, TEMPLATE_HASH_LABEL

    revisions: dict[int, JsonDict] = {}
    for rs in replica_sets:
        found = rs.get("metadata")
        meta: JsonDict = found if isinstance(found, dict) else {}
        owners = [o for o in meta.get("ownerReferences") or [] if isinstance(o, dict)]
        if not any(o.get("kind") == "Deployment" and o.get("name") == owner for o in owners):
            continue
        try:
            revision = int((meta.get("annotations") or {}).get(REVISION_ANNOTATION, ""))
        except (TypeError, ValueError):
            continue
        template = (rs.get("spec") or {}).get("template")
        if isinstance(template, dict):
            revisions[revision] = template
    if len(revisions) < 2:
        return None
    current, previous = sorted(revisions)[-1], sorted(revisions)[-2]
    template = copy.deepcopy(revisions[previous])
    labels = (template.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(TEMPLATE_HASH_LABEL, None)
    return current, previous, template


def rollback_patch(workload: Workload, template: JsonDict) -> list[JsonDict]:
    """The JSON patch of a rollback, as ``kubectl rollout undo`` sends it: ``test`` the resourceVersion read,
    then ``replace`` the whole ``spec.template`` with the previous revision's."""
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": workload.resource_version},
            {"op": "replace", "path": "/spec/template", "value": template}]


def serving_port(workload: Workload) -> int:
    """The port vLLM serves on in the pod: the serving container's ``containerPort`` named ``http`` (else its
    first), else its ``--port`` argument, else vLLM's default 8000."""
    container = serving_container(pod_spec_of(workload))
    ports = [p for p in container.get("ports") or [] if isinstance(p, dict) and isinstance(p.get("containerPort"), int)]
    named = next((p for p in ports if p.get("name") == "http"), ports[0] if ports else None)
    if named is not None:
        return int(named["containerPort"])
    words = [w for w in [*(container.get("command") or []), *(container.get("args") or [])] if isinstance(w, str)]
    for i, word in enumerate(words):
        value = word.split("=", 1)[1] if word.startswith("--port=") else (
            words[i + 1] if word == "--port" and i + 1 < len(words) else "")
        if value.isdigit() and 0 < int(value) < 65536:
            return int(value)
    return 8000


def patch_lines(ops: list[JsonDict], max_value_chars: int = 160) -> list[str]:
    """A JSON patch as one line per op for a person to read: a value longer than ``max_value_chars`` when
    serialized (a rollback's whole pod template) is named by its path and size instead
    (``{"op": "replace", "path": "/spec/template", "value": <3,412 characters: the template shown above>}``)."""
    import json

    lines = []
    for op in ops:
        value = json.dumps(op.get("value")) if "value" in op else ""
        if len(value) > max_value_chars:
            head = json.dumps({k: v for k, v in op.items() if k != "value"})[:-1]
            lines.append(f'{head}, "value": <{len(value):,} characters: the args and image shown above>}}')
        else:
            lines.append(json.dumps(op))
    return lines
