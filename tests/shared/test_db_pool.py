"""The connection pool holds exactly ``pool_size`` PostgreSQL connections.

A burst of callers above the pool waits for a pooled connection instead of
opening one more: such an extra connection would be closed again when given
back, so a gevent worker serving more requests at once than it has
connections paid a new PostgreSQL session per transaction (the benchmark saw
hundreds a second).
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import event, text

from shared.db import Database
from tooling.testing import fresh_database

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
