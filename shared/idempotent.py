"""Create-or-return by caller-assigned ID: the heart of the idempotency mechanism,
written once for every resource (the rest of an object's life, its generations
and its tombstone, is :mod:`shared.rows`): there is no key table and no stored
response. The ID the caller
chose is the key, a soft-deleted row is the tombstone, and ``generation`` is
the version the upstream wants.

Every function takes the session as ``db_session`` and never commits: the
caller's transaction owner does.

The UUIDv7 horizon (:mod:`shared.horizon`) is decided here too, for every
route alike: an ID older than the horizon is never inserted (a create of it
only reads), and where it has no row the answer is 410 ``id_expired``, not a
create, a tombstone or a 404. A row that exists answers as it always did,
whatever its age.

Statements, not the ORM unit of work: a create is exactly one
``INSERT ... ON CONFLICT DO NOTHING RETURNING`` and a replay adds exactly one
read. Never SELECT-then-INSERT: two concurrent creates would both miss the
SELECT and one would fail on the primary key. With ``ON CONFLICT`` the second
waits for the first to commit, then finds its row. A batch is the same create
for many items at once (one INSERT, at most one read), and a single create is
a batch of one.
"""
from __future__ import annotations

import enum
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, any_, bindparam, func, select
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.engine import RowMapping
from sqlalchemy.sql import ClauseElement

from shared.errors import Gone, HttpProblem, IdConflict, IdExpired, NotFound, TryAgain
from shared.horizon import Horizon
from shared.prebuilt import execute_prebuilt
from shared.registry import Resource


class CreateOutcome(enum.Enum):
    """What a create did with one item (the ``outcome`` label of ``idempotent_creates_total``)."""

    CREATED = "created"
    REPLAYED = "replayed"  # the ID existed with the same immutable fields
    CONFLICT = "conflict"  # the ID exists with different immutable fields
    GONE = "gone"  # the ID, or its parent, was deleted
    EXPIRED = "expired"  # the ID (or its parent's) is older than the horizon and has no row
    NOT_FOUND = "not_found"  # the parent does not exist


@dataclass(frozen=True, slots=True)
class CreateResult:
    """One item's answer: the row (created or replayed), or the problem that refused it."""

    outcome: CreateOutcome
    row: RowMapping | None = None
    error: HttpProblem | None = None

    @property
    def status(self) -> int:
        if self.error is not None:
            return self.error.status
        return 201 if self.outcome is CreateOutcome.CREATED else 200

    def unwrap(self) -> tuple[RowMapping, bool]:
        """``(row, created)``; :raise HttpProblem: the item was refused."""
        if self.error is not None:
            raise self.error
        return self.row, self.outcome is CreateOutcome.CREATED


def create_or_return(
    *,
    db_session: Connection,
    resource: Resource,
    values: Mapping[str, Any],
    horizon: Horizon,
    conflict_on: Sequence[str] = ("id",),
) -> tuple[RowMapping, bool]:
    """Insert the object unless its key exists; return ``(row, created)``.

    A batch of one (:func:`create_or_return_many`). The key is the ID, or the
    columns of another unique constraint named by ``conflict_on``
    (platform_svc keys on the account's Idempotency-Key).

    :raise Gone: the ID is a tombstone, or the parent is deleted.
    :raise IdExpired: the ID (or its parent's) is older than the horizon and has no row.
    :raise NotFound: the parent does not exist.
    :raise IdConflict: the ID exists with different immutable fields.
    :raise TryAgain: the row landed too late to be sure no purge passed its ID.
    """
    return create_or_return_many(
        db_session=db_session, resource=resource, items=(values,), horizon=horizon, conflict_on=conflict_on
    )[0].unwrap()


