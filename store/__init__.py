"""The SQLite history of launches and benchmarks (sqlite-utils).

Light to import: :class:`Launch` and :class:`BenchmarkRecord` load no database code;
:class:`HistoryStore` (which imports sqlite-utils) is loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from store.errors import StoreError
from store.records import BenchmarkRecord, Launch, compile_key

if TYPE_CHECKING:
    from store.history import HistoryStore

__all__ = ["BenchmarkRecord", "HistoryStore", "Launch", "StoreError", "compile_key"]


def __getattr__(name: str) -> Any:
    if name == "HistoryStore":
        from store import history

        return getattr(history, name)
    raise AttributeError(f"module 'store' has no attribute {name!r}")
