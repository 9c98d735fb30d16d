"""The CLI's plain-text tables (console.render.text_table): aligned by terminal cells, nothing cut."""

from __future__ import annotations

from console.render.text_table import text_table


def test_columns_align_on_the_widest_cell_and_nothing_is_cut() -> None:
    long_failure = "There is no more capacity in the zone; " * 4
    out = text_table("Queued resources (2)", ("NAME", "STATE", "FAILURE"),
                     [("qr-a", "ACTIVE", ""), ("qr-failed-long-name", None, long_failure)])
    lines = out.splitlines()
    assert lines[0] == "Queued resources (2)"
    assert lines[1] == "NAME                 STATE   FAILURE"
    assert lines[2] == "qr-a                 ACTIVE"                      # trailing spaces stripped
    assert lines[3] == "qr-failed-long-name  -       " + long_failure.rstrip()
    assert out.endswith("\n")


def test_wide_characters_count_as_two_cells_and_outside_text_is_one_clean_line() -> None:
    out = text_table("t", ("NAME", "RUNTIME"), [("ノード", "a\x1b[2J\nb\tc"), ("n", "x")])
    lines = out.splitlines()
    assert lines[2] == "ノード  a[2J\\nb c"                              # ESC gone, newline shown, tab a space
    assert lines[3] == "n       x"                                         # ノード is 6 cells wide
    assert "\x1b" not in out and len(lines) == 4