def create_or_return_many(
    *,
    db_session: Connection,
    resource: Resource,
    items: Sequence[Mapping[str, Any]],
    horizon: Horizon,
    conflict_on: Sequence[str] = ("id",),
) -> list[CreateResult]:
    """Create-or-return each item; return one result per item, in order.

    One INSERT ... ON CONFLICT DO NOTHING RETURNING for all items, then, only
    if some key already existed, one read of those. An item whose ID is older
    than the horizon is never inserted: it is only read, and answers
    ``expired`` when it has no row. Each item answers exactly
    what its own create, sent alone in the same order, would have: a key
    repeated within the batch is decided by its first occurrence and the
    repeats are replays of that row (200, or 409 when their immutable fields
    differ).

    Concurrent batches that overlap cannot deadlock: rows are inserted in id
    order, so every transaction waits on the others' keys in the same order.

    Several items need the ID as the key, one set of columns and plain values,
    in the Python types the columns return (UUIDs, not their text); a SQL
    expression only as the very same object in every item (platform_svc's
    ``now() + lease``), stored as it is for each row. One item may use any key
    and expressions (platform_svc's Idempotency-Key).
    """
    conflict_on = tuple(conflict_on)
    if len(items) == 1:
        return [_create_one(db_session, resource, items[0], conflict_on, horizon)]
    if not items:
        return []
    if conflict_on != ("id",):
        raise ValueError("a batch is keyed on the ID")
    now = horizon.clock()
    firsts: dict[Any, Mapping[str, Any]] = {}
    for item in items:
        firsts.setdefault(item["id"], item)
    expired = {object_id for object_id in firsts if horizon.expired(object_id, now)}
    fresh = [item for object_id, item in firsts.items() if object_id not in expired]
    stored = _insert_new(db_session, resource, fresh) if fresh else {}
    _landed_in_time(horizon, stored)
    created = set(stored)
    missing = [object_id for object_id in firsts if object_id not in stored]
    if missing:
        rows = db_session.execute(_select_ids(resource), {"ids": missing}).mappings().all()
        stored.update((row["id"], row) for row in rows)
    orphans = [firsts[object_id] for object_id in missing if object_id not in stored and object_id not in expired]
    parents = _parent_states(db_session, resource, orphans) if orphans else {}

    results = []
    for item in items:
        row = stored.get(item["id"])
        if row is None and item["id"] in expired:
            results.append(_expired(resource, horizon, item["id"]))
        elif row is None:
            results.append(_refused_by_parent(resource, parents, item, horizon))
        elif item["id"] in created:
            created.discard(item["id"])  # its repeats, if any, replay this row
            results.append(CreateResult(CreateOutcome.CREATED, row))
        else:
            results.append(_returned(resource, row, item))
    return results


def _create_one(
    db_session: Connection,
    resource: Resource,
    values: Mapping[str, Any],
    conflict_on: tuple[str, ...],
    horizon: Horizon,
) -> CreateResult:
    """A batch of one: the same steps on prebuilt one-row statements, with no
    keys to pair up (the hot path: a single create)."""
    expired = "id" in values and horizon.expired(values["id"])
    if not expired:
        shape = tuple((name, value if isinstance(value, ClauseElement) else None) for name, value in values.items())
        params = {name: value for name, value in values.items() if not isinstance(value, ClauseElement)}
        row = next(iter(execute_prebuilt(db_session, _insert_statement(resource, shape, conflict_on), params)), None)
        if row is not None:
            _landed_in_time(horizon, {row["id"]: row})
            return CreateResult(CreateOutcome.CREATED, row)
    key = {name: values[name] for name in conflict_on}
    existing = next(iter(execute_prebuilt(db_session, _select_by(resource, conflict_on), key)), None)
    if existing is None and expired:
        return _expired(resource, horizon, values["id"])
    if existing is None:
        return _refused_by_parent(resource, _parent_states(db_session, resource, [values]), values, horizon)
    return _returned(resource, existing, values)


def _expired(resource: Resource, horizon: Horizon, object_id: Any) -> CreateResult:
    return CreateResult(CreateOutcome.EXPIRED, error=IdExpired(horizon.refusal(resource.describe(object_id))))


def _landed_in_time(horizon: Horizon, created: Mapping[Any, RowMapping]) -> None:
    """Rows just inserted whose ID a purge may already have passed are not committed (see shared.horizon).

    Only a create that stalled for minutes between its check and its INSERT
    can meet this; the caller sends it again and is answered by the horizon.

    :raise TryAgain: one did (the caller's transaction rolls back).
    """
    now = horizon.clock()
    late = [object_id for object_id in created if not horizon.landed_in_time(object_id, now)]
    if late:
        raise TryAgain(f"The create of {late[0]} reached the database too late to be checked against the "
                       "ID horizon; nothing was stored. Send it again.")


