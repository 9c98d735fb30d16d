"""The fleet's serving sampler schedule (console.flows.serving.SamplingQueue): a bounded number of
nodes at a time, the rows on screen first, no node more often than its period."""

from __future__ import annotations

from console.flows.serving import SamplingQueue


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_at_most_limit_at_once_whatever_the_fleet_size() -> None:
    queue = SamplingQueue(limit=8, period_s=5, clock=Clock())
    queue.set_nodes(f"n{i:05d}" for i in range(50_000))
    first = queue.take()
    assert first == [f"n{i:05d}" for i in range(8)]          # never sampled: in the fleet's order
    assert queue.take() == [] and queue.running == set(first)
    queue.finished("n00003")
    assert queue.take() == ["n00008"] and len(queue.running) == 8


def test_visible_rows_come_first_in_screen_order() -> None:
    queue = SamplingQueue(limit=3, period_s=5, clock=Clock())
    queue.set_nodes(f"n{i}" for i in range(100))
    queue.set_visible(["n50", "gone", "n52", "n51"])           # "gone" is no READY node
    assert queue.take() == ["n50", "n52", "n51"]
    for key in ("n50", "n52", "n51"):
        queue.finished(key)
    assert queue.take() == ["n0", "n1", "n2"]                  # the visible ones are not due yet


def test_no_node_more_often_than_its_period() -> None:
    clock = Clock()
    queue = SamplingQueue(limit=4, period_s=5, clock=clock)
    queue.set_nodes(["a", "b"])
    queue.set_visible(["a", "b"])
    assert queue.take() == ["a", "b"]
    queue.finished("a")
    queue.finished("b")
    clock.now += 4.9
    assert queue.take() == []                                  # free slots, but nothing due
    clock.now += 0.1
    assert queue.take() == ["a", "b"]


def test_the_longest_unsampled_goes_first_and_gone_nodes_are_forgotten() -> None:
    clock = Clock()
    queue = SamplingQueue(limit=1, period_s=5, clock=clock)
    queue.set_nodes(["a", "b", "c"])
    for expected in ("a", "b", "c"):
        assert queue.take() == [expected]
        queue.finished(expected)
        clock.now += 1
    clock.now += 10
    queue.set_nodes(["c", "b"])                                # a is no longer READY
    assert queue.take() == ["b"]                               # sampled before c
    queue.finished("b")
    assert queue.take() == ["c"]
    queue.finished("c")
    assert queue.take() == []
