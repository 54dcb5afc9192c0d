"""Database engine, connections and transactions.

Services receive the transaction's connection as the keyword argument
``db_session`` and never commit. Each transaction has one owner, which opens
and ends it in a single ``with`` block: a view (``with transaction() as
db_session:``), the pusher, or a CLI command (``with database.begin() as
db_session:``). The block commits when it ends normally and rolls back when
it raises. The services speak SQLAlchemy Core (statements, not the ORM unit
of work), so a Core connection is all they need; the few hot statements run on
that connection's own cursor (:mod:`shared.prebuilt`). A view commits before it
returns, so a failed commit becomes a 503 rather than a 201 for a row that
was never stored, and a view that answers an error after writing (a DELETE of
an unknown ID records a tombstone, then answers 404) still keeps what it wrote.
"""
from __future__ import annotations

import _socket  # the C module: gevent's patched socket would wait where this must not
import functools
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from flask import Flask, current_app, g, has_request_context
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, DisconnectionError

from shared import config, deadline
from shared.errors import connection_unusable, database_unavailable, describe_database_error

T = TypeVar("T")
log = logging.getLogger(__name__)

# Constraint names both services' models use, so migrations name them stably.
NAMING_CONVENTION = {
    "pk": "pk_%(table_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
}


class Database:
    """An engine and its session factory, attachable to a Flask app.

    ``connect_wait``: how long a request waits for a database that cannot take it yet
    (``DATABASE_WAIT_SECONDS``; 0: a 503 at once): a pooler restarting, or a database between
    two primaries, costs the request that much time before a 503 instead of an immediate one.
    What is tried again is only ever what cannot have lasted: a new connection it refused, and
    a view that has not tried to commit anything (:meth:`through_failover`).

    ``timeout``: the longest any one wait on the database may take (``DATABASE_TIMEOUT_SECONDS``,
    :data:`shared.deadline.DEFAULT_SECONDS` by default): a connect, a statement, a commit, the wait
    for a pooled connection. A database that hangs costs a request about twice that, then a 503
    (:mod:`shared.deadline`). The server is told a little less for a statement and half of it for a
    lock (:func:`_server_timeouts`), so that a query that is merely slow ends cleanly there first.
    """

    def __init__(
        self, url: str, *, pool_size: int = 5, connect_wait: float = 0.0, timeout: float | None = None,
    ) -> None:
        self.connect_wait = connect_wait
        self.timeout = config.seconds("DATABASE_TIMEOUT_SECONDS", deadline.DEFAULT_SECONDS) if timeout is None else timeout
        deadline.install()
        self.engine: Engine = create_engine(
            url,
            pool_size=pool_size,
            pool_timeout=self.timeout,
            connect_args={"connection_factory": deadline.bounded_connection(self.timeout)},
            # Exactly ``pool_size`` connections, kept open; a caller beyond them
            # waits for one (at most ``timeout``, then a 503). Overflow connections
            # would be closed when given back, so any burst above the pool
            # (16 requests in flight on a gevent worker with 8 connections) paid
            # a new PostgreSQL session per transaction: hundreds a second.
            max_overflow=0,
            # No pre-ping: it costs a round trip on every checkout, a third of a
            # create's wall time under load. Instead a checkout looks at the
            # socket without a round trip (_closed_by_server): a connection whose
            # server ended it while it sat in the pool (a restart, a failover,
            # pg_terminate_backend) is discarded there and a fresh one is made, so
            # the transaction runs on that. A connection that dies between its
            # checkout and its first statement still fails that request (a 503
            # with Retry-After, which every caller may retry: each call is
            # idempotent), and SQLAlchemy then discards the whole stale pool.
            pool_recycle=1800,
            # Errors and logs show the statement but never its values (names,
            # Idempotency-Keys, anything a client sent).
            hide_parameters=True,
        )

        if connect_wait > 0:
            event.listen(self.engine, "do_connect", functools.partial(_connect_waiting, connect_wait))
            event.listen(self.engine, "commit", _count_commit)
        event.listen(self.engine, "connect", functools.partial(_server_timeouts, self.timeout))
        event.listen(self.engine, "checkout", _discard_if_closed_by_server)
        event.listen(self.engine, "handle_error", _discard_if_unusable)

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A connection in a transaction, committed when the block ends normally. A database error
        raised by the commit itself says so (``during_commit``): it may have been committed."""
        committing = False
        try:
            with self.engine.begin() as connection:
                yield connection
                committing = True
        except DBAPIError as error:
            error.during_commit = committing  # type: ignore[attr-defined]
            raise

    def through_failover(self, call: Callable[[], T]) -> T:
        """``call()`` (a view), made again while the database cannot take it, for up to
        ``connect_wait`` seconds: a failover (PgBouncer finds no server, a node still read-only or
        starting up, a session cut), or a database that hangs (each attempt then ends at the
        ``timeout``, on a new connection: the view goes on within a moment of the database's
        return, or of a failover away from it).

        Safe because only a commit makes anything of a transaction last: ``call`` is made again
        only while it has not tried to commit anything (a commit whose answer was lost may have
        happened), and never for an error raised by a commit, its own or a shared flush's."""
        if self.connect_wait <= 0:
            return call()
        pauses = _pauses(time.monotonic() + self.connect_wait)
        while True:
            commits = _commits()
            try:
                return call()
            except DBAPIError as error:
                if not database_unavailable(error) or getattr(error, "during_commit", False) or _commits() != commits:
                    raise
                pause = next(pauses, None)
                if pause is None:
                    raise
                log.info("database unavailable (%s): the request waits for it", describe_database_error(error))
                time.sleep(pause)

    def init_app(self, app: Flask) -> None:
        app.extensions["database"] = self

    def dispose(self) -> None:
        self.engine.dispose()


