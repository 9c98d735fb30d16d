"""Docker's 16 KiB log records: undoing the timestamps ``docker logs --timestamps`` splices into long lines.

Docker's log drivers store a line longer than 16 KiB as several partial records (16,384 bytes of
the line each); ``docker logs --timestamps`` prints every record with its own timestamp and no
newline between them (docker/cli#4941), e.g. a 256-chip ``Init worker | ... total devices=[...]``
line gets ``2026-11-30T10:00:00.000000002Z `` spliced in at byte 16,384 of its text, possibly in
the middle of a multi-byte character. :func:`rejoin_records` removes a timestamp only where a
record border falls, on bytes, so the line decodes to exactly what vLLM printed; the live tail
(:mod:`remote.container.tail`) uses it per line, ``log-summary`` per saved capture (:func:`rejoined_blocks`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

#: Bytes of line text in one record (moby's ``bufSize`` for partial log messages).
DOCKER_RECORD_BYTES = 16 * 1024

_TIMESTAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d) ")
_WINDOW = DOCKER_RECORD_BYTES // 2


def rejoin_records(line: bytes) -> bytes:
    """One ``docker logs --timestamps`` line (no newline) with the record borders' timestamps removed.

    Args:
        line: raw bytes as docker printed them: ``TS text`` where a text over
            :data:`DOCKER_RECORD_BYTES` carries ``TS `` again after each 16,384 bytes.

    Returns:
        ``TS text`` with the whole text (the first record's timestamp kept); the line itself
        when it has no leading timestamp or fits one record. A timestamp-looking text that is
        not at a record border is kept: only borders are touched.
    """
    first = _TIMESTAMP.match(line)
    if first is None or len(line) - first.end() <= DOCKER_RECORD_BYTES:
        return line
    parts = [line[:first.end() + DOCKER_RECORD_BYTES]]
    pos = first.end() + DOCKER_RECORD_BYTES
    while pos < len(line):
        border = _TIMESTAMP.match(line, pos)
        if border is None:                   # not docker's split after all: keep the rest as it is
            parts.append(line[pos:])
            break
        parts.append(line[border.end():border.end() + DOCKER_RECORD_BYTES])
        pos = border.end() + DOCKER_RECORD_BYTES
    return b"".join(parts)


def rejoined_blocks(blocks: Iterable[bytes], *, max_line_bytes: int = 1 << 22) -> Iterator[bytes]:
    """A saved ``docker logs --timestamps`` capture, read in blocks, with every long line rejoined.

    The same byte-level rejoin the live tail does (:func:`rejoin_records` per line), for a file
    given to ``tpu-console log-summary``: blocks may be cut anywhere (inside a line, inside a
    UTF-8 character); what comes out is the capture with each record border's timestamp
    removed, cut only after an LF (the last piece may end without one).

    Args:
        blocks: the capture's bytes in any chunking.
        max_line_bytes: a line longer than this (no LF in 4 MiB: not a docker capture) is
            passed on as it is instead of being held whole.

    Yields:
        bytes; only lines over :data:`DOCKER_RECORD_BYTES` are touched, the rest is passed on
        unchanged.
    """
    carry = b""
    for block in blocks:
        data = carry + block if carry else block
        last = data.rfind(b"\n")
        if last < 0:
            carry = data
            if len(carry) > max_line_bytes:
                yield carry
                carry = b""
            continue
        carry = data[last + 1:]
        yield _rejoin_lines(data[:last + 1])
    if carry:
        yield _rejoin_lines(carry)


def _rejoin_lines(data: bytes) -> bytes:
    """``data`` (whole lines) with :func:`rejoin_records` applied to each line over one record.

    A line over :data:`DOCKER_RECORD_BYTES` holds a whole aligned window of half that size
    without an LF, so one ``bytes.find`` per 8 KiB window finds every candidate (16 per 128 KiB
    block): ordinary logs cost next to nothing.
    """
    out: list[bytes] = []
    pos = checked = 0          # data[:pos] is in out; lines before ``checked`` were looked at
    for k in range(0, len(data), _WINDOW):
        if k < checked or data.find(b"\n", k, k + _WINDOW) >= 0:
            continue
        start = data.rfind(b"\n", 0, k) + 1
        end = data.find(b"\n", k)
        end = len(data) if end < 0 else end
        checked = end
        if end - start > DOCKER_RECORD_BYTES:
            out += [data[pos:start], rejoin_records(data[start:end])]
            pos = end
    if not out:
        return data
    out.append(data[pos:])
    return b"".join(out)
