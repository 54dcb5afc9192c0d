"""Repair passes started from the console: run in the serving process, watched from any.

A run is a row of ``repair_runs``, written as the pass goes (objects compared so
far out of the synced rows counted at its start, the findings so far), so a
person can leave the page and come back, from any worker or replica. The pass
itself is :class:`platform_svc.operations.repair.Repairer`'s, page by page, in a thread of
the process that started it (a greenlet under gevent): no second repair path.

A dry run changes nothing and may run any time. A real run changes rows, so it
runs only while this process holds the lease on the periodic passes
(:class:`~platform_svc.reconciler.leadership.Leadership`),
as the reconciler's periodic pass does: when a reconciler holds it, the page
says which one, and its own pass repairs at its ``--repair-interval``. If the
process running it dies, the row stops moving: the page says since when.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, func, literal, select, update
from sqlalchemy.dialects.postgresql import JSONB

from platform_svc.console.reads import LeaseHolder, lease_holder
from platform_svc.models import RESOURCES, RepairRun
from platform_svc.operations.copies import PAGE_SIZE
from platform_svc.operations.passes import record_pass, this_process
from platform_svc.operations.repair import Finding, Repairer, Report
from platform_svc.operations.status import count_states
from platform_svc.reconciler.leadership import Leadership, WhileLeading
from platform_svc.states import SyncState
from shared.client import InternalClient
from shared.db import Database
from shared.horizon import Horizon

log = logging.getLogger(__name__)

KEPT_FINDINGS = 500  # findings a run's row lists; the counts in its summary are whole
STALE_AFTER = timedelta(seconds=60)  # a running run whose row has not moved for this long has lost its process
_NEVER = timedelta(days=36500)  # counting synced rows only: no row is stalled


class LeaseHeld(Exception):
    """A real run was asked for while another process holds the lease on the periodic passes."""

    def __init__(self, holder: LeaseHolder | None) -> None:
        super().__init__(holder.holder if holder else "unknown")
        self.holder = holder


class RepairRuns:
    """Starts repair runs in this process and records their progress."""

    def __init__(
        self, database: Database, client: InternalClient, horizon: Horizon, *, page_size: int = PAGE_SIZE
    ) -> None:
        self.database = database
        self.client = client
        self.horizon = horizon
        self.page_size = page_size  # objects compared (and progress recorded) per step

    def start(self, *, operator: str, dry_run: bool) -> uuid.UUID:
        """Record a new run and start it in a thread of this process; its ID.

        :raise LeaseHeld: a real run, and another process holds the lease on the periodic passes.
        """
        leadership = None
        if not dry_run:
            leadership = Leadership(self.database)
            leadership.renew()
            if not leadership.holding():
                with self.database.engine.connect() as db_session:
                    raise LeaseHeld(lease_holder(db_session=db_session))
        run_id = uuid.uuid4()
        with self.database.begin() as db_session:
            total = sum(
                count_states(db_session=db_session, resource=resource, stalled_after=_NEVER)[0][SyncState.SYNCED]
                for resource in RESOURCES
            )
            holder = leadership.holder if leadership else this_process()
            db_session.execute(
                RepairRun.__table__.insert().values(
                    id=run_id, dry_run=dry_run, operator=operator, holder=holder, total=total
                )
            )
        threading.Thread(
            target=self._run, args=(run_id, dry_run, leadership), name=f"console-repair-{run_id}", daemon=True
        ).start()
        return run_id

    def _run(self, run_id: uuid.UUID, dry_run: bool, leadership: Leadership | None) -> None:
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
            with leadership.kept() if leadership is not None else contextlib.nullcontext():
                stop = WhileLeading(threading.Event(), leadership) if leadership is not None else threading.Event()
                report = Repairer(self.database, self.client, page_size=self.page_size, horizon=self.horizon).run(
                    dry_run=dry_run, on_finding=on_finding, on_page=on_page, stop=stop
                )
                summary = report.summary(dry_run=dry_run)
                if leadership is not None and not leadership.holding():
                    error = "stopped: the lease on the periodic passes could not be renewed in time"
        except Exception as exc:  # noqa: BLE001 (cluster_svc or the database away, or a bug: said on the page)
            log.exception("console repair run %s failed", run_id)
            error = f"stopped: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        try:
            with self.database.begin() as db_session:
                db_session.execute(
                    update(RepairRun).where(RepairRun.id == run_id)
                    .values(summary=summary, error=error, finished_at=func.now(), updated_at=func.now())
                )
        except Exception:  # noqa: BLE001 (the row then reads as stalled: the page says so)
            log.exception("console repair run %s: its end could not be recorded", run_id)
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


def read_run(*, db_session: Connection, run_id: uuid.UUID):
    """A run's row, with ``stale``: running, and not moved for :data:`STALE_AFTER`."""
    table = RepairRun.__table__
    stale = table.c.finished_at.is_(None) & (table.c.updated_at < func.now() - STALE_AFTER)
    return db_session.execute(select(table, stale.label("stale")).where(table.c.id == run_id)).mappings().first()


def recent_runs(*, db_session: Connection, limit: int = 10):
    table = RepairRun.__table__
    return db_session.execute(select(table).order_by(table.c.started_at.desc()).limit(limit)).mappings().all()
