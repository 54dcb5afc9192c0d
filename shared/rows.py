"""An object's row after its create: read while alive, updated by generation, deleted into a
tombstone, listed a keyset page at a time. The other half of the idempotency mechanism
(:mod:`shared.idempotent` creates), written once for every resource.

An update applies only when its generation is higher than the stored one, so a stale or repeated
one changes nothing; a delete leaves a tombstone, so a second answers 410 and a late create never
brings the ID back. The UUIDv7 horizon answers for an absent ID as it does for a create.

Every function takes the session as ``db_session`` and never commits: the caller's transaction
owner does.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import RowMapping

from shared.errors import Gone, IdConflict, IdExpired, NotFound
from shared.horizon import Horizon
from shared.idempotent import deleted, jsonable
from shared.registry import Resource


class Deletion(enum.Enum):
    DELETED = "deleted"  # it was alive; now it is a tombstone
    ALREADY_DELETED = "already_deleted"  # it was a tombstone already
    NEVER_SEEN = "never_seen"  # nothing had that ID; a tombstone now holds it


def get_live(
    *,
    db_session: Connection,
    resource: Resource,
    object_id: Any,
    horizon: Horizon,
    scope: Mapping[str, Any] | None = None,
) -> RowMapping:
    """The object, if it exists, is alive and lies within ``scope``.

    :raise NotFound: no such object (within ``scope``).
    :raise IdExpired: none, and its ID (or its parent's, when the parent has no row) is older than the horizon.
    :raise Gone: it was deleted.
    """
    row = _read(db_session, resource, object_id, scope, horizon)
    if row["deleted_at"] is not None:
        raise deleted(resource, row)
    return row


def apply_update(
    *,
    db_session: Connection,
    resource: Resource,
    object_id: Any,
    generation: int,
    values: Mapping[str, Any],
    horizon: Horizon,
    scope: Mapping[str, Any] | None = None,
) -> tuple[RowMapping, bool]:
    """Apply ``values`` only if ``generation`` is newer; return ``(row, applied)``.

    A stale or repeated update changes nothing and returns the current row, so
    updates delivered late or twice can never move an object backwards.

    :raise IdConflict: the ID names an object outside ``scope``: nothing changes.
    :raise NotFound: no such object.
    :raise IdExpired: none, and its ID is older than the horizon.
    :raise Gone: it was deleted.
    """
    table = resource.table
    stmt = (
        update(table)
        .where(
            table.c.id == object_id,
            table.c.deleted_at.is_(None),
            table.c.generation < generation,
            *_scope_clauses(table, scope),
        )
        .values(**values, generation=generation, updated_at=func.now())
        .returning(*table.c)
    )
    row = db_session.execute(stmt).mappings().first()
    if row is not None:
        return row, True
    _refuse_elsewhere(db_session, resource, object_id, scope)
    return get_live(db_session=db_session, resource=resource, object_id=object_id, horizon=horizon, scope=scope), False


def mark_deleted(
    *,
    db_session: Connection,
    resource: Resource,
    object_id: Any,
    horizon: Horizon,
    scope: Mapping[str, Any] | None = None,
) -> Deletion:
    """Turn the object into a tombstone, with its children; say what it was.

    An ID never seen gets a tombstone as well, so a create that was delayed in
    the network behind this delete still finds the ID deleted; unless the ID
    is older than the horizon: no create of it can come any more, and nothing
    is recorded. Under a deleted parent the object is gone with its parent
    (``already_deleted``, 410), and its own tombstone is recorded all the
    same: whoever checks that every deleted ID holds one (platform_svc's
    drift repair re-sends a delete it finds missing) finds it.

    :raise IdConflict: the ID names an object outside ``scope`` (under another
        parent, or of another owner when ``scope`` names one): nothing changes.
    :raise NotFound: its parent does not exist (a tombstone needs an existing parent).
    :raise IdExpired: no row has the ID, which is older than the horizon
        (or the parent has none, and its ID is).
    """
    table = resource.table
    if soft_delete(db_session, resource, [table.c.id == object_id, *_scope_clauses(table, scope)]):
        return Deletion.DELETED
    _refuse_elsewhere(db_session, resource, object_id, scope)
    if horizon.expired(object_id):
        # Never inserted: the row, if there is one, decides (410 gone), else 410 id_expired.
        _read(db_session, resource, object_id, scope, horizon)
        return Deletion.ALREADY_DELETED
    parent_gone = resource.parent is not None and _parent_deleted(db_session, resource, scope, horizon)
    tombstone = {"id": object_id, **(scope or {}), "deleted_at": func.now()}
    stmt = insert(table).values(**tombstone).on_conflict_do_nothing(index_elements=[table.c.id]).returning(table.c.id)
    if db_session.execute(stmt).first() is not None:
        return Deletion.ALREADY_DELETED if parent_gone else Deletion.NEVER_SEEN
    # The ID exists: deleted already, under another parent, or created by a
    # request that committed between our UPDATE and INSERT. Lock it and decide.
    row = _read(db_session, resource, object_id, scope, horizon, for_update=True)
    if row["deleted_at"] is not None:
        return Deletion.ALREADY_DELETED
    soft_delete(db_session, resource, [table.c.id == object_id])
    return Deletion.DELETED


def _refuse_elsewhere(db_session: Connection, resource: Resource, object_id: Any, scope: Mapping[str, Any] | None) -> None:
    """A write naming an object where it is not (a rule under another cluster, another team's
    cluster) changes nothing there: the caller's object is not that one.

    Read only when the write's own conditional statement missed, so the usual
    write pays nothing for it.

    :raise IdConflict: the ID's row lies outside ``scope``, naming the columns that differ.
    """
    if not scope:
        return
    table = resource.table
    row = db_session.execute(select(*(table.c[name] for name in scope)).where(table.c.id == object_id)).mappings().first()
    if row is None:
        return
    conflicts = [
        {"field": name, "stored": jsonable(row[name]), "sent": jsonable(value)}
        for name, value in scope.items()
        if row[name] != value
    ]
    if conflicts:
        raise IdConflict(resource.words, object_id, conflicts)


def list_live(
    *,
    db_session: Connection,
    resource: Resource,
    filters: Mapping[str, Any],
    limit: int,
    after: Any = None,
    include_deleted: bool = False,
    root_columns: Sequence[str] = (),
) -> tuple[Sequence[RowMapping], Any]:
    """One page of objects in id order; return ``(rows, next_after)``.

    Live objects only, unless ``include_deleted`` (tombstones too, bare ones
    included: a caller comparing its own records with these needs to see
    every ID that is taken). ``root_columns`` adds those columns of each
    object's root ancestor to its row, under their own names (the ``team_id``
    of a firewall rule's cluster), read by the same statement.
    """
    table = resource.table
    stmt = select(table).where(*_scope_clauses(table, filters))
    if not include_deleted:
        stmt = stmt.where(table.c.deleted_at.is_(None))
    if root_columns:
        root = resource.root
        stmt = stmt.add_columns(*[root.table.c[name] for name in root_columns]).join(
            root.table, root.table.c.id == table.c[root.id_column]
        )
    return keyset_page(db_session, stmt, table.c.id, after=after, limit=limit)


def keyset_page(
    db_session: Connection, stmt: Any, key: Any, *, after: Any, limit: int
) -> tuple[Sequence[RowMapping], Any]:
    """One page of ``stmt`` in ``key`` order, after the cursor ``after``; return ``(rows,
    next_after)``, ``next_after`` None on the last page. One row more than the page is read, so
    a last page that is exactly full says so instead of sending the caller to an empty one."""
    if after is not None:
        stmt = stmt.where(key > after)
    rows = db_session.execute(stmt.order_by(key).limit(limit + 1)).mappings().all()
    if len(rows) > limit:
        return rows[:limit], rows[limit - 1][key.name]
    return rows, None


def soft_delete(db_session: Connection, resource: Resource, where: list[Any]) -> bool:
    """Tombstone the live row matching ``where``, and everything under it; False if none was alive."""
    table = resource.table
    stmt = (
        update(table)
        .where(table.c.deleted_at.is_(None), *where)
        .values(deleted_at=func.now(), updated_at=func.now())
        .returning(table.c.id)
    )
    deleted_id = db_session.execute(stmt).scalar()
    if deleted_id is None:
        return False
    # Every descendant's row names all its ancestors, so each level is one UPDATE by this ID.
    for descendant in resource.descendants:
        column = descendant.table.c[resource.id_column]
        db_session.execute(
            update(descendant.table)
            .where(column == deleted_id, descendant.table.c.deleted_at.is_(None))
            .values(deleted_at=func.now(), updated_at=func.now())
        )
    return True


def _read(
    db_session: Connection,
    resource: Resource,
    object_id: Any,
    scope: Mapping[str, Any] | None,
    horizon: Horizon,
    *,
    for_update: bool = False,
) -> RowMapping:
    """The row with the ID within ``scope``.

    :raise NotFound: none (or, for a child, no such parent). :raise IdExpired: none,
        and the ID (or the missing parent's) is older than the horizon.
        :raise Gone: the parent was deleted.
    """
    table = resource.table
    stmt = select(table).where(table.c.id == object_id, *_scope_clauses(table, scope))
    if for_update:
        stmt = stmt.with_for_update()
    row = db_session.execute(stmt).mappings().first()
    if row is None:
        if resource.parent is not None and scope:
            _require_live_parent(db_session, resource, scope, horizon)
        if horizon.expired(object_id):
            raise IdExpired(horizon.refusal(resource.describe(object_id)))
        raise NotFound(f"{resource.describe(object_id)} does not exist.")
    return row


def _require_live_parent(
    db_session: Connection, resource: Resource, scope: Mapping[str, Any], horizon: Horizon
) -> None:
    """The parent ``scope`` names, under the ancestors it names.

    :raise NotFound: no such parent (there). :raise IdExpired: none, and its ID is
        older than the horizon. :raise Gone: the parent was deleted.
    """
    if _parent_deleted(db_session, resource, scope, horizon):
        raise Gone(f"{resource.parent.describe(scope[resource.parent_column])} was deleted.")


def _parent_deleted(db_session: Connection, resource: Resource, scope: Mapping[str, Any], horizon: Horizon) -> bool:
    """Whether the parent ``scope`` names (under the ancestors it names) is a tombstone.

    :raise NotFound: no such parent (there). :raise IdExpired: none, and its ID is older than the horizon.
    """
    parent = resource.parent
    parent_id = scope[resource.parent_column]
    where = [parent.table.c.id == parent_id, *_scope_clauses(parent.table, _within(parent, scope))]
    deleted_at = db_session.execute(select(parent.table.c.deleted_at).where(*where)).first()
    if deleted_at is None and horizon.expired(parent_id):
        raise IdExpired(horizon.refusal(parent.describe(parent_id)))
    if deleted_at is None:
        raise NotFound(f"{parent.describe(parent_id)} does not exist.")
    return deleted_at[0] is not None


def _within(resource: Resource, scope: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``scope`` that names ``resource``'s own ancestors."""
    return {column: scope[column] for column in resource.scope_columns if column in scope}


def _scope_clauses(table: Table, scope: Mapping[str, Any] | None) -> list[Any]:
    return [table.c[name] == value for name, value in (scope or {}).items()]
