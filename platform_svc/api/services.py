"""platform_svc's rules: accounts, and recording the intent for each object.

Each function takes the session as ``db_session`` and never commits. Pushing
down is :mod:`platform_svc.push.pusher`'s business, after the intent is committed.
"""
from __future__ import annotations

import functools
import hashlib
import json
import secrets
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import uuid6
from sqlalchemy import Connection, func, insert, select, update
from sqlalchemy.engine import RowMapping

from platform_svc.api import auth
from platform_svc.models import Account
from platform_svc.push.recording import fail_waiting_descendants
from platform_svc.states import SyncState
from shared.clock import ClockWatch
from shared.declaration import HIGHEST_GENERATION
from shared.errors import Gone, HttpProblem, IdConflict
from shared.horizon import Horizon, uuid7_millis
from shared.idempotent import CreateOutcome, CreateResult, create_or_return, create_or_return_many
from shared.registry import Resource
from shared.repeated_headers import came_repeated
from shared.rows import get_live, list_live, soft_delete

# A clock set back by less than this still mints IDs in order (after the last one); set back
# further, the IDs follow it (docs/decisions/0016-clocks.md).
KEEP_ORDER_ACROSS = 1000  # milliseconds
_minted = threading.Lock()
_last_minted = (0, 0)  # (unix milliseconds, the 12-bit counter) of the last ID this process minted


def new_id() -> uuid.UUID:
    """Every ID the system uses is invented here: a UUIDv7 of this host's clock as it reads now.

    IDs minted in one millisecond are ordered by a 12-bit counter (RFC 9562's
    "fixed bit-length dedicated counter"), and a clock that goes back by under
    a second still mints after the last ID. Not the uuid6 package's
    ``uuid7()``: it never lets its time go back, so after a clock that ran
    ahead is corrected it goes on minting IDs of that future time, refused
    downstream (422) for as long as the clock had been ahead.
    """
    global _last_minted
    millis = time.time_ns() // 1_000_000
    with _minted:
        last, counter = _last_minted
        if last - KEEP_ORDER_ACROSS < millis <= last:
            millis, counter = (last, counter + 1) if counter < 0xFFF else (last + 1, 0)
        else:
            counter = secrets.randbits(11)  # a random start, with room to count up
        _last_minted = (millis, counter)
    return uuid6.UUID(int=(millis << 80) | (counter << 64) | secrets.randbits(62), version=7)


# Accounts ------------------------------------------------------------------


def create_account(*, db_session: Connection, name: str, rate_limit: int | None = None) -> tuple[uuid.UUID, str]:
    """Create an account with its first API key; return its id and the key, which is never stored.

    ``rate_limit``: its own public requests per second (None: the default, ``ACCOUNT_RATE_LIMIT``).
    """
    account_id = new_id()
    db_session.execute(insert(Account).values(id=account_id, name=name, rate_limit=rate_limit))
    return account_id, auth.issue_key(db_session=db_session, account_id=account_id)


# Objects -------------------------------------------------------------------


class InvalidIdempotencyKey(HttpProblem):
    status, code = 400, "invalid_idempotency_key"


class IdempotencyKeyReused(HttpProblem):
    status, code = 422, "idempotency_key_reused"


class GenerationExhausted(HttpProblem):
    """A PATCH of an object already at the highest generation: no later one could be pushed."""

    status, code = 409, "generation_exhausted"


def check_idempotency_key(header: str | None, environ: Mapping[str, Any] | None = None) -> str | None:
    """The Idempotency-Key as the IETF draft has it: one per request, 1-255 printable ASCII characters.

    The header arrives as WSGI has it, one character per byte, so a non-ASCII
    key ("café" in UTF-8) shows up as characters above 0x7E and is refused,
    rather than stored garbled. Whitespace around it is HTTP's, not the key's.

    The field sent on two lines reaches the app joined with a comma ("one,two"),
    exactly like one key that contains a comma; the request's ``environ`` tells
    them apart where the server recorded the repeat (the services' gunicorn
    worker does: :mod:`shared.repeated_headers`). Two keys are refused; one key
    with a comma is a key like any other.

    :raise InvalidIdempotencyKey:
    """
    if header is None:
        return None
    if environ is not None and came_repeated(environ, "Idempotency-Key"):
        raise InvalidIdempotencyKey(
            "Send one Idempotency-Key per request: this request carried the header more than once."
        )
    key = header.strip(" \t")
    if not 1 <= len(key) <= 255 or not all(" " <= char <= "~" for char in key):
        raise InvalidIdempotencyKey(
            "The Idempotency-Key header must be 1 to 255 printable ASCII characters (space to '~')."
        )
    return key


