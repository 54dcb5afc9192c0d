"""What the console's pages read, through the services that already know it: ``sync-status``'s
counts (:mod:`platform_svc.operations.status`), the lease on the periodic passes, the passes, and one object compared with
cluster_svc's copy as repair judges it (:mod:`platform_svc.push.content`, :mod:`platform_svc.operations.repair`).

Each function takes the session and never commits; the views own the transactions.
"""
from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, literal, select
from sqlalchemy.engine import Row, RowMapping

from platform_svc.models import RESOURCES, Account, Lease, Pass, Sighting
from platform_svc.operations.leadership import LEASE_NAME
from platform_svc.operations.repair import judge
from platform_svc.operations.status import count_states, tries
from platform_svc.push import content
from platform_svc.states import SHOWN, SyncState, in_state, shown_state
from shared.horizon import Horizon
from shared.registry import Resource
from shared.rows import keyset_page

PAGE_SIZE = 50


@dataclass(frozen=True)
class ResourceCounts:
    resource: Resource
    counts: dict[SyncState, int]  # synced, pending (not stalled), stalled, failed, abandoned: every row
    oldest_pending: timedelta | None

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def bar(self, width: int = 400) -> list[tuple[str, int, int]]:
        """The SVG bar's segments: (state, x, width), proportional to the counts; empty ones left out."""
        segments, x = [], 0
        total = self.total or 1
        for state in SHOWN:  # as drawn, left to right
            w = round(width * self.counts[state] / total)
            if self.counts[state] and w == 0:
                w = 1  # one stuck row among a million still shows
            if w:
                segments.append((state, x, w))
                x += w
        return segments


@dataclass(frozen=True)
class LeaseHolder:
    holder: str
    expires_at: datetime
    live: bool  # not expired (by the database's clock)


@dataclass(frozen=True)
class Overview:
    counts: list[ResourceCounts]
    lease: LeaseHolder | None
    passes: dict[str, Row]
    sightings: Sequence[Row]  # each process's last sighting of cluster_svc, the latest first


def overview(*, db_session: Connection, stalled_after: timedelta) -> Overview:
    """Every resource's counts, who holds the lease on the periodic passes, the last pass of each
    kind, and whether cluster_svc answered each process's last calls."""
    resources = []
    for resource in RESOURCES:
        counts, oldest = count_states(db_session=db_session, resource=resource, stalled_after=stalled_after)
        resources.append(ResourceCounts(resource, counts, oldest))
    return Overview(resources, lease_holder(db_session=db_session), last_passes(db_session=db_session),
                    sightings(db_session=db_session))


def sightings(*, db_session: Connection, limit: int = 10) -> Sequence[Row]:
    """The ``limit`` processes that called cluster_svc last: whether it served them, how long ago, since when."""
    table = Sighting.__table__
    return db_session.execute(
        select(table, (func.now() - table.c.seen_at).label("age"), (func.now() - table.c.since).label("for_"))
        .order_by(table.c.seen_at.desc()).limit(limit)
    ).all()


def lease_holder(*, db_session: Connection) -> LeaseHolder | None:
    """The row of the lease on the periodic passes: who took it last, until when, and whether that is still ahead."""
    lease = Lease.__table__
    row = db_session.execute(
        select(lease.c.holder, lease.c.expires_at, (lease.c.expires_at > func.now()).label("live"))
        .where(lease.c.name == LEASE_NAME)
    ).first()
    return LeaseHolder(row.holder, row.expires_at, row.live) if row else None


def last_passes(*, db_session: Connection) -> dict[str, Row]:
    passes = Pass.__table__
    rows = db_session.execute(
        select(passes, (func.now() - passes.c.finished_at).label("age"))
    ).all()
    return {row.name: row for row in rows}


# Rows that need a person ------------------------------------------------------------------


def due(table: Any) -> Any:
    """The column ``due``: whether the row's next try has come, on the database's clock."""
    return (table.c.next_attempt_at <= func.now()).label("due")


def parent_state(resource: Resource) -> Any:
    """The column ``parent_state``: the parent row's sync state (None for a root): a child is pushed
    only once cluster_svc confirmed its parent, so a pending child may be waiting for it."""
    if resource.parent is None:
        return literal(None).label("parent_state")
    parent = resource.parent.table
    return select(parent.c.sync_state).where(parent.c.id == resource.table.c[resource.parent_column]) \
        .scalar_subquery().label("parent_state")


LABELS = ("name", "description")  # the first of these fields a resource has names its rows on a page


