"""Swap on a GKE workload: ``s`` on a row of the fleet's Workloads table.

The door of :class:`console.flows.workload_swap.WorkloadSwapCase` for the screen, as ``tpu-console swap
deploy/NAME`` is for the terminal: type the edits (``max-model-len=8192 image=vllm/vllm-tpu:v0.12.0
-kv-cache-dtype``: ``KEY=VALUE`` sets, ``-KEY`` unsets), Enter previews (the args before and after, the lint
findings, the JSON patch), ``ctrl+s`` asks (a lint error needs the workload's name typed) and patches, then
the rollout is followed to the new pod's ready in the log below. Read-only mode refuses it (the use case
itself refuses; the key only says so).

``rollback=True`` (``R`` on a workload, as ``tpu-console rollback deploy/NAME``): no edits; the preview of
the previous revision's template (:meth:`~console.flows.workload_swap.WorkloadSwapCase.preview_rollback`,
as ``kubectl rollout undo``) is shown at once, ``ctrl+s`` confirms, and the rollout is followed the same way.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Header, Input, RichLog, Static

from console.flows.group_watch import GroupEvent
from console.flows.workload_watch import WorkloadEvent
from console.screens.base import ConsoleScreen
from console.widgets.footer import ConsoleFooter
from remote.gke.edit import patch_lines
from remote.gke.models import Workload
from remote.printable import printable


def parse_edits(text: str) -> tuple[dict[str, str | None], str | None]:
    """``"max-model-len=8192 image=I -enforce-eager"`` -> ``({"max-model-len": "8192", "enforce-eager": None}, "I")``.

    Raises:
        ValueError: a word that is neither ``KEY=VALUE`` nor ``-KEY``.
    """
    changes: dict[str, str | None] = {}
    image = None
    for word in text.split():
        key, eq, value = word.partition("=")
        if eq and key.strip("-"):
            if key == "image":
                image = value
            else:
                changes[key.lstrip("-")] = value
        elif word.startswith("-") and word.strip("-"):
            changes[word.lstrip("-")] = None
        else:
            raise ValueError(f"{word!r}: expected KEY=VALUE (set) or -KEY (unset)")
    return changes, image


class WorkloadSwapScreen(ConsoleScreen):
    """Edit, lint, confirm and patch one workload's serving container, then follow the rollout."""

    BINDINGS = [Binding("ctrl+s", "patch", "Patch", id="workload_patch"),
                Binding("escape", "back", "Back", id="workload_swap_back")]
    DEFAULT_CSS = """
    WorkloadSwapScreen #workload-swap-plan { padding: 0 1; height: auto; max-height: 50%; }
    WorkloadSwapScreen #workload-swap-log { height: 1fr; }
    """

    def __init__(self, workload: Workload, config: Any, *, rollback: bool = False) -> None:
        super().__init__()
        self.workload = workload
        self.rollback = rollback
        self.config = config
        self.preview: Any = None
        self.case: Any = None
        self.outcome: Any = None
        self.running = False
        self._source: Any = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="edits: max-model-len=8192 image=vllm/vllm-tpu:TAG -FLAG (Enter previews)",
                    id="workload-swap-edits")
        yield Static(Text("Type the edits and press Enter to see the lint and the patch.", style="dim"),
                     id="workload-swap-plan")
        yield RichLog(id="workload-swap-log", max_lines=2000, markup=False, wrap=True)
        yield ConsoleFooter()

    def on_mount(self) -> None:
        w = self.workload
        self.sub_title = f"{'rollback' if self.rollback else 'swap'} · {w.cluster}/{w.namespace}/{w.ref}"
        if self.rollback:
            self.query_one("#workload-swap-edits", Input).display = False
            self._plan(Text("reading the Deployment's revisions…", style="dim"))
            self._preview(None)
        else:
            self.query_one("#workload-swap-edits", Input).focus()

    def action_back(self) -> None:
        """Back to the fleet (a rollout being followed goes on in the cluster; its view stops)."""
        self.app.pop_screen()

    def _plan(self, text: Text) -> None:
        self.query_one("#workload-swap-plan", Static).update(text)

    @on(Input.Submitted, "#workload-swap-edits")
    def _submitted(self, event: Input.Submitted) -> None:
        self._preview(event.value)

    @work(exclusive=True, group="workload-swap-preview", exit_on_error=False)
    async def _preview(self, text: str | None) -> None:
        from console.flows.gke_fleet import gke_source
        from console.flows.gke_target import WorkloadSpec, WorkloadSpecError, find_workload
        from console.flows.history_access import HistoryAccess
        from console.flows.policy import ReadOnlyRefused
        from console.flows.workload_swap import WorkloadSwapCase
        from remote.errors import RemoteError

        try:
            changes, image = parse_edits(text) if text is not None else ({}, None)
            if self._source is None:
                self._source = gke_source(self.config)
            w = self.workload
            workload, kube = await find_workload(self._source, WorkloadSpec(w.kind, w.name, w.namespace, w.cluster))
            pool = next((p for c in self._source.clusters.values() for p in c.node_pools
                         if p.cluster == workload.cluster and p.name == workload.node_pool), None)
            self.case = WorkloadSwapCase(workload, kube, self.config,        # the console's own history
                                         HistoryAccess(lambda: self.services.store, owned=False), pool=pool,
                                         verb="rollback" if text is None else "swap")
            self.preview = self.case.preview(changes, image) if text is not None else await self.case.preview_rollback()
        except (ValueError, ReadOnlyRefused, WorkloadSpecError, RemoteError) as exc:
            self.preview = None
            self._plan(Text(printable(str(exc)), style="bold red"))
            return
        p = self.preview
        out = Text()
        if p.restores_revision is not None:
            out.append(f"restores revision {p.restores_revision} (as kubectl rollout undo; it becomes revision "
                       f"{p.new_revision})\n", style="bold")
        out.append("args  ", style="bold").append(printable(" ".join(p.old_args)) + "\n")
        out.append("   -> ", style="bold").append(printable(" ".join(p.args or p.old_args)) + "\n")
        if p.image:
            out.append("image ", style="bold").append(f"{printable(p.old.image)} -> {printable(p.image)}\n")
        for f in p.findings:
            out.append(f"lint {f.severity}: {f.rule_id}: ", style="bold red" if f.severity == "error" else "yellow")
            out.append(printable(f.message) + "\n")
        out.append("JSON patch ", style="bold").append(printable("[" + ", ".join(patch_lines(p.patch)) + "]") + "\n")
        out.append("ctrl+s patches (after a confirm)", style="dim")
        self._plan(out)

    def action_patch(self) -> None:
        """Confirm and patch the previewed swap."""
        if self.preview is None or self.case is None:
            self.app.notify("Nothing to patch: the preview above says why." if self.rollback else
                            "Press Enter on the edits first: the patch is what the preview shows.", severity="warning")
            return
        if self.running:
            return
        self._run()

    @work(exclusive=True, group="workload-swap-run", exit_on_error=False)
    async def _run(self) -> None:
        from console.flows.policy import ReadOnlyRefused
        from console.screens.confirm import ConfirmScreen

        w, p = self.case.workload, self.preview
        errors = p.errors
        what = "Patch" if p.restores_revision is None else f"Roll back to revision {p.restores_revision}:"
        confirmed = await self.ask(ConfirmScreen(
            f"{what} {w.ref} in {w.cluster}/{w.namespace}?",
            ("The LeaderWorkerSet's leader and worker templates change: each group is made anew"
             if w.kind == "LeaderWorkerSet" else "The Deployment's pod template changes: its pod is replaced by a new one")
            + (f"; {len(errors)} lint error(s): type the workload's name to patch anyway" if errors else "."),
            patch_lines(p.patch), confirm_label="Patch", require_text=w.name if errors else None))
        if not confirmed:
            self.app.notify("Nothing was changed.", title="Rollback" if self.rollback else "Swap")
            return
        self.running = True
        log = self.query_one("#workload-swap-log", RichLog)
        try:
            self.outcome = await self.case.run(p, force=bool(errors), on_event=self._event, poll_s=1.0)
        except (ReadOnlyRefused, ValueError) as exc:
            log.write(Text(printable(str(exc)), style="bold red"))
            return
        finally:
            self.running = False
        if not self.outcome.patched:
            log.write(Text(printable(f"the patch was refused: {self.outcome.error}; nothing was changed."),
                           style="bold red"))

    def _event(self, event: WorkloadEvent | GroupEvent) -> None:
        style = {"ready": "bold green", "failed": "bold red", "ready_early": "bold yellow"}.get(event.kind, "")
        text = event.line() if isinstance(event, GroupEvent) else event.text
        self.query_one("#workload-swap-log", RichLog).write(Text(f"» {printable(text)}", style=style))

    async def on_unmount(self) -> None:
        if self._source is not None:
            await self._source.close()
