"""The request form: from nothing to serving, in the console.

Fields (name, project, zone, accelerator type, provisioning model, runtime version, max run
duration, valid until) feed :func:`console.flows.request.build_request`, the same flow as
``tpu-console request``; the container fields (image, model, settings as ``--set KEY=VALUE``
items) feed :func:`console.flows.request_container.container_launch`, as ``request --image --model --set``.
The image starts as the config's ``[container]`` image, pinned to the digest the history recorded
for its tag when there is one. The preview shows the container's commands and the swap's lint for
the requested type (:func:`console.flows.request_container.preview_launch`), the exact REST
call and body, the equivalent gcloud line and the cost, or what is wrong with a field.

``ctrl+t`` probes the capacity first (:class:`console.flows.probe.ProbeCase`, after a confirm: it
creates and deletes a spot queued resource): stockout, quota or available, with what to try.
``ctrl+s`` asks for a typed confirm (the operator types the name) and creates; the startup view
then follows the request: its queue states, the node's creation, the container's start (pull,
run), the boot, ready.
Keys: ``ctrl+s`` create [request_create], ``ctrl+t`` probe first [request_probe], ``escape`` back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Checkbox, Input, Label, Select, Static

from console.flows.history_access import HistoryAccess
from console.flows.policy import ReadOnlyRefused
from console.flows.request import RequestCase, RequestPreview, build_request, explain, preview
from console.flows.request_container import (
    ContainerLaunch,
    container_launch,
    known_digest,
    planned_node,
    preview_launch,
    split_settings,
)
from console.render import request_preview as render
from console.screens.base import ConsoleScreen
from console.screens.confirm import ConfirmScreen
from console.widgets.check_box import MarkedCheckbox
from console.widgets.footer import ConsoleFooter
from console.widgets.header import ConsoleHeader
from remote.errors import RemoteError
from remote.models import QueuedResource
from remote.names import console_command
from remote.tpu.requests import REQUEST_MODELS

if TYPE_CHECKING:
    from console.flows.probe import ProbeAnswer
    from console.flows.swap_case import SwapPreview
    from remote.models import Node
    from remote.tpu.requests import QueuedResourceRequest

#: (field id, label, placeholder) of the text fields, in order.
FIELDS = (
    ("name", "Name", "queued resource id, e.g. demo-v5e"),
    ("project", "Project", "GCP project id"),
    ("zone", "Zone", "e.g. us-west4-a"),
    ("accelerator_type", "Accelerator type", "e.g. v5litepod-1, v6e-8"),
    ("runtime_version", "Runtime version", "empty: the usual one for the type"),
    ("max_run_duration", "Max run duration", "flex-start only: 10m to 7d, e.g. 4h"),
    ("valid_until", "Valid until", "how long it may wait in the queue, e.g. 1h (optional)"),
)
#: (field id, label, placeholder) of the container fields.
CONTAINER_FIELDS = (
    ("image", "Image", "e.g. vllm/vllm-tpu:v0.30.0 (or repo@sha256:...)"),
    ("model", "Model", "e.g. google/gemma-4-E2B-it"),
    ("settings", "Settings (--set KEY=VALUE ...)", "e.g. max-model-len=8192 gpu-memory-utilization=0.9"),
)
#: Seconds between two reads of the probe's state (tests make it short).
PROBE_POLL_S = 2.0
#: Seconds the probe waits for an answer before calling it a stockout (``probe --wait-s``).
PROBE_WAIT_S = 120.0
#: Seconds between two polls of the TPU API while the startup view follows the request.
FOLLOW_POLL_S = 5.0
#: Below this many columns the preview sits under the form, both the full width.
STACK_BELOW = 110


class RequestScreen(ConsoleScreen):
    """Form + live preview for one queued-resource request and the container it starts.

    Args:
        selected: the fleet's selected node or queued resource (its project and zone prefill the
            form; a queued resource's type and provisioning model too), or ``None``.
        probe: probe the capacity of the prefilled type at once (the fleet's ``p`` on a waiting
            or failed request); the confirm still asks first.
    """

    DEFAULT_CSS = """
    RequestScreen #request-body { height: 1fr; }
    RequestScreen #request-form { width: 56; height: 1fr; padding: 0 1; }
    RequestScreen #request-form Label { margin-top: 1; }
    RequestScreen #request-form .rq-head { margin-top: 1; text-style: bold; color: $accent; }
    RequestScreen #request-preview { width: 1fr; height: 1fr; padding: 0 1; border-left: solid $panel; }
    RequestScreen #rq-probe, RequestScreen #rq-container, RequestScreen #rq-call, RequestScreen #rq-keys {
        margin-top: 1;
    }
    RequestScreen #rq-probe { margin: 0 0 1 0; }
    RequestScreen.-stacked #request-body { layout: vertical; }
    RequestScreen.-stacked #request-form { width: 1fr; }
    RequestScreen.-stacked #request-preview { border-left: none; border-top: solid $panel; }
    """

    READONLY_ACTIONS = {"create": "request", "probe": "probe"}
    BINDINGS = [
        Binding("ctrl+s", "create", "Create", id="request_create"),
        Binding("ctrl+t", "probe", "Probe first", id="request_probe"),
        Binding("escape", "back", "Back", id="request_back"),
    ]

    def __init__(self, selected: Node | QueuedResource | None = None, *, probe: bool = False) -> None:
        super().__init__()
        self.selected = selected
        self.probe_at_once = probe
        self.current: RequestPreview | None = None
        self.problem: str | None = None
        self.launch: ContainerLaunch | None = None
        self.container: SwapPreview | None = None
        self.container_problem: str | None = None
        #: (the digest the image field was pinned to, the note saying so) while the field holds it
        self._pinned: tuple[str, str] | None = None
        self.probe_answer: ProbeAnswer | None = None
        self.probe_progress: list[str] = []
        self.probe_running: str | None = None
        self.probe_problem: str | None = None
        self._history: HistoryAccess | None = None
        self._linted_for: tuple[object, SwapPreview] | None = None

    def compose(self) -> ComposeResult:
        yield ConsoleHeader()
        with Horizontal(id="request-body"):
            with VerticalScroll(id="request-form"):
                for field_id, label, placeholder in FIELDS[:4]:
                    yield Label(label)
                    yield Input(placeholder=placeholder, id=f"rq-{field_id}")
                yield Label("Provisioning model")
                yield Select([(m, m) for m in REQUEST_MODELS], value="flex-start", allow_blank=False,
                             id="rq-provisioning_model")
                for field_id, label, placeholder in FIELDS[4:]:
                    yield Label(label)
                    yield Input(placeholder=placeholder, id=f"rq-{field_id}")
                yield Label("Container", classes="rq-head")
                yield MarkedCheckbox("start it once the node is READY", True, id="rq-start_container")
                for field_id, label, placeholder in CONTAINER_FIELDS:
                    yield Label(label)
                    yield Input(placeholder=placeholder, id=f"rq-{field_id}")
            with VerticalScroll(id="request-preview"):
                yield Static("", id="rq-probe")
                yield Static("", id="rq-preview")
                yield Static("", id="rq-container")
                yield Static("", id="rq-call")
                yield Static(Text("ctrl+t: probe the capacity first · ctrl+s: create (you type the name to confirm)",
                                  style="dim"), id="rq-keys")
        yield ConsoleFooter()

    def on_resize(self, event: events.Resize) -> None:
        """Below :data:`STACK_BELOW` columns the preview sits under the form."""
        super().on_resize(event)
        self.set_class(event.size.width < STACK_BELOW, "-stacked")

    def on_mount(self) -> None:
        self.sub_title = "request capacity and the container it serves"
        self.set_class(self.app.size.width < STACK_BELOW, "-stacked")
        config = self.services.config
        self._history = HistoryAccess(lambda: self.services.store, owned=False)
        selected = self.selected
        project = getattr(selected, "project", None) or (config.projects[0].id if config.projects else "")
        self.query_one("#rq-project", Input).value = project
        self.query_one("#rq-zone", Input).value = getattr(selected, "zone", None) or ""
        if isinstance(selected, QueuedResource):         # asking again (or probing) what it asked for
            self.query_one("#rq-accelerator_type", Input).value = selected.accelerator_type or ""
            if selected.provisioning_model in REQUEST_MODELS:
                self.query_one("#rq-provisioning_model", Select).value = selected.provisioning_model
        self.query_one("#rq-max_run_duration", Input).value = "4h"
        digest = known_digest(self._history, config.container.image)
        self.query_one("#rq-image", Input).value = digest or config.container.image
        if digest:
            self._pinned = (digest, f"image pinned to the digest the history recorded for {config.container.image}")
        self.query_one("#rq-model", Input).value = config.container.model
        self.query_one("#rq-name", Input).focus()
        self._update()
        if self.probe_at_once:
            self.call_after_refresh(self.action_probe)

    def value(self, field_id: str) -> str:
        """The text of one field (``name``, ``zone``, ``image``...)."""
        if field_id == "provisioning_model":
            return str(self.query_one("#rq-provisioning_model", Select).value)
        return self.query_one(f"#rq-{field_id}", Input).value

    @on(Input.Changed)
    @on(Select.Changed)
    @on(Checkbox.Changed)
    def _changed(self) -> None:
        self._update()

    def _update(self) -> None:
        """Rebuild the request and its container from the fields; show the preview or what is wrong."""
        model = self.value("provisioning_model")
        try:
            request = build_request(
                name=self.value("name"), project=self.value("project"), zone=self.value("zone"),
                accelerator_type=self.value("accelerator_type"), provisioning_model=model,
                runtime_version=self.value("runtime_version"),
                max_run_duration=self.value("max_run_duration") if model == "flex-start" else None,
                valid_until=self.value("valid_until"))
        except ValueError as exc:
            self.current, self.problem = None, str(exc)
        else:
            self.current, self.problem = preview(request, self.services.config.prices,
                                                 api_endpoint=self.services.config.api_endpoint), None
        self._update_container()
        self.query_one("#rq-preview", Static).update(render.request_text(self.current, self.problem))
        self.query_one("#rq-call", Static).update(render.call_text(self.current))
        self._show_probe()

    def _update_container(self) -> None:
        """The container's spec, lint and commands (the swap's, for the requested type)."""
        self.launch, self.container, self.container_problem = None, None, None
        enabled = self.query_one("#rq-start_container", Checkbox).value
        for field_id, _, _ in CONTAINER_FIELDS:
            self.query_one(f"#rq-{field_id}", Input).disabled = not enabled
        if enabled:
            try:
                self.launch = container_launch(image=self.value("image"), model=self.value("model"),
                                               settings=split_settings(self.value("settings")))
                if self.launch is not None and self.current is not None and self._history is not None:
                    self.container = self._linted(self.current.request, self.launch, self._history)
            except ValueError as exc:
                self.launch, self.container_problem = None, str(exc)
        widget = self.query_one("#rq-container", Static)
        if self.current is None and self.container_problem is None and self.launch is not None:
            widget.update(Text("Container, started once READY: linted once the request is complete.", style="dim"))
            return
        pinned = self._pinned is not None and self.value("image").strip() == self._pinned[0]
        widget.update(render.container_text(self.container, self.container_problem,
                                            self._pinned[1] if pinned and self._pinned is not None else None))

    def _linted(self, request: QueuedResourceRequest, launch: ContainerLaunch, history: HistoryAccess) -> SwapPreview:
        """:func:`preview_launch` of the container on the requested node, read again only when what the
        lint reads changed (the type, the provisioning model and run, the container): a keystroke in the
        name or the zone costs no history query.

        Raises:
            ValueError: the container's spec is invalid.
        """
        key = (request.accelerator_type, request.provisioning_model, request.max_run_duration_s, request.node,
               launch.image, tuple(sorted(launch.changes.items(), key=lambda kv: kv[0])))
        if self._linted_for is not None and self._linted_for[0] == key:
            return self._linted_for[1]
        shown = preview_launch(self.services.config, request, launch, self.services.config.container, history,
                               self.services.clock())
        self._linted_for = (key, shown)
        return shown

    def _show_probe(self) -> None:
        widget = self.query_one("#rq-probe", Static)
        text = render.probe_text(self.probe_answer, self.probe_progress, running=self.probe_running,
                                 problem=self.probe_problem, readonly=self.console.readonly)
        widget.update(text)
        widget.display = bool(text.plain)

    def action_back(self) -> None:
        """Leave the form; nothing was created."""
        self.app.pop_screen()

    # --- probe first --------------------------------------------------------------------

    def action_probe(self) -> None:
        """Probe the capacity of the form's type, zone and project (a confirm first: it creates and
        deletes a spot queued resource)."""
        if self.console.refuse_readonly("probe"):
            return
        if self.probe_running is not None:
            self.app.notify("A probe is already running.", severity="warning")
            return
        from remote.tpu.requests import default_runtime_version

        accel = self.value("accelerator_type").strip()
        runtime = self.value("runtime_version").strip() or default_runtime_version(accel)
        project, zone = self.value("project").strip(), self.value("zone").strip()
        if not (accel and zone and project and runtime):
            self.app.notify("The probe needs a project, a zone and an accelerator type (with a known runtime).",
                            title="Not probed", severity="warning")
            return
        self._probe(project, zone, accel, runtime)

    @work(group="request-probe", exclusive=True, exit_on_error=False)
    async def _probe(self, project: str, zone: str, accel: str, runtime: str) -> None:
        from console.flows.probe import ProbeCase

        line = console_command(["probe", "--project", project, "--zone", zone, "--accelerator-type", accel])
        question = ConfirmScreen(
            f"Probe {accel} capacity in {project}/{zone}?",
            "This creates a spot queued resource (probe-…) with a short validUntil, reads the API's answer "
            "(stockout, quota or available) and deletes it again. The same from the CLI:", [line],
            confirm_label="Probe")
        if not await self.ask(question):
            self.app.notify("Not probed: nothing was created.")
            return
        services = self.services
        offered = getattr(services.fleet, "offered_types", None)

        async def no_zones(_project: str) -> dict[str, tuple[str, ...]]:
            return {}

        self.probe_answer, self.probe_problem, self.probe_progress = None, None, []
        self.probe_running = f"{accel} in {project}/{zone}"
        self._show_probe()

        def seen(state: str) -> None:
            self.probe_progress.append(state)
            self._show_probe()

        try:
            case = ProbeCase(services.config, services.queued_resources, project, zone, accel, runtime,
                             wait_s=PROBE_WAIT_S, actions=services.actions, poll_s=PROBE_POLL_S)
            self.probe_answer = await case.answer(offered or no_zones, on_state=seen)
        except (ReadOnlyRefused, ValueError, RemoteError) as exc:
            self.probe_problem = str(exc)
        finally:
            self.probe_running = None
            self._show_probe()
        answer = self.probe_answer
        if answer is not None:
            self.app.notify(f"{answer.result.verdict}: {answer.result.reason}", title=f"Capacity of {accel}",
                            severity="information" if answer.result.verdict == "available" else "warning")

    # --- create -------------------------------------------------------------------------

    def action_create(self) -> None:
        """Ask (typed confirm), then create the queued resource and follow it in the startup view."""
        if self.console.refuse_readonly("request"):
            return
        if self.current is None:
            self.app.notify(self.problem or "Fill in the form first.", title="Not ready", severity="warning")
            return
        if self.container_problem is not None:
            self.app.notify(f"Container: {self.container_problem}", title="Not ready", severity="warning")
            return
        self._create(self.current, self.launch, self.container)

    @work(group="request", exclusive=True, exit_on_error=False)
    async def _create(self, shown: RequestPreview, launch: ContainerLaunch | None,
                      container: SwapPreview | None) -> None:
        request = shown.request
        then = ("Once READY: " + ("the container is pulled and started (commands 2 on)"
                                  + (f"; {container.verdict()}" if container.errors else "") + "."
                                  if container is not None else "no container is started.") + " ")
        question = ConfirmScreen(
            f"Create queued resource {request.name}?",
            f"{request.accelerator_type} {request.provisioning_model} in {request.project}/{request.zone}. "
            f"{shown.cost} {then}The startup view follows it.",
            [shown.gcloud, *(container.plan.commands if container is not None else ())],
            confirm_label="Create", require_text=request.name)
        if not await self.ask(question):
            self.app.notify("Not created: nothing was changed.")
            return
        try:
            case = RequestCase(self.services.config, self.services.queued_resources, request, self.services.actions,
                               launch=launch)
            qr = await case.submit()
        except ReadOnlyRefused as exc:
            self.app.notify(str(exc), title="Read-only", severity="warning")
            return
        except RemoteError as exc:
            self.app.notify(str(exc), title=f"{request.name} not created", severity="error", timeout=10)
            return
        self.app.notify(f"{qr.name} is {qr.state}: {explain(qr, None)}", title="Created", timeout=10)
        self._follow(case, qr)

    def _follow(self, case: RequestCase, qr: QueuedResource) -> None:
        """Replace the form with the startup view of the node the request creates (queue -> READY ->
        the container's start and boot); the fleet lists the new request."""
        from dataclasses import replace

        from console.screens.startup import StartupScreen

        node = replace(planned_node(case.request, self.services.clock()), state=qr.state)
        fleet = self.console.fleet_screen
        self.app.switch_screen(StartupScreen(node, poll_s=FOLLOW_POLL_S, request=case))
        if fleet is not None:
            fleet.action_refresh_fleet()
