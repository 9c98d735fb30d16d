"""Cost per million output tokens from a chip-hour price and a measured token rate.

$/Mtok = price per chip-hour x chips / 3600 s/h / output tokens per second x 10^6.
Example (a public v5e-1 flex-start report): $0.60/chip-h, 1 chip, 126.9 tokens/s
-> $1.313 per million output tokens.
"""

from __future__ import annotations

from collections.abc import Mapping

from remote.models import chip_generation


def usd_per_mtok(price_per_chip_hour_usd: float, chips: int, output_tokens_per_s: float) -> float:
    """US dollars per million output tokens.

    Args:
        price_per_chip_hour_usd: $ per chip-hour (>= 0).
        chips: chips billed (>= 1).
        output_tokens_per_s: measured output throughput in tokens/s (> 0).

    Raises:
        ValueError: a non-positive token rate or chip count, or a negative price.
    """
    if output_tokens_per_s <= 0:
        raise ValueError("no output tokens were measured, so there is no cost per token")
    if chips < 1:
        raise ValueError(f"chips must be at least 1, got {chips}")
    if price_per_chip_hour_usd < 0:
        raise ValueError(f"price must not be negative, got {price_per_chip_hour_usd}")
    return price_per_chip_hour_usd * chips / 3600.0 / output_tokens_per_s * 1e6


def lookup_price(prices: Mapping[str, Mapping[str, float]], accelerator_type: str | None,
                 provisioning_model: str) -> float | None:
    """$ per chip-hour from a ``prices[generation][provisioning_model]`` table, or ``None``.

    ``accelerator_type`` (``v6e-8``, ``v5litepod-4``) is reduced to its chip generation
    with :func:`remote.models.chip_generation`.
    """
    return prices.get(chip_generation(accelerator_type) or "", {}).get(provisioning_model)
