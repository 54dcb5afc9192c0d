"""A caller's journal of named operations: the Idempotency-Key of each is written to a file before
anything is sent, so an operation begun before the caller crashed is completed exactly once after.

The key-table designs this project replaced ask the *client* to store its key while the operation
is pending and send it on every retry. A key kept in memory dies with its process: the restart
either forgets the operation or does it again under a new key (a second object). With a journal::

    journal = Journal("orders.journal")          # one file the caller keeps (SQLite)
    api = PlatformClient(url, api_key=KEY, journal=journal)
    api.create("/v1/clusters", body, operation="provision-order-1234")
    ...                                          # the process is killed, and started again:
    api.resume()                                 # every begun, unanswered operation, sent again

The first call naming an operation writes its key (a new UUIDv7) with the request, committed,
before the request is sent; every later call naming it, in this process or another, sends the same
key, and so gets the same object. :meth:`Journal.answered` records the answer's status; what has
none (the process died first, or nothing answered within ``retry_for``) :meth:`~PlatformClient.resume`
sends again. The server keeps a key's object recoverable for as long as the object lives (and
then its ID horizon), so entries older than that are pruned (:meth:`Journal.prune`).

Several processes may share one file: every change is one SQLite transaction taken with
``BEGIN IMMEDIATE`` (a write lock on the file), and the file is in WAL mode, so readers never wait.
The standard library's ``sqlite3`` only.
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uuid6

PRUNE_AFTER = 30 * 24 * 3600.0  # seconds: the services' default ID horizon (ID_HORIZON_SECONDS)

SCHEMA = """
CREATE TABLE IF NOT EXISTS operations (
    name TEXT PRIMARY KEY,
    method TEXT NOT NULL,
    path TEXT NOT NULL,
    body TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    begun_at REAL NOT NULL,
    answered_at REAL,
    status INTEGER
)
"""


class OperationReused(ValueError):
    """An operation's name was given again with another request: a caller bug (the first stands)."""


@dataclass(frozen=True)
class Operation:
    """One journaled operation: the request, the key it is sent with, and its answer's status (None:
    none recorded yet)."""

    name: str
    method: str
    path: str
    body: Mapping[str, Any]
    idempotency_key: str
    status: int | None


class Journal:
    """Named operations and their keys, in one SQLite file (see the module)."""

    def __init__(self, path: str | Path, *, timeout: float = 30.0) -> None:
        self.path = Path(path)
        self._local = threading.local()  # a connection per thread: sqlite3's own rule
        self._timeout = timeout
        with self._transaction() as db:
            db.execute(SCHEMA)

    def begin(self, name: str, method: str, path: str, body: Mapping[str, Any]) -> Operation:
        """The operation ``name``: written now with a new key, committed before this returns (so before
        the request is sent), unless it was begun before, in any process: then as it was.

        :raise OperationReused: ``name`` was begun with another method, path or body.
        """
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        with self._transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO operations (name, method, path, body, idempotency_key, begun_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (name, method, path, text, str(uuid6.uuid7()), time.time()),
            )
            row = db.execute("SELECT * FROM operations WHERE name = ?", (name,)).fetchone()
        if (row["method"], row["path"], row["body"]) != (method, path, text):
            raise OperationReused(
                f"operation {name!r} was begun as {row['method']} {row['path']} with another body;"
                " a name stands for one request"
            )
        return _operation(row)

    def answered(self, name: str, status: int) -> None:
        """Record that ``name`` was answered (``status``): :meth:`unanswered` leaves it out from now on."""
        with self._transaction() as db:
            db.execute("UPDATE operations SET answered_at = ?, status = ? WHERE name = ?", (time.time(), status, name))

    def unanswered(self) -> list[Operation]:
        """Every operation begun and not answered yet, oldest first."""
        with self._transaction() as db:
            rows = db.execute("SELECT * FROM operations WHERE answered_at IS NULL ORDER BY begun_at, name").fetchall()
        return [_operation(row) for row in rows]

    def get(self, name: str) -> Operation | None:
        with self._transaction() as db:
            row = db.execute("SELECT * FROM operations WHERE name = ?", (name,)).fetchone()
        return None if row is None else _operation(row)

    def prune(self, older_than: float = PRUNE_AFTER) -> int:
        """Forget answered operations begun more than ``older_than`` seconds ago; how many."""
        with self._transaction() as db:
            return db.execute(
                "DELETE FROM operations WHERE answered_at IS NOT NULL AND begun_at < ?", (time.time() - older_than,)
            ).rowcount

    def close(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        db = getattr(self._local, "connection", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = FULL")  # a begun operation outlives a power cut, not only a kill
            self._local.connection = db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


def _operation(row: sqlite3.Row) -> Operation:
    return Operation(row["name"], row["method"], row["path"], json.loads(row["body"]), row["idempotency_key"],
                     row["status"])


def note_answer(journal: Journal | None, operation: str | None, status: int) -> None:
    """A create's answer (a refusal too: sending it again would get the same), recorded for its
    operation when it names one."""
    if operation is not None and journal is not None:
        journal.answered(operation, status)


def key_for(journal: Journal | None, operation: str | None, idempotency_key: str | None, path: str,
            body: Mapping[str, Any]) -> str | None:
    """The key a create sends: its operation's, from the journal (begun there now if new), or the one
    given, or None (the client makes one).

    :raise ValueError: an operation without a journal, or with a key of the caller's own too.
    :raise OperationReused: the operation was begun with another request.
    """
    if operation is None:
        return idempotency_key
    if journal is None:
        raise ValueError("operation= needs a journal: PlatformClient(..., journal=Journal(path))")
    if idempotency_key is not None:
        raise ValueError("give operation= or idempotency_key=, not both: the journal keeps the operation's key")
    return journal.begin(operation, "POST", path, body).idempotency_key
