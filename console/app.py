"""The Textual application: composition root of the console.

The app is handed its :class:`~console.services.Services` (TPU source, history
store, sandbox); it never builds clients itself. Feature screens (startup watch,
swap, benchmark, history) are opened by name through :meth:`TpuConsoleApp.open_feature`.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from textual import events
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.content import Content
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import Input
from textual.worker import Worker, WorkerState

from console.flows.fleet_cache import FleetCache
from console.heap import freeze_long_lived, refreeze_if_grown
from console.screens.fleet import FleetScreen
from console.screens.help import HelpScreen
from console.services import Services
from remote.models import utc_now
from remote.printable import printable

if TYPE_CHECKING:
    from remote.models import Node, QueuedResource

#: What a key that needs the services says while they are being built (the sandbox, the TPU client).
#: Seconds between two looks at whether the frozen heap should be collected (:func:`console.heap.refreeze_if_grown`),
#: and seconds without a key or a click that make a moment quiet enough for it.
REFREEZE_CHECK_S = 5.0
QUIET_S = 2.0
STARTING_MESSAGE = "starting… (the console's services are being built; try again in a moment)"

#: Features whose view changes the fleet -> the policy's action (refused in read-only mode whatever the door).
FLEET_CHANGING_FEATURES = {"swap": "swap", "rollback": "rollback", "request": "request"}

#: feature name -> (module, screen class). Each screen takes ``(node)``.
FEATURES: dict[str, tuple[str, str]] = {
    "startup": ("console.screens.startup", "StartupScreen"),
    "swap": ("console.screens.swap.screen", "SwapScreen"),
    "bench": ("console.screens.bench", "BenchScreen"),
    "history": ("console.screens.history.screen", "HistoryScreen"),
    "rollback": ("console.screens.swap.rollback", "RollbackScreen"),
    "request": ("console.screens.request", "RequestScreen"),
    "forwards": ("console.screens.forwards", "ForwardsScreen"),
    "metrics": ("console.screens.metrics", "MetricsScreen"),
}


def binding_ids() -> set[str]:
    """Every binding id of the app and of its screens and modals (what ``[keys]`` may name)."""
    ids: set[str] = set()
    for cls in binding_classes():
        for binding in cls.__dict__.get("BINDINGS", []):
            if isinstance(binding, Binding) and binding.id:
                ids.add(binding.id)
    return ids


def binding_classes() -> list[type]:
    """The app and every screen and modal of the console (each view's module imported first)."""
    import pkgutil

    from textual.screen import Screen as _Screen

    import console.screens

    # every view and modal, whichever were imported already (the answer must not depend on import order)
    for info in pkgutil.walk_packages(console.screens.__path__, "console.screens."):
        importlib.import_module(info.name)
    classes: list[type] = [TpuConsoleApp]
    pending: list[type] = [_Screen]
    while pending:
        subclasses: list[type] = pending.pop().__subclasses__()
        for sub in subclasses:
            pending.append(sub)
            if sub.__module__.startswith("console."):
                classes.append(sub)
    return classes


def is_text_field(widget: object) -> bool:
    """Whether ``widget`` takes typed text: an ``Input``, or a ``TextArea`` (whose module, ~10 ms to
    import, is looked for among those loaded: none can have focus before it is)."""
    if isinstance(widget, Input):
        return True
    text_area = sys.modules.get("textual.widgets._text_area")
    return text_area is not None and isinstance(widget, text_area.TextArea)


class TpuConsoleApp(App[None]):
    """tpu-console: fleet, startup watch, hot swap, history and benchmarks."""

    TITLE = "tpu-console"
    CSS_PATH = "app.tcss"
    BINDINGS = [
        Binding("question_mark", "help", "Help", key_display="?", id="help"),
        Binding("f1", "help", "Help", show=False, priority=True, id="help_f1"),   # works inside inputs
        # priority: the action runs (and waits for the command box) before the app reads the next key;
        # in a text field ":" is typed there (check_action)
        Binding("colon", "command", "Command", key_display=":", id="command", show=False, priority=True),  # ? and ctrl+p list it
        Binding("F", "forwards", "Forwards", id="forwards", show=False),  # ? and ctrl+p list it
        Binding("q", "quit", "Quit", id="quit"),
    ]

    def __init__(self, services: Services | None = None, *, start: Callable[[], Services] | None = None,
                 fleet_cache: FleetCache | None = None, readonly: bool = False, sandbox: bool = False,
                 keys: dict[str, str] | None = None) -> None:
        """Either ``services`` (built already: tests, snapshots) or ``start``, a callable that builds
        them (starting the sandbox for ``--demo``); it runs on a thread after the first frame, so the
        fleet is on screen (from ``fleet_cache``, or "loading fleet…") before it returns.

        Args:
            services: the collaborators, or ``None`` with ``start``.
            start: builds the services (blocking; on a worker thread); what it raises goes to
                :meth:`report_unexpected`.
            fleet_cache: the last fleet on disk (default: ``services.fleet_cache``).
            readonly, sandbox, keys: what the first frame shows before the services exist
                (read-only mode, the sandbox title, the ``[keys]`` table); the services' config wins after.
        """
        super().__init__()
        if services is None and start is None:
            raise ValueError("TpuConsoleApp needs services or a start callable")
        self._services: Services | None = None
        self._start = start
        self._readonly = readonly
        self.fleet_cache = fleet_cache if fleet_cache is not None or services is None else services.fleet_cache
        if keys:
            self.set_keymap(keys)
        #: the title without the forwards (:meth:`show_forwards` appends them)
        self.base_title = self._title_for(sandbox)
        #: when the last key or mouse event came (``time.monotonic``)
        self._last_input_s = time.monotonic()
        self.title = self.base_title
        if services is not None:
            self._take_services(services)

    @property
    def ready(self) -> bool:
        """Whether the services are built (until then keys that need them say "starting…")."""
        return self._services is not None

    @property
    def services(self) -> Services:
        """The app's collaborators.

        Raises:
            RuntimeError: they are not built yet (check :attr:`ready`; :meth:`need_services` says so).
        """
        if self._services is None:
            raise RuntimeError("the console's services are not built yet")
        return self._services

    @property
    def readonly(self) -> bool:
        """Read-only mode: the config's once the services exist, else what the app was started with."""
        return self._services.config.readonly if self._services is not None else self._readonly

    def clock(self) -> datetime:
        """The services' clock (tests freeze it), or the UTC time before they exist."""
        return self._services.clock() if self._services is not None else utc_now()

    def need_services(self, what: str = "") -> bool:
        """``True`` when the services are built; else a "starting…" toast and ``False``."""
        if self._services is not None:
            return True
        self.notify(STARTING_MESSAGE, title=what or "Starting", severity="warning", timeout=3)
        return False

    def _take_services(self, services: Services) -> None:
        self._services = services
        if self.fleet_cache is None:
            self.fleet_cache = services.fleet_cache
        if services.config.keys:
            self.set_keymap(services.config.keys)
        shared = services.shared_sandbox_dir
        self.base_title = self._title_for(services.sandbox is not None or shared is not None)
        self.title = self.base_title
        if shared is not None:
            self.notify(f"Using the sandbox already running in {shared} (tpu-console sandbox); it keeps running "
                        "when you quit.", title="Sandbox", markup=False, timeout=10)
        services.forwards.subscribe(self.show_forwards)

    def _title_for(self, sandbox: bool) -> str:
        """``tpu-console — sandbox — READ-ONLY``: the header says read-only mode (as k9s does)."""
        title = "tpu-console — sandbox" if sandbox else self.TITLE
        return f"{title} — READ-ONLY" if self.readonly else title

    def refuse_readonly(self, action: str) -> bool:
        """``True`` (after a toast saying why) when read-only mode refuses ``action`` (a policy action:
        :data:`console.flows.policy.FLEET_CHANGING_ACTIONS`)."""
        from console.flows.policy import ReadOnlyRefused, refuse_in_readonly

        where = "the config"
        if self._services is not None and self._services.config.path is not None:
            where = str(self._services.config.path)
        try:
            refuse_in_readonly(self, action, where=where)
        except ReadOnlyRefused as exc:
            self.notify(str(exc), title="Read-only", severity="warning", timeout=6)
            return True
        return False

    async def action_quit(self) -> None:
        """Quit; while an action changes a node (a swap, a request), ask first and say what state
        each node is in. Quitting anyway records each action as interrupted."""
        running = self._services.actions.describe() if self._services is not None else []
        if not running:
            self.exit()
            return
        from console.screens.confirm import ConfirmScreen

        def answer(quit_anyway: bool | None) -> None:
            if quit_anyway and self._services is not None:
                self._services.actions.abandon_all()
                self.exit()

        await self.push_screen(ConfirmScreen(
            "An action is still running: quit anyway?",
            "Quitting now stops it where it is; it is recorded in the history as interrupted.\n"
            + "\n".join(f"• {line}" for line in running),
            confirm_label="Quit anyway", cancel_label="Keep running"), answer)

    def on_mount(self) -> None:
        self.push_screen(FleetScreen())
        if self._services is None:
            self.call_after_refresh(self._after_first_frame)

    def on_ready(self) -> None:
        # the long-lived heap out of the collector's full collections (console.heap); without
        # the services yet, once they are built
        if self._services is not None:
            self.call_after_refresh(freeze_long_lived)
        self.set_interval(REFREEZE_CHECK_S, self._refreeze_when_quiet)

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.InputEvent):
            self._last_input_s = time.monotonic()
        await super().on_event(event)

    def _refreeze_when_quiet(self) -> None:
        """What the frozen heap keeps in dead cycles, collected at a moment without keys
        (:func:`console.heap.refreeze_if_grown`; nothing unless ``console.tui`` turned freezing on)."""
        refreeze_if_grown(quiet=time.monotonic() - self._last_input_s >= QUIET_S)

    def _after_first_frame(self) -> None:
        # One more refresh before the start, whose imports hold the GIL: the fleet table's rows may be
        # drawn in the frame after the first. (Not measured apart: the bench is too noisy on this machine.)
        self.call_after_refresh(self._begin_start)

    def _begin_start(self) -> None:
        self.run_worker(self._build_services, name="starting the console", group="start", thread=True,
                        exit_on_error=False)

    def _build_services(self) -> None:
        assert self._start is not None
        services = self._start()
        self.call_from_thread(self._services_built, services)

    def _services_built(self, services: Services) -> None:
        self._take_services(services)
        fleet = self.fleet_screen
        if fleet is not None:
            fleet.services_ready()
        self.call_after_refresh(freeze_long_lived)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The services' start failed: a known cause (the history database, the sandbox's config or
        ports, a remote failure) is one sentence with what to do; anything else is a bug (its
        traceback). Shown, not a crash."""
        error = event.worker.error
        if event.worker.group != "start" or event.state is not WorkerState.ERROR or error is None:
            return
        from console.config import ConfigError
        from remote.errors import RemoteError
        from store import StoreError

        if isinstance(error, (StoreError, ConfigError, RemoteError, OSError)):
            from console.screens.error import ErrorScreen

            self.log.error(f"starting the console failed: {type(error).__name__}: {error}")
            self.push_screen(ErrorScreen(
                f"The console could not start: {error}", "",
                advice="Nothing was changed. Fix the cause above and start tpu-console again; q quits."))
        else:
            self.report_unexpected("starting the console", error)

    def show_forwards(self) -> None:
        """Put the forwards in the header: ``⇄ vllm-flex-b localhost:8005`` (``+N`` more; the first's
        state when it is not open, ``(target down)`` while the node refuses its port), after every
        change of the app's forwards."""
        forwards = [f for f in self.services.forwards.forwards.values() if f.state != "closed"]
        if not forwards:
            self.title = self.base_title
            return
        first = forwards[0]
        state = "" if first.state == "open" else f" ({first.state})"
        if first.state == "open" and first.target_down is not None:
            state = " (target down)"
        more = f" +{len(forwards) - 1}" if len(forwards) > 1 else ""
        self.title = f"{self.base_title}  ⇄ {first.label}{state}{more}"

    def action_forwards(self) -> None:
        """Open the forwards view (every forward the console holds: close, copy URL)."""
        if type(self.screen).__name__ == "ForwardsScreen" or not self.need_services("Forwards"):
            return
        self.open_feature("forwards", getattr(self.screen, "node", None))

    def action_help(self) -> None:
        """Show every binding of the current screen and of the app."""
        if isinstance(self.screen, HelpScreen):
            return
        self.push_screen(HelpScreen(self.screen))

    @property
    def fleet_screen(self) -> FleetScreen | None:
        """The fleet screen (the first pushed), or ``None`` before it is mounted."""
        return next((s for s in self.screen_stack if isinstance(s, FleetScreen)), None)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``:`` is command mode except in a text field, where it is typed."""
        return not (action == "command" and is_text_field(self.focused))

    async def action_command(self) -> None:
        """``:`` command mode: jump to a view, or to a node by name (see :mod:`console.screens.command`).

        Waits until the command box is mounted and focused: keys typed right after ``:`` (a fast
        typist, a paste) wait in the app's queue meanwhile, then go to the box, none to the view below."""
        from console.screens.command import CommandScreen, candidates

        if isinstance(self.screen, CommandScreen):
            return
        fleet = self.fleet_screen
        nodes = fleet.snapshot.nodes if fleet and fleet.snapshot else []
        await self.push_screen(CommandScreen(candidates(nodes, readonly=self.readonly,
                                                        workloads=self._workloads())), self.run_command)

    def _workloads(self) -> list[Any]:
        """The GKE workloads the fleet's Workloads table lists (none without ``[gke]`` or before a listing)."""
        from console.widgets.workloads import WorkloadsPane

        fleet = self.fleet_screen
        panes = list(fleet.query(WorkloadsPane)) if fleet is not None else []
        listed = panes[0].fleet if panes else None
        return list(listed.workloads) if listed is not None else []

    def run_command(self, text: str | None) -> None:
        """Run what was typed in command mode (``None``: closed); a bad command is a toast."""
        from console.screens.command import parse_command

        if not text or not text.strip():
            return
        fleet = self.fleet_screen
        nodes = {n.name: n for n in fleet.snapshot.nodes} if fleet and fleet.snapshot else {}
        workloads = self._workloads()
        try:
            command = parse_command(text, list(nodes.values()), readonly=self.readonly, workloads=workloads)
        except ValueError as exc:
            self.notify(str(exc), title=f":{text.strip()}", severity="warning", markup=False)
            return
        if command.workload is not None and fleet is not None:
            from console.screens.command import workload_names

            fleet.open_workload(command.view, workload_names(workloads)[command.workload])
        elif command.view == "help":
            self.action_help()
        elif command.view == "quit":
            self.run_worker(self.action_quit(), group="quit")
        elif command.view in ("fleet", "node"):
            self._back_to_fleet(nodes.get(command.node or ""))
        else:
            self.open_feature(command.view, nodes.get(command.node or ""))

    def _back_to_fleet(self, node: Node | None) -> None:
        """Close the screens above the fleet (asking first when a swap form holds edits), then
        select ``node`` (or keep the selection when ``None``)."""
        from console.screens.confirm import ConfirmScreen
        from console.screens.swap.screen import SwapScreen

        fleet = self.fleet_screen
        edited = [s for s in self.screen_stack[1:] if isinstance(s, SwapScreen) and s.has_unsaved_edits()]

        def go(discard: bool | None = True) -> None:
            if not discard:
                return
            while len(self.screen_stack) > 1 and self.screen is not fleet:
                self.pop_screen()
            if fleet is not None and node is not None:
                fleet.select_node(node)

        if not edited:
            go()
            return
        names = ", ".join(printable(getattr(s.node, "name", "?")) for s in edited)
        self.push_screen(ConfirmScreen(
            f"Discard the swap form's edits for {names}?",
            "Going to the fleet closes the swap form; its edits are not kept anywhere.",
            confirm_label="Discard", cancel_label="Keep editing"), go)

    def open_feature(self, name: str, node: Node | QueuedResource | None) -> None:
        """Push the screen of feature ``name`` for ``node`` (a key of :data:`FEATURES`); a view that
        changes the fleet is refused (with the reason) in read-only mode, whatever door asked."""
        if not self.need_services(name.capitalize()):
            return
        if name in FLEET_CHANGING_FEATURES and self.refuse_readonly(FLEET_CHANGING_FEATURES[name]):
            return
        module_name, class_name = FEATURES[name]
        module = importlib.import_module(module_name)
        screen = getattr(module, class_name)(node)
        top_node = getattr(self.screen, "node", None)
        if type(self.screen) is type(screen) and top_node is not None and node is not None \
                and top_node.key == node.key:
            # The same view of the same node is on top (e.g. the startup view a swap or rollback
            # was opened from): replace it, so Escape goes back to where the operator came from.
            self.switch_screen(screen)
            return
        self.push_screen(screen)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """The command palette: app commands plus every binding of the current screen. Textual's
        "Keys" (its key panel) is left out: "Help: all keys" lists every binding, with its id."""
        for command in super().get_system_commands(screen):
            if command.title != "Keys":
                yield command
        for binding in getattr(screen, "BINDINGS", []):
            if isinstance(binding, Binding) and binding.description and binding.show \
                    and screen.check_action(binding.action, ()) is not False:
                action = binding.action
                yield SystemCommand(
                    f"{binding.description} ({binding.key_display or binding.key})",
                    f"{type(screen).__name__.removesuffix('Screen')}: {binding.description}",
                    lambda a=action, s=screen: self.call_later(s.run_action, a),
                )
        yield SystemCommand("Help: all keys", "Show every binding", self.action_help)
        yield SystemCommand("Command mode (:)", "Jump to a view or a node by name, with completion",
                            self.action_command)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Every toast of the console: ``message`` and ``title`` shown literally (never parsed as
        markup, whatever ``markup`` says) after :func:`remote.printable.printable`, since they
        often carry outside text (error messages, log lines, container values)."""
        super().notify(printable(message), title=printable(title), severity=severity, timeout=timeout,
                       markup=False)

    def format_title(self, title: str, sub_title: str) -> Content:
        """Every screen's header: titles carry node names from the API, so through the one sanitizer."""
        return super().format_title(printable(title), printable(sub_title))

    def report_unexpected(self, what: str, error: BaseException) -> None:
        """The one route for a failure no code expected (a bug): its traceback goes to the
        Textual log (``textual console``) and into an :class:`~console.screens.error.ErrorScreen`;
        the console keeps running."""
        import traceback

        from console.screens.error import ErrorScreen

        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        self.log.error(f"{what} failed unexpectedly\n{text}")
        self.push_screen(ErrorScreen(f"{what} failed: {type(error).__name__}: {error}", text))

    def on_unmount(self) -> None:
        if self._services is not None:
            self._services.close()
