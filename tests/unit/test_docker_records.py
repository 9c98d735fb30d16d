"""Docker's 16 KiB records (docker/cli#4941): timestamps spliced into long lines are removed at record borders."""

from __future__ import annotations

from remote.container.docker_records import DOCKER_RECORD_BYTES, rejoin_records

TS = [f"2026-11-30T10:00:00.00000000{i}Z ".encode() for i in range(1, 6)]


def _devices_line(chips: int) -> bytes:
    """A 256-chip ``Init worker`` line as tpu_worker.py prints it (text only, no envelope)."""
    devices = ", ".join(f"TpuDevice(id={i}, process_index={i // 4}, coords=({i % 4},{i // 4 % 8},{i // 32}), "
                        f"core_on_chip=0)" for i in range(chips))
    hbm = ", ".join("(0.0, 31.25)" for _ in range(chips))
    return (f"INFO 11-30 10:00:00 [tpu_worker.py:471] Init worker | rank=0 | is_driver_worker=True | "
            f"hbm=[{hbm}]GiB | total devices=[{devices}] | note: “ünïcödé” │ ok").encode()


def _as_docker_prints(text: bytes, cut_in_char: bool = True) -> bytes:
    """``TS text`` split into 16 KiB records, each after the first with a fresh timestamp."""
    if cut_in_char:   # move a multi-byte character onto the first border, as happens in real logs
        text = text[:DOCKER_RECORD_BYTES - 1] + "│".encode() + text[DOCKER_RECORD_BYTES - 1:]
    records = [text[i:i + DOCKER_RECORD_BYTES] for i in range(0, len(text), DOCKER_RECORD_BYTES)]
    return b"".join(TS[i] + record for i, record in enumerate(records)), text


def test_a_split_line_is_byte_identical_after_rejoining() -> None:
    printed, text = _as_docker_prints(_devices_line(256))
    assert len(text) > DOCKER_RECORD_BYTES
    assert printed.count(b"2026-11-30T10:00:00.0000000") == -(-len(text) // DOCKER_RECORD_BYTES)  # one per record
    assert text[DOCKER_RECORD_BYTES - 1:DOCKER_RECORD_BYTES + 2] == "│".encode()   # the border cuts it
    joined = rejoin_records(printed)
    assert joined == TS[0] + text
    assert "\ufffd" not in joined.decode("utf-8", "replace")


def test_short_lines_and_foreign_text_stay_as_they_are() -> None:
    assert rejoin_records(TS[0] + b"INFO short") == TS[0] + b"INFO short"
    no_stamp = b"x" * (3 * DOCKER_RECORD_BYTES)
    assert rejoin_records(no_stamp) == no_stamp
    # a long line with a timestamp-like text that is not at a border keeps it
    text = b"a" * 100 + TS[3] + b"b" * (2 * DOCKER_RECORD_BYTES)
    assert rejoin_records(TS[0] + text) == TS[0] + text


def test_a_capture_in_any_chunking_is_each_line_rejoined() -> None:
    """``rejoined_blocks`` = ``rejoin_records`` per line, whatever the block borders and line lengths."""
    import random

    from remote.container.docker_records import rejoined_blocks

    rnd = random.Random(7)
    lines = []
    for i in range(60):
        size = rnd.choice((0, 10, 300, DOCKER_RECORD_BYTES - 31, DOCKER_RECORD_BYTES + 1, 40_000, 70_000))
        printed, _ = _as_docker_prints(b"x" * size, cut_in_char=size > DOCKER_RECORD_BYTES)
        lines.append(printed if i % 7 else b"no stamp " + b"y" * size)      # some lines without a stamp
    capture = b"\n".join(lines) + b"\n" + lines[1]                          # the last without an LF
    expected = b"\n".join(rejoin_records(line) for line in capture.split(b"\n"))
    for seed in range(4):
        pieces, pos = [], 0
        while pos < len(capture):
            n = rnd.randint(1, rnd.choice((5, 4096, 20_000, 1 << 17)))
            pieces.append(capture[pos:pos + n])
            pos += n
        assert b"".join(rejoined_blocks(pieces)) == expected, f"seed {seed}"
