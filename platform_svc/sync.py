"""Pushing platform rows down to cluster_svc, and recording what happened.

Used twice, the same way: inline, right after a public write commits (a short
budget), and by the reconciler for everything still pending. The rules that
keep it safe:

- The intent is committed before any call; a push never runs inside a
  database transaction. A row is pushed only by whoever holds its lease, so
  two pushers never send the same row at the same moment, and a pusher that
  dies simply lets its lease run out.
- What to send follows from the row alone (level-triggered): a deleted row
  wants its delete confirmed; a row cluster_svc never confirmed is created
  (with its current fields and generation); otherwise it is updated to the
  wanted generation. Recording the answer only ever moves
  ``synced_generation`` forward, so a late answer cannot undo a newer one.
"""
from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Integer,
    Interval,
    String,
    Table,
    and_,
    bindparam,
    case,
    exists,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.engine import RowMapping

from platform_svc.models import CLUSTERS, FIREWALL_RULES, Cluster
from shared.client import Answer, InternalClient, Outcome
from shared.counters import count_push
from shared.db import Database
from shared.idempotent import Resource

log = logging.getLogger(__name__)

# A row pending for longer than this (since its last change, ``updated_at``)
# is "stalled": shown apart in sync-status and the metrics, still retried.
STALLED_AFTER = timedelta(minutes=5)


@dataclass(frozen=True)
class Kind:
    """How one kind of platform row maps onto cluster_svc's routes and bodies."""

    resource: Resource
    collection: Callable[[RowMapping], str]
    create_body: Callable[[RowMapping], dict[str, Any]]
    update_body: Callable[[RowMapping], dict[str, Any]]

    def item(self, row: RowMapping) -> str:
        return f"{self.collection(row)}/{row['id']}"


CLUSTER = Kind(
    resource=CLUSTERS,
    collection=lambda row: "/v1/clusters",
    create_body=lambda row: {
        "id": str(row["id"]),
        "team_id": str(row["account_id"]),
        "name": row["name"],
        "region": row["region"],
        "postgres_version": row["postgres_version"],
        "plan": row["plan"],
        "storage_gb": row["storage_gb"],
        "generation": row["generation"],
    },
    update_body=lambda row: {
        "generation": row["generation"],
        "name": row["name"],
        "plan": row["plan"],
        "storage_gb": row["storage_gb"],
    },
)
FIREWALL_RULE = Kind(
    resource=FIREWALL_RULES,
    collection=lambda row: f"/v1/clusters/{row['cluster_id']}/firewall-rules",
    create_body=lambda row: {
        "id": str(row["id"]),
        "cidr": str(row["cidr"]),
        "description": row["description"],
        "generation": row["generation"],
    },
    update_body=lambda row: {"generation": row["generation"], "description": row["description"]},
)
KINDS = (CLUSTER, FIREWALL_RULE)  # parents first: a rule waits for its cluster


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff between a row's pushes (each push has its own quick retries)."""

    max_attempts: int = 8
    base_delay: float = 1.0
    max_delay: float = 300.0

    def delay(self, attempts: int) -> timedelta:
        """Exponential, with full jitter so a crowd of failed rows spreads out."""
        ceiling = min(self.max_delay, self.base_delay * 2 ** max(0, attempts - 1))
        return timedelta(seconds=random.uniform(ceiling / 2, ceiling))


def push(client: InternalClient, kind: Kind, row: RowMapping) -> Answer:
    """Send the one call that moves cluster_svc toward this row."""
    if row["deleted_at"] is not None:
        return client.delete(kind.item(row))
    if row["synced_generation"] == 0:
        return client.create(kind.collection(row), kind.create_body(row))
    return client.update(kind.item(row), kind.update_body(row))


def record(
    *, db_session: Connection, kind: Kind, row: RowMapping, answer: Answer, retry: RetryPolicy, inline: bool
) -> RowMapping:
    """Store the outcome of a push and release the lease; return the new row.

    An inline push is a bonus attempt: its transient failure leaves the row due
    at once for the reconciler, without spending one of its attempts.
    """
    params: dict[str, Any] = {"b_id": row["id"], "b_lease": row["lease_until"], "b_reason": answer.reason}
    if answer.outcome is Outcome.DONE:
        if row["deleted_at"] is not None:
            change = "delete_confirmed"
        else:
            change = "confirmed"
            params["b_confirmed"] = (answer.body or {}).get("generation", row["generation"])
    elif answer.outcome is Outcome.PERMANENT:
        # A create or update refused because the row was deleted meanwhile (a
        # 410 because its cluster was deleted, say) is judged on the row as it
        # is now: the delete is what is wanted and goes next, so the row stays
        # pending. A refused delete is a failure like any other.
        change = "failed" if row["deleted_at"] is not None else "failed_unless_deleted"
    elif inline:
        change = "due_now"
    else:
        params["b_attempts"] = attempts = row["attempts"] + 1
        if attempts >= retry.max_attempts:
            change = "gave_up"
            params["b_reason"] = f"gave up after {attempts} attempts: {answer.reason}"
        else:
            change = "retry_later"
            params["b_delay"] = retry.delay(attempts)
    return db_session.execute(_record_statement(kind.resource.table, change), params).mappings().one()


