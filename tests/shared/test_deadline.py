"""Every wait on the database has a deadline (shared.deadline), proven on a real PostgreSQL that
hangs (SIGSTOP), not a mock: a hung server answers nothing and closes nothing. Each stall here
lasts real seconds, because its length is what the bound is measured against."""
from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text
from sqlalchemy import exc as sa_exc
from sqlalchemy.exc import OperationalError

from shared import deadline
from shared.db import Database
from shared.errors import database_unavailable
from tooling import embedded_pg
from tooling.testing import frozen_postgres, own_postgres


@pytest.fixture(scope="module")
def hung_pg():
    with own_postgres("pgd") as server:
        yield server


def test_a_statement_a_connect_and_a_pool_wait_on_a_hung_database_each_end_within_the_bound(hung_pg):
    database = Database(embedded_pg.admin_url(hung_pg), pool_size=1, timeout=0.5)
    try:
        with database.engine.connect() as conn:
            assert conn.execute(text("SELECT 1")).scalar() == 1
            with frozen_postgres(hung_pg):
                started = time.monotonic()
                with pytest.raises(OperationalError) as stalled:
                    conn.execute(text("SELECT 2"))
                assert time.monotonic() - started < 1.5
                assert isinstance(stalled.value.orig, deadline.DatabaseStalled) and database_unavailable(stalled.value)
        with frozen_postgres(hung_pg):
            started = time.monotonic()
            with pytest.raises(OperationalError), database.engine.connect() as conn:  # a new connection: no answer
                conn.execute(text("SELECT 3"))
            assert time.monotonic() - started < 1.5
        with database.engine.connect() as conn:  # thawed: a fresh connection, at once
            assert conn.execute(text("SELECT 4")).scalar() == 4
    finally:
        database.dispose()


def test_where_the_service_waits_through_a_failover_it_waits_through_a_hang_and_goes_on_after_it(hung_pg):
    """DATABASE_WAIT_SECONDS (run-ha's): a hung database is one that cannot take the request yet;
    each attempt still ends at the bound, on a new connection, so the view goes on within a moment
    of the thaw instead of waiting on a connection the hang left behind."""
    database = Database(embedded_pg.admin_url(hung_pg), pool_size=1, timeout=0.5, connect_wait=10)
    try:
        with database.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

        def view() -> int:
            with database.begin() as conn:
                return conn.execute(text("SELECT 5")).scalar()

        hung = threading.Event()

        def stall() -> None:
            with frozen_postgres(hung_pg):
                hung.set()
                time.sleep(1.5)  # real time: the hang's length is what the wait is measured against

        staller = threading.Thread(target=stall)
        staller.start()
        assert hung.wait(10)
        started = time.monotonic()
        assert database.through_failover(view) == 5
        waited = time.monotonic() - started
        staller.join()
        assert 1.0 <= waited < 1.5 + 0.5 + 1.0  # the hang's remaining 1.5 s at most, then one pause and one bound at most
    finally:
        database.dispose()


def test_the_server_is_told_a_little_less_for_a_statement_and_half_for_a_lock(hung_pg):
    database = Database(embedded_pg.admin_url(hung_pg), pool_size=1, timeout=2.0)
    try:
        with database.engine.connect() as conn:
            assert conn.execute(text("SHOW statement_timeout")).scalar() == "1800ms"
            assert conn.execute(text("SHOW lock_timeout")).scalar() == "1s"
            with pytest.raises(OperationalError) as cancelled:  # merely slow: ended by the server, cleanly
                conn.execute(text("SELECT pg_sleep(5)"))
            assert "statement timeout" in str(cancelled.value) and database_unavailable(cancelled.value)
    finally:
        database.dispose()


def test_a_databases_connections_carry_its_bound_and_other_engines_none():
    bounded = deadline.bounded_connection(600)  # work that is long by nature: a Database of its own bound
    assert deadline.bound_of(bounded.__new__(bounded)) == 600  # the class carries it: no server needed
    assert deadline.bound_of(object()) is None  # an engine of a test's own, or Alembic's


def test_a_wait_that_ran_out_is_told_from_a_refusal():
    assert deadline.stalled(deadline.DatabaseStalled("no answer"))
    assert deadline.stalled(OperationalError("SELECT 1", {}, deadline.DatabaseStalled("no answer")))
    assert deadline.stalled(sa_exc.TimeoutError("every pooled connection held"))
    assert not deadline.stalled(OperationalError("SELECT 1", {}, Exception("connection refused")))
