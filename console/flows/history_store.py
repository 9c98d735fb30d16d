"""Opening the history database: the one place that turns the config into a store.

Every verb and screen opens the history through :func:`open_history`, so ``--db``, the
config's ``db_path`` and the XDG default are resolved the same way everywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from console.config import Config, default_db_path

if TYPE_CHECKING:
    from store.history import HistoryStore


def history_path(config: Config | None, override: str | Path | None = None) -> Path:
    """The database file: ``override`` (``--db``), else ``config.db_path``, else the XDG data path."""
    if override:
        return Path(override).expanduser()
    if config is not None and config.db_path:
        return Path(config.db_path).expanduser()
    return default_db_path()


def open_history(config: Config | None, override: str | Path | None = None) -> HistoryStore:
    """Open (create, migrate) the history database of ``config`` / ``override``.

    Raises:
        store.StoreError: the file cannot be created or opened, is not a database, or was
            written by a newer tpu-console; the message names the file.
    """
    from store.history import HistoryStore

    return HistoryStore(history_path(config, override))
