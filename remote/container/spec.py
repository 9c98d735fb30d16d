"""The serving container's spec: parsed from ``docker inspect``, edited, turned back into ``docker run``.

A :class:`ContainerSpec` is what a hot swap edits: image, env, volumes, network and the
``vllm serve`` model and flags. It comes from the running container's ``docker inspect``
JSON (Docker Engine API ``ContainerInspect`` shape, any Docker >= 20.10) or from the config
template when no container runs, and turns into a ``docker run`` argument vector. Argument
vectors are only ever joined with :func:`shlex.join`, so no value can start a second
shell command. Every display goes through :func:`mask_argv`: secret values become ``***``.

Edit keys accepted by :meth:`ContainerSpec.with_changes`:

- ``image``, ``model``, ``name``, ``network``, ``shm-size``, ``privileged`` (``true``/``false``);
- a ``vllm serve`` flag without dashes (``max-model-len``, ``gpu-memory-utilization``...);
  a flag outside :data:`KNOWN_SERVE_FLAGS` goes to the free-form ``extra_args``
  (lint warns about flags vLLM may not know);
- ``env.NAME`` for an environment variable;
- ``volume:/container/path`` with ``host/path[:mode]`` for a bind mount.

A value of ``None`` removes the setting.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from remote.container.parse import (
    ENV_NAME_RE,
    KNOWN_SERVE_FLAGS,
    KV_CACHE_DTYPES,
    SPEC_KEYS,
    SWITCH_FLAGS,
    check_flag_value,
    container_start_time,
    parse_inspect,
    parse_serve_args,
    set_env,
    set_extra_flag,
    set_known_flag,
    set_spec_key,
    set_volume,
    split_env,
    split_volume,
)
from remote.secrets import MASK, is_secret_name

#: The launcher vLLM images are started with.
VLLM_SERVE = ("vllm", "serve")

_TOKEN_SHAPE = re.compile(r"\b(hf_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_\-]{16,})")
_CONTAINER_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
_IMAGE_REF = re.compile(r"^[a-z0-9][a-z0-9._\-/:@]*[a-zA-Z0-9_]$")
_FLAG_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def mask_argv(argv: Iterable[str]) -> list[str]:
    """Mask secrets in a ``docker run`` / ``vllm serve`` argument vector for display.

    ``-e HF_TOKEN=x`` -> ``-e HF_TOKEN=***``; ``--api-key x`` and ``--hf-token=x`` -> ``***``;
    ``hf_...`` and ``sk-...`` token shapes anywhere -> ``***``. Same length as the input.
    """
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        name, eq, _ = arg.partition("=")
        if arg.startswith("--") and not eq and is_secret_name(arg):
            mask_next = True
            out.append(arg)
        elif (eq and name and not name.startswith("-") and ENV_NAME_RE.match(name) and is_secret_name(name)) or (eq and name.startswith("--") and is_secret_name(name)):
            out.append(f"{name}={MASK}")
        else:
            out.append(_TOKEN_SHAPE.sub(MASK, arg))
    return out


def display_argv(argv: Iterable[str]) -> str:
    """``shlex.join`` of :func:`mask_argv`: the one way a command is shown to a person."""
    return shlex.join(mask_argv(argv))


@dataclass(frozen=True)
class ContainerSpec:
    """Everything needed to (re)create the serving container.

    Attributes:
        name: container name (``--name``).
        image: image reference as given to ``docker run`` (``vllm/vllm-tpu:v0.11.1``).
        model: ``vllm serve`` model (HF id or path).
        image_digest: pullable repo digest (``vllm/vllm-tpu@sha256:...``) or, when only that is
            known, the local image id (``sha256:...``); ``None`` when unknown.
        env: environment, image defaults (``PATH``...) left out. Read-only by convention.
        volumes: ``host:container[:mode]`` mounts, in ``docker run -v`` form.
        ports: ``-p`` forms (``8000:8000``); empty with host networking.
        network: network mode (``host``).
        privileged: ``--privileged`` (TPU VMs need it to reach ``/dev/accel*``).
        shm_size: ``--shm-size`` (``16g``), or ``None`` for docker's default.
        restart_policy: restart policy observed; a swap always runs ``unless-stopped``.
        serve_flags: known ``vllm serve`` flags in order, ``None`` value for a bare switch.
        extra_args: other ``vllm serve`` arguments, verbatim.
        launcher: program before the model (``("vllm", "serve")`` or
            ``("python3", "-m", "vllm.entrypoints.openai.api_server")``; the latter uses ``--model``).
        launcher_in_entrypoint: the launcher was the image entrypoint (``docker run --entrypoint``).
        ignored: container settings seen in ``docker inspect`` that a swap does not carry over.
    """

    name: str
    image: str
    model: str
    image_digest: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    volumes: tuple[str, ...] = ()
    ports: tuple[str, ...] = ()
    network: str = "host"
    privileged: bool = True
    shm_size: str | None = "16g"
    restart_policy: str = "unless-stopped"
    serve_flags: dict[str, str | None] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    launcher: tuple[str, ...] = VLLM_SERVE
    launcher_in_entrypoint: bool = False
    ignored: tuple[str, ...] = ()

    # ---- construction ------------------------------------------------------------------

    @classmethod
    def from_inspect(cls, inspect: Mapping[str, Any] | list[Any],
                     image_inspect: Mapping[str, Any] | list[Any] | None = None) -> ContainerSpec:
        """Build from ``docker inspect CONTAINER`` JSON (one object or the one-element list).

        Args:
            inspect: the container's inspect JSON.
            image_inspect: optional ``docker image inspect`` JSON of its image: its ``Env`` is
                left out of ``env`` and its ``RepoDigests`` give ``image_digest``.

        Raises:
            ValueError: not a container's inspect JSON, or no ``vllm serve`` /
                ``vllm.entrypoints.openai.api_server`` command with a model in it.
        """
        fields = parse_inspect(inspect, image_inspect)
        serve = parse_serve_args(fields.pop("serve_tokens"))
        if not serve.model:
            raise ValueError("the vLLM server command names no model (no positional model, no --model)")
        return cls(**fields, model=serve.model, serve_flags=serve.flags, extra_args=serve.extra)

    @classmethod
    def from_template(cls, *, name: str, image: str, model: str, args: Iterable[str] = (),
                      env: Mapping[str, str] | None = None, volumes: Iterable[str] = (),
                      environ: Mapping[str, str] | None = None) -> ContainerSpec:
        """Build from the config's ``[container]`` template (when no container runs).

        Args:
            name, image, model: as in ``ContainerConfig``.
            args: extra ``vllm serve`` arguments (``["--max-model-len", "4096"]``).
            env: environment; a value that is exactly ``$VAR``/``${VAR}`` is read from ``environ``.
            volumes: ``host:container[:mode]`` mounts.
            environ: where ``$VAR`` references are looked up (default: none resolve).

        Raises:
            ValueError: a ``$VAR`` that ``environ`` lacks, or an invalid name, image or model.
        """
        resolved: dict[str, str] = {}
        for key, value in (env or {}).items():
            ref = re.fullmatch(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", value)
            if ref:
                if environ is None or ref[1] not in environ:
                    raise ValueError(f"env {key} refers to ${ref[1]}, which is not set in this environment")
                value = environ[ref[1]]
            resolved[key] = value
        serve = parse_serve_args([model, *args])
        spec = cls(name=name, image=image, model=serve.model, env=resolved, volumes=tuple(volumes),
                   serve_flags=serve.flags, extra_args=serve.extra)
        return spec.with_changes({})

    # ---- editing -----------------------------------------------------------------------

    def flag(self, name: str) -> str | None:
        """Value of a known or extra ``vllm serve`` flag (``"true"`` for a bare switch), or ``None``."""
        if name in self.serve_flags:
            value = self.serve_flags[name]
            return "true" if value is None else value
        return parse_serve_args(["-", *self.extra_args]).extra_flags.get(name)

    def with_changes(self, set: Mapping[str, str | None] | None = None, *,
                     image: str | None = None) -> ContainerSpec:
        """A new spec with ``set`` applied (see the module docstring for the keys), validated.

        Args:
            set: edit key -> new value, ``None`` to remove. Flag keys may carry ``--``
                and ``_`` (``--max_model_len`` is ``max-model-len``).
            image: shorthand for ``set={"image": ...}``.

        Returns:
            The new spec; its restart policy is ``unless-stopped``.

        Raises:
            ValueError: with the reason, e.g. ``max-model-len must be a positive integer
                (tokens), got '0'``; nothing is applied then.
        """
        changes = dict(set or {})
        if image is not None:
            changes["image"] = image
        spec = replace(self, env=dict(self.env), serve_flags=dict(self.serve_flags),
                       restart_policy="unless-stopped")
        extra = list(self.extra_args)
        volumes = list(self.volumes)
        for raw_key, value in changes.items():
            key = raw_key.strip()
            if value is not None and "\x00" in value:
                raise ValueError(f"{key}: a value cannot contain a NUL character")
            if key.startswith("env."):
                set_env(spec.env, key[4:], value)
            elif key.startswith("volume:"):
                volumes = set_volume(volumes, key[7:], value)
            elif key in SPEC_KEYS:
                spec = set_spec_key(spec, key, value)
            else:
                flag = key.lstrip("-").replace("_", "-").lower()
                if not _FLAG_NAME.match(flag):
                    raise ValueError(f"unknown setting {raw_key!r}: use a vllm serve flag name, "
                                     "env.NAME, volume:/path, or one of " + ", ".join(SPEC_KEYS))
                if flag == "model":
                    spec = set_spec_key(spec, "model", value)
                elif flag in KNOWN_SERVE_FLAGS:
                    set_known_flag(spec.serve_flags, flag, value)
                else:
                    extra = set_extra_flag(extra, flag, value)
        spec = replace(spec, extra_args=tuple(extra), volumes=tuple(volumes))
        spec.validate()
        return spec

    def validate(self) -> None:
        """Check every field; raises ``ValueError`` with the first reason found."""
        if not _CONTAINER_NAME.match(self.name):
            raise ValueError(f"container name {self.name!r} is not a valid docker name")
        if not _IMAGE_REF.match(self.image):
            raise ValueError(f"image {self.image!r} is not a valid image reference")
        if not self.model or self.model.startswith("-") or any(c.isspace() for c in self.model):
            raise ValueError(f"model {self.model!r} must be a model id or path without spaces")
        for name, value in self.serve_flags.items():
            check_flag_value(name, value)
        for name, value in parse_serve_args(["-", *self.extra_args]).extra_flags.items():
            check_flag_value(name, value)

    # ---- output ------------------------------------------------------------------------

    def serve_args(self) -> list[str]:
        """The ``vllm serve`` arguments after the launcher: model, known flags, extra args."""
        args = [self.model] if self.launcher == VLLM_SERVE else ["--model", self.model]
        for name, value in self.serve_flags.items():
            if value is None:
                args.append(f"--{name}")
            elif value.startswith("-"):
                args.append(f"--{name}={value}")
            else:
                args += [f"--{name}", value]
        return args + list(self.extra_args)

    def run_argv(self) -> list[str]:
        """``docker run -d --name N --restart unless-stopped ... IMAGE vllm serve MODEL ...``.

        No ``sudo``: the swap plan adds ``sudo -n``. Join with :func:`shlex.join` only.
        """
        argv = ["docker", "run", "-d", "--name", self.name, "--restart", "unless-stopped"]
        if self.privileged:
            argv.append("--privileged")
        if self.network and self.network != "default":
            argv += ["--net", self.network]
        if self.shm_size:
            argv += ["--shm-size", self.shm_size]
        for volume in self.volumes:
            argv += ["-v", volume]
        for port in self.ports:
            argv += ["-p", port]
        for key, value in self.env.items():
            argv += ["-e", f"{key}={value}"]
        launcher = list(self.launcher)
        if self.launcher_in_entrypoint:
            argv += ["--entrypoint", launcher.pop(0)]
        return argv + [self.image, *launcher, *self.serve_args()]

    def display_command(self) -> str:
        """The ``docker run`` command as shown to a person, secrets masked."""
        return display_argv(self.run_argv())

    def secret_values(self) -> set[str]:
        """Values that must never be shown (secret env values, secret flag values)."""
        values = {v for k, v in self.env.items() if is_secret_name(k) and v}
        args = self.serve_args()
        for shown, real in zip(mask_argv(args), args):
            if shown != real:
                values.add(real.partition("=")[2] if real.startswith("--") else real)
        return {v for v in values if len(v) >= 3}

    def mask_text(self, text: str) -> str:
        """``text`` (e.g. a command's stderr) with this spec's secret values replaced by ``***``."""
        for value in sorted(self.secret_values(), key=len, reverse=True):
            text = text.replace(value, MASK)
        return _TOKEN_SHAPE.sub(MASK, text)

    def to_dict(self, *, mask: bool = True) -> dict[str, Any]:
        """JSON-ready dict (the history's ``container_spec``); secrets masked unless ``mask=False``."""
        env = {k: (MASK if mask and is_secret_name(k) else v) for k, v in self.env.items()}
        return {
            "name": self.name, "image": self.image, "image_digest": self.image_digest, "model": self.model,
            "env": env, "volumes": list(self.volumes), "ports": list(self.ports), "network": self.network,
            "privileged": self.privileged, "shm_size": self.shm_size, "restart_policy": self.restart_policy,
            "serve_flags": dict(self.serve_flags),
            "extra_args": mask_argv(self.extra_args) if mask else list(self.extra_args),
            "launcher": list(self.launcher), "launcher_in_entrypoint": self.launcher_in_entrypoint,
        }

    @property
    def repo_digest(self) -> str | None:
        """``image_digest`` when it is a pullable repo digest (``repo@sha256:...``), else ``None``.

        The history keeps only this form: a bare local image id (``sha256:...``) names no
        image another node can pull.
        """
        return repo_digest(self.image_digest)

    def pinned(self) -> ContainerSpec:
        """This spec with ``image`` replaced by its repo digest when that is known and pullable."""
        if self.image_digest and "@sha256:" in self.image_digest and self.image != self.image_digest:
            return replace(self, image=self.image_digest)
        return self


def repo_digest(value: str | None) -> str | None:
    """``value`` when it is a repo digest (``vllm/vllm-tpu@sha256:<64 hex>``), else ``None``."""
    if not value or "@sha256:" not in value:
        return None
    repo, _, digest = value.partition("@sha256:")
    return value if repo and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest) else None


def diff(old: ContainerSpec | None, new: ContainerSpec) -> list[tuple[str, str | None, str | None]]:
    """What changes from ``old`` to ``new``: ``[(field, old value, new value)]``, secrets masked.

    Fields are ``image``, ``model``, ``--flag`` names, ``extra args``, ``env.NAME``,
    ``volume:/container/path``, ``network``... ``None`` means absent. A changed secret shows
    as ``("env.HF_TOKEN", "***", "*** (changed)")``. ``old=None`` lists every setting of ``new``.
    """
    a, b = _flat(old) if old else {}, _flat(new)
    out: list[tuple[str, str | None, str | None]] = []
    for key in [*a, *(k for k in b if k not in a)]:
        (shown_a, real_a), (shown_b, real_b) = a.get(key, (None, None)), b.get(key, (None, None))
        if real_a != real_b:
            out.append((key, shown_a, f"{shown_b} (changed)" if shown_a == shown_b else shown_b))
    return out


def _flat(spec: ContainerSpec) -> dict[str, tuple[str, str]]:
    """``{field: (shown value, real value)}`` of every setting."""
    out = {"image": spec.image, "model": spec.model, "name": spec.name, "network": spec.network,
           "privileged": str(spec.privileged).lower(), "shm-size": spec.shm_size or "default",
           "restart": spec.restart_policy}
    pairs = {key: (value, value) for key, value in out.items()}
    for name, value in spec.serve_flags.items():
        pairs[f"--{name}"] = ("(on)", "(on)") if value is None else (value, value)
    if spec.extra_args:
        pairs["extra args"] = (shlex.join(mask_argv(spec.extra_args)), shlex.join(spec.extra_args))
    for key, value in spec.env.items():
        pairs[f"env.{key}"] = (MASK if is_secret_name(key) else value, value)
    for volume in spec.volumes:
        host, target, mode = split_volume(volume)
        shown = host + (f":{mode}" if mode else "")
        pairs[f"volume:{target}"] = (shown, shown)
    for port in spec.ports:
        pairs[f"port {port}"] = (port, port)
    return pairs


__all__ = [
    "KNOWN_SERVE_FLAGS",
    "KV_CACHE_DTYPES",
    "MASK",
    "SWITCH_FLAGS",
    "VLLM_SERVE",
    "ContainerSpec",
    "container_start_time",
    "diff",
    "display_argv",
    "is_secret_name",
    "mask_argv",
    "repo_digest",
    "split_env",
    "split_volume",
]
