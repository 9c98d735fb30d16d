"""The Fleet view: every TPU node and queued resource across projects, live.

Keys (ids in brackets, remappable through ``[keys]`` in the config):
``r`` refresh [refresh], ``/`` filter [filter], ``escape`` clear filter,
``j`` raw JSON [raw_json], ``enter``/``w`` startup watch [watch], ``s`` hot swap [swap],
``R`` roll back [rollback], ``b`` benchmark [bench], ``H`` history [history],
``n`` request capacity [request], ``d`` delete the selected queued resource [delete],
``p`` probe the capacity of a waiting or failed request [probe],
``f`` forward ``localhost:PORT`` to the selected READY node's vLLM [forward] (it stays open; ``F`` lists forwards),
``i`` detail pane [detail], ``y`` copy the row's JSON [copy], ``o`` sort by the next column [sort], ``O`` reverse the sort [sort_reverse].

READY nodes get serving columns (SERVING, TOK/S, QUEUE, MODEL) from a background task per node
(:mod:`console.flows.serving`, each sample bounded by a timeout): the table never waits for them;
a node not sampled yet says ``…``, one that does not answer ``unreachable``.

Columns are shown by priority (:data:`NODE_COLUMNS`, :data:`QR_COLUMNS`): those that fit, whole;
the detail pane has every field and hides itself below :data:`DETAIL_MIN_WIDTH` columns. The
sort of each table survives refreshes.

Under the problems, one banner per zone with inactive (SUSPENDED / FAILED) queued resources that
may hold quota, each with its exact delete command. Read-only mode (``--readonly`` /
``readonly = true``) hides and refuses swap, rollback, request, delete and probe.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.json import JSON
from rich.table import Table
from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Input, Label, Static

from console.flows import serving as serving_flow
from console.flows.delete import DeletePlan, owned_nodes, plan_delete
from console.flows.node_lookup import NodeLookupError
from console.flows.serving import SamplingQueue, ServingSample
from console.flows.triage import advice_for, inactive_by_zone, stuck_verdict
from console.render import format as fmt
from console.render.columns import cell_widths, fit_columns, natural_key, widest_cells
from console.render.plain import plain, printable, row
from console.render.serving import serving_cells, serving_rows
from console.screens.base import ConsoleScreen
from console.screens.confirm import ConfirmScreen
from console.widgets.fleet_table import FleetTable, one_line
from console.widgets.footer import ConsoleFooter
from console.widgets.header import ConsoleHeader
from console.widgets.workloads import WorkloadsPane
from remote.errors import RemoteError
from remote.gke.models import Workload
from remote.models import FleetSnapshot, Node, QueuedResource

if TYPE_CHECKING:
    from console.flows.fleet_cache import CacheFile
    from console.flows.serving import ServingSampler

#: Node columns by priority: a narrow terminal shows the leading ones that fit, whole (the detail
#: pane always has every field).
NODE_COLUMNS = ("NAME", "STATE", "ACCELERATOR", "PROVISIONING", "TIME LEFT", "SERVING", "TOK/S", "QUEUE", "MODEL",
                "HEALTH", "PROJECT", "ZONE", "EXTERNAL IP", "INTERNAL IP", "RUNTIME", "QUEUED RESOURCE", "AGE")
#: Columns shown only beside another (by name): a rate or a queue with no serving state reads as a
#: number about nothing (at 80 columns TOK/S was shown while SERVING did not fit).
COLUMN_NEEDS = {"TOK/S": "SERVING", "QUEUE": "SERVING", "MODEL": "SERVING"}
#: Actions that change the fleet -> the policy's action: hidden and refused in read-only mode.
MUTATING_ACTIONS = {"swap": "swap", "rollback": "rollback", "request": "request", "delete_qr": "delete",
                    "probe": "probe"}
#: Queued-resource states whose capacity ``p`` probes (waiting for it, or failed for want of it).
PROBED_STATES = ("WAITING_FOR_RESOURCES", "FAILED")
#: Queued-resource columns by priority, as :data:`NODE_COLUMNS`.
QR_COLUMNS = ("NAME", "STATE", "ACCELERATOR", "PROVISIONING", "TIME LEFT", "FAILURE", "MAX RUN", "PROJECT",
              "ZONE", "AGE")
#: Below this terminal width the detail pane hides itself (``i`` shows it again).
DETAIL_MIN_WIDTH = 120
#: Seconds from a serving sample's return to the redraw of the tables (samples within it: one redraw;
#: every cell update makes the table draw its visible rows again, so a fleet's samples are batched).
SERVING_REDRAW_S = 1.0
#: Seconds between two looks for serving samples that are due (:class:`~console.flows.serving.SamplingQueue`).
SAMPLE_DUE_S = 0.2
#: Rows of each table the first frame draws from the cache (a tall terminal's screenful); the rest follow.
FIRST_ROWS = 120
#: Records read, or rows built, per loop turn while a large fleet is loaded or shown (keys go in between).
CHUNK_ROWS = 500
#: Seconds the cursor stays on a row before the detail pane follows it, while it moves row after row.
DETAIL_SETTLE_S = 0.15
#: Seconds between two writes of the fleet cache (the first live listing is written at once; a listing that
#: changed nothing is not written): each write is a JSON dump of the whole fleet holding the GIL on its thread.
CACHE_SAVE_EVERY_S = 30.0
#: Cells the detail pane takes (its CSS width, border included).
DETAIL_WIDTH = 44
#: Width (cells, padding included) held for the serving columns before their first samples, so the
#: columns shown do not change when the samples arrive (``unreachable``, a 5-digit rate, a model name).
SERVING_RESERVED_WIDTH = {"SERVING": 13, "TOK/S": 8, "QUEUE": 7, "MODEL": 24}


def clock_time(value: datetime) -> str:
    """``13:05:31Z``: the time of day (UTC) the cached fleet was saved."""
    return value.strftime("%H:%M:%SZ")


def node_row_key(node: Node) -> str:
    """Stable DataTable row key of a node."""
    return "node:" + "/".join(node.key)


def qr_row_key(qr: QueuedResource) -> str:
    """Stable DataTable row key of a queued resource."""
    return "qr:" + "/".join(qr.key)


def _health(node: Node) -> Text:
    if node.symptoms:
        return Text(printable(f"{node.health or '?'} ({', '.join(node.symptoms)})"), style="bold red")
    return fmt.styled_state(node.health)


#: One table row: (node or queued resource, its cells' plain text, its cells, its row key, its cells'
#: widths in terminal cells, its cells' text lowercased and joined: what the filter searches).
_Row = tuple[Node | QueuedResource, list[str], list[Any], str, tuple[int, ...], str]
#: A row as built for one item and one serving sample: (item, sample, row).
_Entry = tuple[Any, Any, _Row]


def _matches(words: list[str], hay: str) -> bool:
    return all(w in hay for w in words)


def _shows_same(before: ServingSample | None, now: ServingSample | None) -> bool:
    """Whether a node's row draws ``now`` as it drew ``before`` (:func:`console.render.serving.serving_cells`:
    state, tok/s, queue, model; a sample that says only the same again changes no cell)."""
    if before is now:
        return True
    if before is None or now is None:
        return False
    return ((before.serving, before.tokens_per_s, before.running, before.waiting, before.model)
            == (now.serving, now.tokens_per_s, now.running, now.waiting, now.model))


def _row_of(item: Node | QueuedResource, cells: list[Any], key: str) -> _Row:
    """A row of the table: its cells made :class:`~console.widgets.fleet_table.OneLine` where they draw
    the same so (once per row built, not per draw), their plain texts, widths and filter text."""
    plains = [c.plain if isinstance(c, Text) else str(c) for c in cells]
    return item, plains, [one_line(c) for c in cells], key, cell_widths(plains), " ".join(plains).lower()


class FleetScreen(ConsoleScreen):
    """Default screen: one table of nodes and one of queued resources, with a detail pane."""

    READONLY_ACTIONS = MUTATING_ACTIONS
    BINDINGS = [
        Binding("r", "refresh_fleet", "Refresh", id="refresh"),
        # priority: the filter opens (and has the focus) before the app reads the next key, so a fast or pasted
        # "/spot" types "spot" there (as a plain binding, "s" reached the table first: the swap form); in a
        # text field "/" is typed there (check_action). Esc the same: "<Esc>/x" closes, opens, types "x".
        Binding("slash", "filter", "Filter", key_display="/", id="filter", priority=True),
        Binding("escape", "clear_filter", "Clear filter", show=False, id="clear_filter", priority=True),
        Binding("j", "toggle_raw", "Raw JSON", id="raw_json"),
        Binding("w", "watch", "Startup", id="watch"),
        Binding("s", "swap", "Swap", id="swap"),
        Binding("R", "rollback", "Roll back", id="rollback"),
        Binding("b", "bench", "Bench", id="bench"),
        Binding("f", "forward", "Forward", id="forward"),
        Binding("m", "metrics", "Metrics", id="metrics"),
        Binding("H", "history", "History", id="history"),
        Binding("n", "request", "Request", id="request"),
        Binding("d", "delete_qr", "Delete QR", id="delete"),
        Binding("p", "probe", "Probe", id="probe"),
        Binding("i", "toggle_detail", "Detail", id="detail"),
        Binding("y", "copy_row", "Copy JSON", id="copy"),
        Binding("o", "cycle_sort", "Sort", id="sort"),
        Binding("O", "reverse_sort", "Reverse sort", id="sort_reverse"),
        Binding("S", "shell", "Shell", id="shell", show=False),    # (? lists it; the footer stays as it was)
    ]

    def __init__(self) -> None:
        super().__init__()
        self.snapshot: FleetSnapshot | None = None
        self.filter_words: list[str] = []
        self.show_raw = False
        self._refreshing = False
        self._last_error: str | None = None
        #: what the fleet cache holds (the snapshot written) and when it was written (monotonic seconds)
        self._cache_saved: tuple[FleetSnapshot, float] | None = None
        #: table id -> the widest each column has been (cells), see :meth:`_stable_widths`
        self._widest: dict[str, list[int]] = {}
        self._selected_key: str | None = None
        self._by_key: dict[str, Node | QueuedResource] = {}
        #: ``i`` says shown/hidden; ``None`` follows the width (hidden below :data:`DETAIL_MIN_WIDTH`).
        self.detail_wanted: bool | None = None
        #: table id -> (column sorted by or ``None`` for the API's order, descending).
        self.sort_by: dict[str, tuple[str | None, bool]] = {}
        #: project -> zone -> accelerator types it offers (listed once, for a stuck request's advice).
        self.offered_types: dict[str, dict[str, tuple[str, ...]]] = {}
        self._offered_loading: set[str] = set()
        #: node row key -> (OS Login, SSH user) rows of the detail pane, worked out once per node
        #: in the background (:meth:`LoginResolver.login` with ``import_key=False``).
        self.logins: dict[str, tuple[str, str]] = {}
        self._logins_loading: set[str] = set()
        #: node row key -> its last serving sample (READY nodes being sampled)
        self.serving: dict[str, ServingSample] = {}
        #: node row key -> its sampler (kept between samples while the row is on screen)
        self._samplers: dict[str, ServingSampler] = {}
        self._sample_tasks: dict[str, asyncio.Task[None]] = {}
        #: which READY nodes are sampled next: a bounded number at once, the rows on screen first
        self._sampling: SamplingQueue | None = None
        self._ready_nodes: dict[str, Node] = {}
        self._serving_dirty = False
        #: table id -> row key -> (item, its serving sample, its row): a row is rebuilt only when its
        #: item or sample changed (a refresh, a sample), not per keystroke; ``_row_by_id`` finds an
        #: item kept from the last listing (the same object) without working out its key
        self._row_cache: dict[str, dict[str, _Entry]] = {}
        self._row_by_id: dict[str, dict[int, _Entry]] = {}
        #: table id -> (the items, the serving samples' version, their rows): a filter keystroke, a sort
        #: or a resize reuses the rows; ``_serving_version`` counts the samples that changed a row
        self._rows_memo: dict[str, tuple[Sequence[Any], int, list[_Row]]] = {}
        self._serving_version = 0
        #: what the detail pane and the titles show now (not set again when unchanged: each update
        #: lays the screen out again)
        self._detail_shown_for: tuple[Any, ...] | None = None
        self._detail_refs: tuple[Any, ...] = ()
        self._cursor_moved_at = 0.0
        self._detail_timer: Any = None
        self._titles: dict[str, str] = {}
        #: table id -> (columns shown, row keys in order, each row's cells' plain text)
        self._drawn: dict[str, tuple[list[str], list[str], dict[str, list[str]]]] = {}
        self._drawn_width: int | None = None
        #: when the fleet shown was saved, while it comes from the cache (``None``: live, or nothing yet)
        self.cached_at: datetime | None = None
        self._refresh_timer: Any = None
        self._projects = 0
        self._problems_error: str | None = None

    def compose(self) -> ComposeResult:
        yield ConsoleHeader()
        yield Static("", id="problems")
        yield Input(placeholder="filter: words match any column (Esc clears)", id="filter")
        with Horizontal(id="fleet-body"):
            with Vertical(id="tables"):
                yield Label("Nodes", id="nodes-title", classes="section-title")
                yield FleetTable(id="nodes", cursor_type="row", zebra_stripes=True)
                yield Label("Queued resources", id="qrs-title", classes="section-title")
                yield FleetTable(id="qrs", cursor_type="row", zebra_stripes=True)
                yield WorkloadsPane(id="workloads-pane")
            with VerticalScroll(id="detail"):
                yield Static("Loading the fleet…", id="detail-body")
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self._apply_detail()
        self.query_one("#filter", Input).display = False
        if not self._show_cache_head():
            self.sub_title = "loading fleet…"
            self._set_title("nodes", "Nodes · loading fleet…")
        self.set_interval(1.0, self._tick)
        self.query_one("#nodes", DataTable).focus()
        if self.console.ready:
            self.services_ready()

    def _show_cache_head(self) -> bool:
        """The cached fleet's first :data:`FIRST_ROWS` rows of each table, now (the first frame); the
        rest follows a chunk per loop turn (:meth:`_show_cache_rest`). ``False``: no usable cache."""
        from console.flows.fleet_cache import UNREADABLE

        cache = self.console.fleet_cache
        file = cache.read() if cache is not None else None
        if file is None:
            return False
        try:
            head = file.snapshot(FIRST_ROWS, FIRST_ROWS)
        except UNREADABLE:
            return False
        self.show_snapshot(head, cached_at=file.saved_at)
        if len(file.node_records) > FIRST_ROWS or len(file.qr_records) > FIRST_ROWS:
            self._show_cache_rest(file, head)
        return True

    @work(group="cache", exit_on_error=False)
    async def _show_cache_rest(self, file: CacheFile, head: FleetSnapshot) -> None:
        """The rest of the cached fleet, read :data:`CHUNK_ROWS` records per loop turn (the keys go in
        between), then shown whole; dropped when a live listing landed first or a record is unreadable."""
        from console.flows.fleet_cache import UNREADABLE

        nodes, qrs = list(head.nodes), list(head.queued_resources)
        try:
            for start in range(FIRST_ROWS, len(file.node_records), CHUNK_ROWS):
                await asyncio.sleep(0)
                nodes += file.nodes(start, start + CHUNK_ROWS)
            for start in range(FIRST_ROWS, len(file.qr_records), CHUNK_ROWS):
                await asyncio.sleep(0)
                qrs += file.queued_resources(start, start + CHUNK_ROWS)
        except UNREADABLE:
            return
        snapshot = FleetSnapshot(tuple(nodes), tuple(qrs), file.problems, fetched_at=file.saved_at)
        await self._warm_rows(snapshot)
        if self.snapshot is head:              # still the cache's first rows (no live listing, no refresh)
            self.show_snapshot(snapshot, cached_at=file.saved_at)

    def services_ready(self) -> None:
        """The app's services exist: list the fleet now and every ``refresh_interval_s`` (once)."""
        if self._refresh_timer is not None:
            return
        self._refresh_timer = self.set_interval(self.services.config.refresh_interval_s, self.action_refresh_fleet)
        self.action_refresh_fleet()
        self.query_one(WorkloadsPane).start(self.services.config)

    # --- refresh -----------------------------------------------------------------------

    def action_refresh_fleet(self) -> None:
        """Start one refresh unless one is already in flight (polls never overlap)."""
        if self._refreshing or not self.console.need_services("Refresh"):
            return
        self._refreshing = True
        self._load()

    @work(group="fleet", exit_on_error=False)
    async def _load(self) -> None:
        services = self.services
        try:
            snapshot = await services.fleet.list_fleet()
        except RemoteError as exc:    # no credentials: shown as a sentence, never a traceback
            message = str(exc)
            if message != self._last_error:  # one toast per new problem, not one per refresh
                self.app.notify(message, title="Fleet refresh failed", severity="error", timeout=10)
            self._last_error = message
            self.sub_title = "refresh failed" + (f" · showing the cache of {clock_time(self.cached_at)}"
                                                 if self.cached_at is not None else "")
            self._render_problems()
            if self.snapshot is None:        # nothing listed yet: no "loading fleet…" left behind
                self._set_title("nodes", "Nodes · not listed: the refresh failed (r retries)")
                self._detail_shown_for = None
                self.query_one("#detail-body", Static).update(
                    Text("The fleet could not be listed; the reason is above.", style="dim"))
            return
        finally:
            self._refreshing = False
        self._last_error = None
        self.services.reload_ssh_hosts()     # a node made READY since (e.g. requested here) may have a host entry now
        if not (self.snapshot is not None and snapshot.nodes is self.snapshot.nodes):
            self._sync_samplers(snapshot)    # the READY nodes' samples first: the rows are built with them
            await self._warm_rows(snapshot)
        self.show_snapshot(snapshot)
        await self._save_cache(snapshot)

    async def _save_cache(self, snapshot: FleetSnapshot) -> None:
        """Keep the fleet for the next start's first frame, written on a thread (50,000 nodes are ~20 MB
        of JSON: seconds the keys would wait on the loop); a failure to write is logged, not shown."""
        cache = self.console.fleet_cache
        if cache is None or not self._cache_save_due(snapshot):
            return
        self._cache_saved = (snapshot, time.monotonic())
        try:
            await asyncio.to_thread(cache.save, snapshot, self._now())
        except OSError as exc:
            self.log.warning(f"fleet cache not written: {cache.path}: {exc}")

    def _cache_save_due(self, snapshot: FleetSnapshot) -> bool:
        """Whether ``snapshot`` is to be written: the first live listing, then one whose nodes, queued
        resources or problems changed, at most every :data:`CACHE_SAVE_EVERY_S` (at 5,000 nodes a write held
        the keys ~50 ms once per refresh); the cache then lags the fleet by at most that much."""
        if self._cache_saved is None:
            return True
        saved, at_s = self._cache_saved
        same = (snapshot.nodes is saved.nodes and snapshot.queued_resources is saved.queued_resources
                and snapshot.problems == saved.problems)
        return not same and time.monotonic() - at_s >= CACHE_SAVE_EVERY_S

    def show_snapshot(self, snapshot: FleetSnapshot, *, cached_at: datetime | None = None) -> None:
        """Render ``snapshot`` into the tables, keeping the selection. ``cached_at``: the fleet comes
        from the cache saved then (the title says "cached HH:MM:SS" until a live refresh lands).

        A live listing that changed nothing (the same node and queued-resource tuples, as the child
        lister hands back, and the same problems) only says when it was refreshed: the rows on screen
        count down and age on their own (:meth:`_tick`)."""
        before = self.snapshot
        self.snapshot = snapshot
        if (before is not None and cached_at is None and self.cached_at is None and before.nodes is snapshot.nodes
                and before.queued_resources is snapshot.queued_resources and before.problems == snapshot.problems):
            self.sub_title = self._fleet_title(snapshot, self._projects, None)
            if self._problems_error != self._last_error:      # a failed refresh's line goes
                self._render_problems()
            return
        self.cached_at = cached_at
        self._by_key = {node_row_key(n): n for n in snapshot.nodes}
        self._by_key.update({qr_row_key(q): q for q in snapshot.queued_resources})
        self._projects = len({n.project for n in snapshot.nodes} | {p.project for p in snapshot.problems}
                             | {q.project for q in snapshot.queued_resources})
        self.sub_title = self._fleet_title(snapshot, self._projects, cached_at)
        if cached_at is None:
            self._sync_samplers(snapshot)
        self._render_problems()
        self._render_tables()

    def _fleet_title(self, snapshot: FleetSnapshot, projects: int, cached_at: datetime | None) -> str:
        """``N nodes · N queued resources · N projects · cached HH:MM:SSZ`` (or ``refreshed ...``)."""
        return (f"{fmt.count(len(snapshot.nodes), 'node')} · "
                          f"{fmt.count(len(snapshot.queued_resources), 'queued resource')}"
                f" · {fmt.count(projects, 'project')} · "
                + (f"cached {clock_time(cached_at)}" if cached_at is not None
                   else f"refreshed {fmt.when(self._now())}"))

    # --- serving columns ----------------------------------------------------------------------

    def _sync_samplers(self, snapshot: FleetSnapshot) -> None:
        """The READY nodes go to the sampling queue; a node gone or no longer READY loses its sampler
        and sample. Samples run :data:`~console.flows.serving.SAMPLE_CONCURRENCY` at a time, the rows
        on screen first, each node at most every ``SAMPLE_INTERVAL_S`` (:meth:`_sample_due`)."""
        if not self.console.ready or self.services.serving_sampler is None:
            return
        if self._sampling is None:
            self._sampling = SamplingQueue(serving_flow.SAMPLE_CONCURRENCY, serving_flow.SAMPLE_INTERVAL_S)
            self.set_interval(SAMPLE_DUE_S, self._sample_due)
        self._ready_nodes = {node_row_key(n): n for n in snapshot.nodes if n.state == "READY"}
        for key in [k for k in self.serving if k not in self._ready_nodes]:
            self._stop_sampler(key)
        for key in self._ready_nodes:
            self.serving.setdefault(key, ServingSample())
        self._sampling.set_nodes(self._ready_nodes)
        self.services.serving_targets.keep(n.key for n in self._ready_nodes.values())
        self._sample_due()

    def _sample_due(self) -> None:
        """Start the samples the queue says are due (the rows on screen first)."""
        queue = self._sampling
        if queue is None or not self.is_mounted:
            return
        queue.set_visible(self.query_one("#nodes", FleetTable).visible_row_keys())
        for key in queue.take():
            node = self._ready_nodes.get(key)
            if node is None:
                queue.finished(key)
                continue
            task = asyncio.create_task(self._sample_once(key, node), name=f"serving {node.name}")
            task.add_done_callback(self._sampler_ended)
            self._sample_tasks[key] = task

    async def _sample_once(self, key: str, node: Node) -> None:
        """One sample of ``node``, bounded by ``SAMPLE_TIMEOUT_S`` (:mod:`console.flows.serving`); the
        sampler (its SSH connection) is kept while the row is on screen, else closed."""
        sampler = self._samplers.get(key)
        if sampler is None:
            make = self.services.serving_sampler
            assert make is not None
            sampler = self._samplers[key] = make(node)
        try:
            sample = await serving_flow.sample_within(
                sampler, serving_flow.SAMPLE_TIMEOUT_S, model=self.serving.get(key, ServingSample()).model,
                now=self._now)
            if key in self._ready_nodes:
                before = self.serving.get(key)
                self.serving[key] = sample
                if not _shows_same(before, sample):  # a row changed: drawn again with the others that did
                    self._serving_version += 1
                    if not self._serving_dirty:   # samples that come back together: one redraw
                        self._serving_dirty = True
                        self.set_timer(SERVING_REDRAW_S, self._redraw_serving)
                elif key == self._selected_key:   # its row is as drawn; the detail pane says when it was sampled
                    self._render_detail()
            if not self.is_mounted or key not in self.query_one("#nodes", FleetTable).visible_row_keys():
                self._samplers.pop(key, None)
                await sampler.aclose()
        except asyncio.CancelledError:        # the node left the fleet, or the screen closes
            await sampler.aclose()
            raise
        finally:
            self._sample_tasks.pop(key, None)
            if self._sampling is not None:
                self._sampling.finished(key)

    def _redraw_serving(self) -> None:
        self._serving_dirty = False
        self._render_tables()

    def _sampler_ended(self, task: asyncio.Task[None]) -> None:
        """A sampling task that raised (a bug: samplers turn every expected failure into a sample)."""
        error = None if task.cancelled() else task.exception()
        if error is not None:
            self.console.report_unexpected(task.get_name(), error)

    def _stop_sampler(self, key: str) -> None:
        sampler = self._samplers.pop(key, None)
        task = self._sample_tasks.pop(key, None)
        self.serving.pop(key, None)
        if task is not None:
            task.cancel()
        if sampler is not None:
            sampler.close()

    def on_unmount(self) -> None:
        for key in list(self.serving):
            self._stop_sampler(key)

    def _render_problems(self) -> None:
        """The ⚠ problems and ⚑ inactive-queued-resource banners, as many as fit whole in the box
        (``#problems``' max-height), then ``+N more: ...`` naming the rest."""
        from console.render.fit import fit_items

        widget = self.query_one("#problems", Static)
        self._problems_error = self._last_error
        problems = self.snapshot.problems if self.snapshot else ()
        inactive = inactive_by_zone(self.snapshot) if self.snapshot else []
        widget.display = bool(problems or inactive or self._last_error)
        items: list[tuple[str, list[Text]]] = []
        if self._last_error is not None:        # the last refresh failed: said first, above what it last listed
            items.append(("⚠ refresh failed", [Text.assemble(
                ("⚠ ", "bold red"), ("refresh failed: ", "bold"), printable(self._last_error))]))
        for p in problems:
            where = f"{p.project}/{p.zone}" if p.zone else p.project
            code = f"HTTP {p.code}" if p.code else "no answer"
            items.append((f"⚠ {printable(where)}", [Text.assemble(
                ("⚠ ", "bold red"), (printable(where), "bold"), printable(f" ({code}): {p.message}"))]))
        readonly = self.console.readonly
        for zone in inactive:
            head = Text.assemble(("⚑ ", "bold yellow"), (printable(zone.headline), "bold"))
            if readonly:
                head.append(" (read-only: delete hidden)", style="dim")
            lines = [head] + ([] if readonly else [Text("   " + printable(c)) for c in zone.commands])
            items.append((f"⚑ {printable(zone.project)}/{printable(zone.zone)}", lines))
        width = (self.size.width or self.app.size.width) - 2              # the box's padding: 0 1
        max_rows = widget.styles.max_height.value if widget.styles.max_height else 6
        widget.update(fit_items(items, self.app.console, width, int(max_rows)))

    def _now(self) -> datetime:
        return self.console.clock()

    def _node_cells(self, n: Node) -> list[Any]:
        now = self._now()
        serving, tok_s, queue, model = serving_cells(self.serving.get(node_row_key(n)))
        return row(n.name, fmt.styled_state(n.state), n.accelerator_type, n.provisioning_model,
                   fmt.countdown(n.time_left_s(now)), serving, tok_s, queue, model,
                   _health(n), n.project, n.zone, fmt.dash(n.external_ip),
                   fmt.dash(n.internal_ip), fmt.dash(n.runtime_version), fmt.dash(n.queued_resource),
                   fmt.age(n.create_time, now))

    def _qr_cells(self, q: QueuedResource) -> list[Any]:
        now = self._now()
        failure = plain(q.failure, style="red") if q.failure else Text("-", style="dim")
        state = Text(fmt.qr_state_label(q.state, q.state_initiator), style=fmt.STATE_STYLES.get(q.state, ""))
        return row(q.name, state, fmt.dash(q.accelerator_type), q.provisioning_model,
                   self._qr_time_left(q, now), failure, fmt.duration(q.max_run_duration_s), q.project, q.zone,
                   fmt.age(q.create_time, now))

    @staticmethod
    def _qr_time_left(q: QueuedResource, now: datetime) -> Text:
        if fmt.qr_run_ended(q.state, q.termination_time):      # as ``nodes`` says it
            return Text("ended", style="dim")
        return fmt.countdown(q.time_left_s(now))

    def _tables_width(self) -> int:
        """Cells the tables may use: the screen minus the detail pane and a scrollbar."""
        width = self.size.width or self.app.size.width
        return width - (DETAIL_WIDTH if self.detail_shown else 0) - 2

    def _numeric_sort_value(self, column: str, item: Node | QueuedResource) -> float | None:
        """Columns whose text does not sort (countdowns, ages, durations) sort by their value."""
        now = self._now()
        if column == "TIME LEFT":
            return item.time_left_s(now)
        if column == "AGE":
            return -item.create_time.timestamp() if item.create_time else None
        if column == "MAX RUN" and isinstance(item, QueuedResource):
            return item.max_run_duration_s
        if column in ("TOK/S", "QUEUE") and isinstance(item, Node):
            sample = self.serving.get(node_row_key(item))
            if sample is None:
                return None
            return sample.tokens_per_s if column == "TOK/S" else sample.queue
        return None

    def _sorted(self, table_id: str, columns: Sequence[str], rows: list[_Row]) -> list[_Row]:
        column, descending = self.sort_by.get(table_id, (None, False))
        if column is None or column not in columns:
            return rows
        index = columns.index(column)
        numeric = column in ("TIME LEFT", "AGE", "MAX RUN", "TOK/S", "QUEUE")

        def key(entry: _Row) -> Any:
            if numeric:
                return self._numeric_sort_value(column, entry[0])
            text = str(entry[1][index]).strip()
            return None if text in ("", "-") else natural_key(text)

        present = [e for e in rows if key(e) is not None]
        missing = [e for e in rows if key(e) is None]    # blanks last, whichever the direction
        return sorted(present, key=key, reverse=descending) + missing

    def _tables(self, snapshot: FleetSnapshot) -> tuple[tuple[str, Sequence[Any], Callable[[Any], list[Any]],
                                                          Callable[[Any], str]], ...]:
        """Each table's (id, items, cells of an item, row key of an item)."""
        return (("nodes", snapshot.nodes, self._node_cells, node_row_key),
                ("qrs", snapshot.queued_resources, self._qr_cells, qr_row_key))

    def _entry_for(self, table_id: str, item: Any, cells_of: Callable[[Any], list[Any]],
                   key_of: Callable[[Any], str]) -> _Entry:
        """``item``'s row as cached when its item and serving sample are the objects it was built from;
        with its times counted again when the item is an equal one (a refresh); else built anew."""
        serving = self.serving if table_id == "nodes" else {}
        entry = self._row_by_id.get(table_id, {}).get(id(item))
        if entry is not None and entry[0] is item:          # the same object as drawn: its key is known
            if entry[1] is serving.get(entry[2][3]):
                return entry
            key = entry[2][3]
        else:
            key = key_of(item)
            entry = self._row_cache.get(table_id, {}).get(key)
        sample = serving.get(key)
        if entry is not None and entry[0] is item and _shows_same(entry[1], sample):
            return entry if entry[1] is sample else (item, sample, entry[2])
        if entry is not None and _shows_same(entry[1], sample) and entry[0] == item:
            return self._with_times(item, sample, entry)     # a refresh, the same node
        return item, sample, _row_of(item, cells_of(item), key)

    async def _warm_rows(self, snapshot: FleetSnapshot) -> None:
        """Build the rows of ``snapshot``'s new items :data:`CHUNK_ROWS` at a time, a chunk per loop turn,
        so that showing it costs no cell building (thousands of new rows at once held the keys)."""
        for table_id, items, cells_of, key_of in self._tables(snapshot):
            cache = self._row_cache.setdefault(table_id, {})
            by_id = self._row_by_id.setdefault(table_id, {})
            for start in range(0, len(items), CHUNK_ROWS):
                for item in items[start:start + CHUNK_ROWS]:
                    entry = self._entry_for(table_id, item, cells_of, key_of)
                    cache[entry[2][3]] = by_id[id(item)] = entry
                await asyncio.sleep(0)

    def _table_rows(self, table_id: str, items: Sequence[Any], cells_of: Callable[[Any], list[Any]],
                    key_of: Callable[[Any], str]) -> list[_Row]:
        """Each item's row (:data:`_Row`, :meth:`_entry_for`): a keystroke of the filter, a sort or a
        resize costs no cell building, and the same items and samples cost nothing at all."""
        version = self._serving_version if table_id == "nodes" else 0
        memo = self._rows_memo.get(table_id)
        if memo is not None and memo[0] is items and memo[1] == version:
            return memo[2]
        fresh: dict[str, _Entry] = {}
        fresh_by_id: dict[int, _Entry] = {}
        rows: list[_Row] = []
        for item in items:
            entry = self._entry_for(table_id, item, cells_of, key_of)
            fresh[entry[2][3]] = fresh_by_id[id(item)] = entry
            rows.append(entry[2])
        self._row_cache[table_id], self._row_by_id[table_id] = fresh, fresh_by_id
        self._rows_memo[table_id] = (items, version, rows)
        return rows

    def _with_times(self, item: Node | QueuedResource, sample: Any, entry: _Entry) -> _Entry:
        """``entry``'s row for ``item``, equal to the item it was built from, with TIME LEFT and AGE
        counted again (a refresh costs two cells a row, not the row)."""
        now = self._now()
        cells = list(entry[2][2])
        columns = NODE_COLUMNS if isinstance(item, Node) else QR_COLUMNS
        left = (fmt.countdown(item.time_left_s(now)) if isinstance(item, Node) else self._qr_time_left(item, now))
        for column, cell in (("TIME LEFT", left), ("AGE", plain(fmt.age(item.create_time, now)))):
            cells[columns.index(column)] = cell
        return item, sample, _row_of(item, cells, entry[2][3])

    def _draw(self, table: FleetTable, shown: list[str], widths: list[int], indexes: list[int],
              rows: list[_Row]) -> None:
        """Put ``rows`` in ``table``: when the columns and the rows' order are as drawn last, only the
        cells that changed are updated (the cursor and the scroll stay); else the rows are laid anew
        and the cursor goes back to the selected row. ``widths``: each shown column's, padding included."""
        table_id = table.id or ""
        keys = [r[3] for r in rows]
        drawn_cells = {r[3]: r[1] for r in rows}     # a cell's style follows from its text
        drawn = self._drawn.get(table_id)
        width_of = {column: width - 2 for column, width in zip(shown, widths, strict=True)}
        drawn_count = len(drawn[1]) if drawn is not None else 0
        if drawn is not None and drawn[0] == shown and keys[:drawn_count] == drawn[1]:
            # the rows drawn are still the first ones: their changed cells updated, new rows added below
            # (a large cached fleet arrives a screenful first, the rest after)
            table.set_widths(width_of)
            before = drawn[2]
            changed: list[tuple[str, str, Any]] = []
            for _, now, cells, key, _, _ in rows[:drawn_count]:
                then = before.get(key)
                if now is not then and now != then:
                    changed += [(key, shown[j], cells[i]) for j, i in enumerate(indexes)
                                if then is None or now[i] != then[i]]
            table.update_cells(changed)
            table.add_rows_keyed((key, [cells[i] for i in indexes]) for _, _, cells, key, _, _ in rows[drawn_count:])
        else:
            table.clear(columns=[c.value for c in table.columns] != shown)
            if not table.columns:
                for column in shown:
                    table.add_column(column, key=column, width=width_of[column])
            table.set_widths(width_of)
            table.add_rows_keyed((key, [cells[i] for i in indexes]) for _, _, cells, key, _, _ in rows)
            if self._selected_key is not None and self._selected_key in table.rows:
                table.move_cursor(row=table.get_row_index(self._selected_key), animate=False)
        self._drawn[table_id] = (shown, keys, drawn_cells)

    def _render_tables(self) -> None:
        if self.snapshot is None:
            return
        nodes_table = self.query_one("#nodes", FleetTable)
        qrs_table = self.query_one("#qrs", FleetTable)
        shown_count: dict[str, int] = {}
        hidden_count: dict[str, int] = {}
        tables: tuple[tuple[FleetTable, Sequence[str], Sequence[Any], Callable[[Any], list[Any]],
                            Callable[[Any], str]], ...] = (
            (nodes_table, NODE_COLUMNS, self.snapshot.nodes, self._node_cells, node_row_key),
            (qrs_table, QR_COLUMNS, self.snapshot.queued_resources, self._qr_cells, qr_row_key),
        )
        available = self._drawn_width = self._tables_width()
        for table, columns, items, cells_of, key_of in tables:
            table_id = table.id or ""
            rows = self._table_rows(table_id, items, cells_of, key_of)
            if self.filter_words:
                rows = [r for r in rows if _matches(self.filter_words, r[5])]
            rows = self._sorted(table_id, columns, rows)
            measured = widest_cells(columns, [r[4] for r in rows])
            widths = self._stable_widths(table_id, columns, measured)
            needs = {columns.index(c): columns.index(n) for c, n in COLUMN_NEEDS.items() if c in columns}
            indexes = fit_columns(widths, available, needs=needs)
            # fitted by the widest each column has been; drawn as wide as its cells are now
            self._draw(table, [columns[i] for i in indexes], [measured[i] for i in indexes], indexes, rows)
            shown_count[table_id] = table.row_count
            hidden_count[table_id] = len(columns) - len(indexes)
        shown_keys = [k.value for table in (nodes_table, qrs_table) for k in table.rows]
        if self._selected_key not in shown_keys:   # the filter hid the selection: follow the cursor
            self._selected_key = shown_keys[0] if shown_keys else None
        for table_id, label, total in (("nodes", "Nodes", len(self.snapshot.nodes)),
                                       ("qrs", "Queued resources", len(self.snapshot.queued_resources))):
            parts = [f"{label} {shown_count[table_id]}/{total}"]
            if self.filter_words:
                parts.append(f"filter: {' '.join(self.filter_words)}")
            sort_column, descending = self.sort_by.get(table_id, (None, False))
            if sort_column is not None:
                parts.append(f"sorted by {sort_column} {'descending' if descending else 'ascending'}")
            if hidden_count[table_id]:
                where = "in the detail pane" if self.detail_shown else "(i: detail pane)"
                parts.append(f"{fmt.count(hidden_count[table_id], 'more column')} {where}")
            self._set_title(table_id, " · ".join(parts))
        self._render_detail()

    def _set_title(self, table_id: str, text: str) -> None:
        """The table's title line, updated only when its text changed (an update lays the screen out)."""
        if self._titles.get(table_id) != text:
            self._titles[table_id] = text
            self.query_one(f"#{table_id}-title", Label).update(plain(text))

    def _stable_widths(self, table_id: str, columns: Sequence[str], measured: list[int]) -> list[int]:
        """The widths the columns are fitted by: the widest each has been this session (and the serving
        columns' reserve), so a refresh, a sample or a filter never swaps one column for another
        (MODEL gone and PROJECT shown when a long model name arrived); only a resize does."""
        seen = self._widest.get(table_id) or [0] * len(columns)
        widths = [max(m, s, SERVING_RESERVED_WIDTH.get(c, 0)) for m, s, c in zip(measured, seen, columns, strict=True)]
        self._widest[table_id] = widths
        return widths

    def _tick(self) -> None:
        """Once a second: count down the TIME LEFT of the rows on screen from the cached snapshot (no
        API call; a row scrolled into view counts down from the next tick), and age their AGE when its
        text changes (a refresh that changed nothing builds no row: the rows on screen age here)."""
        if self.snapshot is None:
            return
        selected = self.selected
        if selected is not None and selected.termination_time is not None and not self.show_raw:
            self._render_detail()           # its time_left_s counts down with the table
        now = self._now()
        for table_id, columns in (("nodes", NODE_COLUMNS), ("qrs", QR_COLUMNS)):
            table = self.query_one(f"#{table_id}", FleetTable)
            drawn = self._drawn.get(table_id)
            drawn_plains = drawn[2] if drawn is not None else {}
            changed: list[tuple[str, str, Any]] = []
            for key in table.visible_row_keys():
                item = self._by_key.get(key)
                if item is None:
                    continue
                if item.termination_time is not None and "TIME LEFT" in table.columns:
                    left = (fmt.countdown(item.time_left_s(now)) if isinstance(item, Node)
                            else self._qr_time_left(item, now))
                    changed.append((key, "TIME LEFT", left))
                plains = drawn_plains.get(key)
                age = fmt.age(item.create_time, now)
                if "AGE" in table.columns and plains is not None and plains[columns.index("AGE")] != age:
                    plains[columns.index("AGE")] = age      # as drawn now (the row's cells are rebuilt on a change)
                    changed.append((key, "AGE", plain(age)))
            table.update_cells(changed)        # one redraw of the rows on screen, not one per cell

    # --- selection and detail --------------------------------------------------------------

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        # Only the focused table drives the selection (both tables move their cursor on refresh).
        if not event.data_table.has_focus and self._selected_key is not None:
            return
        if event.row_key is not None and event.row_key.value is not None:
            self._selected_key = event.row_key.value
            self._render_detail_soon()

    def _render_detail_soon(self) -> None:
        """The detail pane for a cursor that moved: at once when it had been still, else once it stays
        put :data:`DETAIL_SETTLE_S` (a held key redraws the table per row, the pane once: each pane
        update lays the whole screen out)."""
        now = time.monotonic()
        moving = now - self._cursor_moved_at < DETAIL_SETTLE_S
        self._cursor_moved_at = now
        if self._detail_timer is not None:
            self._detail_timer.stop()
            self._detail_timer = None
        if not moving:
            self._render_detail()
            return

        def settled() -> None:
            self._detail_timer = None
            self._render_detail()
        self._detail_timer = self.set_timer(DETAIL_SETTLE_S, settled)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        """Moving focus between the tables selects the row under that table's cursor."""
        table = event.widget
        if self._workloads_focused():                # the detail pane holds no stale node beside a workload
            self._render_detail()
        elif isinstance(table, DataTable) and table.id in ("nodes", "qrs") and table.row_count:
            row_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
            if row_key.value is not None:
                self._selected_key = row_key.value
                self._render_detail()

    @on(DataTable.RowSelected, "#nodes")
    def _selected(self, event: DataTable.RowSelected) -> None:
        self.action_watch()

    @property
    def selected(self) -> Node | QueuedResource | None:
        """The node or queued resource under the cursor; ``None`` while the Workloads table has the focus
        (the keys then act on its workload, never on the row left selected in another table)."""
        if self._workloads_focused():
            return None
        return self._by_key.get(self._selected_key or "")

    def _workloads_focused(self) -> bool:
        return any(pane.has_focus_within for pane in self.query(WorkloadsPane))

    @property
    def selected_node(self) -> Node | None:
        """The selected node, or ``None`` when a queued resource (or nothing) is selected."""
        item = self.selected
        return item if isinstance(item, Node) else None

    def _detail_signature(self, item: Node | QueuedResource | None) -> tuple[Any, ...]:
        """What the detail pane's text follows from: the same signature draws the same pane."""
        if item is None:
            return (None, self._workloads_focused())
        key = self._selected_key or ""
        left = item.time_left_s(self._now()) if item.termination_time is not None else None
        return (key, id(item), self.show_raw, None if left is None else int(left), id(self.serving.get(key)),
                self.logins.get(key), key in self._logins_loading, self.console.ready, self.console.readonly,
                id(self.offered_types.get(item.project)))

    def _render_detail(self) -> None:
        body = self.query_one("#detail-body", Static)
        item = self.selected
        signature = self._detail_signature(item)
        if signature == self._detail_shown_for:      # each update lays the screen out again: only on a change
            return
        self._detail_shown_for = signature
        # the objects whose ids the signature holds stay alive with it (an id is never reused while it does)
        self._detail_refs = (item, self.serving.get(self._selected_key or ""),
                             self.offered_types.get(item.project) if item is not None else None)
        if item is None:
            body.update(Text("A GKE workload: its fields are in its row (nodes --json has them all). w: its startup, "
                             "s: swap it, R: roll it back, f: forward, b: bench, m: metrics, H: its launches."
                             if self._workloads_focused() else
                             "Select a row to see every field. j: raw JSON.", style="dim"))
            return
        if self.show_raw:
            raw = JSON(json.dumps(item.raw, default=str, sort_keys=True)).text
            raw.no_wrap, raw.overflow = False, "fold"           # long values folded, never cut at the edge
            body.update(Group(raw, Text("j: fields · long values fold at the pane's edge · y copies the JSON",
                                        style="dim")))
            return
        now = self._now()
        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold")
        table.add_column()
        data = item.to_json(now) if isinstance(item, Node) else item.to_json()
        for key, value in data.items():
            table.add_row(*row(key, fmt.dash(value)))
        extra = Table.grid(padding=(0, 1))
        extra.add_column(style="bold")
        extra.add_column()
        if isinstance(item, Node):
            extra.add_row(*row("node_id", fmt.dash(item.node_id)))
            extra.add_row(*row("health_description", fmt.dash(item.health_description)))
            extra.add_row(*row("symptoms", ", ".join(item.symptoms) or "-"))
            for w in item.workers:
                extra.add_row(*row(f"worker {w.worker}", f"{fmt.dash(w.external_ip)} / {fmt.dash(w.internal_ip)}"))
            for name, value in self._login_rows(item):
                extra.add_row(*row(name, value))
            for name, value in serving_rows(self.serving.get(node_row_key(item))):
                extra.add_row(*row(name, value))
        else:
            extra.add_row(*row("state_initiator", fmt.dash(item.state_initiator)))
            extra.add_row(*row("node_ids", ", ".join(item.node_ids) or "-"))
        title = plain(f"{'Node' if isinstance(item, Node) else 'Queued resource'} {item.name}", style="bold")
        parts: list[Any] = [title, table, extra]
        if isinstance(item, QueuedResource) and stuck_verdict(item) is not None:
            parts.append(self._advice_text(item))
        body.update(Group(*parts, Text("j: raw JSON", style="dim")))

    def _login_rows(self, node: Node) -> list[tuple[str, str]]:
        """``OS Login`` and ``SSH user`` rows: cached, else "working out…" while a worker asks
        (the table never waits for the OS Login or Compute API)."""
        key = node_row_key(node)
        known = self.logins.get(key)
        if known is not None:
            return [("OS Login", known[0]), ("SSH user", known[1])]
        if not self.console.ready:           # a cached fleet before the services exist: asked after the refresh
            return [("OS Login", "starting…"), ("SSH user", "starting…")]
        if key not in self._logins_loading:
            self._logins_loading.add(key)
            self._resolve_login(node)
        return [("OS Login", "working out…"), ("SSH user", "working out…")]

    @work(group="login", exit_on_error=False)
    async def _resolve_login(self, node: Node) -> None:
        """Which user the console would log in as on ``node`` (read only: no key is imported here)."""
        key = node_row_key(node)
        resolver = self.services.logins
        try:
            login = await resolver.login(node, import_key=False)
        except RemoteError as exc:
            try:
                verdict = (await resolver.verdict(node)).describe()
            except RemoteError:
                verdict = "-"
            self.logins[key] = (verdict.removeprefix("OS Login "), f"cannot tell: {exc}")
        else:
            os_login = ("needed" if login.verdict.enabled else "not needed") + login.verdict.describe().removeprefix(
                "OS Login on" if login.verdict.enabled else "OS Login off")
            user = "; ".join([f"{login.user} ({login.source})", *(n for n in login.notes if n != login.verdict.note)])
            self.logins[key] = (os_login, user)
        self._logins_loading.discard(key)     # an unexpected error leaves it loading: asked once, not per tick
        if self._selected_key == key:
            self._render_detail()

    def _advice_text(self, qr: QueuedResource) -> Text:
        """The stuck request's "what to try" lines (the zones' types are listed once per project)."""
        offered = self.offered_types.get(qr.project)
        if offered is None:
            self._load_offered(qr.project)
        out = Text("\nWhat to try", style="bold yellow")
        if offered is None:
            out.append("  (listing the zones' accelerator types…)", style="dim")
        readonly = self.console.readonly
        if readonly:
            out.append("  (read-only: the commands are hidden)", style="dim")
        for option in advice_for(qr, offered or {}):
            out.append("\n• ")
            out.append(printable(f"{option.why} ({option.zone}, {option.accelerator_type}, "
                                 f"{option.provisioning_model})" if readonly else option.why))
            if not readonly:
                out.append("\n  ")
                out.append(printable(option.command), style="bold")
        return out

    def _load_offered(self, project: str) -> None:
        if not self.console.ready:
            return      # asked again at the next render once the services exist
        fleet = self.services.fleet
        if project in self._offered_loading or not hasattr(fleet, "offered_types"):
            return
        self._offered_loading.add(project)
        self._list_offered(project)

    @work(group="offered", exit_on_error=False)
    async def _list_offered(self, project: str) -> None:
        try:
            offered = await self.services.fleet.offered_types(project)  # type: ignore[attr-defined]
        except RemoteError as exc:
            self.app.notify(f"could not list the accelerator types of {project}: {exc}", markup=False,
                            title="What to try", severity="warning", timeout=8)
            offered = {}
        self.offered_types[project] = offered
        self._offered_loading.discard(project)
        self._render_detail()

    def select_node(self, node: Node) -> None:
        """Move the cursor to ``node`` (clearing a filter that hides it) and focus the nodes table."""
        key = node_row_key(node)
        table = self.query_one("#nodes", DataTable)
        if key not in table.rows and self.filter_words:
            self.action_clear_filter()
        self._selected_key = key
        if key in table.rows:
            table.move_cursor(row=table.get_row_index(key), animate=False)
        table.focus()
        self._render_detail()

    @property
    def detail_shown(self) -> bool:
        """Whether the detail pane is shown: the operator's ``i``, else the terminal is wide enough."""
        if self.detail_wanted is not None:
            return self.detail_wanted
        return (self.size.width or self.app.size.width) >= DETAIL_MIN_WIDTH

    def _apply_detail(self) -> None:
        self.query_one("#detail").display = self.detail_shown

    def on_resize(self, event: events.Resize) -> None:
        """A new terminal size: the detail pane and the columns that fit follow it (drawn again only
        when the tables' width changed)."""
        self._apply_detail()
        self._render_problems()
        if self._tables_width() != self._drawn_width:
            self._render_tables()

    def action_toggle_detail(self) -> None:
        """Show or hide the detail pane (the tables get its width and show more columns)."""
        self.detail_wanted = not self.detail_shown
        self._apply_detail()
        self._render_tables()

    def _focused_table_id(self) -> str:
        focused = self.focused
        return focused.id if isinstance(focused, DataTable) and focused.id else "nodes"

    def action_cycle_sort(self) -> None:
        """Sort the focused table by its next shown column (after the last: the API's order again)."""
        table_id = self._focused_table_id()
        table = self.query_one(f"#{table_id}", DataTable)
        shown = [c.value for c in table.columns]
        column, descending = self.sort_by.get(table_id, (None, False))
        index = shown.index(column) + 1 if column in shown else 0
        self.sort_by[table_id] = (shown[index] if index < len(shown) else None, descending)
        self._render_tables()

    def action_reverse_sort(self) -> None:
        """Reverse the focused table's sort (sorting by name first when it was unsorted)."""
        table_id = self._focused_table_id()
        column, descending = self.sort_by.get(table_id, (None, False))
        self.sort_by[table_id] = (column or "NAME", not descending if column else True)
        self._render_tables()

    def action_copy_row(self) -> None:
        """Copy the selected row's JSON (the fields ``list --json`` prints) to the clipboard."""
        item = self.selected
        if item is None:
            self.app.notify("Select a row to copy its JSON.", severity="warning")
            return
        data = item.to_json(self._now()) if isinstance(item, Node) else item.to_json()
        self.copy(f"the JSON of {item.name}", json.dumps(data, default=str, sort_keys=True, indent=2))

    def action_toggle_raw(self) -> None:
        """Toggle the detail pane between fields and the raw REST JSON."""
        self.show_raw = not self.show_raw
        self._render_detail()

    # --- filter ----------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``/`` opens the filter except in a text field, where it is typed; read-only mode as every screen."""
        from console.app import is_text_field

        if action == "filter" and is_text_field(self.focused):
            return False
        return super().check_action(action, parameters)

    def action_filter(self) -> None:
        """Show the filter input and focus it before the next key is handled (``focus()`` queues the
        change behind the keys already waiting: a fast or pasted ``/spot`` opened the swap form with ``s``)."""
        box = self.query_one("#filter", Input)
        box.display = True
        self.set_focus(box)

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_words = event.value.lower().split()
        self._render_tables()

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        self.set_focus(self.query_one("#nodes", DataTable))

    def action_clear_filter(self) -> None:
        """Clear and hide the filter; the nodes table has the keys again at once."""
        box = self.query_one("#filter", Input)
        box.value = ""
        box.display = False
        self.filter_words = []
        self._render_tables()
        self.set_focus(self.query_one("#nodes", DataTable))

    # --- actions on the selected node ------------------------------------------------------

    def _live(self, what: str) -> bool:
        """Whether an action that changes the fleet may run: the fleet shown is live (not the cache)."""
        if not self.console.need_services(what):
            return False
        if self.cached_at is not None:
            self.app.notify(f"The fleet shown is the cache of {clock_time(self.cached_at)}; {what.lower()} waits "
                            "for the live refresh.", title=what, severity="warning")
            return False
        return True

    def action_shell(self) -> None:
        """A shell on worker 0 of the selected READY node, as ``tpu-console ssh NODE`` opens it (gcloud's
        command line): the console steps aside while it runs and comes back when it ends (k9s's shell)."""
        node = self._need_node("open a shell on")
        if node is None or not self.console.need_services("Shell"):
            return
        if node.state != "READY":
            self.app.notify(f"{node.name} is {node.state}: a shell needs a READY node.", severity="warning")
            return
        self._shell(node)

    @work(group="shell", exclusive=True, exit_on_error=False)
    async def _shell(self, node: Node) -> None:
        import subprocess

        from textual.app import SuspendNotSupported

        from console.flows.ssh_shell import NodeShell, ShellOptions

        services = self.services
        try:
            plan = await NodeShell(services.config, services.fleet, logins=services.logins).plan(node, ShellOptions())
        except RemoteError as exc:
            self.app.notify(str(exc), title=f"No shell on {node.name}", severity="error", timeout=10)
            return
        shell = plan.shells[0]
        try:
            with self.app.suspend():
                for note in plan.notes:
                    print(note, flush=True)
                code = await asyncio.to_thread(subprocess.call, list(shell.argv))
        except SuspendNotSupported:        # no terminal to hand over (a test, a web driver)
            self.app.notify(f"This terminal cannot be handed over; run: {shell.command_line}", title="Shell",
                            severity="warning", timeout=15)
            return
        except OSError as exc:
            self.app.notify(f"Could not run ssh: {exc}", title="Shell", severity="error")
            return
        self.app.notify(f"The shell on {node.name} ended (exit {code}).", title="Shell")

    def open_workload(self, view: str, workload: Workload) -> None:
        """Open ``view`` of a GKE workload: every door (the Workloads table's keys, command mode) comes here.

        Args:
            view: ``startup``, ``swap``, ``rollback`` (refused in read-only mode, as the use case refuses
                them too), ``bench``, ``metrics`` or ``history`` (from ``CLUSTER/NAMESPACE/deploy/NAME``).
        """
        from console.flows.gke_target import lint_node

        config = self.services.config
        if view == "startup":
            from console.widgets.workloads import workload_startup

            self.app.push_screen(workload_startup(workload, config))
        elif view == "history":
            self.open_feature("history", lint_node(workload))
        elif not self.console.need_services(view.capitalize()):
            return
        elif view in ("swap", "rollback"):
            if not self.console.refuse_readonly(view):
                from console.screens.workload_swap import WorkloadSwapScreen

                self.app.push_screen(WorkloadSwapScreen(workload, config, rollback=view == "rollback"))
        elif view == "bench":
            from console.screens.bench import BenchScreen

            fleet = self.query_one(WorkloadsPane).fleet
            pool = next((p for p in (fleet.node_pools if fleet is not None else [])
                         if p.cluster == workload.cluster and p.name == workload.node_pool), None)
            self.app.push_screen(BenchScreen(lint_node(workload), workload=workload, pool=pool))
        elif view == "metrics":
            from console.screens.metrics import MetricsScreen

            self.app.push_screen(MetricsScreen(lint_node(workload), workload=workload))

    def _need_node(self, verb: str) -> Node | None:
        node = self.selected_node
        if node is None and self._workloads_focused():
            self.app.notify(f"A GKE workload is selected: on a workload, w follows its startup, s swaps it, R rolls "
                            f"it back, f forwards, b benchmarks, m shows its metrics and H its launches; select a "
                            f"TPU node to {verb}.", severity="warning", markup=False)
        elif node is None:
            self.app.notify(f"Select a node to {verb}.", severity="warning")
        return node

    def action_watch(self) -> None:
        """Open the startup watch of the selected node; on a queued resource, of the node it creates,
        followed from the queue (waiting for capacity, the node's creation) to its container's boot; on a
        GKE workload (the Workloads table focused), its pod's (:mod:`console.screens.workload_startup`)."""
        pane = self.query_one(WorkloadsPane)
        if pane.has_focus_within:                   # a GKE workload: its own startup view
            if pane.selected is not None:
                self.open_workload("startup", pane.selected)
            return
        item = self.selected
        if isinstance(item, QueuedResource):
            from console.flows.node_wait import request_node

            try:
                created = request_node(item, self.snapshot.nodes if self.snapshot else ())
            except NodeLookupError as exc:
                self.app.notify(str(exc), title=f"Not following {item.name}", markup=False, severity="warning")
                return
            self.open_feature("startup", created)
        elif (node := self._need_node("watch its startup")) is not None:
            self.open_feature("startup", node)

    def action_swap(self) -> None:
        """Open the hot-swap form of the selected node; on a GKE workload (the Workloads table focused), its
        swap view (:mod:`console.screens.workload_swap`)."""
        pane = self.query_one(WorkloadsPane)
        if pane.has_focus_within:
            if pane.selected is not None:
                self.open_workload("swap", pane.selected)
            return
        if self._live("Swap") and (node := self._need_node("swap its container")) is not None:
            self.open_feature("swap", node)

    def action_rollback(self) -> None:
        """Open the rollback preview of the selected node (re-runs the container a swap replaced); on a GKE
        workload, its rollback view (the previous revision's template, as ``kubectl rollout undo``)."""
        pane = self.query_one(WorkloadsPane)
        if pane.has_focus_within:
            if pane.selected is not None:
                self.open_workload("rollback", pane.selected)
            return
        if self._live("Roll back") and (node := self._need_node("roll back its container")) is not None:
            self.open_feature("rollback", node)

    def action_bench(self) -> None:
        """Open the benchmark form of the selected node; on a GKE workload, of its serving pod (through the
        API server's port-forward, priced by its node pool)."""
        pane = self.query_one(WorkloadsPane)
        if pane.has_focus_within:
            if pane.selected is not None:
                self.open_workload("bench", pane.selected)
            return
        if (node := self._need_node("benchmark it")) is not None:
            self.open_feature("bench", node)

    def action_forward(self) -> None:
        """Forward ``localhost:PORT`` to the selected READY node's vLLM, in the app's forwards (it stays
        open when this view is left; the node's port: :meth:`~console.flows.forwards.ForwardRegistry.port_for`)."""
        if not self.console.need_services("Forward"):
            return
        pane = self.query_one(WorkloadsPane)
        if pane.has_focus_within:
            if pane.selected is not None:
                self._forward_workload(pane.selected)
            return
        node = self._need_node("forward to its vLLM")
        if node is None:
            return
        if node.state != "READY":
            self.app.notify(f"{node.name} is {node.state}, not READY: nothing serves there yet.", severity="warning")
            return
        existing = self.services.forwards.get(node.key)
        if existing is not None and existing.state in ("open", "reconnecting"):
            self.app.notify(f"{existing.url} -> {node.name}: {existing.describe()} (F lists forwards).",
                            title="Already forwarded")
            return
        self._forward(node)

    @work(group="forward", exit_on_error=False)
    async def _forward_workload(self, workload: Workload) -> None:
        """``f`` on a GKE workload: its forward (through the API server to the serving pod; it follows a
        rollout, and says so), held by the app's forwards."""
        from console.flows.workload_forward import open_workload_forward

        try:
            forward = await open_workload_forward(self.services.forwards, workload, self.services.config,
                                                  notify=lambda s: self.app.notify(s, title=f"Forward {workload.ref}",
                                                                                   markup=False, timeout=8))
        except RemoteError as exc:
            self.app.notify(exc.message, title=f"No forward to {workload.ref}", severity="error", timeout=10,
                            markup=False)
            return
        self.app.notify(f"{forward.url} -> {workload.ref} pod {forward.pod} port {forward.container_port} (through "
                        "the API server; it moves to the new pod after a rollout). F lists forwards.",
                        title="Forward open", markup=False)

    @work(group="forward", exit_on_error=False)
    async def _forward(self, node: Node) -> None:
        from console.flows.ssh_target import resolve_target
        from console.screens.confirm import host_key_question

        config = self.services.config
        try:
            target = await resolve_target(node, config, 0, self.services.fleet, logins=self.services.logins)

            async def ask(fingerprint: str) -> bool:
                return await self.ask(host_key_question(target, fingerprint))

            forward = await self.services.forwards.open(
                node, target, container_port=config.container.port, config=config.forward,
                accept_new_host_key=ask, container=config.container.name)
        except RemoteError as exc:
            self.app.notify(exc.message, title=f"No forward to {node.name}", severity="error", timeout=10)
            return
        self.app.notify(f"{forward.url} -> {node.name} port {forward.container_port}; it stays open "
                        "(F lists forwards, y there copies the URL).", title="Forward open")

    def action_metrics(self) -> None:
        """Open the metrics view of the selected READY node (``/metrics`` through its forward); on a GKE
        workload, of its serving pod (through the workload's forward)."""
        pane = self.query_one(WorkloadsPane)
        if pane.has_focus_within:
            if pane.selected is not None:
                self.open_workload("metrics", pane.selected)
            return
        node = self._need_node("see what it serves")
        if node is None:
            return
        if node.state != "READY":
            self.app.notify(f"{node.name} is {node.state}, not READY: nothing serves there yet.", severity="warning")
            return
        self.open_feature("metrics", node)

    def action_history(self) -> None:
        """Open the history pane; from a GKE workload, with its launches (``N``: its launches only)."""
        pane = self.query_one(WorkloadsPane)
        if pane.has_focus_within and pane.selected is not None:
            self.open_workload("history", pane.selected)
            return
        self.open_feature("history", self.selected_node)

    # --- queued resources ------------------------------------------------------------------

    def action_request(self) -> None:
        """Open the request form (prefilled with the selected row's project and zone)."""
        if not self._live("Request"):
            return
        self.open_feature("request", self.selected)

    def action_probe(self) -> None:
        """Probe the capacity of the selected WAITING_FOR_RESOURCES or FAILED request's type and zone: the
        request form, prefilled from it, asks to probe at once (stockout, quota or available, what to try)."""
        if not self._live("Probe"):
            return
        item = self.selected
        if not isinstance(item, QueuedResource) or item.state not in PROBED_STATES or not item.accelerator_type:
            self.app.notify("Select a WAITING_FOR_RESOURCES or FAILED queued resource to probe its capacity "
                            "(the request form's ctrl+t probes any type).", title="Probe", severity="warning")
            return
        if self.console.refuse_readonly("probe"):
            return
        from console.screens.request import RequestScreen

        self.app.push_screen(RequestScreen(item, probe=True))

    def selected_queued_resource(self) -> QueuedResource | None:
        """The selected queued resource, or the one owning the selected node, or ``None``."""
        item = self.selected
        if isinstance(item, QueuedResource):
            return item
        if isinstance(item, Node) and item.queued_resource and self.snapshot is not None:
            return next((q for q in self.snapshot.queued_resources
                         if (q.project, q.zone, q.name) == (item.project, item.zone, item.queued_resource)), None)
        return None

    def action_delete_qr(self) -> None:
        """Delete the selected queued resource after the operator types its name (never an ACTIVE one)."""
        if not self._live("Delete"):
            return
        qr = self.selected_queued_resource()
        if qr is None:
            self.app.notify("Select a queued resource to delete.", severity="warning")
            return
        plan = plan_delete(qr, owned_nodes(qr, self.snapshot.nodes if self.snapshot else ()),
                           self.services.config.prices, self._now())
        if plan.needs_force:
            self.app.notify(f"{qr.name} is {qr.state}: not offered here. To delete it and its nodes anyway: "
                                 f"{plan.command}", markup=False, title="Delete refused", severity="warning", timeout=10)
            return
        self._delete(plan)

    @work(group="delete", exclusive=True, exit_on_error=False)
    async def _delete(self, plan: DeletePlan) -> None:
        qr = plan.qr
        # the gcloud line, as the request's confirm shows its create line; the CLI's own line in the text
        question = ConfirmScreen(f"Delete queued resource {qr.name}?",
                                 " ".join([*plan.lines(), f"The same from the CLI: {plan.command}"]), [plan.gcloud],
                                 confirm_label="Delete", require_text=qr.name)
        if not await self.ask(question):
            self.app.notify("Not deleted: nothing was changed.", markup=False)
            return
        from console.flows.delete import DeleteCase
        from console.flows.policy import ReadOnlyRefused

        try:
            await DeleteCase(self.services.config, self.services.queued_resources, plan,
                             self.services.actions).run(typed_name=qr.name)
        except (ReadOnlyRefused, ValueError) as exc:
            self.app.notify(str(exc), markup=False, title=f"{qr.name} not deleted", severity="warning", timeout=10)
            return
        except RemoteError as exc:
            self.app.notify(str(exc), markup=False, title=f"{qr.name} not deleted", severity="error", timeout=10)
            return
        self.app.notify(f"Deleted queued resource {qr.name}.", markup=False, title="Deleted")
        self.action_refresh_fleet()
