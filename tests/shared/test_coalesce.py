"""shared.coalesce: one flush at a time, callers arriving meanwhile share the next,
a lone caller flushes at once, and a flush's failure is its own callers' only.

Real threads; a flush that waits on an event holds the first flush open while
the others queue (what the database's round trip does in a worker)."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from shared.coalesce import Coalescer
from tooling.testing import wait_for


class Flushes:
    """A flush function that records each batch and can be held open until released."""

    def __init__(self) -> None:
        self.batches: list[list] = []
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Event()
        self.fail_with: dict[int, BaseException] = {}  # batch number -> what that flush raises

    def __call__(self, items):
        self.batches.append(list(items))
        self.started.set()
        self.release.wait(10)
        if len(self.batches) - 1 in self.fail_with:
            raise self.fail_with[len(self.batches) - 1]
        return [item * 10 if item >= 0 else ValueError(f"item {item}") for item in items]


def queued(coalescer, count):
    wait_for(lambda: len(coalescer._queue) >= count, timeout=10, what="callers queued", poll=0.001)


def held_then_released(coalescer, flushes, first, then, pool):
    """``first`` flushes alone and is held; ``then`` queue behind it; then all are released."""
    flushes.release.clear()
    head = pool.submit(coalescer.submit, first)
    assert flushes.started.wait(10)
    rest = [pool.submit(coalescer.submit, item) for item in then]
    queued(coalescer, len(then))
    flushes.release.set()
    return head, rest


def test_a_lone_caller_flushes_at_once_alone():
    flushes = Flushes()
    coalescer = Coalescer(flushes)

    assert [coalescer.submit(n) for n in range(3)] == [0, 10, 20]
    assert flushes.batches == [[0], [1], [2]]


def test_callers_arriving_during_a_flush_share_the_next_in_their_order():
    flushes = Flushes()
    coalescer = Coalescer(flushes)
    with ThreadPoolExecutor(8) as pool:
        head, rest = held_then_released(coalescer, flushes, 1, [2, 3, 4, 5], pool)
        assert head.result(10) == 10
        assert sorted(f.result(10) for f in rest) == [20, 30, 40, 50]
    assert len(flushes.batches) == 2 and sorted(flushes.batches[1]) == [2, 3, 4, 5]
    assert (coalescer.flushes, coalescer.items) == (2, 5)


def test_a_flush_holds_at_most_max_items_and_max_bytes():
    flushes = Flushes()
    coalescer = Coalescer(flushes, max_items=3, max_bytes=25)
    with ThreadPoolExecutor(8) as pool:
        flushes.release.clear()
        head = pool.submit(coalescer.submit, 0, 10)
        assert flushes.started.wait(10)
        rest = [pool.submit(coalescer.submit, n, 10) for n in range(1, 6)]
        queued(coalescer, 5)
        flushes.release.set()
        assert [f.result(10) for f in [head, *rest]] == [0, 10, 20, 30, 40, 50]
    assert [len(batch) for batch in flushes.batches] == [1, 2, 2, 1]  # 25 bytes: two items of 10


def test_a_failed_flush_fails_its_own_callers_only():
    flushes = Flushes()
    coalescer = Coalescer(flushes, max_items=2)
    flushes.fail_with[1] = ConnectionError("the database went away")
    with ThreadPoolExecutor(8) as pool:
        head, rest = held_then_released(coalescer, flushes, 1, [2, 3, 4], pool)
        assert head.result(10) == 10
        outcomes = []
        for future in rest:
            try:
                outcomes.append(future.result(10))
            except ConnectionError:
                outcomes.append("failed")
    failed_batch = flushes.batches[1]
    assert outcomes == ["failed" if item in failed_batch else item * 10 for item in (2, 3, 4)]
    assert coalescer.submit(7) == 70  # and it goes on


def test_an_item_answered_with_an_exception_raises_for_its_caller_alone():
    flushes = Flushes()
    coalescer = Coalescer(flushes)
    with ThreadPoolExecutor(8) as pool:
        head, rest = held_then_released(coalescer, flushes, 1, [2, -1, 3], pool)
        assert head.result(10) == 10
        assert rest[0].result(10) == 20 and rest[2].result(10) == 30
        with pytest.raises(ValueError, match="item -1"):
            rest[1].result(10)
