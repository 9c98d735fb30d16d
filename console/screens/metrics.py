"""The metrics view of a serving node: vLLM's ``/metrics`` read every few seconds, with sparklines.

Opened by ``m`` on a READY node in the fleet or ``:metrics NODE``. It reads through the node's forward
in the app's forwards (the one open, else opened here as ``f`` would; it stays open when the view is
left), every :data:`INTERVAL_S` seconds: running and waiting requests, KV cache use, output tok/s, prefix
hits, TTFT and ITL percentiles over the last minute (:class:`remote.vllm_metrics.MetricsWindow`), and
the tok/s and queue history over the session (:data:`SESSION_SAMPLES` samples) as sparklines. A read
that fails is said under the last figures; the view keeps trying. ``escape`` goes back.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Header, Static

from console.flows.forwards import Forward
from console.screens.base import ConsoleScreen
from console.widgets.footer import ConsoleFooter
from console.widgets.serving_panel import ServingPanel
from remote.errors import RemoteError
from remote.models import Node
from remote.printable import printable

if TYPE_CHECKING:
    from console.flows.workload_forward import WorkloadForward
    from remote.gke.models import Workload

#: Seconds between two reads of ``/metrics``.
INTERVAL_S = 3.0
#: Samples the sparklines keep (an hour at :data:`INTERVAL_S`).
SESSION_SAMPLES = 1200


class MetricsScreen(ConsoleScreen):
    """Live serving figures of ``node`` (a READY node) and their history over the session."""

    BINDINGS = [Binding("escape", "back", "Back", id="metrics_back")]
    DEFAULT_CSS = """
    MetricsScreen #metrics-status { padding: 0 1; height: auto; }
    MetricsScreen ServingPanel { padding: 0 1; }
    """

    def __init__(self, node: Node, workload: Workload | None = None) -> None:
        super().__init__()
        self.node = node
        #: a GKE workload (``m`` on the Workloads table): ``node`` is its ``CLUSTER/NAMESPACE/deploy/NAME`` and
        #: the forward goes through the API server to its serving pod
        self.workload = workload
        self.forward: Forward | WorkloadForward | None = None
        self.samples = 0        # figures shown so far (tests wait on it)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text(f"opening the forward to {printable(self.node.name)}…", style="dim"), id="metrics-status")
        yield ServingPanel(id="metrics-panel", history=SESSION_SAMPLES)
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self.sub_title = f"metrics · {self.node.name}"
        if self.node.state != "READY":
            self._status(f"{self.node.name} is {self.node.state}, not READY: nothing serves there yet.", "yellow")
            return
        self._sample()

    def _status(self, sentence: str, style: str = "dim") -> None:
        self.query_one("#metrics-status", Static).update(Text(printable(sentence), style=style))

    async def _open_forward(self) -> Forward | WorkloadForward | None:
        if self.workload is not None:
            from console.flows.workload_forward import open_workload_forward

            try:
                return await open_workload_forward(self.services.forwards, self.workload, self.services.config)
            except RemoteError as exc:
                self._status(f"No forward to {self.workload.ref}: {exc.message}", "bold red")
                return None
        """The node's forward: the one the console holds, else a new one (asking about an unknown host key)."""
        from console.flows.ssh_target import resolve_target
        from console.screens.confirm import host_key_question

        existing = self.services.forwards.get(self.node.key)
        if existing is not None and existing.state in ("open", "reconnecting"):
            return existing
        config = self.services.config
        try:
            target = await resolve_target(self.node, config, 0, self.services.fleet)

            async def ask(fingerprint: str) -> bool:
                return await self.ask(host_key_question(target, fingerprint))

            return await self.services.forwards.open(
                self.node, target, container_port=config.container.port, config=config.forward,
                accept_new_host_key=ask, container=config.container.name)
        except RemoteError as exc:
            self._status(f"No forward to {self.node.name}: {exc.message}", "bold red")
            return None

    @work(exclusive=True, group="metrics", exit_on_error=False)
    async def _sample(self) -> None:
        import httpx

        from remote.vllm_metrics import MetricsWindow, fetch_metrics

        forward = await self._open_forward()
        if forward is None:
            return
        self.forward = forward
        window = MetricsWindow()
        panel = self.query_one("#metrics-panel", ServingPanel)
        async with httpx.AsyncClient(timeout=5.0, trust_env=False) as client:
            while forward.state != "closed":
                if forward.state == "open":
                    try:
                        window.add(await fetch_metrics(client, forward.url))
                        panel.show(window.figures(), None)
                        self.samples += 1
                        self._status(f"{forward.url} -> {self.node.name} · every {INTERVAL_S:g} s · "
                                     f"{self.samples} samples this session")
                    except RemoteError as exc:
                        panel.show_problem(f"/metrics not read: {exc}")
                else:
                    self._status(f"forward {forward.url}: {forward.describe()}", "yellow")
                await asyncio.sleep(INTERVAL_S)
        self._status(f"the forward {forward.url} was closed (F lists forwards); escape goes back", "yellow")

    def action_back(self) -> None:
        """Back to the previous view (the forward stays open)."""
        self.app.pop_screen()
