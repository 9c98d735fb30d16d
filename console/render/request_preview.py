"""The request form's preview and the probe's answer as Rich text (the form and, for the probe, any view).

Pure renderers over :mod:`console.flows.request` and :mod:`console.flows.probe` results: what the
operator reads before confirming a request (the capacity it asks for, its cost, the container it
starts once READY with the swap's lint, the exact REST call, body and gcloud line) and what a
capacity probe answered (verdict, reason, what to try with each command).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.text import Text

from console.render import swap_preview
from console.render.plain import plain, printable

if TYPE_CHECKING:
    from console.flows.probe import ProbeAnswer
    from console.flows.request import RequestPreview
    from console.flows.swap_case import SwapPreview
    from remote.container.lint import Finding

#: Style of each probe verdict.
VERDICT_STYLES = {"available": "bold green", "stockout": "bold yellow", "quota": "bold yellow",
                  "refused": "bold red"}


def probe_text(answer: ProbeAnswer | None, progress: Sequence[str] = (), *, running: str | None = None,
               problem: str | None = None, readonly: bool = False) -> Text:
    """The ``Capacity`` section: a probe running (``running``: what it probes, ``progress``: the states
    seen), its answer, or why it could not run (``problem``); empty when none was asked for.
    ``readonly``: the commands of what to try are left out (they would change the fleet)."""
    out = Text()
    if running is not None:
        out.append("Capacity probe ", style="bold")
        out.append_text(plain(f"{running}: " + (" → ".join(progress) if progress else "creating the probe…")))
        return out
    if problem is not None:
        out.append("Capacity probe ", style="bold")
        out.append_text(plain(f"not run: {problem}", style="red"))
        return out
    if answer is None:
        return out
    result = answer.result
    out.append("Capacity ", style="bold")
    out.append(result.verdict, style=VERDICT_STYLES.get(result.verdict, "bold"))
    out.append_text(plain(f" for {result.accelerator_type} in {result.project}/{result.zone}: {result.reason}"))
    gone = "deleted" if result.deleted else f"NOT deleted ({result.cleanup_error})"
    out.append("\n")
    out.append_text(plain(f"  probe {result.queued_resource} ({result.last_state or 'not created'}, "
                          f"{result.elapsed_s:.1f} s) {gone}", style="dim" if result.deleted else "bold red"))
    if answer.note:
        out.append("\n")
        out.append_text(plain(f"  {answer.note}", style="yellow"))
    if answer.tries:
        out.append("\n  What to try", style="bold yellow")
    for option in answer.tries:
        out.append("\n")
        out.append_text(plain(f"  • {option.why}"))
        if not readonly:
            out.append("\n")
            out.append_text(plain(f"    {option.command}", style="bold"))
    return out


def container_text(container: SwapPreview | None, problem: str | None, note: str | None) -> RenderableType:
    """The ``Container, started once READY`` section: the lint findings and the commands, or what
    is wrong with the container's fields, or that none is started (capacity only)."""
    title = Text("Container, started once READY", style="bold")
    if problem is not None:
        return Group(title, Text.assemble(("Not ready: ", "bold yellow"), plain(problem)))
    if container is None:
        return Group(title, Text("none: capacity only (the startup view waits for a container).", style="dim"))
    parts: list[RenderableType] = [title]
    if note:
        parts.append(plain(note, style="dim"))
    if container.findings:
        parts.extend(_finding(f) for f in container.findings)
        if container.errors:
            parts.append(plain(f"{container.verdict()}: confirming (you type the name) starts it anyway.",
                               style="bold red"))
    else:
        parts.append(Text("Lint: no findings.", style="green"))
    parts.append(swap_preview.numbered(container.plan.commands))
    return Group(*parts)


def _finding(finding: Finding) -> Text:
    """A lint finding as the swap form shows it, its fix as the setting to type (``fix: KEY=VALUE``)."""
    text = Text()
    text.append(f"{finding.severity.upper():7} ", style=swap_preview.SEVERITY_STYLE.get(finding.severity, ""))
    text.append(f"{finding.rule_id}: ", style="bold")
    text.append_text(plain(finding.message))
    if finding.fix:
        fix = " ".join(f"{k}={'' if v is None else v}" for k, v in finding.fix.items())
        text.append_text(plain(f"  fix: {fix}", style="dim"))
    return text


def request_text(shown: RequestPreview | None, problem: str | None) -> RenderableType:
    """The request's headline: type, place and cost; or what is wrong with a field."""
    if shown is None:
        return Text.assemble(("Not ready: ", "bold yellow"), plain(problem or "fill in the form."))
    request = shown.request
    return Group(
        plain(f"{request.accelerator_type} {request.provisioning_model} in {request.project}/{request.zone} "
              f"(node {request.node})", style="bold"),
        plain(f"Cost: {shown.cost}"))


def call_text(shown: RequestPreview | None) -> RenderableType:
    """The exact REST call and body and the equivalent gcloud line (nothing while a field is wrong)."""
    if shown is None:
        return Text("")
    return Group(
        Text("REST call", style="bold"), plain(shown.rest_call), Text(""),
        Text("Body", style="bold"), Text(printable(shown.body_text, keep_newlines=True)), Text(""),
        Text("Equivalent gcloud", style="bold"), plain(shown.gcloud))
