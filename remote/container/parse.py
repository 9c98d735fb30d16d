"""Reading ``docker inspect`` JSON, ``vllm serve`` argument vectors and edit values (helpers of ``remote.container.spec``).

Source formats:

- ``docker inspect CONTAINER`` (Docker Engine API ``ContainerInspect``, Docker 20.10 - 27):
  ``Config.Image``/``Env``/``Entrypoint``/``Cmd``, ``Image`` (local image id),
  ``HostConfig.Binds``/``Mounts``/``NetworkMode``/``Privileged``/``ShmSize``/``RestartPolicy.Name``/
  ``PortBindings``; ``docker image inspect`` gives ``Env`` and ``RepoDigests``.
- The serving command in any of the forms vLLM TPU images are run with:
  ``vllm serve MODEL ...``, ``vllm serve --model MODEL ...``, an image whose entrypoint is
  ``vllm serve`` (``Entrypoint: ["vllm", "serve"]``, ``Cmd: [MODEL, ...]``),
  ``python3 -m vllm.entrypoints.openai.api_server --model MODEL ...``, a wrapper entrypoint
  (tpu-inference's ``entrypoint.sh`` execs its arguments), and ``sh -c "vllm serve ..."``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from remote.container.spec import ContainerSpec

#: The ``vllm serve`` flags the swap form edits, in display order.
KNOWN_SERVE_FLAGS = (
    "served-model-name", "max-model-len", "max-num-batched-tokens", "gpu-memory-utilization",
    "tensor-parallel-size", "kv-cache-dtype", "quantization", "enable-auto-tool-choice",
    "tool-call-parser", "max-num-seqs",
)
#: Known flags that take no value (argparse ``store_true``).
SWITCH_FLAGS = frozenset({"enable-auto-tool-choice"})
#: ``--kv-cache-dtype`` choices (vLLM ``CacheDType``, v0.9 - v0.11).
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla")
#: ``--dtype`` choices (vLLM ``ModelDType``, v0.9 - v0.29).
MODEL_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
#: ``--quantization`` method names of vLLM's ``QuantizationMethods`` (union of v0.9 - v0.29 and
#: the TPU ``tpu_int8``); a name outside it is a lint warning, not a refusal (new releases add names).
QUANTIZATION_METHODS = frozenset({
    "awq", "auto_awq", "deepspeedfp", "tpu_int8", "fp8", "ptpc_fp8", "fbgemm_fp8", "fp_quant", "modelopt",
    "modelopt_fp4", "modelopt_mxfp8", "modelopt_mixed", "marlin", "bitblas", "gguf", "gptq_marlin_24",
    "gptq_marlin", "gptq_bitblas", "awq_marlin", "gptq", "auto_gptq", "compressed-tensors", "bitsandbytes",
    "qqq", "hqq", "experts_int8", "neuron_quant", "ipex", "quark", "moe_wna16", "torchao", "auto-round", "rtn",
    "inc", "mxfp4", "gpt_oss_mxfp4", "petit_nvfp4", "deepseek_v4_fp8", "cpu_awq", "online", "fp8_per_tensor",
    "fp8_per_block", "fp8_per_channel", "int8_per_channel_weight_only", "nvfp4_per_token", "mxfp8", "humming",
})
#: Flags whose value has a type, known or free-form: ``positive_int`` (tokens, counts, sizes),
#: ``non_negative_int``, ``non_negative_number`` (GiB), ``fraction`` (0, 1], ``choice`` of a tuple, ``name``.
TYPED_FLAGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "max-model-len": ("positive_int", ()), "max-num-batched-tokens": ("positive_int", ()),
    "tensor-parallel-size": ("positive_int", ()), "max-num-seqs": ("positive_int", ()),
    "pipeline-parallel-size": ("positive_int", ()), "data-parallel-size": ("positive_int", ()),
    "block-size": ("positive_int", ()), "num-gpu-blocks-override": ("positive_int", ()),
    "max-logprobs": ("non_negative_int", ()), "seed": ("non_negative_int", ()),
    "swap-space": ("non_negative_number", ()), "cpu-offload-gb": ("non_negative_number", ()),
    "gpu-memory-utilization": ("fraction", ()),
    "kv-cache-dtype": ("choice", KV_CACHE_DTYPES), "dtype": ("choice", MODEL_DTYPES),
    "quantization": ("name", ()), "port": ("positive_int", ()),
}
_UNITS = {"max-model-len": " (tokens)", "max-num-batched-tokens": " (tokens)", "block-size": " (tokens)",
          "swap-space": " (GiB)", "cpu-offload-gb": " (GiB)"}
_METHOD_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")


def check_flag_value(name: str, value: str | None) -> None:
    """Check one ``vllm serve`` flag value against :data:`TYPED_FLAGS` (untyped flags pass).

    Args:
        name: the flag without dashes (``max-model-len``).
        value: its value; ``None`` (a bare switch) passes.

    Raises:
        ValueError: with the flag, the expected type and the value, e.g. ``quantization must be
            a quantization method name (awq, fp8, gptq, ...), got '0.95'``.
    """
    kind, choices = TYPED_FLAGS.get(name, ("", ()))
    if not kind or value is None:
        return
    unit = _UNITS.get(name, "")
    if kind in ("positive_int", "non_negative_int"):
        low = 1 if kind == "positive_int" else 0
        if not (value.isdigit() and int(value) >= low):
            what = "a positive integer" if low else "an integer >= 0"
            raise ValueError(f"{name} must be {what}{unit}, got {value!r}")
    elif kind == "non_negative_number":
        try:
            ok = float(value) >= 0
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"{name} must be a number >= 0{unit}, got {value!r}")
    elif kind == "fraction":
        try:
            ok = 0.0 < float(value) <= 1.0
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"{name} must be a fraction in (0, 1], got {value!r}")
    elif kind == "choice" and value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    elif kind == "name" and not _METHOD_NAME.match(value):
        raise ValueError(f"{name} must be a quantization method name (awq, fp8, gptq, compressed-tensors, "
                         f"tpu_int8 ...), got {value!r}")


#: ``with_changes`` keys that edit the container rather than a flag.
SPEC_KEYS = ("image", "model", "name", "network", "shm-size", "privileged")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: Env vars that come from base images, not from the operator; left out of a spec.
IMAGEENV_NAME_RES = frozenset({
    "PATH", "HOME", "HOSTNAME", "TERM", "LANG", "LANGUAGE", "LC_ALL", "GPG_KEY", "PYTHON_VERSION",
    "PYTHON_SHA256", "PYTHON_PIP_VERSION", "PYTHON_SETUPTOOLS_VERSION", "PYTHON_GET_PIP_URL",
    "PYTHON_GET_PIP_SHA256", "DEBIAN_FRONTEND", "PIP_NO_CACHE_DIR", "PIP_ROOT_USER_ACTION",
})
_API_SERVER = "vllm.entrypoints.openai.api_server"
_DOCKER_DEFAULT_SHM = 64 * 1024 * 1024


@dataclass
class ServeArgs:
    """A parsed ``vllm serve`` argument vector.

    Attributes:
        model: the model (positional or ``--model``), ``""`` when absent.
        flags: known flags in order (``None`` for a bare switch).
        extra: every other argument, verbatim.
        extra_flags: ``{flag: value}`` view of ``extra`` (``"true"`` for a bare switch).
    """

    model: str = ""
    flags: dict[str, str | None] = field(default_factory=dict)
    extra: tuple[str, ...] = ()
    extra_flags: dict[str, str] = field(default_factory=dict)


def split_env(entries: Iterable[str] | None) -> dict[str, str]:
    """Docker ``Env`` (``["NAME=value", ...]``) -> ``{NAME: value}``, order kept."""
    out: dict[str, str] = {}
    for entry in entries or ():
        name, _, value = str(entry).partition("=")
        if name:
            out[name] = value
    return out


def parse_serve_args(tokens: Iterable[str]) -> ServeArgs:
    """Parse the arguments after the launcher: ``[MODEL] --flag value --switch --k=v ...``.

    A token after a flag is its value unless it starts with ``--`` (so ``-1`` is a value).
    ``--max_model_len`` is read as ``max-model-len``. A leading ``"-"`` token is a placeholder
    for "no positional model" and is skipped.
    """
    args = [str(t) for t in tokens]
    out = ServeArgs()
    extra: list[str] = []
    i = 0
    if args and args[0] == "-":
        i = 1
    elif args and not args[0].startswith("-"):
        out.model = args[0]
        i = 1
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("--"):
            extra.append(token)
            continue
        raw, eq, value = token[2:].partition("=")
        name = raw.replace("_", "-").lower()
        has_next = i < len(args) and not args[i].startswith("--")
        if name in SWITCH_FLAGS:
            if not eq or value.lower() in ("true", "1"):
                out.flags[name] = None
            continue
        if not eq and has_next:
            value = args[i]
            i += 1
        elif not eq:
            extra.append(token)
            out.extra_flags[name] = "true"
            continue
        if name == "model":
            out.model = value
        elif name in KNOWN_SERVE_FLAGS:
            out.flags[name] = value
        else:
            extra += [token] if eq else [token, value]
            out.extra_flags[name] = value
    out.extra = tuple(extra)
    return out


def _find_launcher(command: list[str]) -> tuple[int, tuple[str, ...]] | None:
    """Index where the launcher starts in the full command, and the launcher tokens."""
    for i, token in enumerate(command):
        base = token.rsplit("/", 1)[-1]
        if base == "vllm" and i + 1 < len(command) and command[i + 1] == "serve":
            return i, ("vllm", "serve")
        if token == "-m" and i + 1 < len(command) and command[i + 1] == _API_SERVER and i > 0:
            return i - 1, (command[i - 1], "-m", _API_SERVER)
    return None


def _shm_size(size_bytes: Any) -> str | None:
    if not isinstance(size_bytes, int) or size_bytes <= 0 or size_bytes == _DOCKER_DEFAULT_SHM:
        return None
    for unit, factor in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if size_bytes % factor == 0:
            return f"{size_bytes // factor}{unit}"
    return str(size_bytes)


def _volumes(host: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    volumes = [str(b) for b in host.get("Binds") or ()]
    ignored: list[str] = []
    for mount in host.get("Mounts") or ():
        kind, src, dst = mount.get("Type"), mount.get("Source", ""), mount.get("Target", "")
        if kind in ("bind", "volume") and src and dst:
            volumes.append(f"{src}:{dst}" + (":ro" if mount.get("ReadOnly") else ""))
        else:
            ignored.append(f"--mount type={kind} target={dst}")
    return volumes, ignored


def _ports(host: Mapping[str, Any]) -> list[str]:
    ports = []
    for container_port, bindings in (host.get("PortBindings") or {}).items():
        port, _, proto = container_port.partition("/")
        for b in bindings or ():
            spec = (f"{b['HostIp']}:" if b.get("HostIp") else "") + f"{b.get('HostPort') or ''}:{port}"
            ports.append(spec + (f"/{proto}" if proto and proto != "tcp" else ""))
    return ports


def _ignored(config: Mapping[str, Any], host: Mapping[str, Any]) -> list[str]:
    """Settings in the inspect output that ``ContainerSpec`` does not carry over."""
    out = []
    if host.get("Devices"):
        out.append("--device")
    if host.get("CapAdd"):
        out.append("--cap-add " + ",".join(host["CapAdd"]))
    if host.get("IpcMode") not in (None, "", "private", "shareable"):
        out.append(f"--ipc {host['IpcMode']}")
    if host.get("Runtime") not in (None, "", "runc"):
        out.append(f"--runtime {host['Runtime']}")
    if host.get("Ulimits"):
        out.append("--ulimit")
    if host.get("Tmpfs"):
        out.append("--tmpfs")
    if config.get("User"):
        out.append(f"--user {config['User']}")
    return out


def parse_inspect(inspect: Mapping[str, Any] | list[Any],
                  image_inspect: Mapping[str, Any] | list[Any] | None = None) -> dict[str, Any]:
    """``docker inspect`` JSON -> ``ContainerSpec`` keyword arguments plus ``serve_tokens``.

    Raises:
        ValueError: not a container's inspect JSON, or no vLLM server command with a model.
    """
    if isinstance(inspect, list):
        if len(inspect) != 1:
            raise ValueError(f"expected the inspect JSON of one container, got a list of {len(inspect)}")
        inspect = inspect[0]
    if isinstance(image_inspect, list):
        image_inspect = image_inspect[0] if image_inspect else None
    if not isinstance(inspect, Mapping) or not isinstance(inspect.get("Config"), Mapping):
        raise ValueError("not docker inspect output for a container (no Config object)")
    config, host = inspect["Config"], inspect.get("HostConfig") or {}
    entrypoint = [str(t) for t in config.get("Entrypoint") or ()]
    command = entrypoint + [str(t) for t in config.get("Cmd") or ()]
    for i, token in enumerate(command[:-1]):   # sh -c "vllm serve ...": read the script's words
        if token == "-c" and i > 0 and command[i - 1].rsplit("/", 1)[-1] in ("sh", "bash"):
            try:
                command = shlex.split(command[i + 1])
            except ValueError:
                pass
            entrypoint = []
            break
    found = _find_launcher(command)
    if found is None:
        raise ValueError("the container does not run a vLLM server (no 'vllm serve' or "
                         f"'{_API_SERVER}' in its command: {shlex.join(command)[:200]})")
    start, launcher = found
    serve_tokens = command[start + len(launcher):]
    if launcher[0] != "vllm":   # the API server module takes the model only as --model
        serve_tokens = ["-", *serve_tokens]
    name = str(inspect.get("Name") or "").lstrip("/")
    image_env = split_env((image_inspect or {}).get("Config", {}).get("Env")) if image_inspect else {}
    env = {k: v for k, v in split_env(config.get("Env")).items()
           if k not in IMAGEENV_NAME_RES and image_env.get(k) != v}
    image = str(config.get("Image") or "")
    repo = image.split("@")[0].rsplit(":", 1)[0] if ":" in image.split("/")[-1] else image.split("@")[0]
    digest = next((d for d in (image_inspect or {}).get("RepoDigests") or () if d.split("@")[0] == repo), None)
    volumes, ignored_mounts = _volumes(host)
    network = str(host.get("NetworkMode") or "default")
    return {
        "name": name, "image": image, "image_digest": digest or inspect.get("Image") or None,
        "env": env, "volumes": tuple(volumes), "ports": tuple(_ports(host)) if network != "host" else (),
        "network": network, "privileged": bool(host.get("Privileged")), "shm_size": _shm_size(host.get("ShmSize")),
        "restart_policy": str((host.get("RestartPolicy") or {}).get("Name") or "no"),
        "launcher": launcher, "launcher_in_entrypoint": start < len(entrypoint) and len(entrypoint) > 0,
        "ignored": tuple(_ignored(config, host) + ignored_mounts), "serve_tokens": serve_tokens,
    }


# ---- edit values (ContainerSpec.with_changes) ----------------------------------------


_INSPECT_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


def inspect_time(raw: Any) -> datetime | None:
    """A ``docker inspect`` time (RFC 3339, nanoseconds: ``2026-11-30T02:03:23.123456789Z``) as
    UTC, or ``None`` for a missing, malformed or zero (``0001-01-01T00:00:00Z``) value."""
    match = _INSPECT_TIME.match(str(raw or ""))
    if not match:
        return None
    base, frac, zone = match.groups()
    try:
        value = datetime.fromisoformat(f"{base}.{(frac or '0')[:6].ljust(6, '0')}"
                                       f"{'+00:00' if zone == 'Z' else zone}")
    except ValueError:
        return None
    return None if value.year < 1970 else value.astimezone(UTC)


def container_start_time(inspect: Mapping[str, Any] | None) -> datetime | None:
    """When the container was asked to run: the earlier of ``Created`` and ``State.StartedAt``
    (a restarted container's ``StartedAt`` is its latest start), UTC, or ``None``."""
    if not isinstance(inspect, Mapping):
        return None
    state = inspect.get("State")
    started = state.get("StartedAt") if isinstance(state, Mapping) else None
    times = [t for t in (inspect_time(inspect.get("Created")), inspect_time(started)) if t]
    return min(times) if times else None


def split_volume(volume: str) -> tuple[str, str, str]:
    """``host:container[:mode]`` -> ``(host, container, mode)`` (``mode`` ``""`` when absent)."""
    parts = volume.split(":")
    if len(parts) >= 3 and parts[-1] and not parts[-1].startswith("/"):
        return ":".join(parts[:-2]), parts[-2], parts[-1]
    if len(parts) >= 2:
        return ":".join(parts[:-1]), parts[-1], ""
    return "", volume, ""


def set_env(env: dict[str, str], name: str, value: str | None) -> None:
    """Set (``None``: remove) ``env[name]`` in place; raises ``ValueError`` for a bad name."""
    if not ENV_NAME_RE.match(name):
        raise ValueError(f"env name {name!r} must be letters, digits and _ (not starting with a digit)")
    if value is None:
        env.pop(name, None)
    else:
        env[name] = value


def set_volume(volumes: list[str], target: str, value: str | None) -> list[str]:
    """Mounts with the one at container path ``target`` replaced by ``value`` (``host[:mode]``) or removed.

    Raises:
        ValueError: a relative target, or a value that is not ``host/path[:ro|rw]``.
    """
    if not target.startswith("/") or ":" in target:
        raise ValueError(f"volume target {target!r} must be an absolute container path")
    kept = [v for v in volumes if split_volume(v)[1].rstrip("/") != target.rstrip("/")]
    if value is None:
        return kept
    host, _, mode = value.partition(":")
    if not host or mode not in ("", "ro", "rw", "z", "Z", "ro,z", "ro,Z", "rw,z", "rw,Z"):
        raise ValueError(f"volume {target}: expected host/path[:ro|rw], got {value!r}")
    return kept + [f"{host}:{target}" + (f":{mode}" if mode else "")]


def set_spec_key(spec: ContainerSpec, key: str, value: str | None) -> ContainerSpec:
    """``spec`` with one of :data:`SPEC_KEYS` changed; raises ``ValueError`` for a bad value."""
    if key == "shm-size":
        if value is not None and not re.fullmatch(r"\d+[bkmgBKMG]?", value):
            raise ValueError(f"shm-size must look like 16g or 1024m, got {value!r}")
        return replace(spec, shm_size=value)
    if key == "privileged":
        if value not in (None, "true", "false"):
            raise ValueError(f"privileged must be true or false, got {value!r}")
        return replace(spec, privileged=value == "true")
    if value is None or not value.strip():
        raise ValueError(f"{key} cannot be removed, only changed")
    if key == "network" and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]*", value):
        raise ValueError(f"network {value!r} is not a valid network name")
    return replace(spec, **{key: value})  # type: ignore[arg-type]  # key is one of the str fields checked above


