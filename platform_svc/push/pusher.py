"""Pushing, the second piece of the push path: one HTTP call per unit of work, judged and recorded.

:func:`push` sends what moves cluster_svc toward one row, :func:`push_creates` creates a unit's
rows with one batch call. :class:`PushPath` is what every push passes through after its call,
whoever made it: judged (skew), counted, logged and recorded
(:mod:`platform_svc.push.recording`). Two pushers build on it, one per caller:
:class:`UnitPusher`, for each unit the reconciler claims (:mod:`platform_svc.push.schedule`),
and :class:`~platform_svc.push.inline.InlinePusher`, right after a public write commits (a
short budget, behind a circuit breaker; the creates in flight in one worker share one batch
call and one UPDATE). The intent is committed before any call; a
push never runs inside a database transaction, and recording only ever moves
``synced_generation`` forward, so a late answer cannot undo a newer one.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.engine import RowMapping

from platform_svc.push.content import collection_url, create_body, update_body, write_url
from platform_svc.push.recording import (
    AHEAD,
    Change,
    change_for,
    fail_waiting_descendants,
    never_created_and_failed,
    record,
    record_many,
    release_many,
)
from platform_svc.push.schedule import Claim, RetryPolicy
from platform_svc.push.skew import judged_for_skew
from shared.client import Answer, InternalClient, Outcome
from shared.clock import ClockWatch
from shared.counters import count_push, count_repair
from shared.db import Database
from shared.horizon import Horizon
from shared.registry import Registry, Resource

log = logging.getLogger(__name__)



def push(
    client: InternalClient, resource: Resource, row: RowMapping, *, body: dict[str, Any] | None = None,
    deadline: float | None = None,
) -> Answer:
    """Send what moves cluster_svc toward this row: one call, or two when downstream lost the object.

    ``body``: the create body, when the caller built it already. An update
    answered 404 means cluster_svc has no such object (restored from an old
    backup, say): it is created again with its current fields and generation,
    so a change to a lost object still converges.
    """
    if row["deleted_at"] is not None:
        return client.delete(write_url(resource, row))  # 404 and 410 count as done: not alive there
    if row["synced_generation"] == 0:
        return client.create(collection_url(resource, row), body or create_body(resource, row), deadline=deadline)
    answer = client.update(write_url(resource, row), update_body(resource, row))
    if answer.status == 404:
        log.info("%s %s is missing downstream: creating it again", resource.words, row["id"])
        return client.create(collection_url(resource, row), create_body(resource, row))
    return answer


def push_creates(
    client: InternalClient, resource: Resource, rows: Sequence[RowMapping], *,
    bodies: Sequence[dict[str, Any]] | None = None, deadline: float | None = None,
) -> list[Answer]:
    """Create-or-return rows of one collection with one batch call; one answer per row, in order.

    ``bodies``: the rows' create bodies, when the caller built them already.
    Each item is answered as its single create would be (201, 200 for one
    cluster_svc has already: a lost answer's replay, 409, 404 while a rule's
    parent is not there yet...). A call that fails as a whole gives every row
    its answer.
    """
    items = list(bodies) if bodies is not None else [create_body(resource, row) for row in rows]
    return client.create_batch(f"{collection_url(resource, rows[0])}/batch", items, deadline=deadline)


def _record_all(
    db_session: Connection, resource: Resource, rows: Sequence[RowMapping], changes: Sequence[Change]
) -> list[RowMapping]:
    """Record each row's change with one statement: a lone row (a create pushed inline with no
    company, a unit of one) by its change's prebuilt one-row UPDATE, the same values as the
    batch's ``UPDATE ... FROM unnest(...)``, whose array parameters cost a lone push more than
    its one row (docs/performance.md)."""
    if len(rows) == 1:
        return [record(db_session=db_session, resource=resource, row=rows[0], change=changes[0])]
    return record_many(db_session=db_session, resource=resource, rows=rows, changes=changes)


@dataclass(eq=False)
class PushPath:
    """What a push passes through once its call is answered, whoever made it: the answer judged
    for skew, counted and logged, and recorded in a short transaction of its own.

    ``horizon`` and ``clock`` judge the refusals a skewed clock can cause
    (:mod:`platform_svc.push.skew`); the clock is also told every answer's ``Date``.
    Without one, the path measures its own.
    """

    database: Database
    client: InternalClient
    retry: RetryPolicy = RetryPolicy()
    horizon: Horizon = Horizon()
    clock: ClockWatch | None = None

    def __post_init__(self) -> None:
        if self.clock is None:
            self.clock = ClockWatch(self.database, self.horizon)
        if self.client.clock is None:
            self.client.clock = self.clock

    def judged(self, resource: Resource, row: RowMapping, answer: Answer) -> Answer:
        return judged_for_skew(resource, row, answer, horizon=self.horizon, database_now=self.clock.database_now)

    def record(self, resource: Resource, rows: Sequence[RowMapping], changes: Sequence[Change]) -> list[RowMapping]:
        """Record each row's change, all in one transaction (:func:`_record_all`)."""
        with self.database.begin() as db_session:
            return _record_all(db_session, resource, rows, changes)

    def fail_waiting(self, resource: Resource, recorded: Sequence[RowMapping]) -> int:
        """Right after recording: the descendants waiting on rows that just failed for good
        before cluster_svc ever held them fail too (only when there are such rows)."""
        failed = [row["id"] for row in recorded if never_created_and_failed(row)]
        if not failed or not resource.descendants:
            return 0
        with self.database.begin() as db_session:
            count = fail_waiting_descendants(db_session=db_session, resource=resource, ids=failed)
        if count:
            log.warning("%d rows under %d failed %ss failed with them", count, len(failed), resource.words)
        return count

    def pushed(self, resource: Resource, row: RowMapping, answer: Answer, change: Change) -> None:
        """Every row pushed, inline or by the reconciler, alone or in a batch, passes here once,
        judged: its outcome is counted, and logged unless done."""
        count_push(resource.label, answer.operation, answer.outcome)
        if answer.outcome is Outcome.PERMANENT:  # the row fails for good: a person has to look
            log.warning("push of %s %s: %s (%s)", resource.words, row["id"], answer.outcome.value, answer.reason)
        elif answer.outcome is not Outcome.DONE:
            log.info("push of %s %s: %s (%s)", resource.words, row["id"], answer.outcome.value, answer.reason)
        elif change.kind == AHEAD:  # recorded as such: not confirmed, pushed again above cluster_svc's generation
            count_repair(resource.label, "ahead")
            log.warning("push of %s %s: cluster_svc is ahead (generation %d there, %d sent, or other fields);"
                        " pushing the platform's fields again", resource.words, row["id"], change.confirmed,
                        row["generation"])


