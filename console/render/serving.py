"""The fleet's serving cells (MODEL, SERVING, TOK/S, QUEUE) and detail lines, from a
:class:`console.flows.serving.ServingSample` (outside text through :mod:`console.render.plain`)."""

from __future__ import annotations

from rich.text import Text

from console.flows.serving import PENDING, ServingSample
from console.render.plain import plain

#: SERVING cell style by its first word.
SERVING_STYLES = {"ready": "green", "booting": "yellow", "failed": "bold red", "unreachable": "red",
                  "no": "dim", PENDING: "dim"}


def short_model(model: str | None) -> str | None:
    """The model's name after its organisation (``google/gemma-4-E2B-it`` -> ``gemma-4-E2B-it``); a
    local path keeps its last part. The detail pane has the whole name."""
    if not model:
        return None
    return model.rstrip("/").rsplit("/", 1)[-1] or model


def serving_cells(sample: ServingSample | None) -> tuple[Text, Text, Text, Text]:
    """``(SERVING, TOK/S, QUEUE, MODEL)`` cells; ``sample`` ``None`` (not READY, not sampled): dashes.

    TOK/S is generation tokens per second (one decimal under 10), QUEUE is running + waiting
    requests of the last ``/metrics`` sample.
    """
    if sample is None:
        dash = Text("-", style="dim")
        return dash, dash.copy(), dash.copy(), dash.copy()
    serving = plain(sample.serving, style=SERVING_STYLES.get(sample.serving.split(" ")[0], ""))
    rate = sample.tokens_per_s
    tok_s = Text("-", style="dim") if rate is None else Text(f"{rate:.1f}" if rate < 10 else f"{rate:,.0f}")
    queue = Text("-", style="dim") if sample.queue is None else Text(str(sample.queue),
                                                                     style="bold yellow" if sample.waiting else "")
    model = short_model(sample.model)
    return serving, tok_s, queue, (plain(model) if model else Text("-", style="dim"))


def serving_rows(sample: ServingSample | None) -> list[tuple[str, str]]:
    """The detail pane's ``(field, value)`` rows of a sample (none when ``None``)."""
    if sample is None:
        return []
    rows = [("serving", sample.serving)]
    if sample.reason:
        rows.append(("serving_reason", sample.reason))
    rows.append(("model", sample.model or "-"))
    if sample.running is not None or sample.waiting is not None:
        rows.append(("requests", f"{sample.running or 0} running · {sample.waiting or 0} waiting"))
    if sample.tokens_per_s is not None:
        rows.append(("generation", f"{sample.tokens_per_s:,.1f} tok/s"))
    if sample.sampled_at is not None:
        rows.append(("sampled_at", sample.sampled_at.strftime("%H:%M:%S UTC")))
    return rows
