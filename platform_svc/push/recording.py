"""Recording what a push did: the row's new sync state, and its lease given back.

The third piece of the push path (:mod:`platform_svc.push`). One answer decides one
*change* (:func:`change_for`); :func:`record` stores the change of one row (the
inline push, one prebuilt UPDATE per kind of change) and :func:`record_many`
the changes of a whole unit of work (a reconciler's batch of creates) with one
UPDATE ... FROM unnest(...), each row with its own outcome. Both keep the same
three rules:

- the lease is released only if it is still ours: a push that outlived it
  must not free a row another pusher has claimed since;
- ``synced_generation`` only moves forward (``greatest``), so a late answer
  cannot undo a newer one;
- only what an answer proves is confirmed (:func:`change_for`): an answer
  showing cluster_svc *ahead* (a higher generation, or the same one with other
  mutable fields) moves the row's generation past cluster_svc's and leaves it
  due at once, so the platform's fields go down again above it; one showing
  another object under the row's ID (another parent, team or immutable
  field) fails the row, saying which.

A row that fails for good while it was never created downstream takes its
waiting descendants with it (:func:`fail_waiting_descendants`, right after
its own recording): they can never be pushed, so they fail at once with a
reason naming it, ``parent_failed: <id> <code>``.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Connection,
    DateTime,
    Integer,
    Interval,
    String,
    Table,
    bindparam,
    case,
    cast,
    func,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import RowMapping

from platform_svc.push import content
from platform_svc.states import SyncState
from shared.client import Answer, Outcome
from shared.prebuilt import execute_prebuilt
from shared.declaration import HIGHEST_GENERATION
from shared.registry import Resource

if TYPE_CHECKING:
    from platform_svc.push.schedule import RetryPolicy

CONFIRMED = "confirmed"  # created or updated downstream: synced_generation moves up
DELETE_CONFIRMED = "delete_confirmed"
REFUSED = "refused"  # a permanent answer: the row fails
REFUSED_UNLESS_DELETED = "refused_unless_deleted"  # a refused create/update: fine if the row was deleted since
DUE_NOW = "due_now"  # an inline push's transient failure: the reconciler takes it at once
RETRY_LATER = "retry_later"  # a reconciler push's transient failure: back off
RELEASED = "released"  # not pushed at all: only the lease goes back
AHEAD = "ahead"  # answered with a state the push did not set: move past it, push again at once
PARENT_FAILED = "parent_failed"  # the prefix of a descendant's reason when its ancestor failed


@dataclass(frozen=True, slots=True)
class Change:
    """What one answer does to its row."""

    kind: str
    confirmed: int | None = None  # CONFIRMED: the generation cluster_svc holds
    attempts: int | None = None  # RETRY_LATER, DUE_NOW: attempts so far
    delay: timedelta | None = None  # RETRY_LATER: until the next try
    reason: str | None = None  # for sync_error: the answer's, or why it confirmed nothing


def change_for(resource: Resource, row: RowMapping, answer: Answer, retry: RetryPolicy, *, inline: bool) -> Change:
    """The change ``answer`` makes to ``row``: the one judgement of an answer, made once by the pusher,
    and the only place a row is confirmed (so the only way it becomes ``synced``).

    A row is confirmed only by an answer that proves it (docs/design.md, "synced
    is a proof"): a create or update by cluster_svc's copy in the answer's body,
    alive, this object's (its ancestry, its owner and its immutable fields the
    platform's), at this row's generation with the platform's mutable fields
    (:func:`_judged_copy`); a delete by a 204, or by a 404 or 410 that is
    cluster_svc's own problem (it refuses, 409, a delete of an object under
    another parent or of another team, so those mean "not alive there").

    An inline push is counted as an attempt like any other, but its transient
    failure leaves the row due at once for the reconciler instead of backing off.
    """
    if answer.outcome is Outcome.DONE:
        if row["deleted_at"] is not None:
            doubt = _delete_doubt(answer)
            if doubt is None:
                return Change(DELETE_CONFIRMED, reason=answer.reason)
            return _try_again(row, f"{answer.reason}: {doubt}", retry, inline=inline)
        return _judged_copy(resource, row, answer, retry, inline=inline)
    if answer.outcome is Outcome.PERMANENT:
        # A create or update refused because the row was deleted meanwhile (a
        # 410 because its cluster was deleted, say) is judged on the row as it
        # is now: the delete is what is wanted and goes next, so the row stays
        # pending. A refused delete is a failure like any other.
        return Change(REFUSED if row["deleted_at"] is not None else REFUSED_UNLESS_DELETED, reason=answer.reason)
    return _try_again(row, answer.reason, retry, inline=inline)


# The problems with which cluster_svc answers a delete of an object it does not hold alive there.
_NOT_ALIVE_THERE = frozenset({"not_found", "gone", "id_expired"})


def _delete_doubt(answer: Answer) -> str | None:
    """Why a delete's answer does not prove the object is gone there, or None when it does."""
    if answer.status == 204:
        return None
    body = answer.body
    if isinstance(body, Mapping) and body.get("code") in _NOT_ALIVE_THERE:
        return None
    return "not cluster_svc's own answer about this object, so it proves nothing; trying again"


