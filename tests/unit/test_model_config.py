"""The model's own maximum length, derived from config.json as vLLM derives it."""

from __future__ import annotations

import json

import pytest

from remote.container.model_config import derive_limits, hub_dir, parse_model_config

#: google/gemma-3-27b-it config.json (the fields vLLM reads): the 128K already includes the linear x8.
GEMMA3_27B = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
              "text_config": {"model_type": "gemma3_text", "max_position_embeddings": 131072,
                              "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}}
#: Qwen/Qwen2.5-7B-Instruct with the YaRN block its model card says to add for 128K.
QWEN25_YARN = {"model_type": "qwen2", "max_position_embeddings": 32768,
               "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}}
#: meta-llama/Llama-3.1-8B-Instruct: llama3 rope, 131072 already scaled.
LLAMA31 = {"model_type": "llama", "max_position_embeddings": 131072,
           "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192, "rope_type": "llama3"}}


@pytest.mark.parametrize(("config", "limit", "rope"), [
    (GEMMA3_27B, 131072, "linear"), (QWEN25_YARN, 131072, "yarn"), (LLAMA31, 131072, "llama3"),
    ({"model_type": "qwen3", "max_position_embeddings": 40960, "rope_scaling": None}, 40960, None),
    ({"model_type": "gpt2", "n_positions": 1024}, 1024, None),
    ({"model_type": "mistral", "max_position_embeddings": 32768,
      "rope_scaling": {"rope_type": "linear", "factor": 2.0}}, 65536, "linear"),
    ({"model_type": "x", "max_position_embeddings": 8192, "seq_length": 4096}, 4096, None),   # the smallest
])
def test_derived_limit(config, limit, rope):
    limits = derive_limits(config, model="m", source="config.json")
    assert (limits.max_model_len_tokens, limits.rope_type) == (limit, rope)


def test_bad_configs_say_why():
    with pytest.raises(ValueError, match="not JSON"):
        parse_model_config("{nope", model="m", source="/x/config.json")
    with pytest.raises(ValueError, match="not a JSON object"):
        parse_model_config("[1]", model="m", source="/x/config.json")
    with pytest.raises(ValueError, match="states no maximum length"):
        parse_model_config(json.dumps({"model_type": "x"}), model="m", source="/x/config.json")


def test_hub_dir_follows_hf_home_and_hf_hub_cache():
    assert hub_dir("google/gemma-3-27b-it", {}) == "/root/.cache/huggingface/hub/models--google--gemma-3-27b-it"
    assert hub_dir("org/m", {"HF_HOME": "/hf"}) == "/hf/hub/models--org--m"
    assert hub_dir("org/m", {"HF_HOME": "/hf", "HF_HUB_CACHE": "/cache"}) == "/cache/models--org--m"
