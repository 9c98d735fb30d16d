"""Model shapes, chip HBM figures and the per-chip memory arithmetic of the sandbox engine.

Figures (per chip unless said; GiB = 2**30 bytes):

- HBM limit and KV block size: ``remote.accelerators.GENERATIONS`` (the one table; usable HBM
  v5e 15.75, v6e 31.25, v5p 95). Generations without a usable figure seen in a real log
  (v4, tpu7x) are not simulated.
- cap = limit x gpu_memory_utilization (default 0.92, the ratio tpu-inference 0.26-0.29
  prints when the flag is unset: corpus files 10 and 33).
- weights = params x 2 bytes / tensor_parallel_size.
- avail = cap - weights (``Memory statistics`` ``total_hbm_avail_gb``): the KV cache pool.
- KV bytes per token = 2 (K and V) x ceil(kv_heads / tp) x (sum of the head dims of the layers
  that hold their own KV cache) x 2 bytes; by default every layer holds one of ``head_dim``.
- KV tokens = floor(avail / (bytes per token x block)) x block.
- max concurrency = KV tokens / max_model_len.
- activation headroom = max_num_batched_tokens x hidden_size x 2 bytes x 4 / tp: allocated after
  the KV cache, so ``Init kv-cache`` prints weights + KV + headroom.

The pool and the headroom follow three real boots: corpus 09 (v5e-1, 1.86 GiB used, 12.63 avail,
509,184 tokens = 12.625 GiB of KV, ``Init kv-cache`` 14.50), corpus 10 (gemma-4-E2B-it on v6e-1,
19.77 avail, 1,151,744 tokens, 28.76 after KV) and the article's gemma-4-E2B-it on v5e-1 (5.52
avail, 321,280 tokens, 14.51 after KV): KV tokens fill the printed avail to within one block and
the after-KV figure is about one headroom above weights + KV.

Boot durations: a model may carry :class:`MeasuredBoot` figures per chip generation (the
``init engine ... took X s (compilation: Y s)`` line of a real boot); the engine then prints
exactly those in log time. Other boots get durations from the engine's per-step estimates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from remote.accelerators import GENERATIONS
from remote.models import chip_generation, chips_of
from sandbox.serve_args import DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS, ServeArgs

GIB = 1024**3
#: Per-chip HBM limit in GiB as tpu-inference prints it, by chip generation (from the one table).
HBM_LIMIT_GIB = {g: f.hbm_usable_gib for g, f in GENERATIONS.items() if f.hbm_usable_gib is not None}
#: KV cache block (page) size in tokens, by chip generation (from the one table).
BLOCK_SIZE_TOKENS = {g: GENERATIONS[g].kv_block_size_tokens for g in HBM_LIMIT_GIB}
#: HBM the compiled programs need beyond the cap (0.84 GiB: the ~836 MB seen failing at 0.95 on v5e).
PROGRAM_RESERVE_GIB = 0.84


@dataclass(frozen=True)
class MeasuredBoot:
    """Durations a real boot of a model printed on one chip generation, log seconds.

    Attributes:
        generation: ``v5e``, ``v6e``...
        engine_init_s / compile_s: from ``init engine (profile, create kv cache, warmup model)
            took X s (compilation: Y s)`` (tpu-inference, vLLM 0.26-0.30).
        source: where the figures were read (one phrase).
    """

    generation: str
    engine_init_s: float
    compile_s: float
    source: str


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a served model: ``params_b`` in billions, ``max_position`` in tokens.

    ``layers`` is the decoder layer count (config.json's ``num_hidden_layers``);
    ``kv_head_dims`` lists the head dim of every layer that holds its own KV cache, when that
    is not simply ``layers`` x ``head_dim`` (Gemma 4 shares KV across layers and gives its
    full-attention layers wider heads). ``measured_boots``: see :class:`MeasuredBoot`.
    """

    name: str
    params_b: float
    layers: int
    kv_heads: int
    head_dim: int
    max_position: int
    hidden_size: int
    architecture: str
    kv_head_dims: tuple[int, ...] = ()
    measured_boots: tuple[MeasuredBoot, ...] = ()

    @property
    def kv_layers(self) -> int:
        """Layers holding their own KV cache (``num_kv_cache_tensors`` in the log)."""
        return len(self.kv_head_dims) or self.layers

    @property
    def kv_dims_total(self) -> int:
        """Sum of the head dims over the KV-holding layers."""
        return sum(self.kv_head_dims) or self.layers * self.head_dim

    def measured_boot(self, generation: str) -> MeasuredBoot | None:
        """The real boot durations on ``generation``, or None when none was seen."""
        return next((m for m in self.measured_boots if m.generation == generation), None)