@dataclass(eq=False)
class UnitPusher:
    """The reconciler's pusher: one call for each unit it claims from ``resources`` (the registry of
    the tables it pushes), recorded through ``path``."""

    path: PushPath
    resources: Registry

    def push_claimed(
        self, claim: Claim, *, cancelled: Callable[[], bool] = lambda: False,
        observe: Callable[[Answer], None] = lambda answer: None,
    ) -> list[RowMapping] | None:
        """A worker's unit: push the claimed rows with one call and record every answer
        with one statement; return the rows as recorded, or None when they were not pushed.

        ``observe`` is told every answer (the reconciler's recovery watch). Rows
        whose lease has run too short (they waited for a free worker) or whose
        reconciler is stopping are released unpushed, due as they were.
        """
        resource, rows, path = claim.resource, claim.rows, self.path
        if cancelled() or time.monotonic() > claim.push_by:
            with path.database.begin() as db_session:
                release_many(db_session=db_session, resource=resource, rows=rows)
            return None
        answers = push_creates(path.client, resource, rows) if len(rows) > 1 else [push(path.client, resource, rows[0])]
        answers = [path.judged(resource, row, answer) for row, answer in zip(rows, answers)]
        changes = [change_for(resource, row, answer, path.retry, inline=False) for row, answer in zip(rows, answers)]
        for row, answer, change in zip(rows, answers, changes):
            path.pushed(resource, row, answer, change)
            observe(answer)
        return path.record(resource, rows, changes)
