"""``:`` command mode, as in k9s: jump to a view, or to a node by name, with completion.

Commands (:func:`parse_command`): ``fleet``, ``history``, ``request``, ``forwards``, ``help``, ``quit``;
``node NAME`` (or just ``NAME``) selects the node in the fleet; ``startup NAME`` (``watch``),
``swap NAME``, ``rollback NAME``, ``bench NAME`` and ``history NAME`` open that view of the node; the
same words with a GKE workload (``swap deploy/NAME``, or ``CLUSTER/NAMESPACE/deploy/NAME`` when the short
name is in several places) open the workload's view.
Only the actions that can run are offered (:func:`candidates`): ``swap``, ``rollback`` and ``bench``
for READY nodes, ``startup`` for nodes that are or may become READY, none that change the fleet in
read-only mode; :func:`parse_command` refuses the others with a sentence. The matches are listed one
per line; ``tab`` completes to the first match and, pressed again, cycles through the matches of what
was typed; ``enter`` runs, ``escape`` closes. :class:`CommandScreen` dismisses with the text typed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Input, Static

from console.flows.gke_target import is_workload_spec
from console.flows.node_wait import NODE_WAIT_STATES
from console.flows.policy import FLEET_CHANGING_ACTIONS, readonly_sentence
from console.render.plain import printable
from remote.gke.models import Workload
from remote.models import Node

#: Views that need no node.
VIEWS = ("fleet", "history", "request", "forwards", "help", "quit")
#: Views of one node: command word -> feature name (:data:`console.app.FEATURES`, ``node`` = the fleet row).
NODE_VIEWS = {"node": "node", "startup": "startup", "watch": "startup", "swap": "swap",
              "rollback": "rollback", "bench": "bench", "metrics": "metrics", "history": "history"}
#: Features that need a serving container, hence a READY node.
NEEDS_READY = frozenset({"swap", "rollback", "bench", "metrics"})
#: Features that change the fleet (refused in read-only mode: :data:`console.flows.policy.FLEET_CHANGING_ACTIONS`).
MUTATING = frozenset({"swap", "rollback"}) & FLEET_CHANGING_ACTIONS
#: Most matches listed under the prompt.
MATCHES_SHOWN = 8


#: Views of a GKE workload (``swap deploy/NAME``...): command word -> the fleet's workload view.
WORKLOAD_VIEWS = {"startup": "startup", "watch": "startup", "swap": "swap", "rollback": "rollback",
                  "bench": "bench", "metrics": "metrics", "history": "history"}


@dataclass(frozen=True)
class Command:
    """A parsed command: ``view`` (``fleet``, ``node``, ``startup``...) and the node name or ``None``; or a
    workload's view with ``workload`` its name as typed (``deploy/NAME`` or ``CLUSTER/NAMESPACE/deploy/NAME``)."""

    view: str
    node: str | None = None
    workload: str | None = None


def workload_names(workloads: Sequence[Workload]) -> dict[str, Workload]:
    """What a workload may be called in command mode: ``CLUSTER/NAMESPACE/deploy/NAME`` always, and
    ``deploy/NAME`` when only one listed workload has that name."""
    full = {f"{w.cluster}/{w.namespace}/{w.ref}": w for w in workloads}
    short: dict[str, list[Workload]] = {}
    for w in workloads:
        short.setdefault(w.ref, []).append(w)
    return {**{ref: found[0] for ref, found in short.items() if len(found) == 1}, **full}


def refusal(feature: str, node: Node, *, readonly: bool = False) -> str | None:
    """Why ``feature`` (a value of :data:`NODE_VIEWS`) cannot run on ``node`` now, or ``None`` when it can."""
    if readonly and feature in MUTATING:
        return readonly_sentence(feature)           # the policy's own sentence, as every other door says
    if feature in NEEDS_READY and node.state != "READY":
        return f"{feature} needs a READY node: {printable(node.name)} is {printable(node.state)}."
    if feature == "startup" and node.state not in NODE_WAIT_STATES | {"READY"}:
        return f"{printable(node.name)} is {printable(node.state)}: it will not be READY, no startup to watch."
    return None


def candidates(nodes: Sequence[Node], *, readonly: bool = False, workloads: Sequence[Workload] = ()) -> list[str]:
    """Every completion, views first: ``fleet``..., then ``node NAME``, ``bench NAME``... per node,
    each action only for the nodes it can run on (:func:`refusal`); then ``swap deploy/NAME``... per GKE
    workload (none that change the fleet in read-only mode)."""
    result = [v for v in VIEWS if not (readonly and v == "request")]
    for word, feature in NODE_VIEWS.items():
        result.extend(f"{word} {n.name}" for n in nodes if refusal(feature, n, readonly=readonly) is None)
    known = workload_names(workloads)          # a unique deploy/NAME, else CLUSTER/NAMESPACE/deploy/NAME
    names = [w.ref if known.get(w.ref) is w else f"{w.cluster}/{w.namespace}/{w.ref}" for w in workloads]
    for word, view in WORKLOAD_VIEWS.items():
        if not (readonly and view in MUTATING):
            result.extend(f"{word} {name}" for name in names)
    return result