#: google/gemma-4-E2B-it: 35 decoder layers of which 15 hold KV (20 reuse it), 4 sliding-window
#: layers of head dim 256 then one full-attention layer of 512, three times: 18,432 KV bytes
#: per token at bf16 (xbill9/gemma4-dev's verify_allocation.py). bf16 weights 4.8182e9 x 2 B:
#: Init model prints 8.97 GiB; the article's 321,280 KV tokens on a v5e pin the exact size
#: within 0.0005 GiB.
GEMMA_4_E2B = ModelSpec(
    "google/gemma-4-E2B-it", 4.8182, 35, 1, 256, 131072, 1536, "Gemma4ForConditionalGeneration",
    kv_head_dims=(256, 256, 256, 256, 512) * 3,
    measured_boots=(
        MeasuredBoot("v5e", 503.54, 413.41, "the article's v5e-1 boot (vllm/vllm-tpu:v0.30.0, max-model-len 8192)"),
        MeasuredBoot("v6e", 457.25, 402.27, "corpus 10, v6e-1 at max-model-len 32768"),
    ))


MODELS: dict[str, ModelSpec] = {m.name.lower(): m for m in (
    ModelSpec("Qwen/Qwen3-0.6B", 0.6, 28, 8, 128, 40960, 1024, "Qwen3ForCausalLM"),
    ModelSpec("Qwen/Qwen3-8B", 8.2, 36, 8, 128, 40960, 4096, "Qwen3ForCausalLM"),
    ModelSpec("Qwen/Qwen3-32B", 32.8, 64, 8, 128, 40960, 5120, "Qwen3ForCausalLM"),
    ModelSpec("meta-llama/Llama-3.1-8B-Instruct", 8.03, 32, 8, 128, 131072, 4096, "LlamaForCausalLM"),
    ModelSpec("meta-llama/Llama-3.1-70B-Instruct", 70.6, 80, 8, 128, 131072, 8192, "LlamaForCausalLM"),
    ModelSpec("google/gemma-3-4b-it", 4.3, 34, 4, 256, 131072, 2560, "Gemma3ForConditionalGeneration"),
    ModelSpec("google/gemma-3-27b-it", 27.4, 62, 16, 128, 131072, 5376, "Gemma3ForConditionalGeneration"),
    GEMMA_4_E2B,
)}


def model_spec(model: str) -> ModelSpec:
    """The table entry for ``model`` (HF id, case-insensitive, or a path ending in its name).

    Unknown models get an 8B Llama-like default (32 layers, 8 KV heads of 128, 32,768 positions).
    """
    key = model.lower().rstrip("/")
    if key in MODELS:
        return MODELS[key]
    base = key.rsplit("/", 1)[-1]
    for spec in MODELS.values():
        if spec.name.lower().rsplit("/", 1)[-1] == base:
            return spec
    return ModelSpec(model, 8.0, 32, 8, 128, 32768, 4096, "LlamaForCausalLM")


@dataclass(frozen=True)
class EngineFigures:
    """Per-chip memory arithmetic of one launch (see the module docstring); sizes in GiB."""

    spec: ModelSpec
    generation: str
    host_chips: int
    limit_gib: float
    block: int
    tp: int
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    weights_gib: float
    cap_gib: float
    headroom_gib: float
    kv_bytes_per_token: int

    @property
    def pool_gib(self) -> float:
        """The KV cache pool: cap - weights (what ``Memory statistics`` prints as avail)."""
        return self.cap_gib - self.weights_gib

    @property
    def kv_tokens(self) -> int:
        blocks = math.floor(self.pool_gib * GIB / (self.kv_bytes_per_token * self.block))
        return max(0, blocks) * self.block


def compute_figures(args: ServeArgs, accelerator_type: str) -> EngineFigures:
    """The memory arithmetic of ``args`` on one chip of ``accelerator_type``.

    Raises:
        ValueError: an accelerator type of a generation without a usable HBM figure.
    """
    generation = chip_generation(accelerator_type) or ""
    node_chips = chips_of(accelerator_type)
    if generation not in HBM_LIMIT_GIB or not node_chips:
        raise ValueError(f"unknown accelerator type {accelerator_type!r}: expected v5litepod-N, "
                         "v5e-N, v6e-N or v5p-N")
    host_chips = min(node_chips, 4) if generation == "v5p" or node_chips > 8 else node_chips
    spec = model_spec(args.model)
    tp = args.tensor_parallel_size
    limit = HBM_LIMIT_GIB[generation]
    mnbt = args.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
    return EngineFigures(
        spec=spec, generation=generation, host_chips=host_chips, limit_gib=limit,
        block=BLOCK_SIZE_TOKENS[generation], tp=tp,
        max_model_len=args.max_model_len or spec.max_position, max_num_batched_tokens=mnbt,
        max_num_seqs=args.max_num_seqs or DEFAULT_MAX_NUM_SEQS,
        weights_gib=spec.params_b * 1e9 * 2 / tp / GIB, cap_gib=limit * args.gpu_memory_utilization,
        headroom_gib=mnbt * spec.hidden_size * 2 * 4 / tp / GIB,
        kv_bytes_per_token=2 * math.ceil(spec.kv_heads / tp) * spec.kv_dims_total * 2)