def _judged_copy(resource: Resource, row: RowMapping, answer: Answer, retry: RetryPolicy, *, inline: bool) -> Change:
    """A create's or update's success, judged by the copy its body shows."""
    theirs = answer.body
    generation = theirs.get("generation") if isinstance(theirs, Mapping) else None
    if not isinstance(generation, int) or isinstance(generation, bool) or theirs.get("id") != str(row["id"]):
        return _try_again(row, f"{answer.reason}: the answer did not show the object, so it proves nothing",
                          retry, inline=inline)
    if theirs.get("deleted_at") is not None:
        return Change(REFUSED_UNLESS_DELETED, reason=f"{answer.reason}: cluster_svc answered with a deleted copy")
    fixed = content.fixed_differing(resource, row, theirs)
    if fixed:
        # Another parent, another team or another immutable field: not this object, and no update changes it.
        return Change(REFUSED_UNLESS_DELETED, reason=(
            f"diverged: cluster_svc holds {row['id']} with another {', '.join(fixed)} at generation {generation};"
            " no update can change it, so a person decides"
        ))
    if generation > row["generation"] or (
        generation == row["generation"] and content.mutable_differing(resource, row, theirs)
    ):
        if generation >= HIGHEST_GENERATION:  # set by hand (the internal token): nothing counts past it
            return Change(REFUSED, reason=(
                f"ahead: cluster_svc holds generation {generation}, the highest a generation can be, with fields"
                " this push did not set; the platform cannot push past it, so a person decides"
            ))
        reason = (
            f"ahead: cluster_svc holds generation {generation} with fields this push did not set;"
            f" pushing the platform's fields again at generation {max(row['generation'], generation + 1)}"
        )
        return Change(AHEAD, confirmed=generation, reason=reason)
    # At the row's generation: confirmed. Below it (a create replayed onto an older copy): what
    # cluster_svc holds is confirmed, the row stays pending, and the update follows.
    return Change(CONFIRMED, confirmed=generation, reason=answer.reason)


def not_sent(row: RowMapping, reason: str) -> Change:
    """An inline push that was never sent (the breaker open, the budget spent): due at once for the
    reconciler, and not counted as an attempt."""
    return Change(DUE_NOW, attempts=row["attempts"], reason=reason)


def _try_again(row: RowMapping, reason: str, retry: RetryPolicy, *, inline: bool) -> Change:
    attempts = row["attempts"] + 1
    if inline:
        return Change(DUE_NOW, attempts=attempts, reason=reason)
    return Change(RETRY_LATER, attempts=attempts, delay=retry.delay(attempts), reason=reason)


def record(*, db_session: Connection, resource: Resource, row: RowMapping, change: Change) -> RowMapping:
    """Store the outcome of one push and release the lease; return the new row."""
    params: dict[str, Any] = {"b_id": row["id"], "b_lease": row["lease_until"], "b_reason": change.reason}
    if change.kind in (CONFIRMED, AHEAD):
        params["b_confirmed"] = change.confirmed
    elif change.kind == RETRY_LATER:
        params["b_attempts"], params["b_delay"] = change.attempts, change.delay
    elif change.kind == DUE_NOW:
        params["b_attempts"] = change.attempts
    (stored,) = execute_prebuilt(db_session, _record_statement(resource.table, change.kind), params)
    return stored


