"""Every wait on the database has a deadline, whatever the database does (docs/decisions/0021).

A database that hangs instead of failing (its host paused, its disk stalled, the postmaster
SIGSTOPped) answers nothing and closes nothing: the kernel still accepts the connection and
acknowledges what is sent, so neither TCP keepalives nor ``tcp_user_timeout`` see anything, and a
stopped server never fires its own ``statement_timeout``. Only the client can bound the wait.

psycopg2 lets one function do every wait (its *wait callback*: a connect, each statement, each
commit); :func:`wait` is that function for the connections of a :class:`shared.db.Database`
(:func:`bounded_connection`, their class, carries the bound). Past the bound it raises
:class:`DatabaseStalled`; psycopg2 then closes the connection (``closed == 2``), SQLAlchemy
invalidates it like any disconnect, and the request answers 503 with Retry-After. Under gevent
(``serve``) a wait yields to the other greenlets, as psycogreen's callback does; elsewhere (the
reconciler, the CLI) it is a plain ``select``.

Other engines in the same process (a test's own, Alembic's) keep psycopg2's unbounded waits.
Work that needs longer than the bound says so with a ``Database`` of its own bound.
"""
from __future__ import annotations

import select
import time
from typing import Any

import psycopg2
from psycopg2 import extensions

# The bound when nothing says otherwise (DATABASE_TIMEOUT_SECONDS): one connect, one statement, one
# commit, one wait for a pooled connection. A request pays at most about two of them (a pooled
# connection, then its first statement) before its 503: 4 s against a stall, inside the 5 s the
# design promises. A healthy round trip on this design's statements takes milliseconds.
DEFAULT_SECONDS = 2.0


class DatabaseStalled(psycopg2.OperationalError):
    """The database did not answer within the bound: the connection is closed, never reused."""


class BoundedConnection(extensions.connection):
    """A psycopg2 connection whose every wait :func:`wait` bounds by ``seconds`` (a subclass per bound)."""

    seconds: float = DEFAULT_SECONDS


def bounded_connection(seconds: float) -> type[BoundedConnection]:
    """The connection class (psycopg2's ``connection_factory``) for a bound of ``seconds``."""
    return type("BoundedConnection", (BoundedConnection,), {"seconds": seconds})


def bound_of(connection: Any) -> float | None:
    """The seconds one wait on ``connection`` may take (None: no bound, not a ``Database``'s)."""
    return connection.seconds if isinstance(connection, BoundedConnection) else None


def stalled(error: BaseException) -> bool:
    """Whether ``error`` (SQLAlchemy's, or psycopg2's) is a wait that ran out: the database hung,
    or every pooled connection was held for the whole bound."""
    from sqlalchemy.exc import TimeoutError as NoConnectionInTime

    return isinstance(error, (DatabaseStalled, NoConnectionInTime)) or isinstance(
        getattr(error, "orig", None), DatabaseStalled
    )


def wait(connection: Any) -> None:
    """psycopg2's wait callback: poll until the operation is done, each wait bounded (:func:`bound_of`).

    :raise DatabaseStalled: the database did not answer in time (the connection is closed by psycopg2).
    """
    seconds = bound_of(connection)
    deadline = None if seconds is None else time.monotonic() + seconds
    while True:
        state = connection.poll()
        if state == extensions.POLL_OK:
            return
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        if state == extensions.POLL_READ:
            ready = _wait_for(connection.fileno(), read=True, seconds=left)
        elif state == extensions.POLL_WRITE:
            ready = _wait_for(connection.fileno(), read=False, seconds=left)
        else:
            raise psycopg2.OperationalError(f"unexpected state from poll(): {state!r}")
        if not ready:
            raise DatabaseStalled(f"the database did not answer within {seconds:g} s")


def _select_wait(fd: int, *, read: bool, seconds: float | None) -> bool:
    readable, writable, _ = select.select([fd] if read else [], [] if read else [fd], [], seconds)
    return bool(readable or writable)


def _green_wait(fd: int, *, read: bool, seconds: float | None) -> bool:
    from gevent.socket import wait_read, wait_write

    try:
        (wait_read if read else wait_write)(fd, timeout=seconds, timeout_exc=_Expired)
    except _Expired:
        return False
    return True


class _Expired(Exception):
    pass


_wait_for = _select_wait


def install() -> None:
    """Make :func:`wait` psycopg2's wait callback in this process (gevent's waits where gevent has
    patched the standard library, as ``serve`` does). Idempotent."""
    global _wait_for
    try:
        from gevent import monkey

        green = monkey.is_module_patched("socket")
    except ImportError:
        green = False
    _wait_for = _green_wait if green else _select_wait
    extensions.set_wait_callback(wait)
