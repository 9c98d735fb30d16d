"""The history as the use cases see it: a typed port, opened at most once, its failure one sentence.

:class:`LaunchHistory` is what the flows read and write of the history (``store.history.HistoryStore``
in production; a test may hand any object with these methods). :class:`HistoryAccess` opens it on
first use and, when it cannot be opened, keeps the reason as :attr:`HistoryAccess.problem` and
answers ``None`` from then on: a broken history never stops a swap, a watch or a benchmark, and
every door says the same sentence.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Protocol

from store.errors import StoreError
from store.records import BenchmarkRecord, Launch


class LaunchHistory(Protocol):
    """The history's reads and writes the use cases need (:class:`store.history.HistoryStore`).

    Every method raises ``store.StoreError`` when the database fails.
    """

    def start_launch(self, **fields: object) -> int: ...

    def update_launch(self, launch_id: int, **fields: object) -> None: ...

    def get_launch(self, launch_id: int) -> Launch | None: ...

    def list_launches(self, *, limit: int = 200, node: str | None = None, model: str | None = None,
                      accelerator_type: str | None = None, outcome: str | None = None,
                      text: str | None = None) -> list[Launch]: ...

    def find_launch_by_container(self, node: str, container_id: str) -> Launch | None: ...

    def known_failures(self, accelerator_type: str, model: str, serve_args: list[str],
                       *, limit: int = 20) -> list[Launch]: ...

    def failures_of_kind(self, accelerator_type: str, failure_kind: str, *, limit: int = 3) -> list[Launch]: ...

    def compile_eta_s(self, compile_key: str) -> float | None: ...

    def record_model_limit(self, model: str, max_model_len_tokens: int, source: str,
                           observed_at: datetime | None = None) -> None: ...

    def model_limit(self, model: str) -> tuple[int, str] | None: ...

    def add_benchmark(self, launch_id: int | None, kind: str, params: dict[str, Any], results: dict[str, Any],
                      price_per_hour_usd: float | None = None, usd_per_mtok: float | None = None,
                      *, started_at: datetime | str | None = None) -> int: ...

    def benchmarks_for(self, launch_id: int) -> list[BenchmarkRecord]: ...

    def benchmarks_by_launch(self, launch_ids: Iterable[int]) -> dict[int, list[BenchmarkRecord]]: ...

    def close(self) -> None: ...


class HistoryAccess:
    """The history opened on first use; ``None`` (with :attr:`problem`) when it cannot be.

    Args:
        opener: opens the history; raises ``store.StoreError`` with the file and the reason.
        owned: close what ``opener`` returned in :meth:`close` (a verb's own store); ``False`` for
            a store someone else closes (the console's ``Services.store``).
    """

    def __init__(self, opener: Callable[[], LaunchHistory], *, owned: bool = True) -> None:
        self._opener: Callable[[], LaunchHistory] | None = opener
        self._store: LaunchHistory | None = None
        self._owned = owned
        #: why the history could not be opened or written (one sentence), or ``None``
        self.problem: str | None = None

    @classmethod
    def none(cls) -> HistoryAccess:
        """No history at all (tests, a door that records nothing)."""
        access = cls(_no_history)
        access._opener = None
        return access

    def get(self) -> LaunchHistory | None:
        """The history, or ``None`` when it could not be opened (:attr:`problem` says why)."""
        if self._store is None and self._opener is not None:
            opener, self._opener = self._opener, None
            try:
                self._store = opener()
            except StoreError as exc:
                self.problem = f"the history could not be opened: {exc}"
        return self._store

    def failed(self, exc: StoreError) -> str:
        """Note that the history failed mid-way (it is not used again); returns the sentence."""
        self.problem = f"the history failed: {exc}"
        self._store, self._opener = None, None
        return self.problem

    def close(self) -> None:
        """Close the history if this object opened it (``owned``)."""
        if self._store is not None and self._owned:
            self._store.close()
        self._store = None


def _no_history() -> LaunchHistory:
    raise StoreError("no history")
