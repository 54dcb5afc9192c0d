"""A public write, in one place a reader can hold: validate, decide the ID, commit, push inline,
record, answer.

Each of :meth:`Writes.create`, :meth:`Writes.update` and :meth:`Writes.delete` is the whole
step of one kind of write, and calls only down: :mod:`platform_svc.api.services` for the rules
and the statements (the ID is minted there), the inline pusher
(:mod:`platform_svc.push.inline`) for the push and its recording, :mod:`platform_svc.api.waiting`
for ``Prefer: wait``. The views only parse the request and turn a :class:`Written` into the
answer. The row is always committed before anything is pushed: nothing that fails after the
commit reaches the caller (the row stays ``pending``; the reconciler finishes it).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy.engine import RowMapping

from platform_svc.api import services, waiting
from platform_svc.push.inline import InlinePusher
from platform_svc.states import SyncState
from shared.clock import ClockWatch
from shared.coalesce import Coalescer
from shared.db import Database
from shared.errors import database_unavailable
from shared.horizon import Horizon
from shared.idempotent import CreateResult
from shared.registry import Resource

CREATES_PER_FLUSH = 100
NO_LEASE = timedelta(0)  # while the breaker is open: committed without a lease, the reconciler's at once


@dataclass(frozen=True)
class Written:
    """What a write answers: the object as it is now, whether this request made it (a create that
    replayed its Idempotency-Key did not), and the seconds of ``Prefer: wait`` it honoured."""

    row: RowMapping
    created: bool = False
    waited: int | None = None


@dataclass(eq=False)  # one per app: it holds the creates in flight in this worker (its coalescers)
class Writes:
    """The public writes of one app. ``inline_lease`` (``INLINE_LEASE_SECONDS``) is how long a
    written row is leased to its inline push: long enough for the push with its quick retries;
    if this process dies first, the lease runs out and the reconciler takes over."""

    database: Database
    pusher: InlinePusher
    horizon: Horizon
    clock: ClockWatch | None
    inline_lease: timedelta
    creates_in_flight: dict[tuple[str, timedelta], Coalescer[dict[str, Any], CreateResult]] = field(
        default_factory=dict, init=False, repr=False,
    )
    rereads: waiting.Rereads = field(init=False, repr=False)  # what requests waiting for an outcome read

    def __post_init__(self) -> None:
        self.rereads = waiting.Rereads(self.database)

    def create(
        self, resource: Resource, values: dict[str, Any], *, account_id: uuid.UUID, scope: dict[str, Any],
        idempotency_key: str | None, wait: int | None,
    ) -> Written:
        """Create an object of ``resource`` in ``account_id`` under the parent ``scope`` names.

        1. The parent must be this account's (an account never changes, so this is
           checked apart; that it is alive is checked by the insert itself).
        2. Commit the row with a fresh UUIDv7 and a lease for the inline push; with an
           Idempotency-Key alone, without one with the creates in flight beside it (one
           INSERT and one commit). While the breaker is open the row is committed
           without a lease, answered ``pending`` and not pushed: one statement, no call.
        3. Push it inline and record the answer (a replay of the key is not pushed again;
           a child under a parent that failed for good failed at once, and is not either).

        :raise InvalidIdempotencyKey, IdempotencyKeyReused, NotFound, Gone, ClockSkew:
        """
        if resource.parent is not None:
            with self.database.begin() as db_session:
                services.own_parent(
                    db_session=db_session, resource=resource, account_id=account_id, scope=scope, horizon=self.horizon
                )
        values = {**values, **scope, "account_id": account_id}
        pushing = not self.pusher.holding_off
        lease = self.inline_lease if pushing else NO_LEASE
        if idempotency_key is None:
            row, created = self._creates_of(resource, lease).submit(values).unwrap()
        else:
            with self.database.begin() as db_session:
                row, created = services.create_object(
                    db_session=db_session, resource=resource, values=values, idempotency_key=idempotency_key,
                    lease=lease, horizon=self.horizon, clock=self.clock,
                )
        if created and pushing and row["sync_state"] != SyncState.FAILED:
            row = self.pusher.push_now(resource, row)  # never raises: the row is committed
        return self._settled(resource, row, wait, created=created)

    def update(
        self, resource: Resource, changes: dict[str, Any], *, account_id: uuid.UUID, object_id: Any,
        scope: dict[str, Any], wait: int | None,
    ) -> Written:
        """Apply ``changes`` (the generation bumped), commit, and push it inline if this request takes
        the row's lease (else the pusher holding it, or the reconciler, pushes it).

        :raise NotFound, Gone, IdExpired, GenerationExhausted:
        """
        with self.database.begin() as db_session:
            row = services.update_object(
                db_session=db_session, resource=resource, account_id=account_id, object_id=object_id,
                changes=changes, horizon=self.horizon, **scope,
            )
            claimed = self._claim(db_session, resource, row)
        return self._settled(resource, self._push_if_claimed(resource, row, claimed), wait)

    def delete(
        self, resource: Resource, *, account_id: uuid.UUID, object_id: Any, scope: dict[str, Any], wait: int | None,
    ) -> Written:
        """Record the delete (the object's children too), commit, and push it as :meth:`update` does.

        :raise NotFound, Gone, IdExpired:
        """
        with self.database.begin() as db_session:
            row = services.delete_object(
                db_session=db_session, resource=resource, account_id=account_id, object_id=object_id,
                horizon=self.horizon, **scope,
            )
            claimed = self._claim(db_session, resource, row)
        return self._settled(resource, self._push_if_claimed(resource, row, claimed), wait)

    def _settled(self, resource: Resource, row: RowMapping, wait: int | None, *, created: bool = False) -> Written:
        """``row`` once it settled, when the request asked to wait for it (``Prefer: wait=N``)."""
        if wait is None:
            return Written(row, created)
        return Written(waiting.wait_for_outcome(self.rereads, resource, row, wait), created, wait)

    def _claim(self, db_session, resource: Resource, row: RowMapping) -> RowMapping | None:
        """Within the write's transaction: take the lease if free (else another pusher has the row)."""
        return services.claim(db_session=db_session, resource=resource, object_id=row["id"], lease=self.inline_lease)

    def _push_if_claimed(self, resource: Resource, row: RowMapping, claimed: RowMapping | None) -> RowMapping:
        return self.pusher.push_now(resource, claimed) if claimed is not None else row

    def _creates_of(self, resource: Resource, lease: timedelta) -> Coalescer[dict[str, Any], CreateResult]:
        """The creates of ``resource`` without an Idempotency-Key in flight in this worker, with this
        lease: each flush records them with one INSERT and one commit (:mod:`shared.coalesce`). A
        database that cannot serve it fails the flush's requests (503: nothing was committed); any
        other failure of a shared flush sends its items again one by one."""
        if (resource.key, lease) not in self.creates_in_flight:
            self.creates_in_flight[resource.key, lease] = Coalescer(
                lambda items: self._record_creates(resource, lease, items),
                max_items=CREATES_PER_FLUSH,
                alone_on=lambda error: not database_unavailable(error),
            )
        return self.creates_in_flight[resource.key, lease]

    def _record_creates(self, resource: Resource, lease: timedelta, items: list[dict[str, Any]]) -> list[CreateResult]:
        with self.database.begin() as db_session:
            return services.create_objects(
                db_session=db_session, resource=resource, items=items, lease=lease, horizon=self.horizon,
                clock=self.clock,
            )