def set_known_flag(flags: dict[str, str | None], name: str, value: str | None) -> None:
    """Set (``None``: remove) a known flag in place; switches take ``true``/``false``."""
    if name in SWITCH_FLAGS:
        if value is None or value.lower() in ("false", "0", "no", "off"):
            flags.pop(name, None)
        elif value.lower() in ("", "true", "1", "yes", "on"):
            flags[name] = None
        else:
            raise ValueError(f"{name} is a switch: use true or false, got {value!r}")
    elif value is None:
        flags.pop(name, None)
    else:
        flags[name] = value.strip()


def set_extra_flag(extra: list[str], name: str, value: str | None) -> list[str]:
    """Replace (or remove) ``--name [value]`` / ``--name=value`` in the free-form arguments."""
    out: list[str] = []
    i = 0
    while i < len(extra):
        token = extra[i]
        head = token.partition("=")[0].lstrip("-").replace("_", "-").lower()
        if token.startswith("--") and head == name:
            takes_value = "=" not in token and i + 1 < len(extra) and not extra[i + 1].startswith("--")
            i += 2 if takes_value else 1
            continue
        out.append(token)
        i += 1
    if value is None:
        return out
    if value in ("", "true"):
        return out + [f"--{name}"]
    return out + ([f"--{name}={value}"] if value.startswith("-") else [f"--{name}", value])
