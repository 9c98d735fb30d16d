"""The served model's own limits, read from its ``config.json`` where the node has it.

vLLM refuses a ``--max-model-len`` above the length it derives from the model's Hugging Face
``config.json`` (``ModelConfig._get_and_verify_max_len``, vLLM 0.4 - 0.29): the smallest of the
length keys below (of ``text_config`` for multimodal models), times the rope-scaling factor
unless the rope type is ``su``/``longrope``/``llama3`` (already counted) or the model is a
Gemma 3 (whose 128K is already scaled); a ``yarn`` scaling multiplies
``original_max_position_embeddings`` instead. :func:`derive_limits` follows that rule.

Where the file is: the node's Hugging Face cache inside the serving container,
``$HF_HUB_CACHE`` or ``$HF_HOME/hub`` (default ``/root/.cache/huggingface/hub``), as
``models--ORG--NAME/snapshots/REVISION/config.json``; or ``MODEL/config.json`` when the model is
a path. :func:`read_model_limits` reads it with ``docker exec CONTAINER ls|cat`` (argument
vectors only, no shell in the container).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncssh

from remote.container.docker import docker

#: vLLM's ``possible_keys`` for the model's maximum length, in its order.
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
               "max_sequence_length", "max_seq_length", "seq_len")
#: Rope types whose factor vLLM does not apply again.
_UNSCALED_ROPE = ("su", "longrope", "llama3")
#: The HF hub cache in a vLLM container when neither ``HF_HUB_CACHE`` nor ``HF_HOME`` is set.
DEFAULT_HF_HUB = "/root/.cache/huggingface/hub"
_MAX_CONFIG_BYTES = 4 << 20


@dataclass(frozen=True)
class ModelLimits:
    """What a model's ``config.json`` says about its context.

    Attributes:
        model: the model id or path it was read for.
        max_model_len_tokens: the length vLLM derives (the limit ``--max-model-len`` may not pass).
        max_position_embeddings: the raw ``max_position_embeddings`` (or the first length key found).
        rope_type: ``rope_scaling.rope_type`` (or ``type``), ``None`` without rope scaling.
        rope_factor: ``rope_scaling.factor``, ``None`` without one.
        source: where it was read (``/root/.cache/.../config.json``, ``boot log``...).
    """

    model: str
    max_model_len_tokens: int
    max_position_embeddings: int | None
    rope_type: str | None
    rope_factor: float | None
    source: str


def derive_limits(config: Mapping[str, Any], *, model: str, source: str) -> ModelLimits:
    """The limits of a parsed ``config.json`` (see the module docstring for the rule).

    Raises:
        ValueError: the config states none of :data:`LENGTH_KEYS`.
    """
    nested = config.get("text_config")
    text: Mapping[str, Any] = nested if isinstance(nested, Mapping) else config
    lengths = [(key, text[key]) for key in LENGTH_KEYS
               if isinstance(text.get(key), (int, float)) and not isinstance(text.get(key), bool)]
    if not lengths:
        raise ValueError(f"{source}: the model config states no maximum length ({', '.join(LENGTH_KEYS[:2])}...)")
    first = lengths[0][1]
    derived = float(min(value for _, value in lengths))
    rope = text.get("rope_scaling") or config.get("rope_scaling")
    rope_type = factor = None
    model_type = str(config.get("model_type") or "")
    if isinstance(rope, Mapping):
        rope_type = str(rope.get("rope_type") or rope.get("type") or "") or None
        raw_factor = rope.get("factor")
        factor = float(raw_factor) if isinstance(raw_factor, (int, float)) else None
        if "gemma3" not in model_type and rope_type not in _UNSCALED_ROPE:
            if rope_type == "yarn" and isinstance(rope.get("original_max_position_embeddings"), (int, float)):
                derived = float(rope["original_max_position_embeddings"])
            derived *= factor or 1.0
    return ModelLimits(model=model, max_model_len_tokens=int(derived), max_position_embeddings=int(first),
                       rope_type=rope_type, rope_factor=factor, source=source)


def parse_model_config(text: str, *, model: str, source: str) -> ModelLimits:
    """``config.json`` text -> :class:`ModelLimits`.

    Raises:
        ValueError: not a JSON object, or no maximum length in it.
    """
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: not JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(config, dict):
        raise ValueError(f"{source}: not a JSON object")
    return derive_limits(config, model=model, source=source)


def hub_dir(model: str, env: Mapping[str, str]) -> str:
    """The model's directory in the container's HF hub cache (``.../models--ORG--NAME``)."""
    hub = env.get("HF_HUB_CACHE") or (posixpath.join(env["HF_HOME"], "hub") if env.get("HF_HOME") else DEFAULT_HF_HUB)
    return posixpath.join(hub, "models--" + model.strip("/").replace("/", "--"))


async def read_model_limits(conn: asyncssh.SSHClientConnection, container: str, model: str,
                            env: Mapping[str, str], *, label: str = "the node") -> ModelLimits | None:
    """Read the served model's ``config.json`` through the running container.

    Args:
        conn: an open SSH connection to the node.
        container: the running container's name.
        model: the ``vllm serve`` model (HF id or an absolute path in the container).
        env: the container's environment (``HF_HOME`` / ``HF_HUB_CACHE`` move the cache).
        label: the node, for messages.

    Returns:
        The limits, or ``None`` when the container has no config for this model (not
        downloaded yet, another model, no such container) or it states no length.

    Raises:
        DockerMissing, SudoPasswordRequired, SshTimeout, SshUnreachable: docker or SSH failed.
    """
    if model.startswith("/"):
        candidates = [posixpath.join(model, "config.json")]
    else:
        snapshots = posixpath.join(hub_dir(model, env), "snapshots")
        listed = await docker(conn, ["exec", container, "ls", "-1t", snapshots], label=label, timeout_s=20)
        if listed.exit_status != 0:
            return None
        candidates = [posixpath.join(snapshots, rev, "config.json")
                      for rev in listed.stdout.split() if rev and "/" not in rev][:3]
    for path in candidates:
        result = await docker(conn, ["exec", container, "cat", path], label=label, timeout_s=20)
        if result.exit_status != 0 or len(result.stdout) > _MAX_CONFIG_BYTES:
            continue
        try:
            return parse_model_config(result.stdout, model=model, source=path)
        except ValueError:
            continue
    return None


__all__ = ["DEFAULT_HF_HUB", "LENGTH_KEYS", "ModelLimits", "derive_limits", "hub_dir", "parse_model_config",
           "read_model_limits"]