def create_object(
    *,
    db_session: Connection,
    resource: Resource,
    values: Mapping[str, Any],
    idempotency_key: str,
    lease: timedelta,
    horizon: Horizon = Horizon(),
    clock: ClockWatch | None = None,
) -> tuple[RowMapping, bool]:
    """Record a new object (a fresh UUIDv7) created with an Idempotency-Key, with a lease for the
    inline push (none when ``lease`` is 0); without a key, :func:`create_objects`.

    The key is unique per account on the object's own
    row: the same key and body return the first object as it is now (also
    while the first request is still pushing it: the draft's optional 409 for
    a request in flight is not needed, since the row is committed before the
    push); another body is a 422; the key of a deleted object a 410. The key
    lives as long as its row: once ``platform-svc purge`` removed the deleted
    object, the key is free again. (The ID is new, so the horizon never
    refuses it; any ``horizon`` will do.)

    :raise IdempotencyKeyReused: the key was used with another body.
    :raise Gone: the key's object was deleted.
    :raise NotFound, Gone: the parent is missing or deleted.
    :raise ClockSkew: ``clock`` given, and the new ID's time is too far from the database's (see
        :func:`create_objects`).
    """
    row_values = {
        **_row_values(values, lease),
        "idempotency_key": idempotency_key,
        "request_fingerprint": _fingerprint(values),
    }
    try:
        row, created = create_or_return(
            db_session=db_session, resource=resource, values=row_values, horizon=horizon,
            conflict_on=("account_id", "idempotency_key"),
        )
    except IdConflict:
        raise IdempotencyKeyReused(
            f"Idempotency-Key {idempotency_key!r} was already used with a different request body; "
            "use a new key for a different request.",
        ) from None
    if created and clock is not None:
        _check_minted(clock, [row])
    if created and resource.parent is not None:
        row = _fail_under_failed_parent(db_session, resource, row)
    return row, created


def create_objects(
    *,
    db_session: Connection,
    resource: Resource,
    items: Sequence[Mapping[str, Any]],
    lease: timedelta,
    horizon: Horizon = Horizon(),
    clock: ClockWatch | None = None,
) -> list[CreateResult]:
    """Record new objects without an Idempotency-Key, each with a fresh UUIDv7 and the
    same lease, with one INSERT (:func:`create_or_return_many`); one result per item.

    Each item is what a create with a key makes of it alone (a child under
    a missing or deleted parent is refused, under a failed one it fails at once).

    With ``clock``, each new ID (minted on this host's clock) is checked against
    the database's time in the statement that stored it (the row's
    ``created_at``, the database's ``now()``): an ID off by more than the clock's
    bound would be refused downstream, as from the future or already expired,
    and is never committed. This holds even for a clock that stepped a moment
    ago, before the watch measured it again: no ID a caller is given is dead on arrival.

    :raise ClockSkew: an ID's time is too far from the database's (the caller's transaction rolls back).
    """
    rows = [{**_row_values(values, lease), "idempotency_key": None, "request_fingerprint": None} for values in items]
    results = create_or_return_many(db_session=db_session, resource=resource, items=rows, horizon=horizon)
    if clock is not None:
        _check_minted(clock, [result.row for result in results if result.outcome is CreateOutcome.CREATED])
    if resource.parent is None:
        return results
    return [
        CreateResult(result.outcome, _fail_under_failed_parent(db_session, resource, result.row))
        if result.outcome is CreateOutcome.CREATED else result
        for result in results
    ]


def _check_minted(clock: ClockWatch, rows: Sequence[RowMapping]) -> None:
    """:raise ClockSkew: a new row's ID is too far from the database's time that stored it."""
    for row in rows:
        clock.check_minted(uuid7_millis(row["id"]), row["created_at"].timestamp())


def _row_values(values: Mapping[str, Any], lease: timedelta) -> dict[str, Any]:
    return {"id": new_id(), **values, "lease_until": _lease_until(lease) if lease else None}


def _fail_under_failed_parent(db_session: Connection, resource: Resource, row: RowMapping) -> RowMapping:
    """A new child whose parent's create failed for good can never be pushed: it fails at once,
    its reason naming the parent (``parent_failed: <id> <code>``).

    The insert held a share lock on the parent row, so the parent cannot fail
    between this statement and the commit; if it fails after, its failure
    takes this child along (:func:`platform_svc.push.recording.fail_waiting_descendants`).
    """
    if fail_waiting_descendants(db_session=db_session, resource=resource.parent, only=(resource, row["id"])):
        return read_row(db_session, resource, row["id"])
    return row


@functools.lru_cache(maxsize=8)
def _lease_until(lease: timedelta) -> Any:
    """``now() + lease`` as one reused expression, so the INSERT is built once."""
    return func.now() + lease


