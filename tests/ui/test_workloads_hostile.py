"""Outside text in the Workloads table (a Deployment's args, an API's pool name) is shown as text."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import DataTable, Label

from console.widgets.workloads import WorkloadsPane
from remote.gke.models import GkeFleet, NodePool, Workload

HOSTILE = "[/x]evil\x1b[2J[bold red]M\u200bodel"


class _PaneApp(App[None]):
    def compose(self) -> ComposeResult:
        yield WorkloadsPane()


async def test_markup_and_escapes_in_a_workload_are_shown_as_text() -> None:
    """A model named ``[/x]...`` crashed the console (Rich's MarkupError from the DataTable's str cell)."""
    workload = Workload(project="p", location="us-east5", cluster="c", namespace="default", kind="Deployment",
                        name="hostile", model=HOSTILE, image="vllm/vllm-tpu:[b]x", node_pool="[/y]")
    pool = NodePool(project="p", location="us-east5", cluster="c", name="[/y]", machine_type="ct6e-standard-4t")
    app = _PaneApp()
    async with app.run_test(size=(200, 20)) as pilot:
        pane = app.query_one(WorkloadsPane)
        pane.display = True
        pane.show_fleet(GkeFleet(node_pools=(pool,), workloads=(workload,)))
        await pilot.pause()
        cells = [str(c) for c in app.query_one("#workloads", DataTable).get_row_at(0)]
        title = str(app.query_one("#workloads-title", Label).render())
    assert app._exception is None
    model = cells[8]
    assert model.startswith("[/x]evil") and "\x1b" not in model and "[bold red]M" in model
    assert "\u200b" not in model                              # the invisible made visible (printable)
    assert cells[4] == "[/y]" and "[/y] ?/?" in title
