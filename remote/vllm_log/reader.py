"""Incremental reader of vLLM startup logs (``docker logs [--timestamps] vllm``).

Feed it bytes or text in any chunking, or one line at a time as lines arrive over
SSH; it keeps a small startup state, never the lines, and hands out frozen
:class:`~remote.startup.StartupState` snapshots. The same reader reads whole
files (:func:`read_log`) for ``tpu-console log-summary``.

Formats (ids from ``shared/corpus/vllm-logs/INDEX.md``): envelopes E1-E8
(vLLM V0/V1 prefixes with and without ``[file:line]``, process prefixes, uvicorn,
multi-line messages, foreign lines, CRLF/blank lines/stray bytes/ANSI colours);
tpu-inference HBM lines H1-H6 (2025-07 ... 0.29); KV cache K1-K6 and the
KV-fit errors KF1/KF2; compile progress C1-C6 (torch_xla V0/V1, tpu-inference
2025-10 ... 0.29, GPU torch.compile); uvicorn readiness; XLA OOM texts.

Hot path: each line costs one ``find`` for the envelope end and one dict lookup
on the first four characters of its message; regexes run only on lines whose
message head names a format (see ``state.HANDLERS``). Whole buffers (``feed``) go
through a bulk path first: CRLF endings are dropped per block, and runs of lines
the hot loop would skip anyway (array dumps, :data:`SKIP_HEAD`) are counted, not read,
and compile-step lines (``Precompile``, ``Compilation of ... finished in``, ``AOT lower
skipped``: a third of a TPU boot log) are read on their bytes while the boot compiles, with
no decode and no handler call; a repeated bare line already seen to do nothing is skipped
outside a traceback. Where ``pip install`` built ``_scan.c`` (a C compiler at hand), the bulk path's
lines that need no handler (the skipped and folded ones above) are read by its ``scan`` and an
array dump's run by its ``run_end``, with the hot loop's own conditions; without it the hot loop
reads them (the same state, ~1.6x slower). ``feed_line`` is the line-by-line path (every line
through its handler, never the C scanner); all give the same state.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import IO, Any

from remote.startup import Failure, Phase, PhaseMark, StartupState, summary_json
from remote.vllm_log import patterns as pat
from remote.vllm_log.state import HANDLERS, BootState

_COMPILING = Phase.COMPILING
_QUIET_MAX_BYTES = 512   # bare lines remembered as quiet: at most 1,024 of at most 512 bytes
_QUIET_MAX_LINES = 1024
_ON_PRECOMPILE = HANDLERS["Prec"]
_ON_COMPILE = HANDLERS["Comp"]
_ON_AOT = HANDLERS["AOT "]

__all__ = ["StartupReader", "read_log", "summary_json"]

HANDLERS_BYTES = {key.encode(): handler for key, handler in HANDLERS.items()}
#: The heads that have a handler, 4 bytes each, concatenated (the C scanner's ``keys``).
_HEAD_KEYS = b"".join(HANDLERS_BYTES)

try:
    # The bulk path's line scanner in C (``_scan.c``, built by ``pip install`` where a C compiler is
    # at hand): the lines the hot loop would skip or fold, read without a Python step each.
    from remote.vllm_log._scan import run_end as _run_end
    from remote.vllm_log._scan import scan as _scan
except ImportError:         # no compiled scanner: the hot loop reads every line itself (the same state)
    _scan = _run_end = None  # type: ignore[assignment]

_READ_BLOCK = 1 << 17  # 128 KiB: a block and its lines stay in cache (faster than 1 MiB)

#: The head of a line the hot loop skips on its envelope and message head alone: a standard
#: E1/E2/E4 envelope (optional docker stamp and process prefix, level, ``MM-DD HH:MM:SS``,
#: ``[file.py:N] ``; no ``]`` before it and at most 197 bytes long, so its ``] `` is the one
#: the hot loop finds) and a message that starts with four spaces (vLLM's array dumps, padded
#: continuations) or a digit. The lines of one multi-line message repeat it byte for byte
#: (without a docker stamp), which the bulk path uses.
SKIP_HEAD = re.compile(
    rb"(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)? )?"
    rb"(?:\([^()\]\n\r\x1b]{1,40}? pid=\d{1,8}(?:, ip=[\d.:a-f]{1,20})?\) ?)?"
    rb"(?:DEBUG|INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]{1,45}\.py:\d{1,6}\] "
    rb"(?: {4}|\d)")
#: What a :data:`SKIP_HEAD` line of an array dump holds (found with ``bytes.find``).
SKIP_HINT = b"]     "


class _CompileSteps:
    """Compile-step lines the hot loop read on their bytes (itself, :meth:`read`, or the C scanner) and
    has not yet written to the boot: the counts and figures ``BootState.fold_compile_steps``
    takes, written by :meth:`flush` before any handler runs (so each handler sees the state it
    would have seen line by line)."""

    __slots__ = ("deferred", "dirty", "finished", "in_flight", "last", "started", "total")

    def __init__(self) -> None:
        self.dirty = False          # steps read since the last flush
        self.started = 0            # ``Precompile <name> --> <shape>`` lines
        self.finished = 0           # ``Compilation of ... finished in N [secs]`` lines
        self.deferred = 0           # ``AOT lower skipped`` lines
        self.total = 0.0            # the boot's ``c_total`` after them, s
        self.last = 0.0             # N of the last finished one, s (used only if ``finished``)
        #: ``(line, message start, index of " --> ")`` of the last step if a Precompile (in flight)
        self.in_flight: tuple[bytes, int, int] | None = None

    def flush(self, boot: BootState) -> None:
        """Write the steps read to ``boot`` and start counting again."""
        boot.fold_compile_steps(self.started, self.finished, self.total, self.last, self.deferred,
                                self.in_flight)
        self.dirty, self.started, self.finished, self.deferred, self.in_flight = False, 0, 0, 0, None

    def read(self, raw: bytes, p: int, h: Callable[[BootState, str, str], None], boot: BootState) -> bool:
        """Count the compile step of ASCII line ``raw`` (message at ``p``, its head's handler ``h``:
        ``on_aot`` or ``on_compile``) as that handler would while the boot compiles: the bytes twin
        of those handlers for tpu-inference's C4 shapes (vLLM 0.26+ ``compilation_manager.py``),
        ``AOT lower skipped ...`` and ``Compilation of <name> ... finished in 0.69 [secs].``
        (``Precompile <name> --> <shape>``, half the steps, is counted in the hot loop itself).

        Returns:
            False when the line is another shape, for the handler to read; True when done (a line
            the handler would ignore too included).
        """
        if h is _ON_AOT:
            if raw.startswith(b"AOT lower skipped", p):
                if not self.dirty:
                    self.dirty, self.total = True, boot.c_total
                self.deferred += 1
                self.in_flight = None
            return True
        if raw.startswith(b"Compilation of ", p):   # "... finished in 0.69 [secs]."
            i = raw.rfind(b" finished in ", p) + 13
            j = raw.find(b" ", i)
            if i > 12 and j > 0 and not raw.startswith(b"in ", i):
                try:
                    secs = float(raw[i:j])
                except ValueError:
                    return True             # the handler ignores the line too
                if not self.dirty:
                    self.dirty, self.total = True, boot.c_total
                self.finished += 1
                self.last = secs
                self.total += secs
                self.in_flight = None
                return True
        return False


class StartupReader:
    """Incremental reader. Keeps state, not lines (memory flat).

    Args:
        year: year for vLLM's ``MM-DD HH:MM:SS`` stamps, which carry none (default: the
            current UTC year; a month jump back of more than six months adds one).
            ``docker logs --timestamps`` stamps carry their own year and win.

    Lines longer than :data:`~remote.vllm_log.patterns.MAX_LINE_CHARS` are cut to that
    length. Never raises on content: undecodable bytes become U+FFFD.
    """

    def __init__(self, *, year: int | None = None) -> None:
        self._boot = BootState(year or datetime.now(UTC).year)
        self._pend: list[bytes] = []
        self._pend_len = 0
        self._pend_cut = False
        self._version = 0
        self._snapshot: StartupState | None = None
        self._snapshot_version = -1
        #: bare lines seen to do nothing (``BootState.bare_line_is_quiet``), skipped when repeated
        self._quiet: set[bytes] = set()
        #: compile steps the hot loop read on their bytes, written to the boot before it returns
        self._steps = _CompileSteps()

    # ---- input --------------------------------------------------------------------
    def feed(self, data: str | bytes | bytearray | memoryview) -> None:
        """Read a chunk of the stream; chunk borders may fall anywhere (even inside UTF-8).

        Lines end at LF (CRLF too); a lone CR inside a line is a redraw (``docker run -t``,
        tqdm): the line is read as a terminal shows it, its last state
        (:func:`~remote.vllm_log.patterns.overlay_cr`), and counts once. ANSI escape sequences
        are removed; invalid UTF-8 becomes U+FFFD. A trailing partial line waits for the next
        chunk or :meth:`close`.
        """
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogatepass")
        self._feed_bytes(bytes(data))

    def feed_line(self, line: str, ts: datetime | None = None) -> None:
        """Read one complete line (without its newline), e.g. from an SSH tail.

        Args:
            line: the line; a trailing CR/LF is dropped, embedded LFs split it, inner CRs are
                redraws (its last state is read).
            ts: arrival or log time to use for this line instead of any stamp in it.
        """
        boot = self._boot
        pieces = line.encode("utf-8", "surrogatepass").rstrip(b"\n").split(b"\n")
        pieces = [pat.overlay_cr_bytes(self._clean(p[:pat.MAX_LINE_CHARS])) for p in pieces]
        boot.explicit_ts = ts
        try:
            self._process(pieces)
        finally:
            boot.explicit_ts = None

    def feed_lines(self, items: Sequence[tuple[datetime | None, str]]) -> None:
        """Read a batch of complete lines, each with its own time: the same state as
        :meth:`feed_line` on each ``(ts, line)`` in turn, in one pass of the hot loop (repeated
        quiet bare lines skipped, compile steps read on their bytes while the boot compiles).

        Args:
            items: ``(ts, line)`` pairs, e.g. a followed ``docker logs --timestamps`` tail's
                batch: ``ts`` the line's docker time (or ``None``: the line's own stamp is
                used), ``line`` without its newline (as :meth:`feed_line` takes it).
        """
        if not items:
            return
        pieces: list[bytes] = []
        stamps: list[datetime | None] = []
        cap = pat.MAX_LINE_CHARS
        clean, overlay = self._clean, pat.overlay_cr_bytes
        for ts, line in items:
            raw = line.encode("utf-8", "surrogatepass")
            for piece in raw.rstrip(b"\n").split(b"\n") if b"\n" in raw else (raw,):
                piece = piece[:cap]
                if b"\x1b" in piece:
                    piece = clean(piece)
                if b"\r" in piece:
                    piece = overlay(piece)
                pieces.append(piece)
                stamps.append(ts)
        boot = self._boot
        first = None
        if self._needs_first_stamp():
            for i, (piece, ts) in enumerate(zip(pieces, stamps)):
                at = ts or boot.stamp(piece[:240].decode("utf-8", "replace"), mutate=False)
                if at is not None:
                    first = boot.lines_read + 1 + i, at
                    break
        try:
            self._lines(pieces, True, stamps)
        finally:
            boot.explicit_ts = None
        for piece, ts in zip(reversed(pieces), reversed(stamps)):
            if ts is not None:
                boot.last_at = ts
                break
            line = piece[:240].decode("utf-8", "replace")
            if boot.has_stamp(line):
                boot.last_at = line
                break
        self._note_first_stamp(first)
        self._version += 1

    def close(self) -> None:
        """Flush a trailing partial line. Idempotent."""
        boot = self._boot
        changed = False
        if self._pend_len or self._pend_cut:
            line = b"".join(self._pend)
            self._pend, self._pend_len, self._pend_cut = [], 0, False
            self._process([pat.overlay_cr_bytes(self._clean(line))])
            changed = True
        if boot.accum is not None:
            boot.finish_accum()
            changed = True
        if changed:
            self._version += 1

    # ---- output -------------------------------------------------------------------
    @property
    def version(self) -> int:
        """Bumps whenever the state changes (every complete line read); the UI polls it."""
        return self._version

    @property
    def state(self) -> StartupState:
        """Frozen snapshot of the current state (cached until the next change)."""
        if self._snapshot is None or self._snapshot_version != self._version:
            self._snapshot = self._boot.snapshot()
            self._snapshot_version = self._version
        return self._snapshot

    def current_failure(self) -> Failure | None:
        """The diagnosed failure of the current boot, or ``None`` (no snapshot is built)."""
        return self._boot.current_failure()

    def footprint(self) -> dict[str, int]:
        """What the reader holds, to prove memory stays flat: ``pending_bytes`` of a partial
        line, ``timeline_marks``, ``hbm_snapshots`` and ``accumulating`` (1 while a multi-line
        message is being joined, else 0)."""
        boot = self._boot
        return {"pending_bytes": self._pend_len, "timeline_marks": len(boot.timeline),
                "hbm_snapshots": len(boot.snapshots), "accumulating": int(boot.accum is not None)}

    # ---- line assembly (bytes: splitting never needs a decode) ---------------------
    @staticmethod
    def _clean(line: bytes) -> bytes:
        return pat.ANSI_BYTES.sub(b"", line) if b"\x1b" in line else line

    def _feed_bytes(self, data: bytes) -> None:
        if not data:
            return
        if self._pend_len or self._pend_cut:
            brk = data.find(b"\n")
            if brk < 0:
                self._hold(data)
                return
            head = b"".join(self._pend)
            # a held line at the cap drops the rest of itself
            data = head + (data[brk:] if self._pend_cut else data)
            self._pend, self._pend_len, self._pend_cut = [], 0, False
        last = data.rfind(b"\n")
        self._hold(data[last + 1:])
        if last >= 0:
            self._process_buffer(data[:last + 1])

    def _hold(self, data: bytes) -> None:
        if self._pend_cut or not data:
            return
        room = pat.MAX_LINE_CHARS - self._pend_len
        if len(data) >= room:
            data = data[:room]
            self._pend_cut = True
        self._pend.append(data)
        self._pend_len += len(data)

    # ---- the hot loop ---------------------------------------------------------------
    def _process(self, lines: list[bytes]) -> None:
        """Read complete lines (cut, ANSI-free, CRs overlaid): the line-by-line path."""
        if not lines:
            return
        first = self._first_stamp(lines)
        self._lines(lines)
        self._note_stamps(reversed(lines), first)
        self._version += 1

    def _process_buffer(self, buf: bytes) -> None:
        """Read ``buf``, complete lines each ending in LF: the bulk path.

        Same state as :meth:`_process` on ``buf``'s lines: runs of lines that the hot loop
        would skip on their envelope and message head alone (:data:`SKIP_HEAD`, repeated
        byte for byte: array dumps, padded continuations) are counted (``_scan.run_end`` in C, else
        ``startswith`` per line) instead of being read one by one; the lines between runs go through :meth:`_lines`. Runs are only skipped while
        no multi-line message is being joined (then every line is offered to it).
        """
        boot = self._boot
        first = self._first_stamp(self._prepared(buf)) if self._needs_first_stamp() else None
        end = len(buf)
        pos = 0
        skip_head = SKIP_HEAD.match
        lines = self._lines
        run_end = _run_end
        while pos < end:
            hint = buf.find(SKIP_HINT, pos)
            if hint < 0:
                lines(self._prepared(buf[pos:end]), True)
                break
            start = buf.rfind(b"\n", pos, hint) + 1 or pos
            if start > pos:
                lines(self._prepared(buf[pos:start]), True)
            m = skip_head(buf, start) if boot.accum is None else None
            if m is not None:
                head = buf[start:m.end()]      # every line starting with it is skipped
                skipped, stop, redraw = 0, start, False
                find, starts = buf.find, buf.startswith
                while stop < end:
                    if run_end is not None and starts(head, stop):  # in C, with its redraws
                        stop, count, lone_cr = run_end(buf, stop, end, head)
                        skipped += count
                        redraw = redraw or lone_cr
                        if count:
                            continue
                        break                  # never: every line of buf ends in LF
                    if not (starts(head, stop) or skip_head(buf, stop)):
                        break
                    line_end = find(b"\n", stop) + 1
                    if run_end is not None:
                        redraw = redraw or buf.count(b"\r", stop, line_end) != buf.count(b"\r\n", stop, line_end)
                    stop = line_end
                    skipped += 1
                # CRs only as CRLF endings (a redraw would change the line)
                if run_end is None:
                    redraw = buf.count(b"\r", start, stop) != buf.count(b"\r\n", start, stop)
                if not redraw:
                    boot.lines_read += skipped
                    pos = stop
                    continue
            else:
                stop = buf.find(b"\n", hint) + 1
            lines(self._prepared(buf[start:stop]), True)
            pos = stop
        self._note_stamps(self._prepared_backwards(buf), first)
        self._version += 1

    def _lines(self, lines: list[bytes], fold: bool = False,
               stamps: list[datetime | None] | None = None) -> None:
        """Dispatch each line on the first 4 bytes of its message; decode only those used.
        ``stamps`` (:meth:`feed_lines`): each line's explicit time, set on the boot before its handler.

        With ``fold`` (the bulk path), the C scanner reads the lines up to the next one that needs a
        handler here (:meth:`_scan_run`), and compile-step lines are read on their bytes while the boot
        compiles (``Precompile`` here, the others by :meth:`_CompileSteps.read`). The common path stays
        inline (a call per line costs); bare lines and multi-line messages go to helpers."""
        boot = self._boot
        n = boot.lines_read
        n0 = n + 1          # the number of ``lines[0]``
        heads = HANDLERS_BYTES
        quiet = self._quiet
        acc = boot.accum is not None
        steady = fold and boot.progress is _COMPILING and boot.c_started_at is not None
        steps = self._steps     # read but not yet written to ``boot`` (written before any handler runs)
        scan = fold and _scan is not None
        last_index = len(lines) - 1
        it = iter(lines)
        for raw in it:
            n += 1
            if scan and not acc:    # skip and fold in C up to the next line to read here
                i = n - n0
                stop = self._scan_run(lines, i, steady, steps)
                if stop > i:
                    if stop > last_index:
                        n += last_index - i
                        break
                    raw = next(islice(it, stop - i - 1, None))
                    n += stop - i
            if acc:
                taken, acc, steady = self._offer_to_message(raw, n, stamps, n - n0, fold)
                if taken:
                    continue
            p = raw.find(b"] ", 0, 200)     # "...file.py:123] message", else a bare line
            if not (p > 1 and 47 < raw[p - 1] < 58 and (q := raw.rfind(b".py:", 0, p)) >= 0 and p - q <= 12):
                if fold and raw in quiet and not boot.in_tb:
                    continue
                acc, steady = self._bare_line(raw, n, stamps, n - n0, fold)
                continue
            p += 2
            head = raw[p:p + 4]
            h = heads.get(head)
            if steady and (h is _ON_PRECOMPILE or h is _ON_COMPILE or h is _ON_AOT) and raw.isascii():
                if h is _ON_PRECOMPILE:         # "Precompile <name> --> <shape>": half the steps, inline
                    if (i := raw.find(b" --> ", p)) > p:
                        if not steps.dirty:
                            steps.dirty, steps.total = True, boot.c_total
                        steps.started += 1
                        steps.in_flight = (raw, p, i)
                    continue
                if steps.read(raw, p, h, boot):     # AOT lower skipped, Compilation of ... finished
                    continue
            if h is None:
                c = head[:1]
                if c == b" ":
                    if head == b"    ":  # array/padding continuations, source lines
                        continue
                elif c.isdigit() or not c or not (b"rror" in raw or b"xception" in raw or c == b"\xe2"
                                                  or boot.in_tb):
                    continue
            if steps.dirty:
                steps.flush(boot)
            boot.lines_read = n
            if stamps is not None:
                boot.explicit_ts = stamps[n - n0]
            line = raw.decode("utf-8", "replace")
            msg = line[p:] if len(line) == len(raw) else line[line.find("] ", 0, 200) + 2:]
            if h is not None:
                h(boot, msg, line)
            else:
                boot.dispatch(msg.lstrip(), line, envelope=True)
            acc = boot.accum is not None
            steady = fold and boot.progress is _COMPILING and boot.c_started_at is not None
        if steps.dirty:
            steps.flush(boot)
        boot.lines_read = n

    def _modes(self, fold: bool) -> tuple[bool, bool]:
        """The hot loop's two modes after a handler ran: a multi-line message is being joined
        (every line is offered to it first); ``fold`` and the boot compiles with its start time
        known (compile steps are read on their bytes)."""
        boot = self._boot
        return boot.accum is not None, fold and boot.progress is _COMPILING and boot.c_started_at is not None

    def _at_line(self, n: int, stamps: list[datetime | None] | None, i: int) -> None:
        """Bring the boot to line ``n`` (``lines[i]`` of the batch) before a handler reads it: the
        compile steps read on their bytes written, ``lines_read`` and (with ``stamps``) the line's
        explicit time set."""
        boot = self._boot
        if self._steps.dirty:
            self._steps.flush(boot)
        boot.lines_read = n
        if stamps is not None:
            boot.explicit_ts = stamps[i]

    def _offer_to_message(self, raw: bytes, n: int, stamps: list[datetime | None] | None, i: int,
                          fold: bool) -> tuple[bool, bool, bool]:
        """Offer line ``n`` (``lines[i]``) to the multi-line message being joined.

        Returns:
            ``(taken, *modes)``: whether the message took it (else the hot loop reads it as a
            line), and :meth:`_modes` after it.
        """
        self._at_line(n, stamps, i)
        taken = self._boot.take_accum(raw.decode("utf-8", "replace"))
        return (taken, *self._modes(fold))

    def _bare_line(self, raw: bytes, n: int, stamps: list[datetime | None] | None, i: int,
                   fold: bool) -> tuple[bool, bool]:
        """Read line ``n`` (``lines[i]``), one without an E1/E2 envelope; with ``fold`` (the bulk
        path), one of at most :data:`_QUIET_MAX_BYTES` bytes that does nothing outside a traceback
        is remembered as quiet (at most :data:`_QUIET_MAX_LINES`), so its repeats are skipped unread.

        Returns:
            :meth:`_modes` after it.
        """
        self._at_line(n, stamps, i)
        boot = self._boot
        line = raw.decode("utf-8", "replace")
        if fold and len(raw) <= _QUIET_MAX_BYTES and not boot.in_tb and boot.bare_line_is_quiet(line):
            quiet = self._quiet
            if len(quiet) >= _QUIET_MAX_LINES:
                quiet.clear()
            quiet.add(raw)
        else:
            boot.bare_line(line)
        return self._modes(fold)

    def _scan_run(self, lines: list[bytes], i: int, steady: bool, steps: _CompileSteps) -> int:
        """Read ``lines`` from ``lines[i]`` in C (``_scan.scan``) up to the next line that needs a
        handler here, with the hot loop's own conditions; the compile steps it counted (while
        ``steady``: its twin of :meth:`_CompileSteps.read`) are added to ``steps``.

        Returns:
            The index of that line (``len(lines)`` when none is left).
        """
        boot = self._boot
        stop, started, finished, deferred, total, last, flight = _scan(
            lines, i, _HEAD_KEYS, self._quiet, boot.in_tb, steady, steps.total if steps.dirty else boot.c_total)
        if flight != -2:                # compile steps counted (-2: none)
            steps.dirty = True
            steps.started += started
            steps.finished += finished
            steps.deferred += deferred
            steps.total = total
            if finished:
                steps.last = last
            steps.in_flight = None
            if flight >= 0:             # the index of the last Precompile line, its step in flight
                step = lines[flight]
                at = step.find(b"] ", 0, 200) + 2
                steps.in_flight = (step, at, step.find(b" --> ", at))
        return stop

    def _prepared(self, block: bytes) -> list[bytes]:
        """The lines of ``block`` (each ending in LF) as the hot loop reads them: cut to
        :data:`~remote.vllm_log.patterns.MAX_LINE_CHARS`, ANSI removed, CR redraws overlaid."""
        redraw = False
        if b"\r" in block:
            lines = block.splitlines()      # LF and CRLF endings, in bulk...
            redraw = len(lines) != block.count(b"\n")   # ...unless a CR is not an ending
        if redraw or b"\r" not in block:
            lines = block.split(b"\n")
            lines.pop()
        lines = _cut(lines)
        if b"\x1b" in block:
            clean = self._clean
            lines = [clean(ln) if b"\x1b" in ln else ln for ln in lines]
        if redraw:                          # the line as a terminal shows it
            overlay = pat.overlay_cr_bytes
            lines = [overlay(ln) if b"\r" in ln else ln for ln in lines]
        return lines

    def _prepared_backwards(self, buf: bytes) -> Iterator[bytes]:
        """:meth:`_prepared` lines of ``buf`` (LF-ended lines), last line first, one by one."""
        end = len(buf) - 1
        while end >= 0:
            start = buf.rfind(b"\n", 0, end) + 1
            yield self._prepared(buf[start:end + 1])[0]
            end = start - 1

    def _needs_first_stamp(self) -> bool:
        boot = self._boot
        return len(boot.timeline) == 1 and boot.timeline[0].started_at is None

    def _first_stamp(self, lines: list[bytes]) -> tuple[int, datetime] | None:
        """Line number and time of the batch's first stamped line, while still needed."""
        boot = self._boot
        if not self._needs_first_stamp():
            return None
        for i, raw in enumerate(lines):
            at = boot.explicit_ts or boot.stamp(raw[:240].decode("utf-8", "replace"),
                                                mutate=False)
            if at is not None:
                return boot.lines_read + 1 + i, at
        return None

    def _note_stamps(self, last_first: Iterable[bytes], first: tuple[int, datetime] | None) -> None:
        """Keep the batch's last stamped line (``last_first``: its lines, last first) and the
        boot's start time (``first``, from :meth:`_first_stamp`)."""
        boot = self._boot
        if boot.explicit_ts is not None:
            boot.last_at = boot.explicit_ts
        else:
            for raw in last_first:
                line = raw[:240].decode("utf-8", "replace")
                if boot.has_stamp(line):
                    boot.last_at = line
                    break
        self._note_first_stamp(first)

    def _note_first_stamp(self, first: tuple[int, datetime] | None) -> None:
        """The boot's start time from ``first`` (:meth:`_first_stamp`: line number, time), unless a
        phase began before that line."""
        if first is not None:
            boot = self._boot
            line_no, at = first
            mark = boot.timeline[0]
            if (mark.started_at is None and mark.phase is Phase.STARTING and mark.line_no == 1
                    and (len(boot.timeline) == 1 or boot.timeline[1].line_no >= line_no)):
                boot.timeline[0] = PhaseMark(mark.phase, at, mark.line_no)


def _cut(lines: list[bytes]) -> list[bytes]:
    """``lines`` with each cut to :data:`~remote.vllm_log.patterns.MAX_LINE_CHARS` bytes."""
    if lines and max(map(len, lines)) > pat.MAX_LINE_CHARS:
        return [ln[:pat.MAX_LINE_CHARS] for ln in lines]
    return lines


def read_log(source: str | Path | IO[bytes]) -> StartupState:
    """Read a whole log file or stream and return the final state.

    Args:
        source: a path, ``"-"`` for standard input, or a binary (or text) stream.

    Returns:
        The state after the last line (a trailing partial line included).

    Raises:
        OSError: the file cannot be opened or read (missing, a directory, no permission).
    """
    reader = StartupReader()
    if isinstance(source, (str, Path)) and str(source) != "-":
        with open(source, "rb") as file:
            _pump(file, reader)
    else:
        _pump(sys.stdin.buffer if isinstance(source, (str, Path)) else source, reader)
    reader.close()
    return reader.state


def _pump(stream: IO[Any], reader: StartupReader) -> None:
    while True:
        block = stream.read(_READ_BLOCK)
        if not block:
            return
        reader.feed(block)
