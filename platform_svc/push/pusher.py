"""Pushing, the second piece of the push path: one HTTP call per unit of work, judged and recorded.

:func:`push` sends what moves cluster_svc toward one row, :func:`push_creates` creates a unit's
rows with one batch call. :class:`Pusher` puts pushing and recording (:mod:`platform_svc.push.recording`)
together, inline right after a public write commits (a short budget, behind a circuit breaker;
the creates in flight in one worker share one batch call and one UPDATE) and for each unit the
reconciler claims (:mod:`platform_svc.push.schedule`). The intent is committed before any call; a
push never runs inside a database transaction, and recording only ever moves
``synced_generation`` forward, so a late answer cannot undo a newer one.
"""
from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from sqlalchemy import Connection, case, select, update
from sqlalchemy.engine import RowMapping

from platform_svc.push.breaker import CircuitBreaker
from platform_svc.push.content import collection_url, create_body, update_body, write_url
from platform_svc.push.recording import (
    AHEAD,
    Change,
    change_for,
    fail_waiting_descendants,
    never_created_and_failed,
    not_sent,
    record,
    record_many,
    release_many,
)
from platform_svc.push.schedule import Claim, RetryPolicy, is_create
from platform_svc.push.skew import judged_for_skew
from shared.client import Answer, InternalClient, Operation, Outcome, encode
from shared.clock import ClockWatch
from shared.coalesce import Coalescer
from shared.counters import count_push, count_repair
from shared.db import Database
from shared.errors import database_unavailable, describe_database_error
from shared.horizon import Horizon
from shared.registry import Resource

log = logging.getLogger(__name__)


