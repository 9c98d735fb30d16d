"""Running a confirmed swap plan from the swap screen: worker, step progress, history, outcome.

:class:`SwapRunMixin` is mixed into :class:`console.screens.swap.screen.SwapScreen`; it uses the
screen's node, services, connection and form. The plan runs in an async worker
(``exit_on_error=False``): each step is shown as it starts and ends; on success the
replaced spec is kept for rollback, the launch is recorded and the startup view replaces
the screen; on failure the command's stderr stays on screen and the form is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import work
from textual.widgets import Input, Static

from console.flows import swap as swap_flow
from console.render import swap_preview as preview
from remote.container.swap import SwapPlan, SwapResult


class SwapRunMixin:
    """Executes ``SwapPlan`` s for a swap screen (see the module docstring)."""

    # Provided by the screen:
    node: Any
    app: Any
    services: Any
    busy: bool
    running: Any
    running_id: str | None
    result: SwapResult | None
    focused: Any
    _refocus: Any
    _label: str

    if TYPE_CHECKING:  # the screen's methods this mixin calls (declared for type checkers only)
        def query_one(self, *args: Any, **kwargs: Any) -> Any: ...
        async def _connect(self) -> Any: ...
        def _store(self) -> Any: ...
        def _show_problem(self, message: str | None) -> None: ...
        def _show_node(self) -> None: ...
        def recompute(self) -> None: ...

    @work(group="swap-run", exclusive=True, exit_on_error=False)
    async def _execute(self, plan: SwapPlan) -> None:
        from remote.errors import RemoteError
        from remote.container.swap import execute_swap, ssh_runner

        self.busy = True
        self._refocus = self.focused
        self.query_one("#swap-form").disabled = True
        self._show_problem(None)
        states: dict[str, str] = {}
        self._render_steps(plan, states)
        launch: dict[str, int | None] = {}
        try:
            conn = await self._connect()
        except RemoteError as exc:
            self._fail(f"{getattr(exc, 'title', 'SSH failed')}: {exc}\nNothing was changed.")
            return

        def on_step(step: Any, res: Any) -> None:
            gone = res is not None and step.kind == "rm" and "no such container" in res.stderr.lower()
            states[step.kind] = "running" if res is None else "ok" if res.exit_status == 0 or gone else "failed"
            if res is None and step.kind == "run":
                launch["id"] = self._record(lambda s: swap_flow.record_start(
                    s, self.node, plan.new, self.running_id, replaced_spec=plan.old))
            self._render_steps(plan, states)

        result = await execute_swap(ssh_runner(conn, label=self._label), plan, on_step=on_step)
        self.result = result
        if result.ok:
            await self._succeeded(conn, plan, result, launch.get("id"))
        else:
            self._record(lambda s: swap_flow.record_outcome(s, launch.get("id"), ok=False,
                                                            failure_detail=result.error))
            self._failed(plan, result)

    def _render_steps(self, plan: SwapPlan, states: dict[str, str]) -> None:
        for wid in ("#swap-steps-title", "#swap-steps"):
            self.query_one(wid).display = True
        self.query_one("#swap-steps", Static).update(preview.steps_text(plan, states))

    def _record(self, write: Any) -> Any:
        store = self._store()
        if store is None:
            return None
        try:
            return write(store)
        except Exception as exc:  # noqa: BLE001 - the swap itself must not fail on the history
            self.app.notify(f"The launch was not recorded in the history: {exc}", severity="warning")
            return None

    async def _succeeded(self, conn: Any, plan: SwapPlan, result: SwapResult, launch_id: int | None) -> None:
        from remote.container.docker import docker_image_inspect
        from remote.errors import RemoteError

        if plan.old is not None:
            self.services.previous_specs[self.node.key] = plan.old
        digest = None
        try:
            image = await docker_image_inspect(conn, plan.new.image, label=self._label)
            digest = ((image or {}).get("RepoDigests") or [None])[0]
        except RemoteError:
            pass
        self._record(lambda s: swap_flow.record_outcome(s, launch_id, ok=True, container_id=result.container_id,
                                                        image_digest=digest))
        self.busy = False
        self.app.notify(f"Container {plan.new.name} ({(result.container_id or '')[:12]}) is starting on "
                        f"{self.node.name}.", title="Swapped")
        self.app.pop_screen()
        self.app.open_feature("startup", self.node)  # type: ignore[attr-defined]

    def _failed(self, plan: SwapPlan, result: SwapResult) -> None:
        kind = result.failed_step.kind if result.failed_step else "swap"
        if result.old_container_removed:
            if plan.old is not None:
                self.services.previous_specs[self.node.key] = plan.old
            self.running, self.running_id = None, None
            after = ("The old container was removed; its spec is kept: ctrl+z rolls back to it."
                     if plan.old is not None else "")
        else:
            after = "The old container was not touched; it is still serving."
        self._fail(f"docker {kind} failed: {result.error}\n{after}")
        self._show_node()
        self.recompute()

    def _fail(self, message: str) -> None:
        self.busy = False
        self.query_one("#swap-form").disabled = False
        back = self._refocus
        (back if back is not None and back.is_attached else self.query_one("#f-image", Input)).focus()
        self._show_problem(message)
        self.app.notify(message.splitlines()[0], title="Swap failed", severity="error", timeout=10)
