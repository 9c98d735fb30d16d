"""The store's one error (stdlib only, so catching it loads no database code)."""

from __future__ import annotations


class StoreError(Exception):
    """The history database cannot be used: it cannot be created or opened, is not a
    database, was written by a newer tpu-console, or a read or write failed (any
    ``sqlite3.Error`` or ``OSError`` inside the store). ``str()`` is the one message to show,
    naming the file."""
