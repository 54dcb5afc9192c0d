"""The lease that makes one reconciler the one running the periodic passes, on a real PostgreSQL.

Each test uses a lease name of its own, so tests sharing the database never meet. Time is driven,
not slept through: a process's own clock is a controllable one, and the database's passing of time
is the lease row's expiry moved by hand.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest
from sqlalchemy import create_engine, text

from platform_svc.operations.leadership import Leadership
from platform_svc.reconciler.periodic import Periodic, run_periodically
from shared.db import Database
from tests.helpers import ManualClock
from tooling.testing import wait_for


@pytest.fixture
def database(platform_db_url):
    database = Database(platform_db_url, pool_size=3)
    yield database
    database.dispose()


@pytest.fixture
def lease_name():
    return f"test-{uuid.uuid4().hex[:8]}"


def expire(engine, name: str) -> None:
    """The database's time passes the lease's expiry."""
    with engine.begin() as conn:
        conn.execute(text("UPDATE leases SET expires_at = now() - interval '1 second' WHERE name = :name"), {"name": name})


def renewals(engine, name: str, count: int, timeout: float = 10) -> None:
    """Wait until the lease's expiry has moved ``count`` times (its holder renewed it)."""
    seen: set = set()

    def renewed() -> bool:
        with engine.connect() as conn:
            seen.add(conn.execute(text("SELECT expires_at FROM leases WHERE name = :name"), {"name": name}).scalar())
        return len(seen) > count

    wait_for(renewed, timeout=timeout, poll=0.02, what=lambda: f"{len(seen)} renewals seen, {count} awaited")


def keep_and_run(leader: Leadership, duties: list, stop: threading.Event) -> threading.Thread:
    """What the manager starts: the lease kept beside the passes, given back once both ended."""

    def both() -> None:
        keeper = threading.Thread(target=leader.keep, args=(stop,), daemon=True)
        keeper.start()
        try:
            run_periodically(leader, duties, stop)
        finally:
            keeper.join(timeout=10)
            leader.release()

    runner = threading.Thread(target=both, daemon=True)
    runner.start()
    return runner


def expires_in(engine, name: str) -> float:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT extract(epoch FROM expires_at - now()) FROM leases WHERE name = :name"), {"name": name}
        ).scalar_one()


def test_one_holder_at_a_time_and_a_given_back_lease_is_taken_at_once(database, lease_name):
    first, second = (Leadership(database, ttl=30, name=lease_name) for _ in range(2))

    first.renew()
    second.renew()
    assert (first.holding(), second.holding()) == (True, False)
    assert 29 < expires_in(database.engine, lease_name) <= 30  # set from the database's now()

    first.renew()  # its own lease: renewed
    second.renew()
    assert (first.holding(), second.holding()) == (True, False)

    first.release()
    second.renew()
    assert (first.holding(), second.holding()) == (False, True)


def test_an_expired_lease_is_taken_by_another_and_its_old_holder_knows_it_lost_it(database, lease_name):
    clock = ManualClock()
    first, second = (Leadership(database, ttl=30, name=lease_name, clock=clock) for _ in range(2))
    first.renew()
    clock.step(29.9)
    assert first.holding()

    clock.step(0.2)  # past the lease's time by its own clock: nobody renewed it meanwhile
    assert not first.holding()  # its own clock says so, before anyone takes it
    second.renew()
    assert not second.holding()  # the database's expiry is still ahead: nobody may take it yet
    expire(database.engine, lease_name)
    second.renew()
    first.renew()
    assert (first.holding(), second.holding()) == (False, True)


def test_the_leader_renews_while_a_long_pass_runs_and_gives_the_lease_back_when_stopped(database, lease_name):
    leader = Leadership(database, ttl=1.0, name=lease_name)
    other = Leadership(database, ttl=1.0, name=lease_name)
    stop = threading.Event()
    seen: list[tuple[bool, bool]] = []
    started = threading.Event()

    def long_pass(until) -> str:
        started.set()
        while not until.is_set():
            other.renew()
            seen.append((leader.holding(), other.holding()))
            stop.wait(0.05)
        return "long pass done"

    runner = keep_and_run(leader, [Periodic("long", 0.01, long_pass)], stop)
    assert started.wait(10)
    renewals(database.engine, lease_name, 6)  # the pass runs two leases long (renewed every third)
    stop.set()
    runner.join(timeout=10)

    assert not runner.is_alive()
    assert len(seen) > 10 and set(seen) == {(True, False)}  # the leader held it all along; the other never took it
    other.renew()
    assert other.holding()  # given back on stop: taken at once, not after the lease ran out


def test_a_leader_that_cannot_renew_stops_its_pass_before_the_lease_could_run_out(database, lease_name, caplog):
    leader = Leadership(database, ttl=1.0, name=lease_name)
    stop = threading.Event()
    passes: list[tuple[float, float]] = []  # (started, stopped) of each pass, time.monotonic()

    def endless_pass(until) -> str:
        started = time.monotonic()
        wait_for(until.is_set, timeout=60, poll=0.02, what="the pass told to stop")
        passes.append((started, time.monotonic()))
        return "pass done"

    blocker = create_engine(database.engine.url)
    try:
        with caplog.at_level(logging.INFO, logger="platform_svc.reconciler"):
            runner = keep_and_run(leader, [Periodic("endless", 0.01, endless_pass)], stop)
            wait_for(leader.holding, timeout=10, poll=0.02, what="the lease taken")
            # The database stops answering the renewals: another transaction holds the lease's row.
            with blocker.begin() as conn:
                conn.execute(text("SELECT 1 FROM leases WHERE name = :name FOR UPDATE"), {"name": lease_name})
                blocked_at = time.monotonic()
                wait_for(lambda: passes, timeout=10, poll=0.02, what="the pass stopped")
                assert not leader.holding()
                # It stopped within the lease (renewed at most a third of it before the row was locked).
                assert passes[0][1] - blocked_at < leader.ttl
            stop.set()
            runner.join(timeout=10)
    finally:
        stop.set()
        blocker.dispose()

    assert "endless pass stopped: the lease could not be renewed in time" in caplog.text


def test_a_lease_given_back_says_when_another_reconciler_takes_over_not_that_one_does(database, lease_name, caplog):
    """A lone reconciler stopping cleanly cannot know whether another runs: its last line says what
    happens if one does, and when (within a third of the lease), never that one takes over at once."""
    alone = Leadership(database, ttl=15, name=lease_name)
    alone.renew()

    with caplog.at_level(logging.INFO, logger="platform_svc.operations.leadership"):
        alone.release()

    assert caplog.messages[-1] == (
        "periodic passes: the lease is given back; a reconciler still running takes the passes over within 5 s"
        " (a third of the lease)"
    )