def _fingerprint(values: Mapping[str, Any]) -> str:
    canonical = json.dumps(values, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def get_object(
    *, db_session: Connection, resource: Resource, account_id: uuid.UUID, object_id: Any, horizon: Horizon, **scope: Any
) -> RowMapping:
    """:raise NotFound: not this account's (or no such object). :raise Gone: deleted.
    :raise IdExpired: none in this account, and the ID is older than the horizon (its row may be purged)."""
    return get_live(
        db_session=db_session, resource=resource, object_id=object_id, horizon=horizon,
        scope={"account_id": account_id, **scope},
    )


def own_parent(
    *, db_session: Connection, resource: Resource, account_id: uuid.UUID, scope: Mapping[str, Any], horizon: Horizon
) -> RowMapping:
    """The parent ``scope`` names, if it is this account's and lies under the ancestors ``scope`` names.

    :raise NotFound: not this account's (or no such parent). :raise Gone: deleted.
    """
    parent = resource.parent
    return get_object(
        db_session=db_session, resource=parent, account_id=account_id, object_id=scope[parent.id_column],
        horizon=horizon, **{column: scope[column] for column in parent.scope_columns},
    )


def list_objects(
    *,
    db_session: Connection,
    resource: Resource,
    filters: Mapping[str, Any],
    limit: int,
    after: Any,
    idempotency_key: str | None = None,
) -> tuple[Sequence[RowMapping], Any]:
    """A page of live objects; with ``idempotency_key`` (and the account among ``filters``), the one
    object that key created, if it is alive: one lookup in the (account, key) unique index."""
    if idempotency_key is not None:
        filters = {**filters, "idempotency_key": idempotency_key}
    return list_live(db_session=db_session, resource=resource, filters=filters, limit=limit, after=after)


def update_object(
    *,
    db_session: Connection,
    resource: Resource,
    account_id: uuid.UUID,
    object_id: Any,
    changes: Mapping[str, Any],
    horizon: Horizon,
    **scope: Any,
) -> RowMapping:
    """Apply ``changes`` and bump the generation, so the change is pushed down.

    :raise NotFound, Gone, IdExpired:
    :raise GenerationExhausted: the object is at :data:`HIGHEST_GENERATION` (nothing is changed).
    """
    table = resource.table
    current = get_object(
        db_session=db_session, resource=resource, account_id=account_id, object_id=object_id, horizon=horizon, **scope
    )
    if current["generation"] >= HIGHEST_GENERATION:
        raise GenerationExhausted(
            f"{resource.describe(object_id)} is at generation {current['generation']}, the highest there is:"
            " it cannot be changed any more. Create a new one."
        )
    stmt = (
        update(table)
        .where(table.c.id == object_id, table.c.deleted_at.is_(None), table.c.generation < HIGHEST_GENERATION)
        .values(**changes, generation=table.c.generation + 1, updated_at=func.now())
        .returning(*table.c)
    )
    row = db_session.execute(stmt).mappings().first()
    if row is None:  # deleted (or moved to the highest generation) between the two statements
        return update_object(
            db_session=db_session, resource=resource, account_id=account_id, object_id=object_id, changes=changes,
            horizon=horizon, **scope,
        )
    return row


def delete_object(
    *, db_session: Connection, resource: Resource, account_id: uuid.UUID, object_id: Any, horizon: Horizon, **scope: Any
) -> RowMapping:
    """Record the delete (children too); it is pushed down afterwards.

    :raise NotFound: not this account's. :raise Gone: already deleted.
    :raise IdExpired: none in this account, and the ID is older than the horizon.
    """
    get_object(
        db_session=db_session, resource=resource, account_id=account_id, object_id=object_id, horizon=horizon, **scope
    )
    if not soft_delete(db_session, resource, [resource.table.c.id == object_id]):
        raise Gone(f"{resource.describe(object_id)} was already deleted.")
    return read_row(db_session, resource, object_id)


def claim(*, db_session: Connection, resource: Resource, object_id: Any, lease: timedelta) -> RowMapping | None:
    """Take the push lease on one row unless another pusher holds it.

    A failed row is not claimed: its failure waits for an operator
    (``platform-svc sync-status --retry-failed``). Pushing it on the next
    public write could, after an ``id_conflict``, update or delete the other
    object that holds its ID downstream.
    """
    table = resource.table
    stmt = (
        update(table)
        .where(
            table.c.id == object_id,
            table.c.sync_state != SyncState.FAILED,
            (table.c.lease_until.is_(None)) | (table.c.lease_until < func.now()),
        )
        .values(lease_until=func.now() + lease)
        .returning(*table.c)
    )
    return db_session.execute(stmt).mappings().first()


def read_row(db_session: Connection, resource: Resource, object_id: Any) -> RowMapping:
    """The row of ``object_id``, whatever its state (deleted too): a caller has checked it is the account's."""
    return db_session.execute(select(resource.table).where(resource.table.c.id == object_id)).mappings().one()


def read_rows(db_session: Connection, resource: Resource, object_ids: Sequence[Any]) -> dict[Any, RowMapping]:
    """The rows of ``object_ids`` by ID, whatever their state, in one statement; an ID with no row is left out."""
    table = resource.table
    return {row["id"]: row for row in db_session.execute(select(table).where(table.c.id.in_(object_ids))).mappings()}


