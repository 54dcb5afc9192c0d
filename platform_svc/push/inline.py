"""The inline pusher: the push a public write makes right after it commits.

A short budget (the client's ``total_timeout``, counted from the request's
arrival), behind a circuit breaker (:mod:`platform_svc.push.breaker`): the
creates in flight in one worker share one batch call and one UPDATE
(:mod:`shared.coalesce`); a child whose parent cluster_svc has not confirmed
waits for the reconciler. Every answer goes the same way as the reconciler's
(:class:`~platform_svc.push.pusher.PushPath`). Nothing that fails here reaches
the public caller: the intent is committed, and the row stays ``pending``.
"""
from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import case, select, update
from sqlalchemy.engine import RowMapping

from platform_svc.push.breaker import CircuitBreaker
from platform_svc.push.content import collection_url, create_body
from platform_svc.push.pusher import PushPath, push, push_creates
from platform_svc.push.recording import Change, change_for, not_sent
from platform_svc.push.schedule import is_create
from shared.client import Answer, Operation, Outcome, encode
from shared.coalesce import Coalescer
from shared.errors import database_unavailable, describe_database_error
from shared.registry import Resource

log = logging.getLogger(__name__)


# Inline creates one flush holds at most (with cluster_svc's body limit), and the
# least of a request's inline budget left for a call to be worth making.
INLINE_BATCH = 100
MIN_CALL_SECONDS = 0.05
# Inline batch calls in flight at once per worker and resource: a push that hangs on
# cluster_svc for its whole budget does not hold back a create that arrives meanwhile.
INLINE_CALLS_AT_ONCE = 2


@dataclass(eq=False)  # one per process or test: it holds the pushes in flight (its coalescers)
class InlinePusher:
    """Pushes a public write's row inline through ``path``; ``breaker`` keeps public writes from
    waiting on a cluster_svc known to be failing."""

    path: PushPath
    breaker: CircuitBreaker | None = None
    _coalescers: dict[str, Coalescer] = field(default_factory=dict, init=False, repr=False)

    def _inline_creates(self, resource: Resource) -> Coalescer:
        """The inline creates of ``resource`` in flight in this process, flushed together (shared.coalesce):
        each flush at most one batch call per collection, within cluster_svc's body limit."""
        if resource.key not in self._coalescers:
            flush = functools.partial(self._flush_creates, resource)
            self._coalescers[resource.key] = Coalescer(
                flush, max_items=INLINE_BATCH, max_bytes=self.path.client.max_body, flushes_at_once=INLINE_CALLS_AT_ONCE
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
        budget = self.path.client.policy.total_timeout
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
                    push_creates(self.path.client, resource, together, bodies=bodies, deadline=deadline)
                    if len(together) > 1
                    else [push(self.path.client, resource, together[0], body=bodies[0], deadline=deadline)]
                )
                for index, answer in zip(indexes, pushed):
                    answers[index] = self.path.judged(resource, rows[index], answer)
        changes = [
            not_sent(row, skip) if skip is not None else change_for(resource, row, answer, self.path.retry, inline=True)
            for row, answer in zip(rows, answers)
        ]
        recorded = self.path.record(resource, rows, changes)
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
                self.path.pushed(resource, row, answer, change)
                if self.breaker is not None and sent:
                    self.breaker.record(answer.unavailable)
                self.path.fail_waiting(resource, [recorded])
                return recorded
            else:
                answer = self.path.judged(resource, row, push(self.path.client, resource, row))
                if self.breaker is not None:
                    self.breaker.record(answer.unavailable)
                change = change_for(resource, row, answer, self.path.retry, inline=True)
                self.path.pushed(resource, row, answer, change)
            [recorded] = self.path.record(resource, [row], [change])
            self.path.fail_waiting(resource, [recorded])
            return recorded
        except Exception as exc:  # noqa: BLE001 (after the commit, nothing may turn into a 5xx)
            if database_unavailable(exc):
                log.warning("inline push of %s %s: database unavailable (%s)", resource.words, row["id"],
                            describe_database_error(exc))
            else:
                log.exception("inline push of %s %s failed", resource.words, row["id"])
            return row

    def _parent_confirmed(self, resource: Resource, row: RowMapping) -> bool:
        parent = resource.parent.table
        with self.path.database.engine.connect() as db_session:
            return bool(
                db_session.execute(
                    select(parent.c.synced_generation > 0).where(parent.c.id == row[resource.parent_column])
                ).scalar()
            )

    def _release(self, resource: Resource, row: RowMapping) -> RowMapping:
        """Give the lease back unpushed (only if it is still ours); return the row as it is now."""
        table = resource.table
        lease = case((table.c.lease_until == row["lease_until"], None), else_=table.c.lease_until)
        with self.path.database.begin() as db_session:
            stmt = update(table).where(table.c.id == row["id"]).values(lease_until=lease).returning(*table.c)
            return db_session.execute(stmt).mappings().one()
