"""The request form: ask for TPU capacity (a queued resource) from the console.

Fields (name, project, zone, accelerator type, provisioning model, runtime version, max run
duration, valid until) feed :func:`console.flows.request.build_request`, the same flow as
``tpu-console request``; the preview shows the exact REST call and body, the equivalent gcloud
line and the cost, or what is wrong with a field. ``ctrl+s`` asks for a typed confirm (the
operator types the name) and creates; the fleet then lists the new queued resource.
Keys: ``ctrl+s`` create [request_create], ``escape`` back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Input, Label, Select, Static

from console.flows.request import RequestPreview, build_request, explain, preview
from console.screens.base import ConsoleScreen
from console.screens.confirm import ConfirmScreen
from console.widgets.footer import ConsoleFooter
from console.widgets.header import ConsoleHeader
from remote.errors import RemoteError
from remote.tpu.requests import REQUEST_MODELS

if TYPE_CHECKING:
    from remote.models import Node, QueuedResource

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


class RequestScreen(ConsoleScreen):
    """Form + live preview for one queued-resource request.

    Args:
        selected: the fleet's selected node or queued resource (its project and zone prefill
            the form), or ``None``.
    """

    DEFAULT_CSS = """
    RequestScreen #request-body { height: 1fr; }
    RequestScreen #request-form { width: 60; height: auto; padding: 0 1; }
    RequestScreen #request-form Label { margin-top: 1; }
    RequestScreen #request-preview { width: 1fr; padding: 0 1; border-left: solid $panel; }
    """

    BINDINGS = [
        Binding("ctrl+s", "create", "Create", id="request_create"),
        Binding("escape", "back", "Back", id="request_back"),
    ]

    def __init__(self, selected: Node | QueuedResource | None = None) -> None:
        super().__init__()
        self.selected = selected
        self.current: RequestPreview | None = None
        self.problem: str | None = None

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
            with Vertical(id="request-preview"):
                yield Static("", id="rq-preview")
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self.sub_title = "request capacity"
        config = self.services.config
        project = getattr(self.selected, "project", None) or (config.projects[0].id if config.projects else "")
        zone = getattr(self.selected, "zone", None) or ""
        self.query_one("#rq-project", Input).value = project
        self.query_one("#rq-zone", Input).value = zone
        self.query_one("#rq-max_run_duration", Input).value = "4h"
        self.query_one("#rq-name", Input).focus()
        self._update()

    def value(self, field_id: str) -> str:
        """The text of one field (``name``, ``zone``...)."""
        if field_id == "provisioning_model":
            return str(self.query_one("#rq-provisioning_model", Select).value)
        return self.query_one(f"#rq-{field_id}", Input).value

    @on(Input.Changed)
    @on(Select.Changed)
    def _changed(self) -> None:
        self._update()

    def _update(self) -> None:
        """Rebuild the request from the fields; show its preview or what is wrong."""
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
            self.query_one("#rq-preview", Static).update(Text.assemble(("Not ready: ", "bold yellow"), str(exc)))
            return
        self.current, self.problem = preview(request, self.services.config.prices,
                                                api_endpoint=self.services.config.api_endpoint), None
        shown = self.current
        self.query_one("#rq-preview", Static).update(Group(
            Text(f"{request.accelerator_type} {request.provisioning_model} in {request.project}/{request.zone}",
                 style="bold"),
            Text(f"Cost: {shown.cost}"), Text(""),
            Text("REST call", style="bold"), Text(shown.rest_call), Text(""),
            Text("Body", style="bold"), Text(shown.body_text), Text(""),
            Text("Equivalent gcloud", style="bold"), Text(shown.gcloud), Text(""),
            Text("ctrl+s: create (you type the name to confirm)", style="dim")))

    def action_back(self) -> None:
        """Leave the form; nothing was created."""
        self.app.pop_screen()

    def action_create(self) -> None:
        """Ask (typed confirm), then create the queued resource."""
        if self.console.refuse_readonly("request"):
            return
        if self.current is None:
            self.app.notify(self.problem or "Fill in the form first.", markup=False, title="Not ready", severity="warning")
            return
        self._create(self.current)

    @work(group="request", exclusive=True, exit_on_error=False)
    async def _create(self, shown: RequestPreview) -> None:
        request = shown.request
        question = ConfirmScreen(
            f"Create queued resource {request.name}?",
            f"{request.accelerator_type} {request.provisioning_model} in {request.project}/{request.zone}. "
            f"{shown.cost}", [shown.gcloud], confirm_label="Create", require_text=request.name)
        if not await self.ask(question):
            self.app.notify("Not created: nothing was changed.")
            return
        from console.flows.policy import ReadOnlyRefused
        from console.flows.request import RequestCase

        try:
            case = RequestCase(self.services.config, self.services.queued_resources, request, self.services.actions)
            qr = await case.submit()
        except ReadOnlyRefused as exc:
            self.app.notify(str(exc), title="Read-only", severity="warning")
            return
        except RemoteError as exc:
            self.app.notify(str(exc), markup=False, title=f"{request.name} not created", severity="error", timeout=10)
            return
        self.app.notify(f"{qr.name} is {qr.state}: {explain(qr, None)}", markup=False, title="Created", timeout=10)
        self.app.pop_screen()
        refresh = getattr(self.app.screen, "action_refresh_fleet", None)
        if refresh is not None:
            refresh()
