"""The hot statements on the transaction's own psycopg2 cursor (docs/decisions/0024).

A lone create spent about a third of its database step in SQLAlchemy's execution layer (the
execution context, the result and its metadata), not in psycopg2 or the database: 139 of 380 µs
of CPU in a micro-benchmark. The few statements every write sends (a create's INSERT and its
replay's read, a push's recording) are run here on the transaction's DBAPI cursor instead,
compiled by SQLAlchemy once.
The transaction stays SQLAlchemy's (``Database.begin``, one owner), and so does every other query.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError, InvalidRequestError
from sqlalchemy.sql import Executable

from shared.errors import connection_unusable


def execute_prebuilt(db_session: Connection, statement: Any, params: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The rows of one prebuilt Core statement (a create's INSERT, a push's recording), run on the
    transaction's own psycopg2 cursor: the hot statements' path.

    SQLAlchemy still owns everything around it (the pool, the transaction, its commit or rollback)
    and compiled the statement, once; what is skipped is its execution layer (the execution context,
    the result and its metadata), a third of a lone create's database step (docs/decisions/0024).
    Only where SQLAlchemy would pass every value through unchanged (no column of the statement has
    a bind or result processor under psycopg2: see :func:`_compiled`); any other statement goes
    through ``db_session.execute`` as usual, and the rows are mappings either way.

    It behaves as ``db_session.execute`` does where a caller can tell: ``before_cursor_execute``
    listeners see the statement (the tests' statement counts), a database error is raised as
    SQLAlchemy raises it (a ``DBAPIError`` subclass, its parameters hidden as the engine hides them),
    and a connection it leaves unusable is invalidated, as SQLAlchemy's disconnect handling and
    ``shared.db`` do for their own statements.
    """
    compiled = _compiled(statement, db_session.dialect)
    if compiled is None:
        return [dict(row) for row in db_session.execute(statement, params).mappings()]
    values = compiled.construct_params(params)
    cursor = db_session.connection.cursor()
    try:
        db_session.dispatch.before_cursor_execute(db_session, cursor, compiled.sql, values, None, False)
        cursor.execute(compiled.sql, values)
        if cursor.description is None:  # (a statement without RETURNING)
            return []
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]
    except db_session.dialect.loaded_dbapi.Error as error:
        raise _as_raised_by_sqlalchemy(db_session, cursor, compiled.sql, values, error) from error
    finally:
        cursor.close()


class _Compiled:
    """A statement compiled once for a dialect: its SQL text, and how to make its parameters."""

    def __init__(self, compiled: Any) -> None:
        self.sql = str(compiled)
        self.construct_params = compiled.construct_params


def _compiled(statement: Any, dialect: Any) -> _Compiled | None:
    """``statement`` compiled for ``dialect``, once (None: it must go through SQLAlchemy's execution).

    A statement qualifies where SQLAlchemy would send and return every value as psycopg2 does: no
    type of its parameters or of the columns it returns has a bind or result processor (UUIDs, text,
    integers and times have none; the project's network type has), and no column has a default
    computed in Python (which SQLAlchemy's execution would compute). Kept with the statement itself,
    so that an ``id`` is never taken for another statement's."""
    key = (id(statement), dialect)
    kept = _compiled_statements.get(key)
    if kept is None or kept[0] is not statement:
        compiled = statement.compile(dialect=dialect)
        types = [bind.type for bind in compiled.binds.values()] + [column.type for column in statement.exported_columns]
        fits = not (compiled.insert_prefetch or compiled.update_prefetch) and not any(
            _processes(kind, dialect) for kind in types
        )
        kept = _compiled_statements[key] = (statement, _Compiled(compiled) if fits else None)
    return kept[1]


def _processes(kind: Any, dialect: Any) -> bool:
    """Whether SQLAlchemy changes values of type ``kind`` on their way to or from psycopg2 (a type
    that cannot say without the column's database type, such as a numeric, is taken to)."""
    implementation = kind.dialect_impl(dialect)
    try:
        return bool(implementation.bind_processor(dialect) or implementation.result_processor(dialect, None))
    except (TypeError, ValueError, LookupError, InvalidRequestError):
        return True


# The prebuilt statements (each built once, cached by its module) by id and dialect. A statement is
# kept alive here, so the few there are cost a few kilobytes and their ids stay theirs.
_compiled_statements: dict[tuple[int, Any], tuple[Executable, _Compiled | None]] = {}


def _as_raised_by_sqlalchemy(
    db_session: Connection, cursor: Any, sql: str, values: Mapping[str, Any], error: Any,
) -> Exception:
    """``error`` (psycopg2's) as SQLAlchemy's execution would raise it, its connection invalidated
    if it is of no further use (a disconnect, a stall, a read-only server)."""
    dialect = db_session.dialect
    unusable = dialect.is_disconnect(error, db_session.connection.dbapi_connection, cursor) or connection_unusable(error)
    raised = DBAPIError.instance(sql, values, error, dialect.loaded_dbapi.Error,
                                 hide_parameters=db_session.engine.hide_parameters, dialect=dialect,
                                 connection_invalidated=unusable)
    if unusable:
        db_session.invalidate(raised)
    return raised
