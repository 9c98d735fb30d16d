"""The editable container form of the swap screen, and its conversion to and from a spec.

The form shows a :class:`~remote.container.spec.ContainerSpec` field by field; :meth:`SwapForm.read`
turns what the operator typed back into a validated spec, or into one reason per invalid
field. Secret values (``HF_TOKEN``, ``--api-key``...) are shown as ``***`` and kept unmasked
only in memory: a ``***`` left in place means "keep the value I had".
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import replace

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Checkbox, Input, Label, Static, TextArea

from console.widgets.check_box import MarkedCheckbox
from remote.container.parse import parse_serve_args, split_volume
from remote.container.spec import (
    KNOWN_SERVE_FLAGS,
    MASK,
    SWITCH_FLAGS,
    ContainerSpec,
    is_secret_name,
    mask_argv,
)

#: (field id, label) of the one-line fields, in display order. Ids are ``with_changes`` keys.
LINE_FIELDS: tuple[tuple[str, str], ...] = (
    ("image", "image"),
    ("model", "model"),
    *((flag, f"--{flag}") for flag in KNOWN_SERVE_FLAGS if flag not in SWITCH_FLAGS),
)
UNITS = {"max-model-len": "tokens", "max-num-batched-tokens": "tokens", "gpu-memory-utilization": "(0, 1]",
         "tensor-parallel-size": "chips", "max-num-seqs": "sequences"}


def secrets_of(spec: ContainerSpec) -> dict[str, str]:
    """Secret values of ``spec`` by where they sit: ``env NAME`` and ``--flag`` -> real value."""
    out = {f"env {k}": v for k, v in spec.env.items() if is_secret_name(k)}
    args = list(spec.extra_args)
    for i, (shown, real) in enumerate(zip(mask_argv(args), args)):
        if shown != real:
            if real.startswith("--") and "=" in real:
                name, _, value = real.partition("=")
                out[name] = value
            elif i and args[i - 1].startswith("--"):
                out[args[i - 1]] = real
    return out


def env_text(spec: ContainerSpec) -> str:
    """``NAME=value`` lines, secrets as ``NAME=***``."""
    return "\n".join(f"{k}={MASK if is_secret_name(k) else v}" for k, v in spec.env.items())


def parse_env(text: str, secrets: Mapping[str, str]) -> dict[str, str]:
    """``NAME=value`` lines -> env; ``NAME=***`` keeps the secret held in memory.

    Raises:
        ValueError: a line without ``=``, or a masked secret whose value is not known.
    """
    env: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, eq, value = line.partition("=")
        name = name.strip()
        if not eq:
            raise ValueError(f"env line {n}: expected NAME=value, got {line!r}")
        if value == MASK and is_secret_name(name):
            if f"env {name}" not in secrets:
                raise ValueError(f"env {name}: the value is masked and not known here; type it")
            value = secrets[f"env {name}"]
        env[name] = value
    return env


def extra_text(spec: ContainerSpec) -> str:
    """The free-form ``vllm serve`` arguments, shell-quoted, secrets masked."""
    return shlex.join(mask_argv(spec.extra_args))


def parse_extra(text: str, secrets: Mapping[str, str]) -> tuple[str, ...]:
    """Shell-quoted free-form arguments -> argv; a masked secret keeps the value in memory.

    Raises:
        ValueError: unbalanced quotes, a flag that has its own field, or an unknown masked value.
    """
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"extra arguments: {exc}") from None
    out: list[str] = []
    for i, token in enumerate(tokens):
        name, eq, value = token.partition("=")
        if token == MASK and i and tokens[i - 1].startswith("--"):
            if tokens[i - 1] not in secrets:
                raise ValueError(f"extra arguments: the value of {tokens[i - 1]} is masked; type it")
            token = secrets[tokens[i - 1]]
        elif eq and value == MASK and name.startswith("--"):
            if name not in secrets:
                raise ValueError(f"extra arguments: the value of {name} is masked; type it")
            token = f"{name}={secrets[name]}"
        out.append(token)
    parsed = parse_serve_args(["-", *out])
    own = [f"--{f}" for f in parsed.flags] + (["--model"] if parsed.model else [])
    if own:
        raise ValueError(f"extra arguments: {', '.join(own)} has its own field above")
    return tuple(out)


def parse_volumes(text: str) -> list[tuple[str, str]]:
    """``host:container[:mode]`` lines -> ``[(container path, host[:mode])]`` (``with_changes`` form).

    Raises:
        ValueError: a line without a container path.
    """
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        host, target, mode = split_volume(line)
        if not host:
            raise ValueError(f"volume line {n}: expected host/path:/container/path[:ro], got {line!r}")
        out.append((target, host + (f":{mode}" if mode else "")))
    return out


class SwapForm(VerticalScroll):
    """One row per setting of the container; :meth:`fill` and :meth:`read`."""

    def compose(self) -> ComposeResult:
        for key, label in LINE_FIELDS:
            with Horizontal(classes="field-row"):
                yield Label(label, classes="field-label")
                yield Input(id=f"f-{key}", placeholder=UNITS.get(key, ""), classes="field-input")
            yield Static("", id=f"e-{key}", classes="field-error")
        with Horizontal(classes="field-row"):
            yield Label("tool calls", classes="field-label")
            yield MarkedCheckbox("--enable-auto-tool-choice", id="f-enable-auto-tool-choice")
        yield Label("extra arguments (shell-quoted)", classes="field-head")
        yield Input(id="f-extra", placeholder="--flag value ...", classes="field-input")
        yield Static("", id="e-extra", classes="field-error")
        yield Label("env (NAME=value per line; *** keeps a secret)", classes="field-head")
        yield TextArea(id="f-env", classes="field-area", soft_wrap=True)
        yield Static("", id="e-env", classes="field-error")
        yield Label("volumes (host:container[:ro] per line)", classes="field-head")
        yield TextArea(id="f-volumes", classes="field-area", soft_wrap=True)
        yield Static("", id="e-volumes", classes="field-error")

    def fill(self, spec: ContainerSpec) -> None:
        """Show ``spec`` in the fields (secrets masked)."""
        for key, _ in LINE_FIELDS:
            value = spec.image if key == "image" else spec.model if key == "model" else spec.serve_flags.get(key)
            self.query_one(f"#f-{key}", Input).value = value or ""
        self.query_one("#f-enable-auto-tool-choice", Checkbox).value = "enable-auto-tool-choice" in spec.serve_flags
        self.query_one("#f-extra", Input).value = extra_text(spec)
        self.query_one("#f-env", TextArea).text = env_text(spec)
        self.query_one("#f-volumes", TextArea).text = "\n".join(spec.volumes)

    def read(self, base: ContainerSpec, secrets: Mapping[str, str]) -> tuple[ContainerSpec | None, dict[str, str]]:
        """The spec the fields describe, built on ``base`` (name, network, ports... are kept).

        Args:
            base: the spec the form was filled from.
            secrets: :func:`secrets_of` values for ``***`` placeholders.

        Returns:
            ``(spec, {})`` when valid, else ``(None, {field id: reason})``.
        """
        errors: dict[str, str] = {}
        changes: dict[str, str | None] = {}
        for key, _ in LINE_FIELDS:
            value = self.query_one(f"#f-{key}", Input).value.strip()
            change = {key: value or None}
            try:
                base.with_changes(change)
            except ValueError as exc:
                errors[key] = str(exc)
            changes.update(change)
        changes["enable-auto-tool-choice"] = str(self.query_one("#f-enable-auto-tool-choice", Checkbox).value).lower()
        extra: tuple[str, ...] = ()
        env: dict[str, str] = {}
        volumes: list[tuple[str, str]] = []
        for key, parse in (("extra", lambda t: parse_extra(t, secrets)), ("env", lambda t: parse_env(t, secrets)),
                           ("volumes", parse_volumes)):
            widget = self.query_one(f"#f-{key}")
            text = widget.value if isinstance(widget, Input) else widget.text  # type: ignore[attr-defined]
            try:
                result = parse(text)
            except ValueError as exc:
                errors[key] = str(exc)
                continue
            if key == "extra":
                extra = result  # type: ignore[assignment]
            elif key == "env":
                env = result  # type: ignore[assignment]
                try:
                    base.with_changes({f"env.{k}": v for k, v in env.items()})
                except ValueError as exc:
                    errors[key] = str(exc)
            else:
                volumes = result  # type: ignore[assignment]
                try:
                    base.with_changes({f"volume:{t}": v for t, v in volumes})
                except ValueError as exc:
                    errors[key] = str(exc)
        if errors:
            self._show_errors(errors)
            return None, errors
        changes.update({f"env.{k}": v for k, v in env.items()})
        changes.update({f"volume:{t}": v for t, v in volumes})
        try:
            spec = replace(base, env={}, volumes=(), extra_args=extra).with_changes(changes)
        except ValueError as exc:
            errors["form"] = str(exc)
            self._show_errors(errors)
            return None, errors
        self._show_errors({})
        return spec, {}

    def _show_errors(self, errors: Mapping[str, str]) -> None:
        for widget in self.query(".field-error").results(Static):
            key = (widget.id or "")[2:]
            reason = errors.get(key)
            widget.update(Text(f"↳ {reason}") if reason else "")
            widget.display = bool(reason)
            target = self.query(f"#f-{key}")
            if target:
                target.first().set_class(bool(reason), "-invalid")