@functools.lru_cache(maxsize=None)
def _record_statement(table: Table, change: str) -> Any:
    """The UPDATE that records one kind of outcome, built once (bound parameters ``b_*``)."""
    now = func.now()
    values: dict[str, Any] = {
        # Release the lease only if it is still ours: a push that outlived it
        # must not free a row another pusher has claimed since.
        "lease_until": case((table.c.lease_until == bindparam("b_lease"), None), else_=table.c.lease_until),
    }
    reason = bindparam("b_reason", type_=String())
    if change in ("confirmed", "delete_confirmed"):
        values.update(attempts=0, sync_error=None, sync_failed_at=None, synced_at=now)
        if change == "delete_confirmed":
            values["delete_synced_at"] = now
        else:
            confirmed = bindparam("b_confirmed", type_=Integer())
            values["synced_generation"] = func.greatest(table.c.synced_generation, confirmed)
    elif change in ("failed", "gave_up"):
        values.update(sync_failed_at=now, sync_error=reason)
    elif change == "failed_unless_deleted":
        values.update(sync_failed_at=case((table.c.deleted_at.is_(None), now), else_=None), sync_error=reason)
    elif change == "due_now":
        values.update(sync_error=reason, next_attempt_at=now)
    elif change == "retry_later":
        values.update(sync_error=reason, next_attempt_at=now + bindparam("b_delay", type_=Interval()))
    if change in ("gave_up", "retry_later"):
        values["attempts"] = bindparam("b_attempts", type_=Integer())
    return update(table).where(table.c.id == bindparam("b_id")).values(values).returning(*table.c)


def claim_due(*, db_session: Connection, kind: Kind, limit: int, lease: timedelta) -> list[RowMapping]:
    """Lease up to ``limit`` rows that are due, skipping rows others have locked.

    ``FOR UPDATE SKIP LOCKED`` lets several reconcilers claim side by side; the
    lease (not a lock) is what keeps a row theirs while they push it, so no
    transaction stays open across an HTTP call.
    """
    table = kind.resource.table
    due = select(table.c.id).where(
        table.c.sync_state == "pending",
        table.c.next_attempt_at <= func.now(),
        or_(table.c.lease_until.is_(None), table.c.lease_until < func.now()),
    )
    if kind.resource.parent is not None:
        parent = Cluster.__table__
        due = due.where(
            or_(
                table.c.deleted_at.is_not(None),
                exists().where(and_(parent.c.id == table.c.cluster_id, parent.c.synced_generation > 0)),
            )
        )
    due = due.order_by(table.c.next_attempt_at).limit(limit).with_for_update(skip_locked=True)
    stmt = update(table).where(table.c.id.in_(due.scalar_subquery())).values(lease_until=func.now() + lease)
    return list(db_session.execute(stmt.returning(*table.c)).mappings().all())


def requeue_failed(*, db_session: Connection, kind: Kind) -> int:
    """Put every failed row back in line (after an operator fixed the cause)."""
    table = kind.resource.table
    stmt = (
        update(table)
        .where(table.c.sync_state == "failed")
        .values(sync_failed_at=None, attempts=0, next_attempt_at=func.now(), lease_until=None)
    )
    return db_session.execute(stmt).rowcount


class Pusher:
    """Pushes rows with one client and records the answers, each in its own transaction."""

    def __init__(self, database: Database, client: InternalClient, retry: RetryPolicy = RetryPolicy()) -> None:
        self.database = database
        self.client = client
        self.retry = retry

    def push_now(self, kind: Kind, row: RowMapping) -> RowMapping:
        """Inline: the caller has committed ``row`` and holds its lease."""
        if kind.resource.parent is not None and row["deleted_at"] is None and not self._parent_confirmed(row):
            return self._release(kind, row)  # a rule waits for its cluster; the reconciler will push it
        answer = self._push(kind, row)
        with self.database.begin() as db_session:
            return record(db_session=db_session, kind=kind, row=row, answer=answer, retry=self.retry, inline=True)

    def push_many(self, kind: Kind, rows: list[RowMapping], *, deadline: float | None = None) -> list[RowMapping]:
        """Push a claimed batch in turn, then record every answer in one transaction.

        Rows not reached by ``deadline`` (a ``time.monotonic()`` value, before
        the lease runs out) are left alone: once their lease has run out,
        another pusher may take them, and this one must not push them then.
        """
        answers = []
        for row in rows:
            if deadline is not None and time.monotonic() > deadline:
                break
            answers.append((row, self._push(kind, row)))
        with self.database.begin() as db_session:
            return [
                record(db_session=db_session, kind=kind, row=row, answer=answer, retry=self.retry, inline=False)
                for row, answer in answers
            ]

    def _push(self, kind: Kind, row: RowMapping) -> Answer:
        answer = push(self.client, kind, row)
        count_push(kind.resource.name, answer.operation, answer.outcome)
        if answer.outcome is not Outcome.DONE:
            log.info("push of %s %s: %s (%s)", kind.resource.name, row["id"], answer.outcome.value, answer.reason)
        return answer

    def _parent_confirmed(self, row: RowMapping) -> bool:
        with self.database.engine.connect() as db_session:
            return bool(
                db_session.execute(
                    select(Cluster.synced_generation > 0).where(Cluster.id == row["cluster_id"])
                ).scalar()
            )

    def _release(self, kind: Kind, row: RowMapping) -> RowMapping:
        table = kind.resource.table
        with self.database.begin() as db_session:
            stmt = update(table).where(table.c.id == row["id"]).values(lease_until=None).returning(*table.c)
            return db_session.execute(stmt).mappings().one()
