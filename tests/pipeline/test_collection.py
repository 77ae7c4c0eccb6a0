"""The cyclic collector is held back while a cycle runs, and what the cycle leaves in reference
cycles is freed before it returns."""
from __future__ import annotations

import gc
import weakref

import pytest

from publisher.pipeline import cycle
from publisher.pipeline.collection import collected_after


class Node:
    def __init__(self) -> None:
        self.me = self


def test_the_collector_is_held_back_inside_and_its_cycles_are_freed_after():
    seen: dict[str, bool] = {}
    freed: list[str] = []

    @collected_after
    def work() -> int:
        seen["enabled"] = gc.isenabled()
        node = Node()
        weakref.finalize(node, freed.append, "node")
        del node
        return 7

    assert work() == 7
    assert seen == {"enabled": False}
    assert gc.isenabled()
    assert freed == ["node"]


def test_a_failing_work_gives_the_collector_back():
    @collected_after
    def work() -> None:
        raise RuntimeError("a stage failed")

    with pytest.raises(RuntimeError, match="a stage failed"):
        work()
    assert gc.isenabled()


def test_a_caller_that_holds_the_collector_back_keeps_it_held():
    gc.disable()
    try:
        collected_after(lambda: None)()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_run_cycle_plans_with_the_collector_held_back(monkeypatch):
    seen: list[bool] = []

    def plan_cycle(config, engine, reader):
        seen.append(gc.isenabled())
        return None  # nothing to publish: the cycle ends here

    monkeypatch.setattr(cycle, "follow_shapes", lambda config, engine: ())
    monkeypatch.setattr(cycle, "plan_cycle", plan_cycle)
    result = cycle.run_cycle(None, None, None)
    assert seen == [False]
    assert gc.isenabled()
    assert result.events == 0