def record_many(
    *, db_session: Connection, resource: Resource, rows: Sequence[RowMapping], changes: Sequence[Change]
) -> list[RowMapping]:
    """Store each row's change (:data:`RELEASED`: not pushed, only the lease goes back) with one statement.

    The reconciler's recording of a unit of work, and of the inline pushes one
    flush sent. Returns the new rows in the order of ``rows``.
    """
    params = {
        "ids": [row["id"] for row in rows],
        "leases": [row["lease_until"] for row in rows],
        "changes": [change.kind for change in changes],
        "confirmed": [change.confirmed for change in changes],
        "reasons": [change.reason for change in changes],
        "attempts": [change.attempts for change in changes],
        "delays": [change.delay for change in changes],
    }
    stored = db_session.execute(_record_many_statement(resource.table), params).mappings().all()
    by_id = {row["id"]: row for row in stored}
    return [by_id[row["id"]] for row in rows]


def release_many(*, db_session: Connection, resource: Resource, rows: Sequence[RowMapping]) -> list[RowMapping]:
    """Give the leases of unpushed rows back (only where still ours), due as they were."""
    return record_many(db_session=db_session, resource=resource, rows=rows, changes=[Change(RELEASED)] * len(rows))


def never_created_and_failed(row: RowMapping) -> bool:
    """Whether ``row`` failed for good before cluster_svc ever held it: its descendants wait for nothing."""
    return row["sync_state"] == SyncState.FAILED and row["synced_generation"] == 0


def fail_waiting_descendants(
    *,
    db_session: Connection,
    resource: Resource,
    ids: Sequence[Any] | None = None,
    only: tuple[Resource, Any] | None = None,
) -> int:
    """Fail the pending, live descendants of ``resource`` rows that were never created downstream and
    failed for good (of those ``ids``, or of any); with ``only`` (a descendant resource and an ID),
    just that one row. Return how many failed.

    Such a descendant waits for its ancestor's create to be confirmed, which
    will never happen: it fails at once, its reason naming the ancestor that
    failed and why, ``parent_failed: <id> <code>`` (a grandchild's names the
    same ancestor as its parent's). Each descendant's row names all its
    ancestors, so each level is one UPDATE joined to the failed rows, which
    are read through their partial index (few, never a table scan).
    """
    parent = resource.table
    failed = [parent.c.sync_state == SyncState.FAILED, parent.c.synced_generation == 0]
    if ids is not None:
        failed.append(parent.c.id.in_(list(ids)))
    count = 0
    for descendant in resource.descendants if only is None else [only[0]]:
        table = descendant.table
        where = [
            table.c[resource.id_column] == parent.c.id,
            table.c.sync_state == SyncState.PENDING,
            table.c.deleted_at.is_(None),
            *failed,
        ]
        if only is not None:
            where.append(table.c.id == only[1])
        stmt = update(table).where(*where).values(
            sync_failed_at=func.now(), sync_error=_parent_failed(parent), lease_until=None
        )
        count += db_session.execute(stmt).rowcount
    return count


def _parent_failed(parent: Table) -> Any:
    """SQL: the reason a waiting descendant of a failed ``parent`` row gets.

    The code is the problem's (``409 id_conflict``), else the status, from the
    reason the failed push recorded ("POST /v1/... [item 3]: 409 id_conflict: ...").
    """
    error = parent.c.sync_error
    code = func.coalesce(
        func.substring(error, r": \d{3} ([a-z][a-z0-9_]*)"), func.substring(error, r": (\d{3})"), SyncState.FAILED.value
    )
    named = PARENT_FAILED + ": " + cast(parent.c.id, String()) + " " + code
    return case((error.like(f"{PARENT_FAILED}: %"), error), else_=named)


