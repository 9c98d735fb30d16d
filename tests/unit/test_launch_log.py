"""The launches' full logs on disk: whole lines, size rotation that keeps the newest data,
secrets masked, everything else literal; the ``[logs]`` config."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.config import ConfigError, load_config
from console.flows.launch_log import LaunchLog, launch_log_path, log_opener


def _lines(n: int, width: int = 99) -> list[str]:
    return [f"{i:06d} " + "x" * (width - 7) for i in range(n)]


def test_rotation_at_the_size_limit_keeps_the_newest_data(tmp_path: Path) -> None:
    log = LaunchLog(tmp_path / "n-w0" / "abc.log", max_bytes=10_000, keep=2)
    lines = _lines(1_000)                       # 100 bytes a line with its newline: 100 kB
    for start in range(0, 1_000, 7):            # in uneven batches
        log.write(lines[start:start + 7])
    log.close()
    files = log.files()
    assert [p.name for p in files] == ["abc.log", "abc.log.1", "abc.log.2"]
    assert all(p.stat().st_size <= 10_000 for p in files)
    kept = [line for p in reversed(files) for line in p.read_text().splitlines()]
    assert kept == lines[-len(kept):] and len(kept) >= 200     # the newest lines, in order, none lost between
    assert log.bytes_written == 100_000


def test_a_line_longer_than_the_limit_goes_in_whole(tmp_path: Path) -> None:
    log = LaunchLog(tmp_path / "a.log", max_bytes=1_000, keep=1)
    log.write(["short", "L" * 50_000, "after"])
    log.close()
    assert log.path.read_text() == "after\n"
    assert log.path.with_name("a.log.1").read_text() == "L" * 50_000 + "\n"


def test_secrets_are_masked_and_hostile_text_stays_literal(tmp_path: Path) -> None:
    log = LaunchLog(tmp_path / "a.log", max_bytes=1 << 20, keep=1)
    hostile = "[bold]x[/bold] \x1b[2J\x07 \x00 é"
    log.write(["non-default args: {'api_key': 'sk-abcdefghijklmnopqrstuvwxyz'}", hostile])
    log.close()
    text = log.path.read_text(encoding="utf-8")
    assert "sk-abc" not in text and "'api_key': '***'" in text
    assert text.endswith(hostile + "\n")


def test_a_reopened_log_appends(tmp_path: Path) -> None:
    log = LaunchLog(tmp_path / "a.log", max_bytes=1 << 20, keep=1)
    log.write(["one"])
    log.close()
    log.write(["two"])
    log.close()
    assert log.path.read_text() == "one\ntwo\n"


def test_paths_are_one_folder_per_node_worker_and_one_file_per_container(tmp_path: Path) -> None:
    assert launch_log_path(tmp_path, "vllm-a", 1, "f" * 64) == tmp_path / "vllm-a-w1" / ("f" * 12 + ".log")
    assert launch_log_path(tmp_path, "../../etc", 0, "x/y").parent.parent == tmp_path
    opened = log_opener(tmp_path, "n", 0, max_mib=0.5, keep=4)("c" * 64)
    assert (opened.max_bytes, opened.keep) == (512 * 1024, 4)


def test_logs_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[logs]\nmax_mib = 8\nkeep = 5\n")
    loaded = load_config(config)
    assert (loaded.logs.max_mib, loaded.logs.keep) == (8.0, 5)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert loaded.logs.folder == tmp_path / "state" / "tpu-console" / "logs"
    config.write_text("[logs]\nmax_mib = 0\n")
    with pytest.raises(ConfigError, match=r"logs.*max_mib"):
        load_config(config)
    config.write_text("[logs]\nrotate = 1\n")
    with pytest.raises(ConfigError, match="rotate"):
        load_config(config)


def test_the_history_finds_a_launchs_log_on_any_worker(tmp_path: Path) -> None:
    from console.flows.launch_log import find_launch_log

    cid = "0123456789ab" + "c" * 52
    log = log_opener(tmp_path, "vllm-a", 3, max_mib=1, keep=1)(cid)
    log.write(["a line"])
    log.close()
    assert find_launch_log(tmp_path, "vllm-a", cid) == tmp_path / "vllm-a-w3" / "0123456789ab.log"
    assert find_launch_log(tmp_path, "vllm-a", cid[:12]) == log.path       # the history may keep 12 characters
    assert find_launch_log(tmp_path, "vllm-b", cid) is None
    assert find_launch_log(tmp_path, "vllm-a", None) is None
    assert find_launch_log(tmp_path / "absent", "vllm-a", cid) is None


def test_logs_are_0600_in_0700_folders_even_after_an_older_version(tmp_path: Path) -> None:
    """A log can hold what the scrubber does not know is a secret: only its owner may read it."""
    import os
    import stat

    old_umask = os.umask(0o022)
    try:
        path = launch_log_path(tmp_path / "state" / "logs", "vllm-a", 0, "c" * 64)
        log = LaunchLog(path, max_bytes=40, keep=1)
        log.write(["x" * 30, "y" * 30])                   # rotates: both files stay private
        log.close()
        stale = launch_log_path(tmp_path / "state" / "logs", "vllm-b", 0, "d" * 64)
        stale.parent.mkdir(mode=0o755)
        stale.write_text("old\n")
        stale.chmod(0o644)
        LaunchLog(stale, max_bytes=1 << 20, keep=1).write(["new"])
    finally:
        os.umask(old_umask)
    for folder in (tmp_path / "state", tmp_path / "state" / "logs", path.parent, stale.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    for file in (path, path.with_name(path.name + ".1"), stale):
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
