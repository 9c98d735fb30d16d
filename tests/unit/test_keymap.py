"""``[keys]`` checked the same way by the console and every CLI verb, from a table of the bindings
that must match the screens' own ``BINDINGS`` (this test regenerates it when they drift)."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.keymap import key_problems
from console.keymap_table import BINDINGS_BY_VIEW


def live_table() -> dict[str, tuple[tuple[str, str, str], ...]]:
    """Every console view's bindings, inherited ones included, as :data:`BINDINGS_BY_VIEW` holds them."""
    from textual.binding import Binding

    from console.app import binding_classes

    table = {}
    for cls in binding_classes():
        rows: list[tuple[str, str, str]] = []
        for base in reversed(cls.__mro__):
            if base.__module__.startswith("console.") or base is cls:
                rows.extend((b.id or "", b.action, b.key) for b in base.__dict__.get("BINDINGS", [])
                            if isinstance(b, Binding))
        if rows:
            table[cls.__name__] = tuple(rows)
    return table


def table_source(table: dict[str, tuple[tuple[str, str, str], ...]]) -> str:
    lines = ["BINDINGS_BY_VIEW: dict[str, tuple[tuple[str, str, str], ...]] = {"]
    for name, rows in sorted(table.items()):
        lines.append(f'    "{name}": (')
        lines.extend(f'        ("{i}", "{a}", "{k}"),' for i, a, k in rows)
        lines.append("    ),")
    lines.append("}")
    return "\n".join(lines) + "\n"


def test_the_table_matches_the_screens_bindings() -> None:
    live = live_table()
    if live != BINDINGS_BY_VIEW:
        path = Path(__file__).resolve().parents[2] / "console" / "keymap_table.py"
        head = path.read_text().split("BINDINGS_BY_VIEW:")[0]
        pytest.fail(f"console/keymap_table.py is out of date; its table should read:\n{head}{table_source(live)}")


def test_fine_tables_pass() -> None:
    assert key_problems({}) == []
    assert key_problems({"refresh": "ctrl+r", "sort": "ctrl+o", "command": "ctrl+k"}) == []


def test_an_unknown_id_and_a_key_given_twice_are_said() -> None:
    assert key_problems({"refrsh": "x"}) == [
        "[keys] refrsh = 'x': no binding has the id 'refrsh' (press ? in the console to see every id)"]
    twice = key_problems({"refresh": "x", "swap": "x"})
    assert "[keys]: refresh and swap would both be 'x' in FleetScreen; give each its own key" in twice
    taken = key_problems({"refresh": "s"})                     # s is the fleet's swap
    assert "[keys]: refresh and swap would both be 's' in FleetScreen; give each its own key" in taken
    app_wide = key_problems({"help": "r"})                     # the app's ? moved onto a view's r
    assert any("help and refresh would both be 'r'" in p for p in app_wide)


def test_cli_verbs_refuse_a_bad_keys_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from console.cli import main

    config = tmp_path / "config.toml"
    config.write_text('[[projects]]\nid = "p"\n\n[keys]\nrefresh = "x"\nswap = "x"\n')
    assert main(["--config", str(config), "history", "--json"]) == 2
    err = capsys.readouterr().err
    assert f"tpu-console: config error: {config}: [keys]: refresh and swap would both be 'x' in FleetScreen" in err
