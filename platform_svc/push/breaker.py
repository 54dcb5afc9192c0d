"""A circuit breaker for the inline push, one per process.

When cluster_svc is down or frozen, every inline push waits out its timeouts
and retries (seconds) while holding a server thread, so public writes queue
behind each other and even reads wait for a free thread. After a few
consecutive failures the breaker *opens*: public writes are committed and
answered at once as ``pending`` (the reconciler pushes them later). After a
cool-down one request is let through as a probe; its success closes the
breaker, its failure keeps it open for another cool-down.

Why not pybreaker: its ``CircuitBreaker.call`` holds one lock across the
guarded call, so every inline push of a process would run one at a time, and
under gevent one slow push would block every greenlet reaching the breaker.
It also judges by exceptions, while a push judges by its classified answer.
Here the lock guards a few assignments only and is never held across a call,
which is correct under threads and under gevent (monkeypatched or not: no
switch can happen while it is held).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable


class CircuitBreaker:
    """``allow()`` before a call, ``record(failed)`` after it."""

    def __init__(
        self,
        *,
        failures_to_open: int = 3,
        cool_down: float = 5.0,
        probe_timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failures_to_open = failures_to_open
        self.cool_down = cool_down
        # A probe that never reports back (its thread died) must not keep the
        # breaker half-open for ever: after this, another request may probe.
        self.probe_timeout = probe_timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._opened_at: float | None = None  # None: closed
        self._probe_until = 0.0

    @property
    def is_open(self) -> bool:
        """Open and still cooling down: a call now would not be allowed (no side effect)."""
        with self._lock:
            return self._opened_at is not None and self._clock() < self._opened_at + self.cool_down

    def allow(self) -> bool:
        """May the caller call downstream now? While open, one caller per cool-down gets True: the probe."""
        with self._lock:
            if self._opened_at is None:
                return True
            now = self._clock()
            if now < self._opened_at + self.cool_down or now < self._probe_until:
                return False
            self._probe_until = now + self.probe_timeout
            return True

    def record(self, failed: bool) -> None:
        """The outcome of an allowed call: ``failed`` when downstream could not serve it."""
        with self._lock:
            if not failed:
                self._failures, self._opened_at, self._probe_until = 0, None, 0.0
                return
            self._failures += 1
            if self._opened_at is not None or self._failures >= self.failures_to_open:
                # Opens, or a failed probe keeps it open for another cool-down.
                self._opened_at, self._probe_until = self._clock(), 0.0
