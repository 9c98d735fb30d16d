"""The history pane's filter language and its reads, off the UI thread.

A filter is one line of ``key:value`` terms and free words::

    node:vllm-v5e-a outcome:failed fp8
    model:Qwen3-8B accelerator:v6e-8 limit:1000 max-model-len

Keys: ``node``, ``model``, ``accelerator`` (also ``acc``, ``type``), ``outcome``, ``limit``.
Free words must all appear (case-insensitive) in the node, project, zone, accelerator type,
model, served name, image, serve args, failure or notes: the longest goes to the store's
text index, the others are checked on the rows it returns.

:class:`HistoryReader` owns one :class:`store.HistoryStore` in one worker thread (sqlite3
connections belong to the thread that opened them), so every database read leaves the
event loop and the pane stays responsive on a large database.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from store.records import OUTCOMES, Launch

if TYPE_CHECKING:
    from store.history import HistoryStore

T = TypeVar("T")

#: Rows shown unless ``limit:N`` asks for more (several screenfuls; each row costs table time).
DEFAULT_LIMIT = 100
#: With several free words, how many rows per wanted row the store is asked for.
OVERFETCH = 3
#: Upper bound of ``limit:N``.
MAX_LIMIT = 100_000
_KEYS = {"node": "node", "model": "model", "accelerator": "accelerator_type", "acc": "accelerator_type",
         "type": "accelerator_type", "accelerator_type": "accelerator_type", "outcome": "outcome",
         "limit": "limit"}
_KEY_TERM = re.compile(r"^([A-Za-z_]+):(.*)$")


@dataclass(frozen=True)
class LaunchFilter:
    """A parsed filter line (see the module docstring).

    Attributes:
        node, model, accelerator_type, outcome: exact-match terms, ``None`` when absent.
        words: free words, lowercase.
        limit: at most this many launches, newest first.
    """

    node: str | None = None
    model: str | None = None
    accelerator_type: str | None = None
    outcome: str | None = None
    words: tuple[str, ...] = ()
    limit: int = DEFAULT_LIMIT

    def describe(self) -> str:
        """``node=vllm-v5e-a outcome=failed 'fp8'``, or ``""`` for no filter."""
        terms = [f"{k}={v}" for k, v in (("node", self.node), ("model", self.model),
                                         ("accelerator", self.accelerator_type), ("outcome", self.outcome)) if v]
        return " ".join(terms + [repr(w) for w in self.words])


def parse_filter(line: str) -> LaunchFilter:
    """Parse a filter line.

    Raises:
        ValueError: an unknown ``key:``, an empty value, an unknown outcome or a bad limit,
            with a sentence saying what is accepted.
    """
    try:
        terms = shlex.split(line)
    except ValueError:
        terms = line.split()
    found: dict[str, Any] = {}
    words: list[str] = []
    for term in terms:
        match = _KEY_TERM.match(term)
        if match is None:
            words.append(term.lower())
            continue
        key, value = match[1].lower(), match[2].strip()
        if key not in _KEYS:
            raise ValueError(f"unknown filter key {key!r}: use node:, model:, accelerator:, outcome: or limit:")
        if not value:
            raise ValueError(f"{key}: needs a value, e.g. {key}:{_EXAMPLES[_KEYS[key]]}")
        field = _KEYS[key]
        if field == "outcome" and value.lower() not in OUTCOMES:
            raise ValueError(f"outcome:{value} is not an outcome: use one of {', '.join(OUTCOMES)}")
        if field == "limit":
            if not value.isdigit() or not 1 <= int(value) <= MAX_LIMIT:
                raise ValueError(f"limit:{value} must be a whole number from 1 to {MAX_LIMIT:,}")
            found["limit"] = int(value)
            continue
        found[field] = value.lower() if field == "outcome" else value
    return LaunchFilter(words=tuple(words), **found)


_EXAMPLES = {"node": "vllm-v5e-a", "model": "Qwen3-8B", "accelerator_type": "v6e-8", "outcome": "failed",
             "limit": "1000"}


def _haystack(launch: Launch) -> str:
    parts = (launch.node, launch.project, launch.zone, launch.accelerator_type, launch.model,
             launch.served_model_name, launch.image, " ".join(launch.serve_args), launch.failure_kind,
             launch.failure_detail, launch.notes)
    return " ".join(p for p in parts if p).lower()


def query_launches(store: HistoryStore, flt: LaunchFilter) -> list[Launch]:
    """The launches matching ``flt``, newest first, at most ``flt.limit``.

    With several free words, the store is asked for :data:`OVERFETCH` times the limit by
    the longest word and the others are checked here: when the longest word is common and
    the others rare, older matches can be missed (``limit:N`` looks further back).
    """
    words = sorted(flt.words, key=len, reverse=True)
    rest = words[1:]
    fetch = min(flt.limit * OVERFETCH, MAX_LIMIT) if rest else flt.limit
    launches = store.list_launches(limit=fetch, node=flt.node, model=flt.model,
                                   accelerator_type=flt.accelerator_type, outcome=flt.outcome,
                                   text=words[0] if words else None)
    if rest:
        launches = [x for x in launches if all(w in _haystack(x) for w in rest)][:flt.limit]
    return launches


class HistoryReader:
    """One history store used from one worker thread.

    Args:
        path: the database file (opened, and migrated if needed, on the first call).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="history-db")
        self._store: HistoryStore | None = None

    def _run(self, fn: Callable[[HistoryStore], T]) -> T:
        if self._store is None:
            from console.flows.history_store import open_history

            self._store = open_history(None, self.path)
        return fn(self._store)

    async def call(self, fn: Callable[[HistoryStore], T]) -> T:
        """Run ``fn(store)`` in the reader's thread and return its result.

        Raises:
            store.StoreError: the database cannot be opened; whatever ``fn`` raises.
        """
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._run, fn)

    def _close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def close(self) -> None:
        """Close the store in its thread and let the thread end (does not wait)."""
        try:
            self._pool.submit(self._close)
        except RuntimeError:  # already shut down
            return
        self._pool.shutdown(wait=False)
