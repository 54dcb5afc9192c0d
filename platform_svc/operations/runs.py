"""Repair runs started from the console: asked for on a page, run by whoever leads, watched from any.

A run is a row of ``repair_runs``, written as the pass goes (objects compared so
far out of the synced rows counted at its start, the findings so far), so a
person can leave the page and come back, from any worker or replica. The pass
itself is :class:`platform_svc.operations.repair.Repairer`'s, page by page: no second repair path.

A dry run changes nothing: it runs at once, in a thread of the process that was
asked (a greenlet under gevent). A real run changes rows, so only the process
holding the lease on the periodic passes runs it
(:class:`~platform_svc.operations.leadership.Leadership`). The page records it
*asked for* (no holder yet); the leading reconciler claims what is asked for
within a second (:meth:`RepairRuns.run_requested`, one of its periodic duties)
and runs it beside its own passes. When no process holds the lease, the process
that was asked takes it and runs every run asked for, then gives it back. If the
process running a run dies, the row stops moving: the page says since when.
"""
from __future__ import annotations

import logging
import threading
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, func, literal, select, update
from sqlalchemy.dialects.postgresql import JSONB

from platform_svc.models import RESOURCES, RepairRun
from platform_svc.operations.copies import PAGE_SIZE
from platform_svc.operations.leadership import Leadership, WhileLeading
from platform_svc.operations.passes import record_pass, this_process
from platform_svc.operations.repair import Finding, Repairer, Report
from platform_svc.operations.status import count_states
from platform_svc.states import SyncState
from shared.client import InternalClient
from shared.db import Database
from shared.horizon import Horizon

log = logging.getLogger(__name__)

KEPT_FINDINGS = 500  # findings a run's row lists; the counts in its summary are whole
STALE_AFTER = timedelta(seconds=60)  # a running run whose row has not moved for this long has lost its process
_NEVER = timedelta(days=36500)  # counting synced rows only: no row is stalled


