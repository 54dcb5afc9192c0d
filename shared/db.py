"""Database engine, connections and transactions.

Services receive the transaction's connection as the keyword argument
``db_session`` and never commit. Each transaction has one owner, which opens
and ends it in a single ``with`` block: a view (``with transaction() as
db_session:``), the pusher, or a CLI command (``with database.begin() as
db_session:``). The block commits when it ends normally and rolls back when
it raises. The services speak SQLAlchemy Core (statements, not the ORM unit
of work), so a Core connection is all they need. A view commits before it
returns, so a failed commit becomes a 503 rather than a 201 for a row that
was never stored, and a view that answers an error after writing (a DELETE of
an unknown ID records a tombstone, then answers 404) still keeps what it wrote.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from flask import Flask, current_app
from sqlalchemy import Connection, Engine, create_engine

# Constraint names both services' models use, so migrations name them stably.
NAMING_CONVENTION = {
    "pk": "pk_%(table_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
}


class Database:
    """An engine and its session factory, attachable to a Flask app."""

    def __init__(self, url: str, *, pool_size: int = 5) -> None:
        self.engine: Engine = create_engine(
            url,
            pool_size=pool_size,
            # Exactly ``pool_size`` connections, kept open; a caller beyond them
            # waits for one (at most 30 s, then a 503). Overflow connections
            # would be closed when given back, so any burst above the pool
            # (16 requests in flight on a gevent worker with 8 connections) paid
            # a new PostgreSQL session per transaction: hundreds a second.
            max_overflow=0,
            # No pre-ping: it costs a round trip on every checkout, a third of a
            # create's wall time under load. After a PostgreSQL restart the first
            # use of each dead connection fails (a 503 with Retry-After, which
            # every caller may retry: each call is idempotent), and SQLAlchemy then discards
            # the whole stale pool at once.
            pool_recycle=1800,
            # Errors and logs show the statement but never its values (names,
            # Idempotency-Keys, anything a client sent).
            hide_parameters=True,
        )

    def begin(self) -> AbstractContextManager[Connection]:
        """A connection in a transaction, committed when the block ends normally."""
        return self.engine.begin()

    def init_app(self, app: Flask) -> None:
        app.extensions["database"] = self

    def dispose(self) -> None:
        self.engine.dispose()


@contextmanager
def transaction() -> Iterator[Connection]:
    """One transaction on the current app's database, committed at the end of the block."""
    with current_app.extensions["database"].begin() as db_session:
        yield db_session