def rows_needing_a_person(
    *,
    db_session: Connection,
    resource: Resource,
    stalled_after: timedelta,
    state: SyncState | None,
    reason: str | None,
    after: uuid.UUID | None,
    account_id: uuid.UUID | None = None,
    limit: int = PAGE_SIZE,
) -> tuple[Sequence[RowMapping], uuid.UUID | None]:
    """Failed and stalled rows of ``resource`` (or, with ``state``, the rows shown in that state: one
    of :data:`~platform_svc.states.LISTED`) in ID order after ``after`` (the API's keyset cursor),
    with the next cursor (None on the last page), each with its ``shown_state`` and what a person
    recognises it by (its name, or description, and its account's name). ``reason``: only rows
    whose reason contains it, any case, as ``--reason`` chooses; ``account_id``: only that
    account's rows.
    """
    table = resource.table
    chosen = in_state(table, state, stalled_after) if state is not None else \
        in_state(table, SyncState.FAILED, stalled_after) | in_state(table, SyncState.STALLED, stalled_after)
    stmt = select(
        table.c.id,
        shown_state(table, stalled_after).label("shown_state"),
        tries(table),
        parent_state(resource),
        table.c.sync_error,
        table.c.next_attempt_at,
        table.c.deleted_at,
        (func.now() - func.coalesce(table.c.abandoned_at, table.c.sync_failed_at, table.c.updated_at)).label("age"),
        due(table),
        table.c.account_id,
        Account.name.label("account_name"),
        next((table.c[name] for name in LABELS if name in table.c), literal(None)).label("label"),
    ).join(Account, Account.id == table.c.account_id).where(chosen)
    if account_id is not None:
        stmt = stmt.where(table.c.account_id == account_id)
    if reason:
        stmt = stmt.where(table.c.sync_error.icontains(reason, autoescape=True))
    return keyset_page(db_session, stmt, table.c.id, after=after, limit=limit)


def failure_reasons(*, db_session: Connection, resource: Resource, texts: int = 500) -> list[tuple[str, int]]:
    """The failed rows grouped by reason (:func:`reason_of`), most first: what "retry all" offers,
    one button per reason. Read from the ``texts`` most common error texts."""
    table = resource.table
    rows = db_session.execute(
        select(table.c.sync_error, func.count().label("n"))
        .where(table.c.sync_state == SyncState.FAILED)
        .group_by(table.c.sync_error)
        .order_by(func.count().desc())
        .limit(texts)
    ).all()
    reasons: Counter[str] = Counter()
    for row in rows:
        reasons[reason_of(row.sync_error or "")] += row.n
    return sorted(reasons.items(), key=lambda item: (-item[1], item[0]))


def reason_of(error: str) -> str:
    """A failure's reason, as text ``--reason`` finds again: a leading word (``parent_failed: ...``),
    else the answer's status and problem code (``POST /v1/...: 409 id_conflict: ...``), else the
    text up to its first ``:`` or ``;``."""
    head = re.split(r"[:;]", error, maxsplit=1)[0].strip()
    if re.fullmatch(r"[a-z_]+", head):
        return head
    answer = re.search(r"\b\d{3} [a-z_]+\b", error)
    return answer.group(0) if answer else head[:100]


# One object, both sides -------------------------------------------------------------------


@dataclass(frozen=True)
class FieldPair:
    name: str
    ours: Any
    theirs: Any
    differs: bool
    mutable: bool


@dataclass
class BothSides:
    resource: Resource
    row: RowMapping
    theirs: dict[str, Any] | None  # as copies.copy_of gives it; None: cluster_svc has no row
    unreadable: str | None = None  # why cluster_svc's copy could not be read
    fields: list[FieldPair] = field(default_factory=list)
    finding: str | None = None  # what a repair pass would report now
    children: list[tuple[Resource, Sequence[RowMapping]]] = field(default_factory=list)


def platform_row(
    *, db_session: Connection, resource: Resource, object_id: uuid.UUID, stalled_after: timedelta
) -> RowMapping | None:
    """The row, with ``shown_state`` (its state as every page counts it: pending long enough is
    stalled) and ``due`` (its next try has come), both on the database's clock."""
    table = resource.table
    return db_session.execute(
        select(table, shown_state(table, stalled_after).label("shown_state"), due(table), tries(table),
               parent_state(resource))
        .where(table.c.id == object_id)
    ).mappings().first()


def children_of(
    *, db_session: Connection, resource: Resource, object_id: uuid.UUID, stalled_after: timedelta,
    limit: int = PAGE_SIZE,
) -> list[tuple[Resource, Sequence[RowMapping]]]:
    """Each child resource's rows under the object (the first ``limit`` of each, in ID order), each
    with its ``shown_state``."""
    found = []
    for child in resource.children:
        table = child.table
        rows = db_session.execute(
            select(table.c.id, shown_state(table, stalled_after).label("shown_state"), table.c.deleted_at,
                   table.c.sync_error)
            .where(table.c[resource.id_column] == object_id)
            .order_by(table.c.id)
            .limit(limit)
        ).mappings().all()
        found.append((child, rows))
    return found


def compare_sides(
    resource: Resource, row: RowMapping, theirs: dict[str, Any] | None, horizon: Horizon, *, known: bool = True
) -> tuple[list[FieldPair], str | None]:
    """Every compared field (what the platform owns and the ancestry), ours and theirs, marked where
    they differ; and the finding repair would report (it judges synced rows only). ``known``: False
    when cluster_svc did not answer (its side, and so any finding, unknown)."""
    ours = content.expected(resource, row)
    mutable = content.mutable(resource)
    pairs = []
    for name in sorted(content.compared(resource)):
        there = theirs["fields"].get(name) if theirs is not None else None
        differs = theirs is not None and theirs["alive"] and there != ours.get(name)
        pairs.append(FieldPair(name, ours.get(name), there, differs, name in mutable))
    return pairs, judge(row, theirs, horizon, resource=resource) if known else None


def resource_named(segment: str) -> Resource | None:
    """The resource whose path segment (as in the API: its table with dashes) is ``segment``."""
    return next((resource for resource in RESOURCES if resource.segment == segment), None)
