"""The ``vllm serve`` flags vLLM's argparse knows, for the swap lint and the sandbox's engine.

Stdlib only (a leaf: the sandbox imports it). :data:`VLLM_SERVE_FLAGS` is every flag name without
its dashes: the swap form's own flags (``remote.container.parse.KNOWN_SERVE_FLAGS``) and
:data:`OTHER_VLLM_FLAGS` (vLLM 0.9 - 0.11 engine and frontend args, ``vllm/engine/arg_utils.py``
and ``vllm/entrypoints/openai/cli_args.py``). vLLM's ``FlexibleArgumentParser`` reads ``_`` as ``-``
in flag names; any other flag makes argparse exit 2 with ``vllm serve: error: unrecognized
arguments: ...``.
"""

from __future__ import annotations

#: The flags the swap form edits (``remote.container.parse.KNOWN_SERVE_FLAGS``), kept equal by a test.
FORM_FLAGS = frozenset({
    "served-model-name", "max-model-len", "max-num-batched-tokens", "gpu-memory-utilization",
    "tensor-parallel-size", "kv-cache-dtype", "quantization", "enable-auto-tool-choice",
    "tool-call-parser", "max-num-seqs",
})

#: ``vllm serve`` flags known besides the form's; anything else gets the lint's ``unknown-flag``
#: warning.
OTHER_VLLM_FLAGS = frozenset(["host", "port", "uvicorn-log-level", "api-key", "allowed-origins", "allowed-methods", "allowed-headers", "ssl-keyfile", "ssl-certfile", "root-path", "middleware", "chat-template", "chat-template-content-format", "response-role", "disable-log-requests", "enable-log-requests", "disable-log-stats", "disable-uvicorn-access-log", "disable-frontend-multiprocessing", "enable-request-id-headers", "enable-prompt-tokens-details", "enable-force-include-usage", "enable-server-load-tracking", "return-tokens-as-token-ids", "reasoning-parser", "tool-parser-plugin", "tool-server", "lora-modules", "prompt-adapters", "tokenizer", "tokenizer-mode", "tokenizer-revision", "skip-tokenizer-init", "trust-remote-code", "revision", "code-revision", "download-dir", "load-format", "dtype", "seed", "max-seq-len-to-capture", "max-logprobs", "hf-token", "hf-config-path", "hf-overrides", "config-format", "config", "generation-config", "override-generation-config", "override-neuron-config", "enforce-eager", "disable-sliding-window", "disable-cascade-attn", "disable-custom-all-reduce", "pipeline-parallel-size", "data-parallel-size", "data-parallel-size-local", "data-parallel-address", "data-parallel-rpc-port", "data-parallel-backend", "enable-expert-parallel", "enable-eplb", "distributed-executor-backend", "worker-cls", "worker-extension-cls", "block-size", "enable-prefix-caching", "no-enable-prefix-caching", "prefix-caching-hash-algo", "swap-space", "cpu-offload-gb", "num-gpu-blocks-override", "calculate-kv-scales", "kv-sharing-fast-prefill", "max-num-partial-prefills", "max-long-partial-prefills", "long-prefill-token-threshold", "enable-chunked-prefill", "no-enable-chunked-prefill", "scheduling-policy", "scheduler-cls", "async-scheduling", "num-scheduler-steps", "speculative-config", "kv-transfer-config", "kv-events-config", "compilation-config", "additional-config", "structured-outputs-config", "guided-decoding-backend", "limit-mm-per-prompt", "mm-processor-kwargs", "disable-mm-preprocessor-cache", "mm-processor-cache-gb", "disable-chunked-mm-input", "enable-lora", "max-loras", "max-lora-rank", "max-cpu-loras", "fully-sharded-loras", "enable-sleep-mode", "model-impl", "task", "runner", "convert", "pooler-config", "override-pooler-config", "logits-processor-pattern", "logits-processors", "served-model-name", "max-num-seqs", "rope-scaling", "rope-theta", "disable-async-output-proc", "otlp-traces-endpoint", "collect-detailed-traces", "show-hidden-metrics-for-version", "enable-auto-tool-choice", "tool-call-parser", "headless", "api-server-count", "safetensors-load-strategy"])

#: Every ``vllm serve`` flag name (no dashes), plus ``model`` (``--model``, deprecated but accepted).
VLLM_SERVE_FLAGS = FORM_FLAGS | OTHER_VLLM_FLAGS | {"model"}


def is_vllm_serve_flag(word: str) -> bool:
    """``word`` (``--max_model_len``, ``--no-enable-prefix-caching``, ``-tp``, ``--x=1``) names a flag
    vLLM's parser knows (``_`` read as ``-``; a boolean flag's ``--no-`` form included)."""
    if word in ("-tp", "-pp", "-dp", "-q", "-O") or word.startswith("-O"):
        return True
    name = word.split("=", 1)[0].removeprefix("--").replace("_", "-")
    return name in VLLM_SERVE_FLAGS or (name.startswith("no-") and name[3:] in VLLM_SERVE_FLAGS)
