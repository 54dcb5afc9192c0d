"""Purge: removing deleted rows whose ID is past the horizon, in short batches that never block writes.

Both services purge the same way (``cluster-svc purge``, ``platform-svc
purge``); each says which deleted rows it may drop (``purgeable``: every
tombstone for cluster_svc, only deletes cluster_svc confirmed for the
platform). A row goes only when its ID is a UUIDv7 older than the horizon
plus the grace by the *database's* clock (:mod:`shared.horizon`): no create
of it can be accepted any more, so nothing needs its row.

One pass walks each resource's deleted rows through the index on
``(deleted_at, id)`` (never the table), in windows of ``batch`` rows in key
order, up to the time the pass began; each window is one short transaction
that deletes those of its rows that may go. Rows another transaction holds
are skipped (``FOR UPDATE SKIP LOCKED``) and left for the next pass, so a
purge never waits on a write and a write waits at most on one window's
DELETE of rows nobody can use. Children go before their parents (a parent
stays while any row under it is left: the foreign keys, and ancestry, need
it), so a pass removes whole trees whose every ID has expired.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, any_, bindparam, delete, exists, func, not_, select, tuple_
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql import ColumnElement

from shared.db import Database
from shared.horizon import Horizon, purgeable_id
from shared.registry import Registry, Resource

log = logging.getLogger(__name__)

BATCH = 1000  # deleted rows one window reads, and at most deletes, in one short transaction


@dataclass
class PurgeReport:
    """What one pass removed (or, in a dry run, would remove), by resource."""

    resources: list[Resource]
    removed: Counter[str] = field(default_factory=Counter)  # resource label -> rows
    seen: Counter[str] = field(default_factory=Counter)  # resource label -> deleted rows walked
    cutoff: uuid.UUID | None = None
    seconds: float = 0.0
    dry_run: bool = False

    def summary(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        counts = ", ".join(f"{self.removed[r.label]} {r.plural}" for r in self.resources)
        kept = sum(self.seen.values()) - sum(self.removed.values())
        return (
            f"purge: {verb} {counts}; {kept} deleted rows kept (ID within the horizon, not IDs of UUIDv7, "
            f"or still needed); {self.seconds:.1f} s" + ("; dry run, nothing removed" if self.dry_run else "")
        )


@dataclass
class Purger:
    """Purge passes over a registry's tables, with one database and one horizon.

    ``purgeable(resource)`` gives the conditions (SQL, on the resource's table)
    that a deleted row must meet besides its expired ID.
    """

    database: Database
    registry: Registry
    horizon: Horizon
    purgeable: Callable[[Resource], Iterable[ColumnElement]]
    _: KW_ONLY
    batch: int = BATCH

    def run(self, *, dry_run: bool = False, stop: threading.Event | None = None) -> PurgeReport:
        """One pass over every resource, children first; ``stop`` ends it after the window at hand."""
        started = time.monotonic()
        resources = list(self.registry)
        report = PurgeReport(resources=resources, dry_run=dry_run)
        with self.database.engine.connect() as db_session:
            began: datetime = db_session.execute(select(func.now())).scalar_one()
        report.cutoff = self.horizon.purge_cutoff(began)
        for resource in reversed(resources):  # registered parents first, so children come first here
            self._walk(resource, report, began, dry_run, stop or threading.Event())
        report.seconds = time.monotonic() - started
        return report

    def _walk(
        self, resource: Resource, report: PurgeReport, began: datetime, dry_run: bool, stop: threading.Event
    ) -> None:
        after: tuple[datetime, Any] | None = None
        while not stop.is_set():
            with self.database.begin() as db_session:
                window = deleted_window(db_session=db_session, resource=resource, until=began, after=after,
                                        limit=self.batch)
                if not window:
                    return
                ids = [row.id for row in window]
                removed = remove(
                    db_session=db_session, resource=resource, ids=ids, cutoff=report.cutoff,
                    purgeable=list(self.purgeable(resource)), dry_run=dry_run,
                    child_purgeable={child: list(self.purgeable(child)) for child in resource.descendants},
                )
            report.seen[resource.label] += len(window)
            report.removed[resource.label] += removed
            if len(window) < self.batch:
                return
            after = (window[-1].deleted_at, window[-1].id)


def deleted_window(
    *, db_session: Connection, resource: Resource, until: datetime, after: tuple[datetime, Any] | None, limit: int
) -> list[Any]:
    """The next ``limit`` deleted rows (``id``, ``deleted_at``) in ``(deleted_at, id)`` order, deleted by ``until``.

    Read from the index on deleted rows alone (``ix_<table>_deleted``).
    """
    table = resource.table
    stmt = select(table.c.id, table.c.deleted_at).where(table.c.deleted_at.is_not(None), table.c.deleted_at <= until)
    if after is not None:
        stmt = stmt.where(tuple_(table.c.deleted_at, table.c.id) > tuple_(*after))
    return list(db_session.execute(stmt.order_by(table.c.deleted_at, table.c.id).limit(limit)))


def remove(
    *,
    db_session: Connection,
    resource: Resource,
    ids: list[Any],
    cutoff: uuid.UUID,
    purgeable: list[ColumnElement],
    dry_run: bool,
    child_purgeable: dict[Resource, list[ColumnElement]],
) -> int:
    """Delete those of ``ids`` that may go now; return how many (a dry run counts them).

    A row may go when it is deleted, meets ``purgeable``, its ID is a UUIDv7
    below ``cutoff``, no row under it is left, and nobody holds it. A dry run
    takes no lock and counts a row as going when every row under it would go
    too: every descendant names all its ancestors (the registry requires the
    columns), so each level down is checked directly, and a grandchild that
    stays keeps its grandparent in a dry run as in a real one (the real pass
    has removed the grandchildren that may go before it comes to the parents).
    """
    table = resource.table
    conditions = [
        table.c.id == any_(bindparam("ids", ids, type_=ARRAY(table.c.id.type))),
        table.c.deleted_at.is_not(None),
        purgeable_id(table.c.id, cutoff),
        *purgeable,
    ]
    for child in resource.descendants:
        under = child.table.c[resource.id_column] == table.c.id
        if dry_run:
            left = not_(and_(purgeable_id(child.table.c.id, cutoff), child.table.c.deleted_at.is_not(None),
                             *child_purgeable[child]))
            conditions.append(~exists().where(under, left))
        else:
            conditions.append(~exists().where(under))
    if dry_run:
        return db_session.execute(select(func.count()).select_from(table).where(*conditions)).scalar_one()
    doomed = select(table.c.id).where(*conditions).with_for_update(of=table, skip_locked=True)
    return db_session.execute(delete(table).where(table.c.id.in_(doomed.scalar_subquery()))).rowcount


def run_every(
    purger: Purger,
    interval: float,
    stop: threading.Event,
    on_pass: Callable[[PurgeReport], None],
    *,
    dry_run: bool = False,
) -> None:
    """A pass, then one every ``interval`` seconds, until ``stop`` is set; a pass that fails
    (the database away, say) is logged and the next one comes on time."""
    while not stop.is_set():
        try:
            on_pass(purger.run(dry_run=dry_run, stop=stop))
        except Exception as exc:  # noqa: BLE001 (one line, and try again next time)
            log.warning("purge pass stopped: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        if stop.wait(interval):
            return

