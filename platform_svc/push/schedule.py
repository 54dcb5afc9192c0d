"""Scheduling, the first piece of the push path: which rows are due, the lease that makes a row one
pusher's while it is pushed, the backoff after transient failures (:class:`RetryPolicy`), waking the
rows in backoff when cluster_svc recovers, and cutting what was claimed into units of work.

The rules that keep it safe:

- A row is pushed only by whoever holds its lease (not a lock: no transaction stays open across an
  HTTP call), so two pushers never send the same row at the same moment, and a pusher that dies
  simply lets its lease run out.
- What to send follows from the row alone (level-triggered): a deleted row wants its delete
  confirmed; a row cluster_svc never confirmed is created; otherwise it is updated to the wanted
  generation (:mod:`platform_svc.push.pusher`).
- Creates claimed together go down together: one batch call per collection (a cluster's rules
  share one), each item answered and recorded on its own.
- Transient failures are retried for ever with capped, jittered backoff; only a permanent answer
  makes a row ``failed`` (:mod:`platform_svc.push.recording`).
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Table, and_, exists, func, not_, or_, select, update
from sqlalchemy.engine import RowMapping

from platform_svc.models import RESOURCES
from platform_svc.push.content import collection_url
from platform_svc.states import SyncState
from shared.registry import Resource


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff between a row's pushes after transient failures (each push has its own quick retries).

    There is no last attempt: a transient failure is retried for ever (it
    heals by itself, or a person sees the row stalled). Only a permanent
    answer makes a row ``failed``.
    """

    base_delay: float = 1.0
    max_delay: float = 300.0

    def delay(self, attempts: int) -> timedelta:
        """Exponential with a cap, and full jitter (anywhere from 0 to the ceiling),
        so the rows of one outage spread out instead of coming back in waves."""
        exponent = min(max(0, attempts - 1), 62)  # 2**62 s is already beyond any cap
        ceiling = min(self.max_delay, self.base_delay * 2**exponent)
        return timedelta(seconds=random.uniform(0, ceiling))



def is_create(row: RowMapping) -> bool:
    """Whether pushing ``row`` means creating it (cluster_svc never confirmed it, and it is alive)."""
    return row["synced_generation"] == 0 and row["deleted_at"] is None


def claim_due(
    *,
    db_session: Connection,
    resource: Resource,
    limit: int,
    lease: timedelta,
    due_by: datetime | None = None,
    creates: bool | None = None,
) -> list[RowMapping]:
    """Lease up to ``limit`` rows that are due (by ``due_by``, else now), skipping rows others have locked.

    ``FOR UPDATE SKIP LOCKED`` lets several reconcilers claim side by side; the
    lease (not a lock) is what keeps a row theirs while they push it, so no
    transaction stays open across an HTTP call. A child is due only once
    cluster_svc confirmed its parent (or once it is deleted). ``creates``: only rows to create
    (True), only the others (False), or any (None).
    """
    table = resource.table
    due = select(table.c.id).where(
        table.c.sync_state == SyncState.PENDING,
        table.c.next_attempt_at <= (func.now() if due_by is None else due_by),
        or_(table.c.lease_until.is_(None), table.c.lease_until < func.now()),
    )
    if resource.parent is not None:
        parent = resource.parent.table
        due = due.where(
            or_(
                table.c.deleted_at.is_not(None),
                exists().where(and_(parent.c.id == table.c[resource.parent_column], parent.c.synced_generation > 0)),
            )
        )
    if creates is not None:
        create = and_(table.c.synced_generation == 0, table.c.deleted_at.is_(None))
        due = due.where(create if creates else not_(create))
    due = due.order_by(table.c.next_attempt_at).limit(limit).with_for_update(skip_locked=True)
    stmt = update(table).where(table.c.id.in_(due.scalar_subquery())).values(lease_until=func.now() + lease)
    return list(db_session.execute(stmt.returning(*table.c)).mappings().all())


def in_backoff(*, db_session: Connection) -> bool:
    """Whether any row waits on a transient backoff (pending, failed before, not due yet)."""
    return any(
        db_session.execute(select(_backed_off(resource.table).exists())).scalar() for resource in RESOURCES
    )


def wake_backed_off(*, db_session: Connection, resource: Resource, limit: int) -> int:
    """Make up to ``limit`` rows waiting on a transient backoff due now; return how many.

    Called when cluster_svc answers again: however long a row's backoff grew
    during the outage, it goes at once. ``attempts`` is kept (it resets when
    the row is confirmed). Rows locked by a claim are skipped: they are being
    pushed anyway.
    """
    table = resource.table
    woken = _backed_off(table).limit(limit).with_for_update(skip_locked=True)
    stmt = update(table).where(table.c.id.in_(woken.scalar_subquery())).values(next_attempt_at=func.now())
    return db_session.execute(stmt).rowcount


def _backed_off(table: Table) -> Any:
    return select(table.c.id).where(
        table.c.sync_state == SyncState.PENDING, table.c.attempts > 0, table.c.next_attempt_at > func.now()
    )


@dataclass(frozen=True)
class Claim:
    """One unit of work the scheduler hands a worker: rows of one resource it leased,
    pushed with one call, and when it is too late to start pushing them (the
    lease would not outlast the push).

    One row (a create, update or delete), or creates to one collection that go
    down in one batch call.
    """

    resource: Resource
    rows: tuple[RowMapping, ...]
    push_by: float  # a time.monotonic() value


def claims_of(resource: Resource, rows: Sequence[RowMapping], *, batch: int, push_by: float) -> list[Claim]:
    """Cut claimed rows into claims, a unit of work (one call) each: creates to the same collection up to
    ``batch`` together, every other row alone."""
    collections: dict[str, list[RowMapping]] = {}
    claims = []
    for row in rows:
        if is_create(row):
            collections.setdefault(collection_url(resource, row), []).append(row)
        else:
            claims.append(Claim(resource, (row,), push_by))
    for together in collections.values():
        together.sort(key=lambda row: row["id"])
        claims += [Claim(resource, tuple(together[i:i + batch]), push_by) for i in range(0, len(together), batch)]
    return claims