def parse_command(text: str, nodes: Sequence[Node], *, readonly: bool = False,
                  workloads: Sequence[Workload] = ()) -> Command:
    """Parse what was typed after ``:`` (case-insensitive words, node names as listed).

    Raises:
        ValueError: an unknown command or node, or an action the node cannot run now (:func:`refusal`);
            the message says what is known or why.
    """
    by_name = {n.name: n for n in nodes}
    words = text.strip().removeprefix(":").split()
    if not words:
        raise ValueError("Type a view (fleet, history, request, forwards, help, quit) or node NAME, bench NAME…")
    head = words[0].lower()
    if len(words) == 1 and head in VIEWS:
        return Command(head)
    if len(words) == 1 and words[0] in by_name:
        return Command("node", words[0])
    if head not in NODE_VIEWS:
        raise ValueError(f"Unknown command {words[0]!r}: try {', '.join(VIEWS)}, or "
                         f"{', '.join(w + ' NAME' for w in NODE_VIEWS)}")
    if len(words) != 2:
        raise ValueError(f"{head} takes one node name: {head} NAME")
    if is_workload_spec(words[1]) or words[1].count("/") >= 3:
        return _workload_command(head, words[1], workloads, readonly=readonly)
    if words[1] not in by_name:
        raise ValueError(f"No node named {words[1]!r} in the fleet")
    feature = NODE_VIEWS[head]
    if (why := refusal(feature, by_name[words[1]], readonly=readonly)) is not None:
        raise ValueError(why)
    return Command(feature, words[1])


def _workload_command(head: str, name: str, workloads: Sequence[Workload], *, readonly: bool) -> Command:
    """``swap deploy/NAME``... as a :class:`Command` with ``workload``.

    Raises:
        ValueError: a view a workload has not, no such listed workload (or several: say the cluster and
            namespace), or a fleet-changing view in read-only mode.
    """
    if head not in WORKLOAD_VIEWS:
        raise ValueError(f"{head} takes a TPU node, not a GKE workload; a workload has "
                         f"{', '.join(w + ' deploy/NAME' for w in WORKLOAD_VIEWS)}")
    view = WORKLOAD_VIEWS[head]
    if readonly and view in MUTATING:
        raise ValueError(readonly_sentence(view))
    known = workload_names(workloads)
    if name not in known:
        many = [n for n in known if n.endswith("/" + name)]
        raise ValueError(f"{printable(name)} is in several clusters or namespaces: say which, e.g. {printable(many[0])}"
                         if many else f"No GKE workload {printable(name)} is listed (the Workloads table)")
    return Command(view, workload=name)


def matches(text: str, options: Sequence[str]) -> list[str]:
    """The options that start with ``text`` (case-insensitive), in order; all of them for ``""``."""
    lowered = text.lower()
    return [o for o in options if o.lower().startswith(lowered)]


def complete(text: str, options: Sequence[str]) -> str:
    """``tab``: the first option that starts with ``text`` (case-insensitive), else ``text``."""
    return next((o for o in matches(text, options) if o != text), text)


def cycle(typed: str, current: str, options: Sequence[str]) -> str:
    """``tab`` again: the match of ``typed`` after ``current`` (wrapping round), else ``current``."""
    found = matches(typed, options)
    if not found:
        return current
    if current not in found:
        return found[0]
    return found[(found.index(current) + 1) % len(found)]


class CommandScreen(ModalScreen[str | None]):
    """The ``:`` prompt at the bottom of the screen, with the matching commands above it."""

    DEFAULT_CSS = """
    CommandScreen {
        align: left bottom;
    }
    #command-box {
        height: auto;
        max-height: 14;
        background: $surface;
        border-top: solid $primary;
    }
    #command-matches {
        height: auto;
        max-height: 10;
        padding: 0 1;
        color: $text-muted;
    }
    """

    BINDINGS = [
        Binding("escape", "close", "Close", id="command_close"),
        Binding("tab", "complete", "Complete", id="command_complete"),
    ]

    def __init__(self, options: Sequence[str]) -> None:
        super().__init__()
        self.options = list(options)
        #: what was typed before the first ``tab`` of a run of tabs (they cycle its matches), else ``None``
        self._typed: str | None = None
        #: the value the last ``tab`` put in the box (a change to anything else ends the cycle)
        self._completed: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="command-box"):
            yield Static("", id="command-matches")
            yield Input(placeholder=":fleet  :history  :node NAME  :bench NAME  (tab completes)", id="command",
                        suggester=SuggestFromList(self.options, case_sensitive=False))

    def on_mount(self) -> None:
        self.query_one("#command", Input).focus()
        self._show_matches("")

    def _show_matches(self, text: str) -> None:
        found = matches(text, self.options)
        shown = found[:MATCHES_SHOWN]
        lines = Text("\n").join(Text(printable(o), style="bold" if o == text else "") for o in shown)
        if len(found) > len(shown):
            lines.append(f"\n… {len(found) - len(shown)} more (type more, or tab to cycle)", style="dim")
        self.query_one("#command-matches", Static).update(lines if found else Text("no match", style="dim"))

    @on(Input.Changed, "#command")
    def _changed(self, event: Input.Changed) -> None:
        if event.value != self._completed:
            self._typed = self._completed = None
        self._show_matches(self._typed if self._typed is not None else event.value)

    @on(Input.Submitted, "#command")
    def _submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_complete(self) -> None:
        """Complete to the first matching command; pressed again, the next match of what was typed."""
        box = self.query_one("#command", Input)
        if self._typed is None:
            self._typed = box.value
            value = complete(box.value, self.options)
        else:
            value = cycle(self._typed, box.value, self.options)
        self._completed = value
        box.value = value
        box.cursor_position = len(value)
        self._show_matches(self._typed)

    def action_close(self) -> None:
        """Close without running anything."""
        self.dismiss(None)
