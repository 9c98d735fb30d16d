"""``log-summary`` on a saved ``docker logs --timestamps`` capture: docker's 16 KiB records (docker/cli#4941)
are rejoined on bytes before the reader (``console.verbs.log_summary.read_capture`` ->
``remote.container.docker_records.rejoined_blocks``), as the live tail does, so a line over 16 KiB
reads as vLLM printed it: no spliced timestamp, no U+FFFD where a border cut a multi-byte character.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.cli import main as cli_main
from console.verbs.log_summary import read_capture
from remote.container.docker_records import DOCKER_RECORD_BYTES, rejoined_blocks
from remote.startup import StartupState
from remote.vllm_log.reader import StartupReader, summary_json

_ENV = b"(EngineCore_DP0 pid=372) INFO 11-30 10:00:%02d [%s] "


def _device(i: int) -> str:
    return f"TpuDevice(id={i}, process_index={i // 4}, coords=({i % 4},{i // 4 % 8},{i // 32}), core_on_chip=0)"


def _init_worker_256() -> bytes:
    """A 256-chip slice's worker 0 ``Init worker`` line (H3b, tpu_worker.py:471, 0.26): > 32 KiB."""
    devices = ", ".join(_device(i) for i in range(256))
    local = ", ".join(_device(i) for i in range(4))
    return (_ENV % (1, b"tpu_worker.py:471") + b"Init worker | rank=0 | is_first_rank=True | is_last_rank=True | "
            b"topology_order_id=0 | is_driver_worker=True | hbm=[(0.0, 95.74), (0.0, 95.74), (0.0, 95.74), "
            b"(0.0, 95.74)]GiB |self.devices=[" + devices.encode() + b"] | total devices=["
            + devices.encode() + b"] | local_devices=[" + local.encode() + b"]")


def _init_model_1024() -> bytes:
    """A single-controller (Pathways-style) ``Init model`` line whose slice-wide hbm list of 1,024
    chips runs past 16 KiB, so a record border falls inside a figure (modelled: no real capture)."""
    hbm = ", ".join("(12.91, 95.74)" for _ in range(1024))
    return _ENV % (9, b"tpu_worker.py:480") + b"Init model | hbm=[" + hbm.encode() + b"]GiB"


def _boot(long_lines: list[bytes]) -> list[bytes]:
    return ([_ENV % (0, b"__init__.py:76") + b"vLLM API server version 0.11.0"] + long_lines
            + [_ENV % (20, b"kv_cache_manager.py:991") + b"Init kv-cache | hbm=[(30.1, 95.74)]Gb",
               b"INFO:     Started server process [1]",
               _ENV % (30, b"launcher.py:29") + b"Available routes are:"])


def _stamp(i: int, record: int = 0) -> bytes:
    return b"2026-11-30T10:00:%02d.%09dZ " % (i, record + 1)


def _split_at_borders(i: int, text: bytes) -> bytes:
    """``TS text`` as docker prints it: each 16,384 bytes of text a record with its own stamp."""
    records = [text[k:k + DOCKER_RECORD_BYTES] for k in range(0, len(text), DOCKER_RECORD_BYTES)]
    return b"".join(_stamp(i, r) + rec for r, rec in enumerate(records))


def _with_char_on_border(text: bytes) -> bytes:
    """``text`` with a three-byte ``│`` moved onto the first border (it is cut after its first byte)."""
    return text[:DOCKER_RECORD_BYTES - 1] + "│".encode() + text[DOCKER_RECORD_BYTES - 1:]


def _captures(long_lines: list[bytes]) -> tuple[bytes, bytes]:
    """(unsplit stamped log, the same as docker prints it with --timestamps)."""
    lines = _boot(long_lines)
    whole = b"".join(_stamp(i) + line + b"\n" for i, line in enumerate(lines))
    split = b"".join(_split_at_borders(i, line) + b"\n" for i, line in enumerate(lines))
    return whole, split


def _read(data: bytes, chunk: int) -> StartupState:
    """The bulk path: rejoined blocks of ``chunk`` bytes fed to one reader."""
    reader = StartupReader(year=2026)
    for block in rejoined_blocks(data[k:k + chunk] for k in range(0, len(data), chunk)):
        reader.feed(block)
    reader.close()
    return reader.state


def _read_by_lines(data: bytes) -> StartupState:
    """The line path: the rejoined capture's lines, decoded, one ``feed_line`` each."""
    reader = StartupReader(year=2026)
    for line in b"".join(rejoined_blocks([data])).decode("utf-8", "replace").split("\n")[:-1]:
        reader.feed_line(line)
    reader.close()
    return reader.state


@pytest.fixture(scope="module")
def capture_256() -> tuple[bytes, bytes]:
    whole, split = _captures([_with_char_on_border(_init_worker_256())])
    assert len(_init_worker_256()) > 2 * DOCKER_RECORD_BYTES
    assert split.count(b"2026-11-30T10:00:01.") == 3          # three records, a fresh stamp in each
    return whole, split


@pytest.mark.parametrize("chunk", [4096, 1 << 17, 1 << 30], ids=["4KiB", "128KiB", "whole"])
def test_the_rejoined_capture_is_byte_identical_to_what_vllm_printed(capture_256: tuple[bytes, bytes],
                                                                     chunk: int) -> None:
    whole, split = capture_256
    joined = b"".join(rejoined_blocks(split[k:k + chunk] for k in range(0, len(split), chunk)))
    assert joined == whole
    assert "\ufffd" not in joined.decode("utf-8", "replace")
    assert "│" in joined.decode()


@pytest.mark.parametrize("chunk", [4096, 1 << 30], ids=["4KiB", "whole"])
def test_bulk_and_line_paths_read_the_unsplit_state(capture_256: tuple[bytes, bytes], chunk: int) -> None:
    whole, split = capture_256
    expected = _read(whole, chunk)
    assert expected.lines_read == 5 and expected.vllm_version == "0.11.0"
    assert _read(split, chunk) == expected
    assert _read_by_lines(split) == expected


def test_a_figure_past_a_border_is_read_whole_only_after_rejoining() -> None:
    whole, split = _captures([_init_model_1024()])
    border = _init_model_1024()[DOCKER_RECORD_BYTES - 1:DOCKER_RECORD_BYTES + 1]
    assert border[:1].isdigit() or border[1:].isdigit() or b"." in border   # the border cuts a figure
    for chunk in (4096, 1 << 30):
        state = _read(split, chunk)
        assert state == _read(whole, chunk) == _read_by_lines(split)
        model = next(s for s in state.hbm_snapshots if s.stage == "model_loaded")
        assert len(model.used_gib) == 1024 and set(model.used_gib) == {12.91}


def test_log_summary_verb_reads_the_split_capture_as_the_unsplit_one(
        capture_256: tuple[bytes, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole, split = capture_256
    whole_path, split_path = tmp_path / "whole.log", tmp_path / "split.log"
    whole_path.write_bytes(whole + _stamp(40) + _init_model_1024() + b"\n")
    split_path.write_bytes(split + _split_at_borders(40, _init_model_1024()) + b"\n")
    summaries = []
    for path in (whole_path, split_path):
        assert cli_main(["log-summary", str(path), "--json"]) == 0
        summaries.append(json.loads(capsys.readouterr().out))
    assert summaries[0] == summaries[1]
    assert summary_json(read_capture(str(split_path))) == summaries[0]
