"""Group commit: requests in flight in one process share one flush.

A :class:`Coalescer` runs a ``flush(items) -> results`` function (one
statement and one commit, one HTTP call...) for several callers at once:

- A caller that finds no flush running becomes the *leader*: it flushes at
  once, with whatever is queued (itself first), up to ``max_items`` items and
  ``max_bytes`` bytes. A lone caller is never delayed: no sleep, no timer.
- Callers that arrive while a flush runs queue for the next one. When a flush
  ends, its leader hands every caller its own result and makes the first
  caller still queued the next leader, which flushes what has queued by then.
  ``flushes_at_once`` (1 unless said) lets that many flushes run side by side
  before callers queue: for a flush that can hang on the network for its
  whole budget, so that one stuck call does not hold every caller behind it.
- A flush that raises gives that exception to its own callers only; the
  next flush is tried as usual. A flush may also answer one item with an
  exception instance: that caller alone raises it. When ``alone_on(error)``
  says a shared flush's failure may be one item's doing (a value the
  database refuses, not the database gone), its items are flushed again one
  by one, in order, each answering or failing on its own.

Per process and per coalescer (one per app and kind of work), with the
``threading`` primitives: under the gevent worker (decision 0004) they are
gevent's, so the queue fills while the leader waits on the database or the
network; without concurrency (the tests' Flask client) every flush is a
batch of one. Results are computed in the leader's context (its app and
request), so ``flush`` must not log or count per item: each caller does that
with its own result, in its own request.
"""
from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

MAX_ITEMS = 100


class _Waiter:
    __slots__ = ("done", "error", "item", "leads", "result", "size", "woken")

    def __init__(self, item: Any, size: int) -> None:
        self.item = item
        self.size = size
        self.woken = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False  # result or error is set
        self.leads = False  # woken to flush the next batch


class Coalescer(Generic[Item, Result]):
    """One flush at a time; callers arriving meanwhile share the next one."""

    def __init__(
        self,
        flush: Callable[[Sequence[Item]], Sequence[Result]],
        *,
        max_items: int = MAX_ITEMS,
        max_bytes: int | None = None,
        alone_on: Callable[[BaseException], bool] = lambda error: False,
        flushes_at_once: int = 1,
    ) -> None:
        if max_items < 1 or flushes_at_once < 1:
            raise ValueError("max_items and flushes_at_once must be at least 1")
        self._flush = flush
        self._alone_on = alone_on
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._queue: deque[_Waiter] = deque()  # callers waiting for a flush (not its leaders)
        self.flushes_at_once = flushes_at_once
        self._running = 0  # flushes running; invariant: fewer than flushes_at_once => the queue is empty
        self.flushes = 0  # how many flushes ran, and how many items they held (for tests and logs)
        self.items = 0

    @property
    def queued(self) -> int:
        """Callers waiting for the next flush (not counting the leaders of the flushes running)."""
        return len(self._queue)

    def submit(self, item: Item, size: int = 0) -> Result:
        """``item``'s result from a flush it shares with the callers in flight.

        ``size`` counts against ``max_bytes`` (its encoded length, say).

        :raise: whatever the flush holding ``item`` raised.
        """
        waiter = _Waiter(item, size)
        with self._lock:
            leads = self._running < self.flushes_at_once
            if leads:
                self._running += 1
            else:
                self._queue.append(waiter)
        if not leads:
            try:
                waiter.woken.wait()
            except BaseException:  # killed while queued (a greenlet's timeout): never strand the queue
                self._abandon(waiter)
                raise
            leads = not waiter.done  # else made the next leader, taken off the queue
        if leads:
            self._lead(waiter)
        if waiter.error is not None:
            raise waiter.error
        if isinstance(waiter.result, BaseException):  # this item's own failure, in a flush that went on
            raise waiter.result
        return waiter.result

    def _lead(self, leader: _Waiter) -> None:
        """Flush this caller's item with those queued first, answer each, hand over."""
        batch = self._take(leader)
        try:
            try:
                results = self._checked(batch)
            except Exception as error:
                if len(batch) == 1 or not self._alone_on(error):
                    raise
                results = []
                for waiter in batch:
                    try:
                        results += self._checked([waiter])
                    except Exception as own:  # noqa: BLE001 (this item's caller raises it)
                        results.append(own)
            for waiter, result in zip(batch, results):
                waiter.result = result
        except BaseException as error:  # noqa: BLE001 (each caller of this flush raises it in its own request)
            for waiter in batch:
                waiter.error = error
        finally:
            self.flushes += 1
            self.items += len(batch)
            for waiter in batch:
                waiter.done = True
            with self._lock:
                self._hand_over()
            for waiter in batch[1:]:  # the leader is batch[0]: it is not waiting
                waiter.woken.set()

    def _checked(self, batch: list[_Waiter]) -> list[Any]:
        results = list(self._flush([waiter.item for waiter in batch]))
        if len(results) != len(batch):
            raise RuntimeError(f"a flush of {len(batch)} items gave {len(results)} results")
        return results

    def _hand_over(self) -> None:
        """(Under the lock.) Make the first queued caller the next leader, or end this flush's turn."""
        if not self._queue:
            self._running -= 1
            return
        successor = self._queue.popleft()
        successor.leads = True
        successor.woken.set()

    def _abandon(self, waiter: _Waiter) -> None:
        """A queued caller gave up: take it out of the queue, or pass the lead on if it had been given it."""
        with self._lock:
            if waiter in self._queue:
                self._queue.remove(waiter)
            elif waiter.leads and not waiter.done:
                self._hand_over()

    def _take(self, leader: _Waiter) -> list[_Waiter]:
        with self._lock:
            batch = [leader]
            size = leader.size
            while self._queue and len(batch) < self.max_items:
                following = self._queue[0]
                if self.max_bytes is not None and size + following.size > self.max_bytes:
                    break
                size += following.size
                batch.append(self._queue.popleft())
        return batch
