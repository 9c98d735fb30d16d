"""The ``[keys]`` table checked against the bindings: ids that exist, and no key given to two actions.

Shared by the console (before the first frame) and every CLI verb (:func:`console.verbs.common.config_or_exit`),
so a bad table is refused the same way everywhere. Textual-free: the bindings come from
:data:`console.keymap_table.BINDINGS_BY_VIEW`, which a test keeps equal to the screens' own.
"""

from __future__ import annotations

from collections.abc import Mapping

from console.keymap_table import BINDINGS_BY_VIEW

#: The view whose bindings are active on every other view.
APP = "TpuConsoleApp"


def _keys_of(key: str) -> list[str]:
    """``"r,ctrl+r"`` -> ``["r", "ctrl+r"]`` (Textual's comma-separated key lists)."""
    return [k.strip() for k in key.split(",") if k.strip()]


def key_problems(keys: Mapping[str, str]) -> list[str]:
    """Sentences, one per problem, for a ``[keys]`` table (empty when it is fine).

    Problems: an id no binding has; a key given to two actions that are active together (a view's
    bindings and the app's) when the table made it so (two ids given one key, or an id given a key
    another binding there already has). Overlaps the console ships with are not reported.
    """
    known = {row[0] for rows in BINDINGS_BY_VIEW.values() for row in rows if row[0]}
    problems = [f"[keys] {name} = {keys[name]!r}: no binding has the id {name!r} (press ? in the console "
                "to see every id)" for name in sorted(set(keys) - known)]
    app_rows = BINDINGS_BY_VIEW.get(APP, ())
    said: set[tuple[str, ...]] = set()
    for view, rows in sorted(BINDINGS_BY_VIEW.items()):
        if view == APP:
            continue
        by_key: dict[str, set[tuple[str, bool]]] = {}     # key -> {(id or action, remapped)}
        for binding_id, action, key in (*rows, *app_rows):
            remapped = bool(binding_id) and binding_id in keys
            for one in _keys_of(keys[binding_id] if remapped else key):
                by_key.setdefault(one, set()).add((binding_id or action, remapped))
        for one, users in sorted(by_key.items()):
            names = sorted({name for name, _ in users})
            if len(names) > 1 and any(remapped for _, remapped in users) and (one, *names) not in said:
                said.add((one, *names))
                problems.append(f"[keys]: {' and '.join(names)} would both be {one!r} in {view}; "
                                "give each its own key")
    return problems