class RepairRuns:
    """Records repair runs, runs the dry ones at once, and the real ones while this process leads."""

    def __init__(
        self, database: Database, client: InternalClient, horizon: Horizon, *, page_size: int = PAGE_SIZE
    ) -> None:
        self.database = database
        self.client = client
        self.horizon = horizon
        self.page_size = page_size  # objects compared (and progress recorded) per step

    def start(self, *, operator: str, dry_run: bool) -> uuid.UUID:
        """Record a new run; its ID. A dry run starts at once in a thread of this process. A real run
        is asked for: the leader runs it (:meth:`run_requested`); when the lease is free, this
        process takes it and runs what is asked for in a thread of its own."""
        run_id = uuid.uuid4()
        with self.database.begin() as db_session:
            db_session.execute(
                RepairRun.__table__.insert().values(
                    id=run_id, dry_run=dry_run, operator=operator,
                    holder=this_process() if dry_run else None,  # a real run's: whoever claims it
                    total=_synced(db_session) if dry_run else 0,
                )
            )
        if dry_run:
            self._thread(self._run, run_id, None, threading.Event(), name=f"console-repair-{run_id}")
            return run_id
        leadership = Leadership(self.database)
        leadership.renew()
        if leadership.holding():
            self._thread(self._lead, leadership, name="console-repair-runs")
        return run_id

    def run_requested(self, leadership: Leadership, stop: Any) -> None:
        """Run every real run asked for, oldest first, while this process holds the lease and
        ``stop`` is not set (the reconciler's duty, and a console's while it leads)."""
        while not (stop.is_set() or not leadership.holding()):
            run_id = self._claim(leadership.holder)
            if run_id is None:
                return
            self._run(run_id, leadership, stop)

    def _lead(self, leadership: Leadership) -> None:
        """Run what is asked for while holding the lease, then give it back; again if a run was asked
        for meanwhile by a process that found the lease taken."""
        while leadership.holding():
            with leadership.kept():
                self.run_requested(leadership, threading.Event())
            if not self._waiting():
                return
            leadership.renew()

    def _waiting(self) -> bool:
        table = RepairRun.__table__
        with self.database.engine.connect() as db_session:
            return db_session.execute(
                select(table.c.id).where(_asked_for()).limit(1)
            ).first() is not None

    def _claim(self, holder: str) -> uuid.UUID | None:
        """The oldest run asked for, now this process's (its total counted now), or None."""
        table = RepairRun.__table__
        waiting = (
            select(table.c.id).where(_asked_for())
            .order_by(table.c.started_at).limit(1).with_for_update(skip_locked=True).scalar_subquery()
        )
        with self.database.begin() as db_session:
            run_id = db_session.execute(
                update(table).where(table.c.id == waiting)
                .values(holder=holder, started_at=func.now(), updated_at=func.now()).returning(table.c.id)
            ).scalar()
            if run_id is not None:
                db_session.execute(update(table).where(table.c.id == run_id).values(total=_synced(db_session)))
        return run_id

    @staticmethod
    def _thread(target: Any, *args: Any, name: str) -> None:
        threading.Thread(target=target, args=args, name=name, daemon=True).start()

    def _run(self, run_id: uuid.UUID, leadership: Leadership | None, stop: Any) -> None:
        """Run one recorded run: a dry one (``leadership`` None), or a real one while ``leadership`` holds."""
        dry_run = leadership is None
        found: list[dict[str, Any]] = []
        kept = 0

        def on_page(report: Report) -> None:
            nonlocal kept
            batch, room = found[:], max(0, KEPT_FINDINGS - kept)
            found.clear()
            kept += len(batch[:room])
            self._progress(run_id, compared=sum(report.compared.values()), findings=batch[:room])

        def on_finding(finding: Finding) -> None:
            found.append(
                {"resource": finding.resource, "finding": finding.finding, "id": str(finding.object_id),
                 "detail": finding.detail}
            )

        summary = error = None
        try:
            until = stop if leadership is None else WhileLeading(stop, leadership)
            report = Repairer(self.database, self.client, page_size=self.page_size, horizon=self.horizon).run(
                dry_run=dry_run, on_finding=on_finding, on_page=on_page, stop=until
            )
            summary = report.summary(dry_run=dry_run)
            if leadership is not None and not leadership.holding():
                error = "stopped: the lease on the periodic passes could not be renewed in time"
        except Exception as exc:  # noqa: BLE001 (cluster_svc or the database away, or a bug: said on the page)
            log.exception("repair run %s failed", run_id)
            error = f"stopped: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        try:
            with self.database.begin() as db_session:
                db_session.execute(
                    update(RepairRun).where(RepairRun.id == run_id)
                    .values(summary=summary, error=error, finished_at=func.now(), updated_at=func.now())
                )
        except Exception:  # noqa: BLE001 (the row then reads as stalled: the page says so)
            log.exception("repair run %s: its end could not be recorded", run_id)
        if summary:  # dry runs too: the overview's line says which it was
            record_pass(self.database, "repair", leadership.holder if leadership is not None
                        else f"{this_process()} (console)", summary)

    def _progress(self, run_id: uuid.UUID, *, compared: int, findings: list[dict[str, Any]]) -> None:
        table = RepairRun.__table__
        with self.database.begin() as db_session:
            db_session.execute(
                update(table).where(table.c.id == run_id).values(
                    compared=compared, findings=table.c.findings.op("||")(literal(findings, type_=JSONB)),
                    updated_at=func.now(),
                )
            )


def _asked_for() -> Any:
    """A real run asked for and not yet claimed by any process."""
    table = RepairRun.__table__
    return table.c.holder.is_(None) & table.c.finished_at.is_(None)


def _synced(db_session: Connection) -> int:
    """The synced rows of every resource: what a run compares."""
    return sum(
        count_states(db_session=db_session, resource=resource, stalled_after=_NEVER)[0][SyncState.SYNCED]
        for resource in RESOURCES
    )


def read_run(*, db_session: Connection, run_id: uuid.UUID):
    """A run's row, with ``stale``: claimed and running, and not moved for :data:`STALE_AFTER`."""
    table = RepairRun.__table__
    stale = table.c.holder.is_not(None) & table.c.finished_at.is_(None) & (table.c.updated_at < func.now() - STALE_AFTER)
    return db_session.execute(select(table, stale.label("stale")).where(table.c.id == run_id)).mappings().first()


def recent_runs(*, db_session: Connection, limit: int = 10):
    table = RepairRun.__table__
    return db_session.execute(select(table).order_by(table.c.started_at.desc()).limit(limit)).mappings().all()
