"""Database engine, sessions and transactions.

Services receive a session as the keyword argument ``db_session`` and never
commit. Each transaction has one owner, which opens and ends it in a single
``with`` block: a view (``with transaction() as db_session:``), the reconciler,
or a CLI command (``with database.sessionmaker.begin() as db_session:``). The
block commits when it ends normally and rolls back when it raises. A view
commits before it returns, so a failed commit becomes a 500 rather than a 201
for a row that was never stored, and a view that answers an error after
writing (a DELETE of an unknown ID records a tombstone, then answers 404)
still keeps what it wrote.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from flask import Flask, current_app
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker


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

    def __init__(self, url: str, *, pool_size: int = 5, max_overflow: int = 10) -> None:
        self.engine: Engine = create_engine(
            url,
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_pre_ping=True,
            # A restarted PostgreSQL leaves dead pooled connections; recycle them
            # rather than fail the first request after the restart.
            pool_recycle=1800,
        )
        self.sessionmaker = sessionmaker(self.engine, expire_on_commit=False)

    def init_app(self, app: Flask) -> None:
        app.extensions["database"] = self

    def dispose(self) -> None:
        self.engine.dispose()


@contextmanager
def transaction() -> Iterator[Session]:
    """One transaction on the current app's database, committed at the end of the block."""
    with current_app.extensions["database"].sessionmaker.begin() as db_session:
        yield db_session
