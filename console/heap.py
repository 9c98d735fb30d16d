"""Keep the garbage collector's full collections short while a log floods the console.

Textual's strips reference themselves through their own caches (``Strip.crop_extend`` and
``Strip.divide`` cache ``self``), so every strip drawn is cyclic garbage only a collection frees;
during a 20,000 lines/s burst that makes a full (generation 2) collection about once a second,
and each one walks every object alive: ~170,000 after start (modules, Textual's DOM and CSS, the
services), 116-227 ms of the UI loop each (measured in ``benches/bench_startup_ui.py``, 11 in a
10 s burst). :func:`freeze_long_lived` moves what is alive once the console is up into the
collector's permanent generation (``gc.freeze``), so a full collection walks only what was made
after it (17-90 ms in the same bench). A view that floods freezes what it made once it follows a container
(:func:`freeze_new`: no full collection then, when the flood begins) and refreezes when it closes
(:func:`refreeze`): its own widgets, connection, reader and Textual's render caches leave the walk
while it is open (the burst's full collections 13-53 ms in the bench, were 27-90), and what it
leaves in cycles when it closes is collected then.

The console itself (``console.tui``, not the tests' apps) also freezes what survives each full
collection the moment it ends (:func:`freeze_after_full_collections`): a fleet of thousands keeps
making objects that live a while (its rows, the render caches), and the oldest generation's walk
grew with them to 40-200 ms every second or two while keys came (``benches/bench_fleet_scale.py``,
``gc_max_ms``). What those freezes keep in cycles after it dies (a strip dropped from a cache) is
freed by a :func:`refreeze` after 30 such freezes at a moment no key came (:func:`refreeze_if_grown`;
the console asks every few seconds), or whatever the moment after 300.
"""

from __future__ import annotations

import gc

_state = {"frozen": False, "after_full": False}
#: Full collections whose survivors were frozen since the last (re)freeze (:func:`refreeze_if_grown`'s
#: measure of what the frozen heap may keep dead: ``gc.get_freeze_count`` walks every frozen object,
#: ~50 ms at 5,000 nodes, so it is not asked).
_frozen_since_refreeze = [0]
#: Frozen full collections after which :func:`refreeze_if_grown` refreezes at a quiet moment, and after
#: which it refreezes whatever the moment.
REFREEZE_AFTER = 30
REFREEZE_FORCED_AFTER = 300


def freeze_long_lived() -> bool:
    """Collect, then freeze every object alive now out of the collector's reach (``gc.freeze``),
    the first time it is called in the process; later calls do nothing.

    Call once the long-lived part of the console exists (services built, the first screen
    shown). What is frozen is not collected until a :func:`refreeze` thaws it: a cycle frozen
    now and dropped later stays in memory until then, hence once per process (a test session
    with many apps freezes only the first).

    Returns:
        ``True`` when this call froze the heap, ``False`` when it was frozen already.
    """
    if _state["frozen"]:
        return False
    _state["frozen"] = True
    gc.collect()
    gc.freeze()
    _frozen_since_refreeze[0] = 0
    return True


def refreeze() -> int:
    """Thaw the frozen heap, collect everything, and freeze what is alive again: one full
    collection (~100-200 ms with the console's heap), so call it at a screen change, not on a
    hot path. A view that floods calls it when it closes (what it left in cycles, and what
    :func:`freeze_new` froze when its flood began, is collected now, not kept forever).

    Returns:
        How many objects are frozen now (``gc.get_freeze_count()``).
    """
    _state["frozen"] = True
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    _frozen_since_refreeze[0] = 0
    return gc.get_freeze_count()


def freeze_new() -> None:
    """Collect the young generations only, then freeze every object alive now (``gc.freeze``):
    no full collection, so a few ms, not the ~100 ms of :func:`refreeze` (a view calls it when
    its flood begins, where a full collection would stall the keys typed then). Cycles of the
    older generation that were garbage already are frozen with the rest and freed by the next
    :func:`refreeze` (the view's close). It does not count what is frozen (``gc.get_freeze_count``
    walks every frozen object: ~50 ms with a 5,000-node fleet behind the view).
    """
    _state["frozen"] = True
    gc.collect(1)
    gc.freeze()


def _freeze_survivors(phase: str, info: dict[str, int]) -> None:
    if phase == "stop" and info["generation"] == 2:
        gc.freeze()          # the lists merged: no walk, nothing garbage left in them now
        _frozen_since_refreeze[0] += 1


def freeze_after_full_collections() -> bool:
    """From now on, freeze what survives each full (generation 2) collection as it ends (a
    ``gc.callbacks`` hook; ``gc.freeze`` then costs nothing: every survivor is alive and the young
    generations are empty), so the next full collection walks only what was made since. Once per
    process; the console calls it at its start (``console.tui``), tests' apps do not (their
    dropped apps would stay frozen). Pair it with :func:`refreeze_if_grown`.

    Returns:
        ``True`` when this call installed the hook, ``False`` when it was installed already.
    """
    if _state["after_full"]:
        return False
    _state["after_full"] = True
    gc.callbacks.append(_freeze_survivors)
    return True


def refreeze_if_grown(quiet: bool) -> bool:
    """:func:`refreeze` when :func:`freeze_after_full_collections` is on and it froze the survivors
    of :data:`REFREEZE_AFTER` full collections since the last (re)freeze and ``quiet`` (no key for a
    while: the collection takes ~100-300 ms), or of :data:`REFREEZE_FORCED_AFTER` whatever the moment.

    Returns:
        ``True`` when it refroze.
    """
    if not _state["after_full"]:
        return False
    frozen = _frozen_since_refreeze[0]
    if frozen >= REFREEZE_FORCED_AFTER or (quiet and frozen >= REFREEZE_AFTER):
        refreeze()
        return True
    return False
