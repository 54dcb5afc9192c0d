"""What ``platform-svc sync-status`` shows: rows by sync state, stalled ones, the oldest pending.

A pending row is *stalled* when its pending age (now minus ``updated_at``:
public writes set it, pushes never touch it) exceeds the threshold
(:mod:`platform_svc.states`). Stalled rows are still retried; they are counted
apart from the other pending rows so a person notices them, here as on the
console and in the ``sync_rows`` gauge (all three read :func:`count_states`); so
are abandoned rows, apart from the synced ones.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, Row, case, func, select

from platform_svc.states import SyncState, abandoned, in_state, stalled
from shared.registry import Resource


@dataclass(frozen=True)
class StatusReport:
    counts: dict[SyncState, int]  # every shown state; pending leaves the stalled rows out
    oldest_pending: timedelta | None
    failed: Sequence[Row]  # id, sync_failed_at, sync_error; oldest failure first
    stalled: Sequence[Row]  # id, age, attempts, sync_error; oldest first
    state: SyncState | None = None  # the state asked for, whose rows ``listed`` holds (instead of the two above)
    listed: Sequence[Row] = ()  # id, age, tries, sync_error; in ID order


def count_states(
    *, db_session: Connection, resource: Resource, stalled_after: timedelta
) -> tuple[dict[SyncState, int], timedelta | None]:
    """Rows by shown state (synced, pending but not stalled, stalled, failed, abandoned: they add up
    to every row), and the oldest pending age (stalled rows included).

    One statement, so one snapshot: what ``sync-status`` prints and what the
    ``sync_rows`` gauge serves at every scrape. Pending and failed rows are
    read through their partial indexes (``ix_*_due``, ``ix_*_failed``, ``ix_*_abandoned``), so
    only the total counts every row, and that from the smallest index.
    """
    table = resource.table
    pending = (
        select(
            func.count().label("pending_rows"),
            func.count().filter(stalled(table, stalled_after)).label("stalled_rows"),
            func.max(func.now() - table.c.updated_at).label("oldest"),
        )
        .where(table.c.sync_state == SyncState.PENDING)
        .subquery()
    )
    total = select(func.count()).select_from(table).scalar_subquery()
    failed = select(func.count()).where(table.c.sync_state == SyncState.FAILED).scalar_subquery()
    closed = select(func.count()).where(abandoned(table)).scalar_subquery()
    total_rows, pending_rows, failed_rows, abandoned_rows, stalled_rows, oldest_pending = db_session.execute(
        select(total, pending.c.pending_rows, failed, closed, pending.c.stalled_rows, pending.c.oldest)
    ).one()
    counts = {
        SyncState.SYNCED: total_rows - pending_rows - failed_rows - abandoned_rows,
        SyncState.PENDING: pending_rows - stalled_rows,
        SyncState.STALLED: stalled_rows,
        SyncState.FAILED: failed_rows,
        SyncState.ABANDONED: abandoned_rows,
    }
    return counts, oldest_pending


def tries(table: Any) -> Any:
    """The column ``tries``: every push of the row, the inline one included: the transient failures
    the row counts, and the permanent answer that failed it."""
    return (table.c.attempts + case((table.c.sync_failed_at.is_not(None), 1), else_=0)).label("tries")


def read_status(
    *, db_session: Connection, resource: Resource, stalled_after: timedelta, limit: int,
    state: SyncState | None = None,
) -> StatusReport:
    """The counts, and the first ``limit`` failed and stalled rows; or, with ``state`` (one of
    :data:`~platform_svc.states.LISTED`), the first ``limit`` rows in that state."""
    table = resource.table
    counts, oldest_pending = count_states(db_session=db_session, resource=resource, stalled_after=stalled_after)
    if state is not None:
        listed = db_session.execute(
            select(table.c.id, (func.now() - table.c.updated_at).label("age"), tries(table), table.c.sync_error)
            .where(in_state(table, state, stalled_after)).order_by(table.c.id).limit(limit)
        ).all()
        return StatusReport(counts, oldest_pending, failed=(), stalled=(), state=state, listed=listed)
    failed = db_session.execute(
        select(table.c.id, table.c.sync_failed_at, table.c.sync_error)
        .where(table.c.sync_state == SyncState.FAILED)
        .order_by(table.c.sync_failed_at)
        .limit(limit)
    ).all()
    stalled_rows = db_session.execute(
        select(table.c.id, (func.now() - table.c.updated_at).label("age"), table.c.attempts, table.c.sync_error)
        .where(stalled(table, stalled_after))
        .order_by(table.c.updated_at)
        .limit(limit)
    ).all()
    return StatusReport(counts=counts, oldest_pending=oldest_pending, failed=failed, stalled=stalled_rows)


# The order sync-status has always printed the counts in (pending leaves the stalled rows out).
PRINTED = (SyncState.SYNCED, SyncState.PENDING, SyncState.FAILED, SyncState.STALLED, SyncState.ABANDONED)


def report_lines(name: str, report: StatusReport) -> list[str]:
    """What ``sync-status`` prints of one resource (``name``): its counts, then its rows listed."""
    counts = report.counts
    oldest = format_age(report.oldest_pending) if report.oldest_pending is not None else "none"
    lines = [f"{name}: {', '.join(f'{counts[state]} {state}' for state in PRINTED)}; oldest pending {oldest}"]
    lines += [f"  failed {row.id} at {row.sync_failed_at:%Y-%m-%d %H:%M:%S}: {row.sync_error}" for row in report.failed]
    lines += [f"  stalled {row.id} pending {format_age(row.age)}, {row.attempts} attempts,"
              f" last error: {row.sync_error or '-'}" for row in report.stalled]
    lines += [f"  {report.state} {row.id} last written {format_age(row.age)} ago, {row.tries} tries,"
              f" last error: {row.sync_error or '-'}" for row in report.listed]
    shown = len(report.failed) + len(report.stalled) + len(report.listed)
    needing = counts[report.state] if report.state else counts[SyncState.FAILED] + counts[SyncState.STALLED]
    if shown < needing:
        lines.append(f"  ... {needing - shown} more (--limit)")
    return lines


def format_age(age: timedelta) -> str:
    """``3d 4h``, ``2h 05m``, ``7m 12s``, ``42s``: two units at most."""
    seconds = max(0, int(age.total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {seconds:02d}s"
    return f"{seconds}s"
