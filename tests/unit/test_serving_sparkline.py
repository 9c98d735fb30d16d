"""The serving panel's sparklines draw what the figures say (Textual scales between min and max)."""

from __future__ import annotations

from console.widgets.serving_panel import sparkline_data


def test_noise_below_the_shown_decimal_draws_flat_and_the_scale_starts_at_zero() -> None:
    # 0.03 tok/s is "0.0 tok/s" in the panel: it must not draw as a full bar beside 0.0
    assert sparkline_data([0.0, 0.03, 0.0]) == [0.0, 0.0, 0.0, 0.0]
    # a busy server's figures keep their height against zero, not against their own minimum
    assert sparkline_data([900.04, 1000.0]) == [0.0, 900.0, 1000.0]
    assert sparkline_data([]) == []
