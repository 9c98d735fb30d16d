"""Docker's 16 KiB log records: undoing the timestamps ``docker logs --timestamps`` splices into long lines.

Docker's log drivers store a line longer than 16 KiB as several partial records (16,384 bytes of
the line each); ``docker logs --timestamps`` prints every record with its own timestamp and no
newline between them (docker/cli#4941), e.g. a 256-chip ``Init worker | ... total devices=[...]``
line gets ``2026-11-30T10:00:00.000000002Z `` spliced in at byte 16,384 of its text, possibly in
the middle of a multi-byte character. :func:`rejoin_records` removes a timestamp only where a
record border falls, on bytes, so the line decodes to exactly what vLLM printed.
"""

from __future__ import annotations

import re

#: Bytes of line text in one record (moby's ``bufSize`` for partial log messages).
DOCKER_RECORD_BYTES = 16 * 1024

_TIMESTAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d) ")


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
