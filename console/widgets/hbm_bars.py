"""HBM per chip as bars: used / limit GiB for each stage the tpu-inference log reports.

Stages (``remote.startup.HbmSnapshot.stage``): ``worker_init`` (``Init worker``),
``model_loaded`` (``Init model``), ``kv_cache`` (``Init kv-cache``), plus
``before_quantization`` / ``other`` when printed. The newest snapshot of each stage is shown;
chips with the same figures share one row (``chips 0-7``), so a v6e-8 stays compact.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from console.widgets.in_place import update_in_place
from remote.startup import HbmSnapshot

#: Stage -> label shown, in boot order.
STAGE_LABELS: dict[str, str] = {
    "worker_init": "worker init",
    "before_quantization": "before quant.",
    "model_loaded": "model loaded",
    "kv_cache": "KV cache",
    "other": "other",
}
BAR_WIDTH = 14


def bar(used_gib: float, limit_gib: float, width: int = BAR_WIDTH) -> Text:
    """A ``█░`` bar of ``used/limit``: green under 75 %, yellow under 90 %, red from 90 %."""
    fraction = 0.0 if limit_gib <= 0 else max(0.0, min(1.0, used_gib / limit_gib))
    full = round(fraction * width)
    style = "red" if fraction >= 0.9 else "yellow" if fraction >= 0.75 else "green"
    return Text.assemble(("█" * full, style), ("░" * (width - full), "bright_black"))


def chip_groups(snapshot: HbmSnapshot) -> list[tuple[str, float, float]]:
    """``(chips label, used GiB, limit GiB)`` with consecutive equal chips merged (``chips 0-3``)."""
    groups: list[tuple[int, int, float, float]] = []
    for chip, (used, limit) in enumerate(zip(snapshot.used_gib, snapshot.limit_gib)):
        if groups and groups[-1][2:] == (used, limit) and groups[-1][1] == chip - 1:
            first, _, _, _ = groups[-1]
            groups[-1] = (first, chip, used, limit)
        else:
            groups.append((chip, chip, used, limit))
    return [(f"chip {a}" if a == b else f"chips {a}-{b}", used, limit) for a, b, used, limit in groups]


def latest_by_stage(snapshots: Sequence[HbmSnapshot]) -> list[HbmSnapshot]:
    """The newest snapshot of each stage, in boot order."""
    newest: dict[str, HbmSnapshot] = {}
    for snap in snapshots:
        newest[snap.stage] = snap
    order = list(STAGE_LABELS)
    return sorted(newest.values(), key=lambda s: order.index(s.stage) if s.stage in order else len(order))


def hbm_table(snapshots: Sequence[HbmSnapshot]) -> Table | Text:
    """The bars as a Rich table (one row per stage and chip group), or a dim line when none yet."""
    shown = latest_by_stage(snapshots)
    if not shown:
        return Text("no HBM figures in the log yet", style="dim")
    table = Table.grid(padding=(0, 1))
    for _ in range(5):
        table.add_column(no_wrap=True)
    for snap in shown:
        for i, (chips, used, limit) in enumerate(chip_groups(snap)):
            label = STAGE_LABELS.get(snap.stage, snap.stage) if i == 0 else ""
            percent = f"{used / limit:.0%}" if limit else "-"
            table.add_row(Text(label, style="bold"), Text(chips, style="dim"), bar(used, limit),
                          f"{used:.2f} / {limit:.2f} GiB", Text(percent, style="dim"))
    return table


class HbmBars(Static):
    """HBM bars of a startup (see :func:`hbm_table`); call :meth:`show` with the snapshots."""

    DEFAULT_CSS = """
    HbmBars { height: auto; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(hbm_table(()), id=id)
        self._shown: tuple[HbmSnapshot, ...] = ()

    def show(self, snapshots: Sequence[HbmSnapshot]) -> None:
        """Render ``snapshots`` (no work when they did not change; a layout only when the height changes)."""
        snaps = tuple(snapshots)
        if snaps != self._shown:
            self._shown = snaps
            update_in_place(self, hbm_table(snaps))
