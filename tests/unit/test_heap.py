"""console.heap: the long-lived heap is frozen out of the collector's reach once per process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


#: What the scripts share: a cycle made on demand (an object that refers to itself).
CYCLES = textwrap.dedent("""
    class Node:
        pass

    def cycle():
        node = Node(); node.me = node
        return node
""")


def run(script: str) -> subprocess.CompletedProcess[str]:
    """``script`` (after :data:`CYCLES`) in a fresh interpreter: the test session's own apps may have frozen
    this one's heap already."""
    return subprocess.run([sys.executable, "-c", CYCLES + script], cwd=ROOT, capture_output=True, text=True,
                          check=True)


def test_objects_alive_at_the_freeze_leave_the_collected_generations_once_per_process() -> None:
    # a fresh interpreter: the test session's own apps may have frozen this one's heap already
    script = textwrap.dedent("""
        import gc
        from console.heap import freeze_long_lived

        kept = [[i] for i in range(1000)]              # tracked containers, alive at the freeze
        cycle = []; cycle.append(cycle); del cycle     # garbage: collected first, not frozen
        assert freeze_long_lived() is True
        frozen = gc.get_freeze_count()
        alive = {id(o) for o in gc.get_objects()}
        later = [[0]]
        assert freeze_long_lived() is False            # once per process
        print(frozen, sum(id(x) in alive for x in kept), id(later[0]) in {id(o) for o in gc.get_objects()},
              gc.get_freeze_count() == frozen)
    """)
    out = run(script)
    frozen, still_collected, later_collected, unchanged = out.stdout.split()
    assert int(frozen) >= 1000 and still_collected == "0"
    assert later_collected == "True" and unchanged == "True"


def test_a_refreeze_collects_what_was_frozen_and_dropped_and_freezes_what_is_alive() -> None:
    script = textwrap.dedent("""
        import gc, weakref
        from console.heap import refreeze

        view = cycle()                            # alive at the first refreeze: frozen with it
        first = refreeze()
        gone = weakref.ref(view); del view        # the view closes: its cycle is frozen garbage
        gc.collect()
        kept_while_frozen = gone() is not None
        later = cycle(); later_ref = weakref.ref(later); del later
        gc.collect()                              # made after the freeze: collected as usual
        refreeze()                                # the view's close: thawed, collected
        print(first > 0, kept_while_frozen, later_ref() is None, gone() is None, gc.get_freeze_count() > 0)
    """)
    out = run(script)
    assert out.stdout.split() == ["True", "True", "True", "True", "True"]


def test_freeze_new_freezes_what_is_alive_without_a_full_collection_and_refreeze_frees_it() -> None:
    """``freeze_new`` (a flood begins) runs no full collection: an old cycle already garbage stays
    (frozen) until the view's close refreezes; objects alive then leave the collected generations."""
    script = textwrap.dedent("""
        import gc, weakref
        from console.heap import freeze_new, refreeze

        old = cycle()
        gc.collect()                              # ``old`` is in the oldest generation now
        old_ref = weakref.ref(old); del old       # garbage a full collection would free
        full_before = gc.get_stats()[2]["collections"]
        view = [[i] for i in range(500)]
        freeze_new()
        count = gc.get_freeze_count()
        full_after = gc.get_stats()[2]["collections"]
        alive = {id(o) for o in gc.get_objects()}
        gc.collect()
        kept = old_ref() is not None              # frozen with the rest, not collected
        refreeze()                                # the close: thawed and collected
        print(full_after == full_before, count >= 500, sum(id(x) in alive for x in view) == 0, kept,
              old_ref() is None)
    """)
    out = run(script)
    assert out.stdout.split() == ["True", "True", "True", "True", "True"]


def test_survivors_of_a_full_collection_are_frozen_and_dead_cycles_freed_after_enough_of_them() -> None:
    """``freeze_after_full_collections``: what survives a full collection leaves the collected
    generations as it ends; a cycle frozen so and dropped stays until ``refreeze_if_grown`` refreezes,
    after REFREEZE_AFTER frozen collections at a quiet moment, after REFREEZE_FORCED_AFTER whatever the moment."""
    script = textwrap.dedent("""
        import gc, weakref
        from console import heap

        heap.refreeze()                                # the count starts here
        assert heap.freeze_after_full_collections() is True
        assert heap.freeze_after_full_collections() is False       # once per process
        survivor = cycle(); dead = cycle(); dead_ref = weakref.ref(dead); del dead
        gc.collect()
        frozen = id(survivor) not in {id(o) for o in gc.get_objects()} and dead_ref() is None
        kept = cycle(); kept_ref = weakref.ref(kept)
        gc.collect()                                   # frozen alive, then dropped: frozen garbage
        del kept
        gc.collect()
        leaked = kept_ref() is not None
        few = heap.refreeze_if_grown(quiet=True)       # 3 frozen collections: nothing yet
        for _ in range(heap.REFREEZE_AFTER):
            gc.collect()
        busy = heap.refreeze_if_grown(quiet=False)     # keys coming: waits
        after_busy = kept_ref() is not None
        quiet = heap.refreeze_if_grown(quiet=True)
        freed = kept_ref() is None
        again = heap.refreeze_if_grown(quiet=True)     # counted from the refreeze
        kept = cycle(); kept_ref = weakref.ref(kept); gc.collect(); del kept
        for _ in range(heap.REFREEZE_FORCED_AFTER):
            gc.collect()
        forced = heap.refreeze_if_grown(quiet=False)
        print(frozen, leaked, few, busy, after_busy, quiet, freed, again, forced, kept_ref() is None)
    """)
    out = run(script)
    assert out.stdout.split() == ["True", "True", "False", "False", "True", "True", "True", "False", "True", "True"]
