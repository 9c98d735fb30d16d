"""Hot swap: edit the serving container's flags, lint, preview, confirm, replace it; and rollback.

:class:`SwapScreen` connects to the node (an unknown host key asks first), reads the running
container (the config's template when none runs) into an editable form and, as the operator
types, shows the field's reason for an invalid value, the lint findings (``f`` or ``enter``
on one applies its fix), the diff against the running spec and the exact commands (secrets
masked). ``ctrl+s`` opens the confirm modal; once confirmed, the commands run in a worker:
``docker pull`` while the old container keeps serving, ``docker rm -f``, ``docker run -d``.
On success the replaced spec is kept for rollback, the launch is recorded in the history
and the startup view follows the new container. On failure the command's stderr stays on
screen and nothing is lost. :class:`RollbackScreen` is the same preview and confirm for the
spec a swap replaced (this session's, else the history's).

No step calls the TPU API: the node itself is never stopped, reset or deleted.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import (
    Checkbox,
    Input,
    Label,
    OptionList,
    Static,
    TextArea,
)
from textual.widgets.option_list import Option

from console.flows.history_access import HistoryAccess, LaunchHistory
from console.flows.policy import ReadOnlyRefused
from console.flows.swap_case import NothingToRun, SwapCase, SwapPreview
from console.render import swap_preview as preview
from console.render.plain import plain, printable
from console.screens.base import ConsoleScreen
from console.screens.confirm import ConfirmScreen, host_key_question
from console.widgets.footer import ConsoleFooter
from console.widgets.header import ConsoleHeader
from console.widgets.swap_form import SwapForm, secrets_of
from remote.container.lint import Finding
from remote.container.spec import ContainerSpec
from remote.container.swap import SwapPlan, SwapResult
from remote.errors import RemoteError
from remote.models import Node

if TYPE_CHECKING:
    import asyncssh
    from textual.widget import Widget


class SwapScreen(ConsoleScreen):
    """Edit, lint, preview and swap the vLLM container of ``node``.

    Args:
        node: the node whose container is replaced.
        spec: a spec to edit instead of reading the node over SSH (tests, snapshots);
            the node is still reached over SSH when the swap runs.
        running: the running spec the diff is taken against (default: ``spec``).
    """

    CSS_PATH = Path(__file__).with_name("swap.tcss")  # absolute: the relaunch screen subclasses this one
    MODE = "swap"
    READONLY_ACTIONS = {"swap_confirm": "swap", "rollback": "rollback"}
    BINDINGS = [
        Binding("ctrl+s", "swap_confirm", "Swap…", id="swap_confirm"),
        Binding("f", "apply_fix", "Apply fix", id="swap_fix"),
        Binding("ctrl+z", "rollback", "Rollback", id="swap_rollback"),
        Binding("escape", "back", "Back", id="swap_back"),
        Binding("y,ctrl+y", "copy_commands", "Copy commands", key_display="y", id="swap_copy"),
    ]

    def __init__(self, node: Node, *, spec: ContainerSpec | None = None,
                 running: ContainerSpec | None = None) -> None:
        super().__init__()
        self.node = node
        self.injected = spec
        self.injected_running = running
        self.case: SwapCase | None = None
        self.base: ContainerSpec | None = None
        self.running: ContainerSpec | None = running if running is not None else spec
        self.running_id: str | None = None
        self.secrets: dict[str, str] = {}
        self.spec: ContainerSpec | None = None
        self.preview: SwapPreview | None = None
        self.plan: SwapPlan | None = None
        self.findings: list[Finding] = []
        self.problem: str | None = None
        self.busy = False
        self.result: SwapResult | None = None
        self._conn: asyncssh.SSHClientConnection | None = None
        self.note = ""
        self._label = node.name
        self._refocus: Widget | None = None
        self._pending = False
        self._history: HistoryAccess | None = None

    def make_case(self, history: HistoryAccess) -> SwapCase:
        """This view's use case (the rollback and relaunch views give their mode).

        Raises:
            ReadOnlyRefused: read-only mode is on.
        """
        return SwapCase(self.node, self.services.config, self.services.config.container, history,
                        mode="swap", actions=self.services.actions, clock=self.services.clock)

    # --- layout -------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield ConsoleHeader()
        yield Static("", id="swap-node")
        with Horizontal(id="swap-body"):
            yield SwapForm(id="swap-form")
            with VerticalScroll(id="swap-preview"):
                yield Static("", id="swap-status")
                yield Static("", id="swap-problem")
                yield Label("Lint (f or enter applies the fix)", classes="section-title")
                yield OptionList(id="swap-lint")
                yield Label("Changes", classes="section-title")
                yield Static("", id="swap-diff")
                verb = "roll back" if self.MODE == "rollback" else "swap"
                yield Label(f"Commands (ctrl+s to {verb})", classes="section-title")
                yield Static("", id="swap-commands")
                yield Label("Progress", classes="section-title", id="swap-steps-title")
                yield Static("", id="swap-steps")
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self.sub_title = f"{'Roll back' if self.MODE == 'rollback' else 'Swap'} the container on {self.node.name}"
        self._show_node()
        for wid in ("#swap-steps-title", "#swap-steps", "#swap-problem"):
            self.query_one(wid).display = False
        self.query_one("#swap-form", SwapForm).disabled = True
        self._history = HistoryAccess(self._open_store, owned=False)
        try:
            self.case = self.make_case(self._history)
        except (ReadOnlyRefused, ValueError) as exc:
            self._show_problem(f"{exc}\nEsc goes back.")
            return
        if self.injected is not None:
            self._ready(self.case.prepared(self.injected, self.injected_running).base)
        else:
            self._status(f"Connecting to {self.node.name}…")
            self._load()

    def on_unmount(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


    def _show_node(self) -> None:
        self.query_one("#swap-node", Static).update(preview.node_text(
            self.node, self.services.clock(), self.running, self.running_id, self.base is not None))

    def _status(self, message: str) -> None:
        self.query_one("#swap-status", Static).update(plain(message, style="dim"))

    def _show_problem(self, message: str | None) -> None:
        self.problem = message
        widget = self.query_one("#swap-problem", Static)
        widget.update(Text(printable(message or "", keep_newlines=True)))
        widget.display = bool(message)

    # --- loading ------------------------------------------------------------------------

    async def _connect(self) -> asyncssh.SSHClientConnection:
        """The SSH connection to the node, opened (asking about an unknown host key) if needed."""
        from console.flows.ssh_target import resolve_target
        from remote.ssh import connect

        if self._conn is not None and not self._conn.is_closed():
            return self._conn
        target = await resolve_target(self.node, self.services.config, 0, self.services.fleet,
                                      logins=self.services.logins)

        async def trust(fingerprint: str) -> bool:
            return await self.ask(host_key_question(target, fingerprint))

        self._conn = await connect(target, accept_new_host_key=trust)
        self._label = target.label
        return self._conn

    @work(group="swap-load", exclusive=True, exit_on_error=False)
    async def _load(self) -> None:
        assert self.case is not None
        try:
            conn = await self._connect()
            draft = await self.case.prepare(conn, label=self._label)
        except NothingToRun as exc:
            self._status("")
            self._show_problem(str(exc))
            return
        except (RemoteError, ValueError) as exc:
            title = getattr(exc, "title", "Cannot read the container")
            self._status("")
            self._show_problem(f"{title}: {exc}\nNothing was changed. Esc goes back.")
            return
        self.running = draft.current.running
        self.running_id = draft.current.container_id
        self.note = draft.note
        self._ready(draft.base)

    def _ready(self, spec: ContainerSpec) -> None:
        self.base = spec
        self.secrets = {**secrets_of(self.running), **secrets_of(spec)} if self.running else secrets_of(spec)
        self._status(self.note)
        self._show_node()
        form = self.query_one("#swap-form", SwapForm)
        form.disabled = False
        self._fill(spec)
        first = self.query_one("#f-image", Input)      # the form's first field, where Tab order starts
        first.focus()   # Input selects its value on focus, so typing replaces it; selecting again
                        # after a refresh raced fast typing (keys typed before it were lost).

    def _fill(self, spec: ContainerSpec) -> None:
        self.query_one("#swap-form", SwapForm).fill(spec)
        self.recompute()

    # --- live validation, lint, diff, commands ------------------------------------------------

    @on(Input.Changed)
    @on(Checkbox.Changed)
    @on(TextArea.Changed)
    def _edited(self) -> None:
        # Edits (and a refill's many Changed messages) are coalesced into one recompute per refresh.
        if self.base is not None and not self._pending:
            self._pending = True
            self.call_after_refresh(self._flush)

    def _flush(self) -> None:
        self._pending = False
        self.recompute()

    def recompute(self) -> None:
        """Read the form; show the reasons, or the lint, diff and commands of the new spec."""
        if self.base is None:
            return
        spec, errors = self.query_one("#swap-form", SwapForm).read(self.base, self.secrets)
        lint_list = self.query_one("#swap-lint", OptionList)
        lint_list.clear_options()
        self.spec, self.preview, self.plan, self.findings = spec, None, None, []
        if spec is None:
            self._show_problem("Swap disabled until these are fixed:\n"
                               + "\n".join(f"• {reason}" for reason in errors.values()))
            self.query_one("#swap-diff", Static).update("")
            self.query_one("#swap-commands", Static).update("")
            return
        if self.problem and self.problem.startswith("Swap disabled"):
            self._show_problem(None)
        assert self.case is not None
        self.preview = self.case.preview(spec)
        self.plan, self.findings = self.preview.plan, self.preview.findings
        self._history_warning()
        if self.findings:
            lint_list.add_options([Option(preview.finding_text(f), id=str(i)) for i, f in enumerate(self.findings)])
        else:
            lint_list.add_option(Option(Text("No findings.", style="green"), disabled=True))
        self._render_plan(self.plan)

    def action_copy_commands(self) -> None:
        """Copy the commands shown (secrets masked, as shown) to the clipboard (``ctrl+y`` in a field)."""
        if self.plan is None:
            self.app.notify("No commands to copy: the form has problems.", severity="warning")
            return
        self.copy(f"the {len(self.plan.commands)} swap commands", "\n".join(self.plan.commands))

    def _render_plan(self, plan: SwapPlan) -> None:
        self.query_one("#swap-diff", Static).update(preview.diff_text(plan))
        self.query_one("#swap-commands", Static).update(preview.numbered(plan.commands))

    def _open_store(self) -> LaunchHistory:
        """The console's history (``services.store``); raises ``StoreError`` when it cannot be opened."""
        return self.services.store

    def _history_warning(self) -> None:
        """Say once, in a toast, that the history is not used (the lint goes on without it)."""
        history = self._history
        if history is not None and history.problem and not getattr(self, "_warned", False):
            self._warned = True
            self.app.notify(f"History not used: {history.problem}", severity="warning", timeout=8)

    # --- lint fixes ---------------------------------------------------------------------

    @on(OptionList.OptionSelected, "#swap-lint")
    def _finding_selected(self, event: OptionList.OptionSelected) -> None:
        self._apply(event.option_index)

    def action_apply_fix(self) -> None:
        """Apply the fix of the highlighted lint finding (the first one with a fix if none)."""
        lint_list = self.query_one("#swap-lint", OptionList)
        index = lint_list.highlighted
        if index is None:
            index = next((i for i, f in enumerate(self.findings) if f.fix), None)
        if index is not None:
            self._apply(index)

    def _apply(self, index: int) -> None:
        if not 0 <= index < len(self.findings) or self.spec is None:
            return
        finding = self.findings[index]
        if not finding.fix:
            self.app.notify(f"{finding.rule_id} has no automatic fix.", severity="warning")
            return
        try:
            fixed = self.spec.with_changes(finding.fix)
        except ValueError as exc:
            self.app.notify(str(exc), title="Fix not applied", severity="error")
            return
        self.secrets.update(secrets_of(self.spec))
        self._fill(fixed)
        self.app.notify(f"Applied: {', '.join(f'{k}={v}' for k, v in finding.fix.items())}", timeout=4)

    # --- swap ---------------------------------------------------------------------------

    def action_swap_confirm(self) -> None:
        """Open the confirm modal with the exact commands; confirming runs the swap."""
        if self.busy:
            self.app.notify("A swap is already running.", severity="warning")
            return
        if self.preview is None or self.case is None:
            self.app.notify(self.problem or "Nothing to swap yet.", title="Swap disabled", severity="error")
            return
        chosen = self.preview
        errors = chosen.errors
        verb = "Roll back" if self.MODE == "rollback" else "Swap"
        message = preview.confirm_message(chosen.plan, self.node, errors)
        self.app.push_screen(
            ConfirmScreen(f"{verb}: replace the container on {self.node.name}?", message, chosen.plan.commands,
                          confirm_label=verb, require_text=self.node.name if errors else None),
            lambda ok: self._confirmed(chosen, ok))

    # --- navigation ---------------------------------------------------------------------

    def action_rollback(self) -> None:
        """Replace this screen with the rollback preview for the same node."""
        if self.busy:
            return
        self.app.pop_screen()
        self.open_feature("rollback", self.node)

    def has_unsaved_edits(self) -> bool:
        """The form differs from the spec it started from (or does not read as a spec)."""
        return self.base is not None and not self.busy and (self.spec is None or self.spec != self.base)

    def action_back(self) -> None:
        """Back to the previous screen (nothing runs without the confirm)."""
        if self.busy:
            self.app.notify("The swap is running; wait for it to finish.", severity="warning")
            return
        self.app.pop_screen()

    # --- running a confirmed plan (console.flows.swap_run.SwapRunner) -------------------------

    @work(group="swap-run", exclusive=True, exit_on_error=False)
    async def _execute(self, chosen: SwapPreview) -> None:
        """Run ``chosen`` through the use case: each step shown as it starts and ends; on success the
        replaced spec is kept for rollback and the startup view replaces this screen; on failure the
        command's stderr stays on screen and the form is kept."""
        assert self.case is not None
        plan = chosen.plan
        self.busy = True
        self._refocus = self.focused
        self.query_one("#swap-form").disabled = True
        self._show_problem(None)
        self._render_steps(plan, {})
        try:
            conn = await self._connect()
            outcome = await self.case.run(
                conn, chosen, label=self._label, typed_name=self.node.name,
                on_step=lambda _step, _res, states: self._render_steps(plan, states),
                on_history_error=lambda sentence: self.app.notify(sentence, severity="warning"))
        except (ReadOnlyRefused, ValueError) as exc:
            self._fail(f"{exc}")
            return
        except RemoteError as exc:
            self._fail(f"{exc.title}: {exc}\nThe connection failed or dropped; check the node before trying "
                       "again.")
            return
        self.result = outcome.result
        if outcome.result.ok:
            self._succeeded(plan, outcome.result)
        else:
            self._failed(plan, outcome.result)

    def _confirmed(self, chosen: SwapPreview, ok: bool | None) -> None:
        if ok:
            self._execute(chosen)

    def _render_steps(self, plan: SwapPlan, states: dict[str, str]) -> None:
        for wid in ("#swap-steps-title", "#swap-steps"):
            self.query_one(wid).display = True
        self.query_one("#swap-steps", Static).update(preview.steps_text(plan, states))

    def _succeeded(self, plan: SwapPlan, result: SwapResult) -> None:
        if plan.old is not None:
            self.services.previous_specs[self.node.key] = plan.old
        self.busy = False
        self.app.notify(f"Container {plan.new.name} ({(result.container_id or '')[:12]}) is starting on "
                        f"{self.node.name}.", title="Swapped")
        self.app.pop_screen()
        self.open_feature("startup", self.node)

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