@functools.lru_cache(maxsize=None)
def _record_statement(table: Table, change: str) -> Any:
    """The UPDATE that records one kind of change for one row, built once (bound parameters ``b_*``)."""
    now = func.now()
    values: dict[str, Any] = {
        "lease_until": case((table.c.lease_until == bindparam("b_lease"), None), else_=table.c.lease_until),
    }
    reason = bindparam("b_reason", type_=String())
    if change in (CONFIRMED, DELETE_CONFIRMED):
        values.update(attempts=0, sync_error=None, sync_failed_at=None, synced_at=now)
        if change == DELETE_CONFIRMED:
            values["delete_synced_at"] = now
        else:
            confirmed = bindparam("b_confirmed", type_=Integer())
            values["synced_generation"] = func.greatest(table.c.synced_generation, confirmed)
    elif change == REFUSED:
        values.update(sync_failed_at=now, sync_error=reason)
    elif change == REFUSED_UNLESS_DELETED:
        values.update(sync_failed_at=case((table.c.deleted_at.is_(None), now), else_=None), sync_error=reason)
    elif change == DUE_NOW:
        values.update(sync_error=reason, next_attempt_at=now, attempts=bindparam("b_attempts", type_=Integer()))
    elif change == AHEAD:
        theirs = bindparam("b_confirmed", type_=Integer())
        values.update(
            sync_error=reason,
            next_attempt_at=now,
            generation=func.greatest(table.c.generation, theirs + 1),
            synced_generation=func.least(table.c.synced_generation, theirs),
        )
    elif change == RETRY_LATER:
        values.update(
            sync_error=reason,
            next_attempt_at=now + bindparam("b_delay", type_=Interval()),
            attempts=bindparam("b_attempts", type_=Integer()),
        )
    return update(table).where(table.c.id == bindparam("b_id")).values(values).returning(*table.c)


@functools.lru_cache(maxsize=None)
def _record_many_statement(table: Table) -> Any:
    """One UPDATE ... FROM unnest(arrays) for any number of rows, each with its own change.

    The same column values as :func:`_record_statement`, chosen per row by its
    ``change``. Arrays are cast explicitly: a column of NULLs has no type of
    its own.
    """
    arrays = {
        "id": cast(bindparam("ids"), ARRAY(table.c.id.type)),
        "lease": cast(bindparam("leases"), ARRAY(DateTime(timezone=True))),
        "change": cast(bindparam("changes"), ARRAY(String())),
        "confirmed": cast(bindparam("confirmed"), ARRAY(Integer())),
        "reason": cast(bindparam("reasons"), ARRAY(String())),
        "attempts": cast(bindparam("attempts"), ARRAY(Integer())),
        "delay": cast(bindparam("delays"), ARRAY(Interval())),
    }
    outcome = func.unnest(*arrays.values()).table_valued(*arrays).render_derived(name="outcome")
    now, t, o = func.now(), table.c, outcome.c
    done = o.change.in_((CONFIRMED, DELETE_CONFIRMED))
    values = {
        "lease_until": case((t.lease_until == o.lease, None), else_=t.lease_until),
        "attempts": case((done, 0), (o.change.in_((RETRY_LATER, DUE_NOW)), o.attempts), else_=t.attempts),
        "sync_error": case((done, None), (o.change == RELEASED, t.sync_error), else_=o.reason),
        "sync_failed_at": case(
            (done, None),
            (o.change == REFUSED, now),
            (o.change == REFUSED_UNLESS_DELETED, case((t.deleted_at.is_(None), now), else_=None)),
            else_=t.sync_failed_at,
        ),
        "synced_at": case((done, now), else_=t.synced_at),
        "delete_synced_at": case((o.change == DELETE_CONFIRMED, now), else_=t.delete_synced_at),
        "synced_generation": case(
            (o.change == CONFIRMED, func.greatest(t.synced_generation, o.confirmed)),
            (o.change == AHEAD, func.least(t.synced_generation, o.confirmed)),
            else_=t.synced_generation,
        ),
        "generation": case((o.change == AHEAD, func.greatest(t.generation, o.confirmed + 1)), else_=t.generation),
        "next_attempt_at": case(
            (o.change.in_((DUE_NOW, AHEAD)), now), (o.change == RETRY_LATER, now + o.delay), else_=t.next_attempt_at
        ),
    }
    return update(table).where(t.id == o.id).values(values).returning(*table.c)
