"""The full log of one launch on disk, rotated by size.

:class:`StartupWatch` writes every line it reads here, from the same data path the reader and
the log pane get (no second SSH stream): one folder per node and worker under the logs folder
(``$XDG_STATE_HOME/tpu-console/logs`` by default, ``[logs]`` in the config), one file per
container (a launch): ``<node>-w<worker>/<container id, 12>.log``. When the file reaches
``max_bytes`` it becomes ``.log.1`` (``.1`` becomes ``.2`` ...) and the oldest beyond ``keep``
goes: the newest data is always kept. Lines are written whole (the pane cuts them at 2,000
characters, the reader at 64 KiB), with secrets masked (:func:`remote.secrets.scrub_text`) and
everything else as the container printed it (control bytes, markup: literal). Files are 0600 in
0700 folders (a log can hold what the scrubber does not know is a secret).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from remote.secrets import scrub_text

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def launch_log_path(folder: Path, node: str, worker: int, container_id: str) -> Path:
    """``folder/<node>-w<worker>/<container id[:12]>.log`` (names reduced to ``[A-Za-z0-9_.-]``)."""
    safe_node = _UNSAFE.sub("_", node).strip(".") or "node"
    safe_id = _UNSAFE.sub("_", container_id[:12]).strip(".") or "container"
    return folder / f"{safe_node}-w{worker}" / f"{safe_id}.log"


def log_opener(folder: Path, node: str, worker: int, *, max_mib: float, keep: int) -> Callable[[str], LaunchLog]:
    """``container_id -> LaunchLog`` for one node's worker (what :class:`StartupWatch` takes)."""
    def open_log(container_id: str) -> LaunchLog:
        return LaunchLog(launch_log_path(folder, node, worker, container_id),
                         max_bytes=int(max_mib * 1024 * 1024), keep=keep)

    return open_log


def find_launch_log(folder: Path, node: str, container_id: str | None) -> Path | None:
    """The current log file of a launch (any worker of ``node``), or ``None`` when none is kept."""
    if not container_id:
        return None
    safe_node = _UNSAFE.sub("_", node).strip(".") or "node"
    name = _UNSAFE.sub("_", container_id[:12]).strip(".") + ".log"
    try:
        found = sorted(folder.glob(f"{safe_node}-w*/{name}"))  # names are [A-Za-z0-9_.-]: no glob characters
    except OSError:
        return None
    return found[0] if found else None


class LaunchLog:
    """Appends lines to one launch's log file, rotating it by size.

    Args:
        path: the current file (created with its folder on the first write; appended to if it exists).
        max_bytes: rotate when the current file would grow past this many bytes (a single longer
            line still goes in whole, into a file of its own).
        keep: rotated files kept (``path.1`` newest ... ``path.<keep>`` oldest).

    Raises (from :meth:`write`): ``OSError`` when the folder or file cannot be written; the
    caller says so once and stops writing.
    """

    def __init__(self, path: Path, *, max_bytes: int, keep: int) -> None:
        self.path = path
        self.max_bytes = max(1, max_bytes)
        self.keep = max(0, keep)
        self._file: BinaryIO | None = None
        self._size = 0
        #: Bytes written so far (all files).
        self.bytes_written = 0

    def write(self, lines: list[str], *, masked: bool = False) -> None:
        """Append ``lines`` (each without its newline), then flush.

        Args:
            lines: the lines.
            masked: the caller already masked secrets (:func:`remote.secrets.scrub_text`), so
                they are not scrubbed twice.
        """
        if not lines:
            return
        file = self._open()
        if masked:          # the whole batch at once while it fits the file
            data = ("\n".join(lines) + "\n").encode("utf-8", "replace")
            if self._size + len(data) <= self.max_bytes:
                file.write(data)
                self._size += len(data)
                self.bytes_written += len(data)
                file.flush()
                return
        for line in lines:
            data = (line if masked else scrub_text(line)).encode("utf-8", "replace") + b"\n"
            if self._size and self._size + len(data) > self.max_bytes:
                file = self._rotate()
            file.write(data)
            self._size += len(data)
            self.bytes_written += len(data)
        file.flush()

    def close(self) -> None:
        """Close the file (a later :meth:`write` appends again). Idempotent."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def files(self) -> list[Path]:
        """The launch's files that exist, newest first (``path``, ``path.1``, ...)."""
        names = [self.path] + [self._rotated(i) for i in range(1, self.keep + 1)]
        return [p for p in names if p.exists()]

    def _rotated(self, index: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{index}")

    def _open(self) -> BinaryIO:
        """The current file, opened for appending: created 0600 in a 0700 folder (every folder it
        creates is 0700), and made so when an older version left the file or its folder readable by others."""
        if self._file is None:
            folder = self.path.parent
            for directory in reversed([folder, *folder.parents]):
                if not directory.exists():
                    directory.mkdir(mode=0o700, exist_ok=True)
            if folder.stat().st_mode & 0o077:
                folder.chmod(0o700)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            if os.fstat(fd).st_mode & 0o077:
                os.fchmod(fd, 0o600)
            self._file = os.fdopen(fd, "ab")
            self._size = self._file.tell()
        return self._file

    def _rotate(self) -> BinaryIO:
        self.close()
        if self.keep == 0:
            self.path.unlink(missing_ok=True)
        else:
            self._rotated(self.keep).unlink(missing_ok=True)
            for index in range(self.keep - 1, 0, -1):
                if self._rotated(index).exists():
                    self._rotated(index).rename(self._rotated(index + 1))
            self.path.rename(self._rotated(1))
        return self._open()
