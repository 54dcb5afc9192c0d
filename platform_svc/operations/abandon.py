"""The way out of an ``id_conflict`` that needs no one else: ``platform-svc abandon`` (and the
console's "Abandon" button) closes a failed row whose ID cluster_svc holds for an object that is
not the platform's.

The row and its descendants are deleted on the platform and closed as never pushed
(``abandoned_at``; their deletes count as settled, since nothing of the platform's was ever
there): its column reads ``synced``, every surface shows it ``abandoned`` (platform_svc.states),
no alert fires for it, and the public API answers its ID 410 saying an operator abandoned it. The ID is retired: the
platform never mints it again, and nothing is ever sent to cluster_svc for it, so the other
team's object is never touched; repair leaves an abandoned row alone. The platform's own copy
downstream is never abandoned: a row whose copy there is the platform's object is refused (delete
it on the platform instead, then retry: decision 0014).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Connection, func, select, update

from platform_svc.operations.copies import RepairError, copy_of
from platform_svc.push import content
from platform_svc.states import SyncState
from shared.client import InternalClient
from shared.db import Database
from shared.idempotent import FAILED_WITH
from shared.registry import Resource


class NotAbandoned(Exception):
    """Why the row was left as it is (nothing changed)."""


@dataclass(frozen=True)
class Abandoned:
    resource: Resource
    object_id: uuid.UUID
    rows: int  # the row and its descendants closed


def abandon(database: Database, client: InternalClient, resource: Resource, object_id: uuid.UUID,
            *, by: str) -> Abandoned:
    """Close the failed row ``object_id`` and its descendants without pushing them (``by``: who).

    :raise NotAbandoned: no such row, it is not failed, cluster_svc could not be asked, or its
        copy there is the platform's own object.
    """
    table = resource.table
    with database.engine.connect() as db_session:
        row = db_session.execute(select(table).where(table.c.id == object_id)).mappings().first()
    if row is None:
        raise NotAbandoned(f"the platform has no {resource.words} {object_id}")
    if row["sync_state"] != SyncState.FAILED:
        raise NotAbandoned(f"{resource.words} {object_id} is {row['sync_state']}, not failed: nothing to abandon")
    try:
        theirs = copy_of(client, resource, object_id)
    except RepairError as exc:
        raise NotAbandoned(f"could not ask cluster_svc for its copy ({exc}); nothing changed, try again") from exc
    if theirs is not None and theirs["alive"] and not content.fixed_differing(resource, row, theirs["fields"]):
        raise NotAbandoned(
            f"cluster_svc's {object_id} is the platform's own object: abandoning would leave it there for good."
            " Delete it on the platform, then retry it"
        )
    with database.begin() as db_session:  # the row first: its descendants only if it was still as read
        closed = _close(db_session, resource, resource.table.c.sync_failed_at == row["sync_failed_at"],
                        resource.table.c.id == object_id, by=by)
        if closed == 0:
            raise NotAbandoned(f"{resource.words} {object_id} changed meanwhile; nothing changed, look again")
        for descendant in resource.descendants:
            closed += _close(db_session, descendant, descendant.table.c[resource.id_column] == object_id, by=by)
    return Abandoned(resource, object_id, closed)


def _close(db_session: Connection, resource: Resource, *chosen: ColumnElement[bool], by: str) -> int:
    """Delete the rows chosen and close them as never pushed; how many."""
    t = resource.table
    return db_session.execute(update(t).where(*chosen).values(
        deleted_at=func.coalesce(t.c.deleted_at, func.now()), delete_synced_at=func.now(),
        sync_failed_at=None, lease_until=None, abandoned_at=func.now(), updated_at=func.now(),
        sync_error=func.concat(f"abandoned by {by}; {FAILED_WITH}", func.coalesce(t.c.sync_error, "-")),
    )).rowcount
