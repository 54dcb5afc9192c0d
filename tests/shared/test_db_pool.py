"""The connection pool holds exactly ``pool_size`` PostgreSQL connections, and heals.

A burst of callers above the pool waits for a pooled connection instead of
opening one more: such an extra connection would be closed again when given
back, so a gevent worker serving more requests at once than it has
connections paid a new PostgreSQL session per transaction (the benchmark saw
hundreds a second).
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from shared.db import Database
from shared.errors import database_unavailable
from tooling.testing import fresh_database, wait_for

POOL_SIZE = 2


def test_callers_beyond_the_pool_wait_for_a_pooled_connection_and_open_none(pg_server_url):
    database = Database(fresh_database(pg_server_url, "pool"), pool_size=POOL_SIZE)
    opened = []
    event.listen(database.engine.pool, "connect", lambda *_: opened.append(1))
    # One more caller than the pool holds, each keeping its connection until all
    # of them have one: only an extra connection could let that happen.
    all_connected = threading.Barrier(POOL_SIZE + 1, timeout=1.0)

    def transaction() -> bool:
        with database.begin() as db_session:
            db_session.execute(text("SELECT 1"))
            try:
                all_connected.wait()
                return True
            except threading.BrokenBarrierError:
                return False

    try:
        with ThreadPoolExecutor(POOL_SIZE + 1) as pool:
            together = list(pool.map(lambda _: transaction(), range(POOL_SIZE + 1)))
        # ... and many more transactions, from more threads than connections.
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: _one(database), range(200)))
    finally:
        database.dispose()

    assert not any(together), "more callers than pooled connections held one at once"
    assert len(opened) == POOL_SIZE


def _one(database: Database) -> None:
    with database.begin() as db_session:
        db_session.execute(text("SELECT 1"))


# -- a pool that heals: connections the server ended, and read-only servers -----------


def _backends(admin, database_name: str) -> int:
    with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        return conn.execute(
            text("SELECT count(*) FROM pg_stat_activity WHERE datname = :name AND pid <> pg_backend_pid()"),
            {"name": database_name},
        ).scalar_one()


def _terminate_all(admin, database_name: str) -> None:
    """pg_terminate_backend on every session of the database, and wait until they are gone."""
    with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(
            text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :name"
                 " AND pid <> pg_backend_pid()"),
            {"name": database_name},
        )
    wait_for(lambda: not _backends(admin, database_name), timeout=10, what="the terminated sessions ended", poll=0.01)


@pytest.fixture
def healing(pg_server_url):
    """A database, a Database on it with every pooled connection opened, and an admin engine."""
    url = fresh_database(pg_server_url, "heal")
    database = Database(url, pool_size=POOL_SIZE)
    admin = create_engine(pg_server_url, poolclass=NullPool)
    with database.begin() as db_session:
        db_session.execute(text("CREATE TABLE t (x int)"))
    _fill(database)
    yield database, admin, make_url(url).database
    database.dispose()
    admin.dispose()


def _fill(database: Database) -> None:
    """Every pooled connection opened and back in the pool."""
    barrier = threading.Barrier(POOL_SIZE)

    def hold() -> None:
        with database.begin() as db_session:
            db_session.execute(text("SELECT 1"))
            barrier.wait(timeout=10)

    with ThreadPoolExecutor(POOL_SIZE) as pool:
        list(pool.map(lambda _: hold(), range(POOL_SIZE)))


def test_connections_the_server_ended_while_pooled_are_never_handed_out(healing):
    database, admin, name = healing
    _terminate_all(admin, name)

    for n in range(2 * POOL_SIZE):
        with database.begin() as db_session:  # no error: each runs on a fresh connection
            db_session.execute(text("INSERT INTO t VALUES (:n)"), {"n": n})

    with database.begin() as db_session:
        assert db_session.execute(text("SELECT count(*) FROM t")).scalar_one() == 2 * POOL_SIZE


def test_a_read_only_server_is_unavailable_and_its_connections_are_discarded(healing):
    database, admin, name = healing
    with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'))
    _terminate_all(admin, name)  # sessions start read-only from now on, as on a standby

    with pytest.raises(DBAPIError) as failure, database.begin() as db_session:
        db_session.execute(text("INSERT INTO t VALUES (1)"))

    assert failure.value.orig.pgcode == "25006"
    assert database_unavailable(failure.value)  # a 503 with Retry-After, never a 500
    assert failure.value.connection_invalidated
    with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f'ALTER DATABASE "{name}" RESET default_transaction_read_only'))
    for n in range(2 * POOL_SIZE):  # the read-only connections were discarded: every write succeeds
        with database.begin() as db_session:
            db_session.execute(text("INSERT INTO t VALUES (:n)"), {"n": n})
