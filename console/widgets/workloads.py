"""The fleet's Workloads table: vLLM workloads on GKE TPU node pools, beside Nodes and Queued resources.

Hidden without ``[gke]`` in the config. Listed by :func:`console.flows.gke_fleet.list_gke` every
``refresh_interval_s`` (one listing in flight), with the rows ``tpu-console nodes`` prints
(:func:`console.flows.gke_fleet.workload_row`); the title names each TPU node pool's chips in use and how
many projects or clusters did not answer. Its own row events stop here (the fleet's selection is of nodes).
"""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Label

from console.flows.gke_fleet import WORKLOAD_COLUMNS, workload_row
from console.render.plain import plain
from remote.gke.models import GkeFleet, Workload

#: Columns shown (``nodes`` prints every one; location and project are in the title's problems or rarely differ).
SHOWN = WORKLOAD_COLUMNS[:9]


def workload_key(w: Workload) -> str:
    """The row key: ``project/location/cluster/namespace/deploy/NAME``."""
    return f"{w.project}/{w.location}/{w.cluster}/{w.namespace}/{w.ref}"


class WorkloadsPane(Vertical):
    """The Workloads title and table; :meth:`start` shows it when the config has ``[gke]``."""

    DEFAULT_CSS = """
    WorkloadsPane { height: auto; max-height: 10; display: none; }
    WorkloadsPane DataTable { height: auto; max-height: 8; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fleet: GkeFleet | None = None
        self._config: Any = None
        self._by_key: dict[str, Workload] = {}

    def compose(self) -> ComposeResult:
        yield Label("Workloads (GKE)", id="workloads-title", classes="section-title")
        yield DataTable(id="workloads", cursor_type="row", zebra_stripes=True)

    def start(self, config: Any) -> None:
        """Show the pane and list every ``config.refresh_interval_s`` when ``config.gke.enabled``."""
        if not config.gke.enabled or self._config is not None:
            return
        self._config = config
        self.display = True
        self.query_one("#workloads-title", Label).update("Workloads (GKE) · listing…")
        self.set_interval(config.refresh_interval_s, self.refresh_workloads)
        self.refresh_workloads()

    @work(group="gke-workloads", exclusive=True, exit_on_error=False)
    async def refresh_workloads(self) -> None:
        """List the GKE fleet once and show it."""
        import asyncio
        import importlib

        from console.flows.gke_fleet import gke_source, list_gke

        # the GKE and Kubernetes clients import in ~1-2 s: on a thread, not on the loop the keys wait on
        await asyncio.to_thread(importlib.import_module, "remote.gke.fleet")
        source = gke_source(self._config)
        try:
            fleet = await list_gke(source)
        finally:
            if source is not None:
                await source.close()
        self.show_fleet(fleet)

    def show_fleet(self, fleet: GkeFleet) -> None:
        """Redraw the table and the title from ``fleet`` (the cursor stays on the same workload)."""
        self.fleet = fleet
        table = self.query_one("#workloads", DataTable)
        selected = self.selected
        table.clear(columns=not table.columns)
        if not table.columns:
            for column in SHOWN:
                table.add_column(column, key=column)
        self._by_key = {workload_key(w): w for w in fleet.workloads}
        for key, w in self._by_key.items():
            table.add_row(*(plain(c) for c in workload_row(w)[:len(SHOWN)]), key=key)   # never markup
        if selected is not None and workload_key(selected) in self._by_key:
            table.move_cursor(row=table.get_row_index(workload_key(selected)))
        pools = ", ".join(f"{p.name} {p.chips_in_use if p.chips_in_use is not None else '?'}/"
                          f"{p.chips if p.chips is not None else '?'}" for p in fleet.node_pools[:6])
        title = f"Workloads {len(fleet.workloads)} (GKE)" + (f" · TPU chips in use: {pools}" if pools else "")
        if fleet.problems:
            title += f" · ⚠ {len(fleet.problems)} not listed"
        self.query_one("#workloads-title", Label).update(plain(title))

    @property
    def selected(self) -> Workload | None:
        """The workload under the cursor, or ``None``."""
        table = self.query_one("#workloads", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return self._by_key.get(key or "")

    @on(DataTable.RowHighlighted, "#workloads")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()

    @on(DataTable.RowSelected, "#workloads")
    def _selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if self.selected is not None:
            self.app.push_screen(workload_startup(self.selected, self._config))


def workload_startup(workload: Workload, config: Any) -> Any:
    """The startup view of ``workload`` (imported on use)."""
    from console.screens.workload_startup import WorkloadStartupScreen

    return WorkloadStartupScreen(workload, config)