# Inline creates one flush holds at most (with cluster_svc's body limit), and the
# least of a request's inline budget left for a call to be worth making.
INLINE_BATCH = 100
MIN_CALL_SECONDS = 0.05
# Inline batch calls in flight at once per worker and resource: a push that hangs on
# cluster_svc for its whole budget does not hold back a create that arrives meanwhile.
INLINE_CALLS_AT_ONCE = 2


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
    batch's ``UPDATE ... FROM unnest(...)``, whose seven array parameters cost a lone push
    about 140 µs of CPU more (docs/performance.md)."""
    if len(rows) == 1:
        return [record(db_session=db_session, resource=resource, row=rows[0], change=changes[0])]
    return record_many(db_session=db_session, resource=resource, rows=rows, changes=changes)


@dataclass(eq=False)  # one per process or test: it holds the pushes in flight (its coalescers)
class Pusher:
    """Pushes rows with one client and records each answer in its own short transaction.

    ``breaker`` (inline pushes) keeps public writes from waiting on a
    cluster_svc known to be failing. ``horizon`` and ``clock`` judge the refusals
    a skewed clock can cause (:mod:`platform_svc.push.skew`); the clock is also told
    every answer's ``Date``. Without one, the pusher measures its own.
    """

    database: Database
    client: InternalClient
    retry: RetryPolicy = RetryPolicy()
    _: KW_ONLY
    breaker: CircuitBreaker | None = None
    horizon: Horizon = Horizon()
    clock: ClockWatch | None = None
    _coalescers: dict[str, Coalescer] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.clock is None:
            self.clock = ClockWatch(self.database, self.horizon)
        if self.client.clock is None:
            self.client.clock = self.clock

    def _judged(self, resource: Resource, row: RowMapping, answer: Answer) -> Answer:
        return judged_for_skew(resource, row, answer, horizon=self.horizon, database_now=self.clock.database_now)

    def _inline_creates(self, resource: Resource) -> Coalescer:
        """The inline creates of ``resource`` in flight in this process, flushed together (shared.coalesce):
        each flush at most one batch call per collection, within cluster_svc's body limit."""
        if resource.key not in self._coalescers:
            flush = functools.partial(self._flush_creates, resource)
            self._coalescers[resource.key] = Coalescer(
                flush, max_items=INLINE_BATCH, max_bytes=self.client.max_body, flushes_at_once=INLINE_CALLS_AT_ONCE
            )
        return self._coalescers[resource.key]

    def _flush_creates(
        self, resource: Resource, items: Sequence[tuple[RowMapping, dict[str, Any], float]]
    ) -> list[tuple[Answer, Change, RowMapping, bool]]:
        """Push inline creates (each with its create body), one call per collection (one alone: its
        own create call, as without company), judge every answer and record them all with one
        statement; (answer, change, row as recorded, whether it was sent) each.

        The inline budget (the client's ``total_timeout``) is each request's, counted
        from its arrival: the flush's calls end when its oldest request's budget does,
        and are not made when too little is left, or when the breaker opened while
        they waited (answered as the breaker would: pending, not sent). Counting,
        logging and the breaker are each caller's own (its request ID on its lines).
        """
        rows = [row for row, _, _ in items]
        budget = self.client.policy.total_timeout
        deadline = None if budget is None else min(arrived for _, _, arrived in items) + budget
        skip = None
        if deadline is not None and deadline - time.monotonic() < MIN_CALL_SECONDS:
            skip = "not sent: the inline budget went on waiting for the pushes ahead of it"
        elif self.breaker is not None and self.breaker.is_open:
            skip = "not sent: cluster_svc failed repeatedly, retrying later"
        if skip is not None:
            answers = [Answer(Outcome.TRANSIENT, None, None, skip, Operation.CREATE)] * len(rows)
        else:
            answers = [None] * len(rows)
            collections: dict[str, list[int]] = {}
            for index, row in enumerate(rows):
                collections.setdefault(collection_url(resource, row), []).append(index)
            for indexes in collections.values():
                together, bodies = [rows[index] for index in indexes], [items[index][1] for index in indexes]
                pushed = (
                    push_creates(self.client, resource, together, bodies=bodies, deadline=deadline)
                    if len(together) > 1
                    else [push(self.client, resource, together[0], body=bodies[0], deadline=deadline)]
                )
                for index, answer in zip(indexes, pushed):
                    answers[index] = self._judged(resource, rows[index], answer)
        changes = [
            not_sent(row, skip) if skip is not None else change_for(resource, row, answer, self.retry, inline=True)
            for row, answer in zip(rows, answers)
        ]
        with self.database.begin() as db_session:
            recorded = _record_all(db_session, resource, rows, changes)
        return [(answer, change, row, skip is None) for answer, change, row in zip(answers, changes, recorded)]

    @property
    def holding_off(self) -> bool:
        """The breaker is open: an inline push now would not even be tried."""
        return self.breaker is not None and self.breaker.is_open

    def push_now(self, resource: Resource, row: RowMapping) -> RowMapping:
        """Inline: the caller has committed ``row`` and holds its lease; return the row as it is now.

        Nothing that fails here reaches the caller: the intent is committed, so
        a failed push or a database gone away while recording it leaves the
        row ``pending`` (the reconciler finishes it) and the committed row is
        what the public answer shows.
        """
        try:
            if resource.parent is not None and row["deleted_at"] is None and not self._parent_confirmed(resource, row):
                return self._release(resource, row)  # a child waits for its parent; the reconciler will push it
            if self.breaker is not None and not self.breaker.allow():  # not sent, so not counted as a push
                answer = Answer(
                    Outcome.TRANSIENT, None, None, "not sent: cluster_svc failed repeatedly, retrying later"
                )
                change = not_sent(row, answer.reason)
            elif is_create(row):
                # With the creates in flight in this worker: one batch call, one UPDATE recording them.
                body = create_body(resource, row)
                answer, change, recorded, sent = self._inline_creates(resource).submit(
                    (row, body, time.monotonic()), len(encode(body))
                )
                self._pushed(resource, row, answer, change)
                if self.breaker is not None and sent:
                    self.breaker.record(answer.unavailable)
                self.fail_waiting(resource, [recorded])
                return recorded
            else:
                answer = self._judged(resource, row, push(self.client, resource, row))
                if self.breaker is not None:
                    self.breaker.record(answer.unavailable)
                change = change_for(resource, row, answer, self.retry, inline=True)
                self._pushed(resource, row, answer, change)
            with self.database.begin() as db_session:
                recorded = record(db_session=db_session, resource=resource, row=row, change=change)
            self.fail_waiting(resource, [recorded])
            return recorded
        except Exception as exc:  # noqa: BLE001 (after the commit, nothing may turn into a 5xx)
            if database_unavailable(exc):
                log.warning("inline push of %s %s: database unavailable (%s)", resource.words, row["id"],
                            describe_database_error(exc))
            else:
                log.exception("inline push of %s %s failed", resource.words, row["id"])
            return row

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
        resource, rows = claim.resource, claim.rows
        if cancelled() or time.monotonic() > claim.push_by:
            with self.database.begin() as db_session:
                release_many(db_session=db_session, resource=resource, rows=rows)
            return None
        answers = push_creates(self.client, resource, rows) if len(rows) > 1 else [push(self.client, resource, rows[0])]
        answers = [self._judged(resource, row, answer) for row, answer in zip(rows, answers)]
        changes = [change_for(resource, row, answer, self.retry, inline=False) for row, answer in zip(rows, answers)]
        for row, answer, change in zip(rows, answers, changes):
            self._pushed(resource, row, answer, change)
            observe(answer)
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

    def _pushed(self, resource: Resource, row: RowMapping, answer: Answer, change: Change) -> None:
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

    def _parent_confirmed(self, resource: Resource, row: RowMapping) -> bool:
        parent = resource.parent.table
        with self.database.engine.connect() as db_session:
            return bool(
                db_session.execute(
                    select(parent.c.synced_generation > 0).where(parent.c.id == row[resource.parent_column])
                ).scalar()
            )

    def _release(self, resource: Resource, row: RowMapping) -> RowMapping:
        """Give the lease back unpushed (only if it is still ours); return the row as it is now."""
        table = resource.table
        lease = case((table.c.lease_until == row["lease_until"], None), else_=table.c.lease_until)
        with self.database.begin() as db_session:
            stmt = update(table).where(table.c.id == row["id"]).values(lease_until=lease).returning(*table.c)
            return db_session.execute(stmt).mappings().one()
