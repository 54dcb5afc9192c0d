"""The inline push's circuit breaker, and the reconciler's backoff policy."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from platform_svc.push.breaker import CircuitBreaker
from platform_svc.push.schedule import RetryPolicy


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def breaker(clock):
    return CircuitBreaker(failures_to_open=3, cool_down=5.0, probe_timeout=10.0, clock=clock)


def fail(breaker, times):
    for _ in range(times):
        assert breaker.allow()
        breaker.record(failed=True)


def test_it_stays_closed_below_the_threshold_and_a_success_resets_the_count(breaker):
    fail(breaker, 2)
    breaker.record(failed=False)
    fail(breaker, 2)

    assert breaker.allow() and not breaker.is_open


def test_it_opens_after_consecutive_failures_and_refuses_at_once(breaker):
    fail(breaker, 3)

    assert breaker.is_open
    assert [breaker.allow() for _ in range(100)] == [False] * 100


def test_after_the_cool_down_exactly_one_caller_probes(breaker, clock):
    fail(breaker, 3)
    clock.now += 5.0

    assert not breaker.is_open
    assert [breaker.allow() for _ in range(10)] == [True] + [False] * 9


def test_a_successful_probe_closes_it(breaker, clock):
    fail(breaker, 3)
    clock.now += 5.0
    assert breaker.allow()

    breaker.record(failed=False)

    assert all(breaker.allow() for _ in range(10))


def test_a_failed_probe_keeps_it_open_for_another_cool_down(breaker, clock):
    fail(breaker, 3)
    clock.now += 5.0
    assert breaker.allow()

    breaker.record(failed=True)

    assert breaker.is_open and not breaker.allow()
    clock.now += 4.9
    assert not breaker.allow()
    clock.now += 0.1
    assert breaker.allow()


def test_a_probe_that_never_reports_back_lets_another_probe_later(breaker, clock):
    fail(breaker, 3)
    clock.now += 5.0
    assert breaker.allow()  # its thread dies without recording

    clock.now += 9.9
    assert not breaker.allow()
    clock.now += 0.1
    assert breaker.allow()


def test_concurrent_callers_after_the_cool_down_get_one_probe_between_them(breaker, clock):
    fail(breaker, 3)
    clock.now += 5.0
    start = threading.Barrier(32)

    def call(_):
        start.wait()
        return breaker.allow()

    with ThreadPoolExecutor(32) as pool:
        allowed = list(pool.map(call, range(32)))

    assert allowed.count(True) == 1


def test_the_lock_is_not_held_while_the_caller_calls_downstream(breaker):
    """A slow call in one thread never delays another thread's decision."""
    assert breaker.allow()  # caller 1 now "calls downstream" for as long as it likes
    decided = []
    other = threading.Thread(target=lambda: decided.append(breaker.allow()))
    other.start()
    other.join(timeout=5)

    assert decided == [True]
    breaker.record(failed=False)


# Backoff --------------------------------------------------------------------------


@pytest.mark.parametrize("attempts", [1, 2, 5, 9, 20, 10_000])
def test_backoff_is_full_jitter_under_a_capped_exponential_ceiling(attempts):
    policy = RetryPolicy(base_delay=1.0, max_delay=300.0)
    ceiling = min(300.0, 2.0 ** min(attempts - 1, 60))

    delays = [policy.delay(attempts).total_seconds() for _ in range(2000)]

    assert all(0 <= delay <= ceiling for delay in delays)
    # Full jitter: spread over the whole range, not bunched near the ceiling.
    assert min(delays) < ceiling * 0.1 and max(delays) > ceiling * 0.9


def test_the_cap_is_the_max_backoff():
    policy = RetryPolicy(max_delay=0.2)

    assert max(policy.delay(50).total_seconds() for _ in range(1000)) <= 0.2
