"""Facts per TPU chip generation: the one table lint, the startup panel and the sandbox read.

Stdlib only. Sizes are GiB (2**30 bytes) per chip; utilizations are fractions of the usable HBM.

Sources:

- HBM per chip (nominal): Cloud TPU system architecture pages: v4 32 GiB, v5e 16 GiB,
  v5p 95 GiB, v6e (Trillium) 32 GiB, tpu7x (Ironwood) 192 GiB.
- Usable HBM: what tpu-inference prints as the per-chip limit (``hbm=[(used, limit)]``):
  15.75 on a v5e (corpus 12, 15, 33), 31.25 on a v6e (corpus 02, 10). No log of a v4, v5p
  or tpu7x was seen: their usable figure is ``None`` (v5p keeps the 95 the sandbox prints).
- HBM-utilization ceiling known to work: 0.92 on a v5e, where 0.95 failed twice with
  ``RESOURCE_EXHAUSTED`` after 691 s of compiling (the article in
  ``shared/design/research``); tpu-inference 0.26-0.29 itself defaults to 0.92 on v5e and v6e
  (``Memory statistics`` cap = 0.92 x limit, corpus 10 and 33). No ceiling is known for the others.
- Native formats: the matrix units' number formats (bf16 and int8 on every generation; fp8
  only on tpu7x). A KV cache in a format the chip lacks is stored as bf16 (the fp8 KV trap).
- KV block size: the page size in tokens the sandbox engine uses. Real tpu-inference picks the
  page size per model and version (corpus 33: 256 tokens on a v5e for gemma-4-12B), so this is
  a default, not a prediction.
"""

from __future__ import annotations

from dataclasses import dataclass

from remote.models import chip_generation

#: The ceiling used when a generation has none of its own: the highest known to work anywhere.
FALLBACK_HBM_UTILIZATION = 0.92


@dataclass(frozen=True)
class GenerationFacts:
    """What is known about one TPU chip generation.

    Attributes:
        generation: ``v5e``, ``v6e``, ``v5p``, ``v4``, ``tpu7x``.
        hbm_nominal_gib: HBM per chip as Google lists it, GiB.
        hbm_usable_gib: per-chip limit tpu-inference reports, GiB, or ``None`` if never seen.
        kv_block_size_tokens: default KV cache page size, tokens (see the module docstring).
        native_formats: number formats the matrix units compute in (``bf16``, ``int8``, ``fp8``).
        max_hbm_utilization: highest ``--gpu-memory-utilization`` known to work, or ``None``.
        ceiling_source: where ``max_hbm_utilization`` comes from (one sentence), or ``""``.
    """

    generation: str
    hbm_nominal_gib: float
    hbm_usable_gib: float | None
    kv_block_size_tokens: int
    native_formats: frozenset[str]
    max_hbm_utilization: float | None = None
    ceiling_source: str = ""

    @property
    def hbm_gib(self) -> float:
        """Usable HBM per chip when known, else the nominal figure, GiB."""
        return self.hbm_usable_gib if self.hbm_usable_gib is not None else self.hbm_nominal_gib

    def supports_format(self, dtype: str) -> bool:
        """Whether a KV/weight dtype (``fp8``, ``fp8_e5m2``, ``bfloat16``, ``int8``) is native."""
        family = dtype.lower()
        family = "bf16" if family in ("bfloat16", "auto") else family.split("_", 1)[0]
        return family in self.native_formats


GENERATIONS: dict[str, GenerationFacts] = {f.generation: f for f in (
    GenerationFacts("v5e", 16.0, 15.75, 32, frozenset({"bf16", "int8"}), 0.92,
                    "0.95 failed twice with RESOURCE_EXHAUSTED after 691 s of compiling on a v5e"),
    GenerationFacts("v6e", 32.0, 31.25, 64, frozenset({"bf16", "int8"}), 0.92,
                    "tpu-inference's own default; the compiled programs need the rest"),
    GenerationFacts("v5p", 95.0, 95.0, 64, frozenset({"bf16", "int8"})),
    GenerationFacts("v4", 32.0, None, 64, frozenset({"bf16", "int8"})),
    GenerationFacts("tpu7x", 192.0, None, 64, frozenset({"bf16", "int8", "fp8"})),
)}
#: Other spellings of a generation (``chip_generation`` of ``tpu7x-8`` is ``tpu7x``).
_ALIASES = {"v7x": "tpu7x", "ironwood": "tpu7x", "trillium": "v6e"}


def generation_facts(accelerator_type: str | None) -> GenerationFacts | None:
    """The facts for an accelerator type (``v5litepod-8``, ``v6e-4``, ``tpu7x-8``, ``v5p``).

    Returns ``None`` for an unknown or empty type: callers say "not checked".
    """
    generation = chip_generation(accelerator_type)
    if generation is None:
        return None
    return GENERATIONS.get(_ALIASES.get(generation, generation))


def generation_by_hbm_limit(limit_gib: float | None) -> GenerationFacts | None:
    """The generation whose usable HBM per chip is ``limit_gib`` (the limit an ``hbm=[(used, limit)]``
    line prints: 15.75 -> v5e, 31.25 -> v6e), for logs without a ``TPU info`` line; ``None`` if none."""
    if limit_gib is None:
        return None
    return next((f for f in GENERATIONS.values()
                 if f.hbm_usable_gib is not None and abs(f.hbm_usable_gib - limit_gib) < 0.005), None)


__all__ = ["FALLBACK_HBM_UTILIZATION", "GENERATIONS", "GenerationFacts", "generation_by_hbm_limit",
           "generation_facts"]
