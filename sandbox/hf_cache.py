"""The Hugging Face cache inside a simulated vLLM container: the served model's ``config.json``.

A real ``vllm serve ORG/NAME`` container has downloaded the model into ``$HF_HOME/hub``
(default ``/root/.cache/huggingface/hub``) as ``models--ORG--NAME/snapshots/REVISION/``; the
sandbox holds only ``config.json`` there, with the shape fields of ``sandbox.models_table``
in the layout of the real Hugging Face configs (Gemma 3: a ``text_config`` with
``rope_scaling {"factor": 8.0, "rope_type": "linear"}``; Llama 3.1: ``rope_type llama3``).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from typing import Any

from sandbox.models_table import ModelSpec, model_spec

DEFAULT_HF_HOME = "/root/.cache/huggingface"


def revision(model: str) -> str:
    """A stable 40-hex snapshot revision for ``model`` (real ones are commit hashes)."""
    return hashlib.sha1(model.lower().encode()).hexdigest()


def config_json(spec: ModelSpec) -> dict[str, Any]:
    """The model's ``config.json`` as Hugging Face publishes it (the fields vLLM reads)."""
    text: dict[str, Any] = {
        "architectures": [spec.architecture], "hidden_size": spec.hidden_size, "num_hidden_layers": spec.layers,
        "num_key_value_heads": spec.kv_heads, "head_dim": spec.head_dim,
        "max_position_embeddings": spec.max_position, "torch_dtype": "bfloat16", "rope_scaling": None,
    }
    if spec.architecture.startswith("Gemma4"):  # multimodal: the text model's shape under text_config
        text.update(model_type="gemma4_text", num_kv_shared_layers=spec.layers - spec.kv_layers)
        return {"architectures": [spec.architecture], "model_type": "gemma4", "text_config": text,
                "torch_dtype": "bfloat16"}
    if spec.architecture.startswith("Gemma3"):
        text.update(model_type="gemma3_text", rope_scaling={"factor": 8.0, "rope_type": "linear"})
        return {"architectures": [spec.architecture], "model_type": "gemma3", "text_config": text,
                "torch_dtype": "bfloat16"}
    if spec.architecture.startswith("Llama"):
        text.update(model_type="llama", rope_scaling={"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                                      "original_max_position_embeddings": 8192,
                                                      "rope_type": "llama3"})
    else:
        text.update(model_type=spec.architecture.removesuffix("ForCausalLM").lower())
    return text


def container_files(model: str, env: dict[str, str]) -> dict[str, str]:
    """Path -> content of the files the container holds for ``model`` (only its config.json).

    ``env`` is the container's environment: ``HF_HUB_CACHE`` or ``HF_HOME`` move the cache.
    """
    if not model:
        return {}
    if model.startswith("/"):
        return {posixpath.join(model, "config.json"): json.dumps(config_json(model_spec(model)), indent=2) + "\n"}
    hub = env.get("HF_HUB_CACHE") or posixpath.join(env.get("HF_HOME") or DEFAULT_HF_HOME, "hub")
    path = posixpath.join(hub, "models--" + model.replace("/", "--"), "snapshots", revision(model), "config.json")
    return {path: json.dumps(config_json(model_spec(model)), indent=2) + "\n"}