@contextmanager
def transaction() -> Iterator[Connection]:
    """One transaction on the current app's database, committed at the end of the block."""
    with current_app.extensions["database"].begin() as db_session:
        yield db_session


CONNECT_PAUSES = (0.1, 0.2, 0.5, 1.0)  # between attempts, the last repeated


def _pauses(deadline: float) -> Iterator[float]:
    """The pauses between attempts (:data:`CONNECT_PAUSES`) while the next one still ends before
    ``deadline`` (a time.monotonic() value): the wait is over when they are."""
    for attempt in itertools.count():
        pause = CONNECT_PAUSES[min(attempt, len(CONNECT_PAUSES) - 1)]
        if time.monotonic() + pause > deadline:
            return
        yield pause


def _connect_waiting(wait: float, dialect: Any, connection_record: Any, cargs: Any, cparams: Any) -> Any:
    """A new DBAPI connection, tried again while the server refuses it, for up to ``wait`` seconds
    (SQLAlchemy's ``do_connect``). The last refusal is raised past that (a 503 with Retry-After)."""
    pauses = _pauses(time.monotonic() + wait)
    while True:
        try:
            return dialect.connect(*cargs, **cparams)
        except dialect.loaded_dbapi.OperationalError:  # refused, or accepted and never answered (a hang)
            pause = next(pauses, None)
            if pause is None:
                raise
            time.sleep(pause)  # a greenlet's wait under gevent: the worker serves the others meanwhile


def _server_timeouts(seconds: float, dbapi_connection: Any, connection_record: Any) -> None:
    """A new connection's session: a statement may run for a little less than the client waits,
    and wait for a lock half as long, so that a merely slow one ends cleanly on the server (57014,
    a 503) before the client gives up on the connection.

    Session settings, not startup parameters: PgBouncer (1.18, Debian 12's) refuses an ``options``
    startup parameter, while a SET passes through it; in transaction mode the setting stays with
    the server connection it ran on, which every client of the pool sets alike
    (docs/decisions/0021)."""
    statement_ms, lock_ms = max(1, int(seconds * 900)), max(1, int(seconds * 500))
    autocommit = dbapi_connection.autocommit
    dbapi_connection.autocommit = True
    try:
        with dbapi_connection.cursor() as cursor:
            cursor.execute(f"SET statement_timeout = {statement_ms}; SET lock_timeout = {lock_ms}")
    finally:
        dbapi_connection.autocommit = autocommit


def _count_commit(connection: Any) -> None:
    """A commit is about to be sent: the request's view may not be made again (:meth:`Database.through_failover`)."""
    if has_request_context():
        g.database_commits = _commits() + 1


def _commits() -> int:
    """The commits this request has sent so far (0 outside a request: a command counts none)."""
    return g.get("database_commits", 0) if has_request_context() else 0


def _closed_by_server(dbapi_connection: Any) -> bool:
    """Whether the server ended this idle connection: its socket has something to read.

    An idle connection in the pool is owed nothing by PostgreSQL (no LISTEN
    is used anywhere), so anything readable is its goodbye: an error (57P01
    when terminated, 57P03 ...) or the end of the stream. One non-blocking
    ``recv(MSG_PEEK)`` on the socket: 5-18 µs per checkout, where a pre-ping's
    round trip costs 180-280 µs on loopback (docs/operations.md).
    """
    if dbapi_connection.closed:
        return True
    try:
        probe = _socket.socket(fileno=dbapi_connection.fileno())  # borrowed: detached, never closed, below
    except OSError:
        return True
    try:
        probe.recv(1, _socket.MSG_PEEK | _socket.MSG_DONTWAIT)
        return True  # a message, or b"": the end of the stream
    except BlockingIOError:
        return False  # nothing to read: alive as far as anything but a round trip can tell
    except OSError:
        return True
    finally:
        probe.detach()


def _discard_if_closed_by_server(dbapi_connection: Any, connection_record: Any, connection_proxy: Any) -> None:
    """Pool checkout: a connection its server ended is discarded, and the pool hands out
    another (a fresh one when none is left): no transaction ever starts on it."""
    if _closed_by_server(dbapi_connection):
        raise DisconnectionError("the server ended this pooled connection while it was idle")


def _discard_if_unusable(context: Any) -> None:
    """A statement failed: if its connection is of no further use (a read-only server, a
    shutdown, a failed connection; see :func:`shared.errors.connection_unusable`), it is
    invalidated, as SQLAlchemy does for the disconnects it recognises itself, so it is closed
    instead of going back to the pool, and the connections pooled before it are replaced too."""
    if context.original_exception is not None and connection_unusable(context.original_exception):
        context.is_disconnect = True
        _close_inside_a_transaction(context)


def _close_inside_a_transaction(context: Any) -> None:
    """Leave an unusable connection that failed outside a transaction (an autocommitted statement)
    inside one, so that closing it ends its server session behind a pooler too.

    PgBouncer in transaction mode hands a server connection back to its pool when its client
    leaves it idle, read-only session and all, and drops it when the client leaves it in the
    middle of a transaction. A statement failing inside our transaction leaves it there already;
    an autocommitted one (the lease renewals of :mod:`platform_svc.operations.leadership`) does
    not, and its read-only server connection would go on to fail every later statement that
    PgBouncer hands it to, however many client connections were discarded."""
    connection = context.connection
    dbapi_connection = getattr(getattr(connection, "connection", None), "dbapi_connection", None)
    if dbapi_connection is None or dbapi_connection.closed or not dbapi_connection.autocommit:
        return
    try:
        dbapi_connection.autocommit = False
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SELECT 1")  # psycopg2 opens the transaction (BEGIN) before it
    except Exception:  # noqa: BLE001 - it is being discarded: whatever it says now changes nothing
        pass
