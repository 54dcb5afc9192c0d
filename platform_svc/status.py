"""What ``platform-svc sync-status`` shows: rows by sync state, stalled ones, the oldest pending.

A pending row is *stalled* when its pending age (now minus ``updated_at``:
public writes set it, pushes never touch it) exceeds the threshold
(:func:`platform_svc.sync.stalled_after`). Stalled rows are still retried;
they are counted apart so a person notices them.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Connection, Row, func, select

from platform_svc.sync import Kind


@dataclass(frozen=True)
class StatusReport:
    counts: dict[str, int]  # synced, pending, failed, stalled (stalled rows are pending too)
    oldest_pending: timedelta | None
    failed: Sequence[Row]  # id, sync_failed_at, sync_error; oldest failure first
    stalled: Sequence[Row]  # id, age, attempts, sync_error; oldest first


def read_status(*, db_session: Connection, kind: Kind, stalled_after: timedelta, limit: int) -> StatusReport:
    table = kind.resource.table
    pending = table.c.sync_state == "pending"
    age = func.now() - table.c.updated_at
    is_stalled = pending & (table.c.updated_at < func.now() - stalled_after)
    row = db_session.execute(
        select(
            func.count().filter(table.c.sync_state == "synced"),
            func.count().filter(pending),
            func.count().filter(table.c.sync_state == "failed"),
            func.count().filter(is_stalled),
            func.max(age).filter(pending),
        )
    ).one()
    failed = db_session.execute(
        select(table.c.id, table.c.sync_failed_at, table.c.sync_error)
        .where(table.c.sync_state == "failed")
        .order_by(table.c.sync_failed_at)
        .limit(limit)
    ).all()
    stalled = db_session.execute(
        select(table.c.id, age.label("age"), table.c.attempts, table.c.sync_error)
        .where(is_stalled)
        .order_by(table.c.updated_at)
        .limit(limit)
    ).all()
    counts = dict(zip(("synced", "pending", "failed", "stalled"), row[:4]))
    return StatusReport(counts=counts, oldest_pending=row[4], failed=failed, stalled=stalled)


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
