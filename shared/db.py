"""Database engine, sessions and the one owner of each request's transaction.

Services receive a session as a keyword argument and never commit. A web
request's transaction is begun lazily on first use and ended in exactly one
place, :meth:`TransactionalFlask.dispatch_request`: committed when the view
returns (whatever status it chose), rolled back when it raises. Committing
there, before the response is built, means a failed commit becomes a 500 rather
than a 201 for a row that was never stored. Jobs and CLI commands use
``with db.sessionmaker.begin() as session:``, the same rule in a ``with``.
"""
from __future__ import annotations

from flask import Flask, current_app, g
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker


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
        app.teardown_appcontext(_close_request_session)

    def dispose(self) -> None:
        self.engine.dispose()


def request_session() -> Session:
    """The current request's session, created on first use."""
    session = g.get("db_session")
    if session is None:
        session = g.db_session = current_app.extensions["database"].sessionmaker()
    return session


def _close_request_session(exc: BaseException | None) -> None:
    session = g.pop("db_session", None)
    if session is not None:
        session.close()


class TransactionalFlask(Flask):
    """A Flask app whose every request runs in one database transaction."""

    def dispatch_request(self):  # type: ignore[override]
        try:
            rv = super().dispatch_request()
        except BaseException:
            session = g.get("db_session")
            if session is not None:
                session.rollback()
            raise
        session = g.get("db_session")
        if session is not None:
            session.commit()
        return rv
