"""A platform row's sync state, and when a pending row counts as *stalled*: the one vocabulary the
API, ``sync-status``, the console and the ``sync_rows`` gauge share.

The database derives ``sync_state`` from the row's generations (:data:`STATE_SQL`, a generated
column), so it can never disagree with them: ``pending`` (cluster_svc has not confirmed what the
row wants), ``synced`` (it has) or ``failed`` (a permanent answer; a person decides).

*Stalled* is never stored: a pending row whose last public write (``updated_at``; pushes never
touch it) is older than the threshold (:func:`stalled_after`). It is still retried, and every
surface counts it apart from the other pending rows. Nor is *abandoned*: a row a person closed
without pushing it (``platform-svc abandon``, :func:`abandoned`), whose column says synced (its
delete is settled) but which never reached cluster_svc. The counts of the five shown states add
up to every row (docs/operations.md, "Sync states").
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import Table, case, func, literal

from shared import config


class SyncState(enum.StrEnum):
    """What a row is shown as. The first three are the ``sync_state`` column's values; ``STALLED``
    is a pending row past the threshold (:func:`stalled`), ``ABANDONED`` a row closed by a person
    (:func:`abandoned`), each shown apart."""

    SYNCED = "synced"
    PENDING = "pending"
    STALLED = "stalled"
    FAILED = "failed"
    ABANDONED = "abandoned"


STORED = (SyncState.PENDING, SyncState.SYNCED, SyncState.FAILED)  # the column's values

# How far a caller's call got, as the ``Idempotency-Status`` header of every public answer about
# one object says it (the FUN-15 design's three words), read off the row's state: ``completed`` is
# ``synced``, cluster_svc's proof; a stalled row is still being processed.
IDEMPOTENCY_STATUS = {
    SyncState.PENDING: "processing",
    SyncState.STALLED: "processing",
    SyncState.SYNCED: "completed",
    SyncState.FAILED: "failed",
    SyncState.ABANDONED: "failed",  # it never reached cluster_svc, and never will
}
# As counted and drawn, left to right.
SHOWN = (SyncState.SYNCED, SyncState.PENDING, SyncState.STALLED, SyncState.FAILED, SyncState.ABANDONED)

# The generated column: failed once a permanent answer came, synced once cluster_svc confirmed
# the wanted generation (or the delete), pending otherwise.
STATE_SQL = f"""CASE
    WHEN sync_failed_at IS NOT NULL THEN '{SyncState.FAILED}'
    WHEN deleted_at IS NULL AND synced_generation >= generation THEN '{SyncState.SYNCED}'
    WHEN deleted_at IS NOT NULL AND delete_synced_at IS NOT NULL THEN '{SyncState.SYNCED}'
    ELSE '{SyncState.PENDING}'
END"""


def is_state(state: SyncState) -> str:
    """The SQL condition ``sync_state = '<state>'`` (a partial index's ``WHERE``)."""
    return f"sync_state = '{state}'"


# A row pending longer than this (since its last public write) is stalled.
STALLED_AFTER = timedelta(minutes=5)


def stalled_after(environ: Mapping[str, str] | None = None) -> timedelta:
    """The stalled threshold: ``SYNC_STALLED_AFTER_SECONDS`` when set, else :data:`STALLED_AFTER`.

    :raise ConfigError: the setting is not an integer.
    """
    seconds = config.integer("SYNC_STALLED_AFTER_SECONDS", int(STALLED_AFTER.total_seconds()), environ)
    return timedelta(seconds=seconds)


def stalled(table: Table, after: timedelta) -> Any:
    """The SQL condition: a row of ``table`` is stalled (pending since more than ``after``)."""
    return (table.c.sync_state == SyncState.PENDING) & (table.c.updated_at < func.now() - after)


def abandoned(table: Table) -> Any:
    """The SQL condition: a row of ``table`` was abandoned (closed by a person, never pushed)."""
    return table.c.abandoned_at.is_not(None)


# The shown states a listing may ask for (the console's rows page, ``sync-status --state``).
LISTED = (SyncState.PENDING, SyncState.STALLED, SyncState.FAILED, SyncState.ABANDONED)


def in_state(table: Table, state: SyncState, after: timedelta) -> Any:
    """The SQL condition: a row of ``table`` is shown as ``state`` (one of :data:`LISTED`), each
    read through its partial index."""
    pending = table.c.sync_state == SyncState.PENDING
    return {
        SyncState.PENDING: pending & (table.c.updated_at >= func.now() - after),
        SyncState.STALLED: stalled(table, after),
        SyncState.FAILED: table.c.sync_state == SyncState.FAILED,
        SyncState.ABANDONED: abandoned(table),
    }[state]


def shown_state(table: Table, after: timedelta) -> Any:
    """The SQL expression of a row's shown state: abandoned, stalled, or its column's."""
    return case((abandoned(table), literal(SyncState.ABANDONED.value)),
                (stalled(table, after), literal(SyncState.STALLED.value)), else_=table.c.sync_state)
