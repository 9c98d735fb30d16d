"""Rich renderings of a swap's preview: node line, lint findings, diff, commands, step progress.

Pure functions of the domain values (no widgets), so the swap screen stays about flow.
Every value shown is already masked by ``remote.container.spec`` / ``remote.container.swap``,
and goes through :func:`remote.printable.printable` (each value one line, no control bytes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from rich.text import Text

from remote.container.lint import Finding
from remote.container.spec import ContainerSpec
from remote.container.swap import SwapPlan
from remote.models import Node
from remote.printable import printable

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
STEP_LABEL = {"pull": "pull the image (the old container keeps serving)", "rm": "remove the old container",
              "run": "run the new container"}
STEP_MARK = {"running": ("… ", "yellow"), "ok": ("✓ ", "green"), "failed": ("✗ ", "bold red")}


def node_text(node: Node, now: datetime, running: ContainerSpec | None, running_id: str | None,
              from_template: bool) -> Text:
    """``vllm-v5e-a  v5litepod-4 · on-demand · project/zone [· N min left]`` and what runs there."""
    text = Text()
    text.append(printable(node.name), style="bold")
    text.append(printable(f"  {node.accelerator_type} · {node.provisioning_model} · {node.project}/{node.zone}"))
    left = node.time_left_s(now)
    if left is not None:
        text.append(f" · {int(left // 60)} min left", style="yellow")
    if running is not None:
        cid = f" {running_id[:12]}" if running_id else ""
        text.append("\n" + printable(f"running: {running.name}{cid} · {running.image}"), style="dim")
        if running.image_digest:
            text.append(printable(f" ({running.image_digest})"), style="dim")
    elif from_template:
        text.append("\nno container runs: starting from the config's [container] template", style="yellow")
    return text


def finding_text(finding: Finding) -> Text:
    """One lint finding: severity in its colour, the sentence, and the fix it offers."""
    text = Text()
    text.append(f"{finding.severity.upper():7} ", style=SEVERITY_STYLE.get(finding.severity, ""))
    text.append(f"{finding.rule_id}: ", style="bold")
    text.append(printable(finding.message))
    if finding.fix:
        fix = ", ".join(f"{k}={'(unset)' if v is None else v}" for k, v in finding.fix.items())
        text.append(printable(f"  [f: {fix}]"), style="dim")
    return text


def diff_text(plan: SwapPlan) -> Text:
    """``field: old → new`` per change (``-`` absent, ``(removed)``)."""
    text = Text()
    for field, before, after in plan.changes:
        if text:
            text.append("\n")
        text.append(printable(f"{field}: "), style="bold")
        text.append("-" if before is None else printable(before), style="red")
        text.append(" → ")
        text.append("(removed)" if after is None else printable(after), style="green")
    if not plan.changes and plan.old is not None:
        text.append("No changes: the same spec runs again.")
    return text


def numbered(commands: Sequence[str]) -> Text:
    """``1. command`` lines, never read as markup; each command one printable line (a newline
    inside a value shows as ``\\n``, so no value can add a line to what is about to run)."""
    text = Text()
    for i, command in enumerate(commands, 1):
        if i > 1:
            text.append("\n")
        text.append(f"{i}. ", style="bold")
        text.append(printable(command))
    return text


def steps_text(plan: SwapPlan, states: Mapping[str, str]) -> Text:
    """Each step with its state mark: ``·`` pending, ``…`` running, ``✓`` done, ``✗`` failed."""
    text = Text()
    for step in plan.steps:
        mark, style = STEP_MARK.get(states.get(step.kind, ""), ("· ", "dim"))
        if text:
            text.append("\n")
        text.append(mark, style=style)
        label = "pull the image" if step.kind == "pull" and plan.old is None else STEP_LABEL[step.kind]
        text.append(f"{label}: ", style="bold")
        text.append(printable(step.display), style="dim")
    return text


def confirm_message(plan: SwapPlan, node: Node, errors: Sequence[Finding]) -> str:
    """What the confirm modal says above the commands: what happens, the changes, lint errors.
    With no container running (``plan.old`` is ``None``) nothing is replaced and nothing keeps serving."""
    if plan.old is None:
        message = printable(f"No container runs on {node.name}: the image is pulled, then {plan.new.name} "
                            "is started; the node stays.")
    else:
        message = printable(f"The container {plan.new.name} on {node.name} is replaced; the node stays. "
                            "The image is pulled first while the old container keeps serving.")
    if plan.changes:
        message += "\n" + printable("Changes: " + "; ".join(
            f"{field} {'-' if before is None else before} → {'(removed)' if after is None else after}"
            for field, before, after in plan.changes) + ".")
    if errors:
        message += "\n" + printable(f"The lint found {len(errors)} error(s): " + "; ".join(f.rule_id for f in errors)
                                    + f". Type {node.name} to go ahead anyway.")
    return message