def _insert_new(db_session: Connection, resource: Resource, items: list[Mapping[str, Any]]) -> dict[Any, RowMapping]:
    """Insert the items whose ID is free with one statement; return the new rows by ID."""
    first = items[0]
    shared = tuple((name, value) for name, value in first.items() if isinstance(value, ClauseElement))
    columns = tuple(name for name in first if not isinstance(first[name], ClauseElement))
    names = set(first)
    if any(
        item.keys() != names
        or any(item[name] is not value for name, value in shared)
        or any(isinstance(item[name], ClauseElement) for name in columns)
        for item in items
    ):
        raise ValueError("a batch needs one set of columns, plain values, and an expression only shared by all")
    params = {name: [item[name] for item in items] for name in columns}
    rows = db_session.execute(_insert_many_statement(resource, columns, shared), params).mappings().all()
    return {row["id"]: row for row in rows}


# How an abandoned row's ``sync_error`` gives the failure it was abandoned for (after who did it).
FAILED_WITH = "it failed with: "


def deleted(resource: Resource, row: Mapping[str, Any], said: str = "was deleted.") -> Gone:
    """The 410 of a deleted row. One a person abandoned (a platform row's ``abandoned_at``) says so,
    and the failure it was abandoned for (not who abandoned it)."""
    if row.get("abandoned_at") is not None:
        failure = (row.get("sync_error") or "").partition(FAILED_WITH)[2] or "not given"
        return Gone(f"{resource.describe(row['id'])} was abandoned by an operator: it could not be made in "
                    f"cluster_svc, so it is deleted and its ID never reused. Its failure: {failure}")
    return Gone(f"{resource.describe(row['id'])} {said}")


def _returned(resource: Resource, row: RowMapping, values: Mapping[str, Any]) -> CreateResult:
    """The answer to a create whose key was taken by ``row``."""
    if row["deleted_at"] is not None:
        return CreateResult(CreateOutcome.GONE, error=deleted(resource, row, "was deleted; a deleted ID is never reused."))
    conflicts = [
        {"field": name, "stored": jsonable(row[name]), "sent": jsonable(values[name])}
        for name in resource.immutable
        if name in values and row[name] != values[name]
    ]
    if conflicts:
        return CreateResult(CreateOutcome.CONFLICT, error=IdConflict(resource.words, row["id"], conflicts))
    return CreateResult(CreateOutcome.REPLAYED, row)


def _parent_states(
    db_session: Connection, resource: Resource, orphans: list[Mapping[str, Any]]
) -> dict[Any, Mapping[str, Any]]:
    """The parents of items that were neither inserted nor found, by parent ID:
    their ``deleted_at`` and the columns naming their own ancestors."""
    if resource.parent is None:
        # Nothing conflicted, yet nothing was inserted: impossible without a parent guard.
        raise AssertionError(f"{resource.describe(orphans[0]['id'])}: insert returned nothing, and no row has the ID")
    parent = resource.parent
    parent_ids = list({item[resource.parent_column] for item in orphans})
    rows = db_session.execute(_select_ids(parent, "id", "deleted_at", *parent.scope_columns), {"ids": parent_ids})
    return {row["id"]: row for row in rows.mappings()}


def _refused_by_parent(
    resource: Resource, parents: Mapping[Any, Mapping[str, Any]], values: Mapping[str, Any], horizon: Horizon
) -> CreateResult:
    """The guarded insert found no live parent under the item's ancestors (and parents never come back to life)."""
    parent_id = values[resource.parent_column]
    parent = parents.get(parent_id)
    if parent is None and horizon.expired(parent_id):
        return _expired(resource.parent, horizon, parent_id)
    if parent is None or any(parent[column] != values[column] for column in resource.parent.scope_columns):
        return CreateResult(CreateOutcome.NOT_FOUND, error=NotFound(f"{resource.parent.describe(parent_id)} does not exist."))
    if parent["deleted_at"] is not None:
        return CreateResult(CreateOutcome.GONE, error=Gone(f"{resource.parent.describe(parent_id)} was deleted."))
    raise AssertionError(f"{resource.describe(values['id'])}: insert returned nothing, yet the parent is alive")


