"""Failed rows put back in line after a person looked at them: ``platform-svc sync-status
--retry-failed`` (narrowed by resource, reason or ID).

A row fails for good when an answer said retrying cannot help (an
``id_conflict``, a refused field, a copy deleted or diverged downstream). Its
writes are held back from then on (:func:`platform_svc.api.services.claim`): after
an ``id_conflict`` the object under its ID downstream is someone else's. So a
retry re-checks each row against cluster_svc's copy before putting it back,
and leaves it failed, saying why, when that copy is not the platform's object
(another team's, under another parent, another immutable field) or was deleted
there while the row is alive here (:func:`verdict`); the row keeps the reason
that failed it. cluster_svc refuses such
writes too (409), so even a row put back in line just before another team
takes its ID cannot change their object.

A row put back is *pending* in a way only a proving answer can end
(:func:`platform_svc.push.recording.change_for`): a live row's confirmed generation
drops below its own, so the pusher sends it again and cluster_svc's answer
shows what it holds; a deleted row's delete is sent again. Retrying a row by ID
takes its failed descendants with it (a cluster with its rules), and a row whose
ancestor stays failed stays failed too (:func:`failed_ancestor`): a retry never
leaves a descendant pending behind a parent that will not be pushed.

The way out for a row deleted downstream (docs/decisions/0014): delete it on
the platform (its children go with it), then retry it: the delete is sent, the
tombstone answers it, and both sides agree it is deleted.
"""
from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, func, or_, select, update
from sqlalchemy.engine import RowMapping

from platform_svc.models import RESOURCES
from platform_svc.operations.copies import RepairError, copy_of
from platform_svc.operations.repair import DELETED_DOWNSTREAM
from platform_svc.push import content
from platform_svc.states import SyncState
from shared.client import InternalClient
from shared.db import Database
from shared.registry import Resource

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Retried:
    """What a retry did with one failed row."""

    resource: Resource
    object_id: uuid.UUID
    requeued: bool
    why: str = ""  # why it stays failed (empty when requeued)


def retry_failed(
    database: Database,
    client: InternalClient,
    *,
    resource: Resource | None = None,
    reason: str | None = None,
    object_id: uuid.UUID | None = None,
) -> list[Retried]:
    """Re-check the failed rows chosen and put back in line those that are still the platform's
    to push; parents before their children. Each row's outcome is committed on its own.

    ``resource``: only its rows (and, with ``object_id``, its descendants'); ``reason``: only
    rows whose failure reason contains it (case-insensitive); ``object_id``: that row and its
    failed descendants.
    """
    outcomes = []
    for candidate in RESOURCES:
        if resource is not None and candidate is not resource and not (
            object_id is not None and candidate in resource.descendants
        ):
            continue
        with database.engine.connect() as db_session:
            rows = failed_rows(db_session=db_session, resource=candidate, reason=reason, object_id=object_id)
        for row in rows:
            outcomes.append(_retry_one(database, client, candidate, row))
    return outcomes


def failed_rows(
    *, db_session: Connection, resource: Resource, reason: str | None, object_id: uuid.UUID | None
) -> Sequence[RowMapping]:
    """The failed rows a retry chose, oldest failure first: with ``object_id``, the row with that
    ID or under it (its ancestors' columns name it)."""
    table = resource.table
    stmt = select(table).where(table.c.sync_state == SyncState.FAILED)
    if reason:
        stmt = stmt.where(table.c.sync_error.icontains(reason, autoescape=True))
    if object_id is not None:
        stmt = stmt.where(or_(table.c.id == object_id, *(table.c[c] == object_id for c in resource.scope_columns)))
    return db_session.execute(stmt.order_by(table.c.sync_failed_at)).mappings().all()


def verdict(resource: Resource, row: RowMapping, theirs: dict | None) -> str | None:
    """Why ``row`` must stay failed given cluster_svc's copy (as :func:`platform_svc.operations.copies.copy_of`
    gives it), or None when it may go back in line."""
    if theirs is None:
        return None  # nothing there: a create (or a delete's tombstone) is the platform's to send
    if theirs["alive"]:
        fixed = content.fixed_differing(resource, row, theirs["fields"])
        if fixed:
            return (
                f"not retried: cluster_svc's {row['id']} is not the platform's object (it holds another"
                f" {', '.join(fixed)}); nothing was sent. An ID names one object for good: delete it on the"
                " platform, or settle it with whoever owns that copy"
            )
        return None
    if row["deleted_at"] is None:
        return f"not retried: {DELETED_DOWNSTREAM}"
    return None  # deleted on both sides: the delete goes down, and its tombstone answers it


def failed_ancestor(database: Database, resource: Resource, row: RowMapping) -> str | None:
    """Why ``row`` must stay failed while an ancestor of it is (it would wait, pending, for a parent
    that is never pushed: a subtree goes back in line only with its root), or None."""
    with database.engine.connect() as db_session:
        for ancestor in resource.ancestors:
            table = ancestor.table
            state = db_session.execute(
                select(table.c.sync_state).where(table.c.id == row[ancestor.id_column])
            ).scalar()
            if state == SyncState.FAILED:
                return (f"not retried: its {ancestor.words} {row[ancestor.id_column]} is failed; it goes back in"
                        f" line with that {ancestor.words} (retry the {ancestor.words})")
    return None


def _retry_one(database: Database, client: InternalClient, resource: Resource, row: RowMapping) -> Retried:
    """Re-check one row and put it back in line, or say why not. A row left failed keeps its own
    reason (what failed it, which ``--reason`` finds); the why is the retry's answer."""
    why = failed_ancestor(database, resource, row)
    if why is None:
        try:
            why = verdict(resource, row, copy_of(client, resource, row["id"]))
        except RepairError as exc:
            why = f"not retried: could not re-check it ({exc}); nothing was sent, try again"
    if why is not None:
        log.info("retry of %s %s: %s", resource.words, row["id"], why)
        return Retried(resource, row["id"], False, why)
    table = resource.table
    still_failed = [table.c.id == row["id"], table.c.sync_failed_at == row["sync_failed_at"]]
    again = {"sync_failed_at": None, "attempts": 0, "next_attempt_at": func.now(), "lease_until": None}
    if row["deleted_at"] is None:
        # Pending until an answer proves cluster_svc holds the row's generation.
        again["synced_generation"] = func.least(table.c.synced_generation, table.c.generation - 1)
    else:
        again["delete_synced_at"] = None
    with database.begin() as db_session:
        changed = db_session.execute(update(table).where(*still_failed).values(again).returning(table.c.id)).first()
    if changed is None:
        return Retried(resource, row["id"], False, "not retried: it changed meanwhile (no longer failed as read)")
    return Retried(resource, row["id"], True)