@functools.lru_cache(maxsize=64)
def _insert_statement(resource: Resource, shape: tuple[tuple[str, Any], ...], conflict_on: tuple[str, ...]) -> Any:
    """The create's INSERT, built once per resource and set of columns.

    ``shape`` names the columns, each with the SQL expression to store (such
    as ``now() + interval``) or None for a bound parameter of that name.
    Building and cache-keying a statement on every request cost a quarter of a
    create's CPU; a prebuilt one is compiled once and reused.
    """
    table = resource.table
    columns = {
        name: expression if expression is not None else bindparam(name, type_=table.c[name].type)
        for name, expression in shape
    }
    if resource.parent is None:
        stmt = insert(table).values(columns)
    else:
        # Insert only while the parent is alive, holding a share lock on it so a
        # concurrent delete of the parent either waits for this child (and then
        # tombstones it too) or has already won (and nothing is inserted).
        parent = resource.parent.table
        source = (
            select(*[column.label(name) for name, column in columns.items()])
            .where(*_parent_guard(resource, bindparam), parent.c.deleted_at.is_(None))
            .with_for_update(read=True)
        )
        stmt = insert(table).from_select(list(columns), source)
    return stmt.on_conflict_do_nothing(index_elements=[table.c[name] for name in conflict_on]).returning(*table.c)


@functools.lru_cache(maxsize=64)
def _insert_many_statement(
    resource: Resource, columns: tuple[str, ...], shared: tuple[tuple[str, Any], ...] = ()
) -> Any:
    """The batch's INSERT: one array parameter per column, unnested into rows
    (and each ``shared`` column the same SQL expression for every row).

    One statement for any batch size (multi-row VALUES would need one per
    size). Rows go in in id order, so overlapping batches lock IDs in the same
    order and cannot deadlock. A child is inserted only under a live parent,
    share-locked, exactly as the single insert does.
    """
    table = resource.table
    rows = func.unnest(*[bindparam(name, type_=ARRAY(table.c[name].type)) for name in columns])
    rows = rows.table_valued(*columns).render_derived(name="item")
    source = select(*[rows.c[name] for name in columns], *[value.label(name) for name, value in shared])
    if resource.parent is not None:
        parent = resource.parent.table
        source = (
            source.join_from(rows, parent, and_(*_parent_guard(resource, lambda name: rows.c[name])))
            .where(parent.c.deleted_at.is_(None))
            .with_for_update(read=True, of=parent)
        )
    stmt = insert(table).from_select([*columns, *(name for name, _ in shared)], source.order_by(rows.c.id))
    return stmt.on_conflict_do_nothing(index_elements=[table.c.id]).returning(*table.c)


def _parent_guard(resource: Resource, value: Any) -> list[Any]:
    """The parent row an item names: its ID, under the same ancestors as the item
    (``value(column)`` is the item's value of a column)."""
    parent = resource.parent.table
    return [parent.c[column] == value(column) for column in resource.parent.scope_columns] + [
        parent.c.id == value(resource.parent_column)
    ]


@functools.lru_cache(maxsize=64)
def _select_by(resource: Resource, key: tuple[str, ...]) -> Any:
    table = resource.table
    return select(table).where(*[table.c[name] == bindparam(name) for name in key])


@functools.lru_cache(maxsize=64)
def _select_ids(resource: Resource, *columns: str) -> Any:
    """The rows (or these columns of them) whose id is in the array parameter ``ids``."""
    table = resource.table
    what = [table.c[name] for name in columns] or [table]
    return select(*what).where(table.c.id == any_(bindparam("ids", type_=ARRAY(table.c.id.type))))


def jsonable(value: Any) -> Any:
    """A value as a problem document lists it (a UUID or a network as its text)."""
    return value if value is None or isinstance(value, (int, float, bool, str)) else str(value)
