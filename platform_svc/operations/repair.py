"""Drift repair: compare every platform object with cluster_svc's copy and put
back in line what cluster_svc lost behind the platform's back.

cluster_svc can lose or regress data the platform believes it confirmed (a
restore from an old backup, a failover that lost the last commits, a manual
edit). The push machinery is level-triggered on the platform's own columns,
so repairing a row means making it *pending* again in the way that makes the
normal pusher send the right call; the repair itself never calls a write
route. The findings (``sync_repairs_total``'s ``finding`` label):

- ``missing``: cluster_svc has no row for the object. Alive here: pushed again
  as a create (``synced_generation`` back to 0; its firewall rules then wait
  for it, as they wait for any unconfirmed cluster). Deleted here: its delete
  is pushed again, which records the tombstone that keeps the ID taken.
- ``behind``: cluster_svc's generation is lower than the one confirmed here:
  ``synced_generation`` goes back to cluster_svc's, so the update is pushed.
- ``ahead``: cluster_svc's generation is above the platform's (the platform's
  database restored from an older backup, a hand edit): the platform owns the
  fields, so its generation moves past cluster_svc's and its fields are
  pushed there, and later updates apply again.
- ``diverged``: other fields (compared: every field the platform pushes,
  immutable ones too, and the object's ancestry, as :mod:`platform_svc.push.content`
  derives them from the declaration). What no update can change (an
  immutable field, the owner, the parent) is compared whatever the
  generations say, so ``ahead``/``behind`` never hide it: the row is marked
  ``failed``, naming the fields, for a person to decide. Mutable ones, at
  the same generation: pushed again at a higher generation.
- ``undeleted``: deleted and confirmed here, alive there: the delete is pushed again.
  A deleted object's tombstone is checked whatever became of its parent (a
  rule's tombstone under a deleted cluster too): ``missing`` re-sends the
  delete, which records the tombstone again.
- ``deleted_downstream``: alive here, a tombstone there. IDs are never reused,
  so it cannot be re-created: the row is marked ``failed``, saying so.
- ``orphan``: a live object there, unknown here, of a team that is one of the
  platform's accounts: reported only, never changed.

Only rows the platform believes synced are compared (a pending row is being
pushed anyway; a failed one waits for a person). Every change is a
conditional UPDATE that applies only while the row is still as it was read,
so a PATCH, DELETE or push that happens meanwhile wins and the finding is
dropped.

Bounded work: both sides are walked in id order, a page at a time (a
merge-join of the platform's table and cluster_svc's keyset-paginated bulk
read). Each page is read in its own short transaction, its cluster_svc rows
are fetched by one or two GETs, and its changes are written in one more short
transaction; no transaction is open across an HTTP call, and a million rows
make two thousand small steps, not one huge transaction or a million calls.
"""
from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, func, select, update
from sqlalchemy.engine import RowMapping

from platform_svc.models import RESOURCES, Account
from platform_svc.operations.copies import PAGE_SIZE, Downstream
from platform_svc.push import content
from platform_svc.push.recording import fail_waiting_descendants
from platform_svc.states import SyncState
from shared.client import InternalClient
from shared.counters import REPAIR_FINDINGS, count_repair
from shared.db import Database
from shared.declaration import HIGHEST_GENERATION
from shared.horizon import Horizon
from shared.registry import Resource

log = logging.getLogger(__name__)

FINDINGS = REPAIR_FINDINGS

DELETED_DOWNSTREAM = (
    "deleted in cluster_svc while alive on the platform; IDs are never reused, so it cannot be re-created:"
    " delete it on the platform (its children go with it), then retry it (sync-status --retry-failed --id)"
)


@dataclass(frozen=True)
class Finding:
    resource: str  # a resource's label (its registry key)
    finding: str  # one of FINDINGS
    object_id: uuid.UUID
    detail: str = ""  # the fields that differ (diverged), or cluster_svc's generation (ahead)

    def __str__(self) -> str:
        return f"{self.finding} {self.resource} {self.object_id}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class Report:
    """What one pass found (and, unless a dry run, put back in line)."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)  # (resource, finding) -> n
    compared: Counter[str] = field(default_factory=Counter)  # resource -> objects compared

    def summary(self, *, dry_run: bool = False) -> str:
        by_finding = Counter()
        for (_resource, finding), n in self.counts.items():
            by_finding[finding] += n
        found = ", ".join(f"{by_finding[finding]} {finding}" for finding in FINDINGS)
        compared = ", ".join(f"{self.compared[r.label]} {r.plural}" for r in RESOURCES)
        return (
            f"repair: {found}; compared {sum(self.compared.values())} objects ({compared})"
            + ("; dry run, nothing changed" if dry_run else "")
        )


# -- the platform side (each function takes the session, never commits) -----------------


def read_page(
    *, db_session: Connection, resource: Resource, after: uuid.UUID | None, limit: int
) -> Sequence[RowMapping]:
    """The next ``limit`` rows in id order, with what judging them needs (every column: the fields too).

    ``parent_settled`` (children): the parent is synced here (alive and
    confirmed, or deleted and its delete confirmed), so cluster_svc must hold
    the child's own row, tombstone or not.
    """
    table = resource.table
    stmt = select(*table.c)
    if resource.parent is not None:
        parent = resource.parent.table
        settled = parent.c.sync_state == SyncState.SYNCED
        stmt = stmt.add_columns(settled.label("parent_settled")).join(
            parent, parent.c.id == table.c[resource.parent_column]
        )
    if after is not None:
        stmt = stmt.where(table.c.id > after)
    return db_session.execute(stmt.order_by(table.c.id).limit(limit)).mappings().all()


def judge(
    row: RowMapping, theirs: dict[str, Any] | None, horizon: Horizon = Horizon(), *, resource: Resource | None = None
) -> str | None:
    """The finding for one platform row and cluster_svc's copy of it, if any.

    With ``resource``, what no update can change is compared first, whatever
    the generations say: a live copy under another parent, of another team
    or with another immutable field is ``diverged`` (never hidden behind
    ``ahead`` or ``behind``, nor taken for an ``undeleted`` copy of a deleted
    row). Then generations (``behind``, ``ahead``), then the mutable fields at
    the same generation (``diverged``). A deleted object whose ID is past the
    horizon may have been purged by cluster_svc: its tombstone missing there is
    the bound holding, not drift.
    """
    if row["sync_state"] != SyncState.SYNCED or row.get("abandoned_at") is not None:
        return None  # an abandoned row's ID is held by another's object, which repair never touches
    if theirs is not None and theirs["alive"] and resource is not None:
        if content.fixed_differing(resource, row, theirs["fields"]):
            return "diverged"
    if row["deleted_at"] is None:
        if theirs is None:
            return "missing"
        if not theirs["alive"]:
            return "deleted_downstream"
        if theirs["generation"] != row["generation"]:
            return "behind" if theirs["generation"] < row["generation"] else "ahead"
        if resource is not None and content.mutable_differing(resource, row, theirs["fields"]):
            return "diverged"
        return None
    if theirs is None:
        # Every deleted object needs its tombstone there, a child of a deleted
        # parent too: re-sending its delete records it. Under a parent not
        # settled yet (one this pass just put back in line, say), it is judged
        # on a later pass, once the parent's own row is back.
        if horizon.expired(row["id"]):
            return None  # purged there (or purgeable): no create of it can come any more
        return "missing" if row.get("parent_settled", True) else None
    return "undeleted" if theirs["alive"] else None


def requeue(
    *,
    db_session: Connection,
    resource: Resource,
    row: RowMapping,
    finding: str,
    theirs: dict[str, Any] | None,
    dry_run: bool,
) -> bool:
    """Put the row back in line for the pusher if it is still as read; say whether it was."""
    table = resource.table
    unchanged = [
        table.c.id == row["id"],
        table.c.sync_state == SyncState.SYNCED,
        table.c.generation == row["generation"],
        table.c.synced_generation == row["synced_generation"],
    ]
    if row["deleted_at"] is None:
        unchanged.append(table.c.deleted_at.is_(None))
    else:
        unchanged.append(table.c.delete_synced_at == row["delete_synced_at"])
    if dry_run:
        return db_session.execute(select(table.c.id).where(*unchanged)).first() is not None
    again = {"attempts": 0, "next_attempt_at": func.now(), "lease_until": None}
    if finding in ("ahead", "diverged"):
        changes = _past_theirs(resource, row, finding, theirs)
        changed = db_session.execute(update(table).where(*unchanged).values(changes).returning(table.c.id)).first()
        return changed is not None
    changes = {
        "missing": (
            {"synced_generation": 0, **again, "sync_error": "repair: cluster_svc had lost it; creating it again"}
            if row["deleted_at"] is None
            else {"delete_synced_at": None, **again, "sync_error": "repair: cluster_svc had lost its tombstone"}
        ),
        "behind": {
            "synced_generation": theirs["generation"] if theirs else 0,
            **again,
            "sync_error": "repair: cluster_svc had an older generation; pushing the update again",
        },
        "undeleted": {"delete_synced_at": None, **again, "sync_error": "repair: alive in cluster_svc; deleting again"},
        "deleted_downstream": {"sync_failed_at": func.now(), "sync_error": DELETED_DOWNSTREAM},
    }[finding]
    changed = db_session.execute(update(table).where(*unchanged).values(changes).returning(table.c.id)).first()
    return changed is not None


def differing_fields(resource: Resource, row: RowMapping, theirs: dict[str, Any]) -> list[str]:
    """What cluster_svc's copy holds otherwise of what the platform owns: its fields and its ancestry."""
    return sorted(
        content.fixed_differing(resource, row, theirs["fields"])
        + content.mutable_differing(resource, row, theirs["fields"])
    )


def _past_theirs(resource: Resource, row: RowMapping, finding: str, theirs: dict[str, Any]) -> dict[str, Any]:
    """The change for ``ahead`` and ``diverged``: the platform's generation moves past cluster_svc's,
    so the pusher sends its fields there; or, for an immutable field that differs, ``failed``."""
    generation = theirs["generation"]
    if finding == "diverged":
        fixed = content.fixed_differing(resource, row, theirs["fields"])
        if fixed:
            return {
                "sync_failed_at": func.now(),
                "sync_error": f"diverged: cluster_svc holds another {', '.join(fixed)} at generation {generation};"
                " no update can change it, so a person decides",
            }
    if generation >= HIGHEST_GENERATION:  # set by hand (the internal token): nothing counts past it
        return {
            "sync_failed_at": func.now(),
            "sync_error": f"{finding}: cluster_svc holds generation {generation}, the highest a generation can be;"
            " the platform cannot push past it, so a person decides",
        }
    why = (
        f"cluster_svc was ahead (generation {generation})" if finding == "ahead"
        else f"cluster_svc held other fields at generation {generation}"
    )
    return {
        "generation": generation + 1,
        "synced_generation": generation,
        "attempts": 0,
        "next_attempt_at": func.now(),
        "lease_until": None,
        "sync_error": f"repair: {why}; pushing the platform's fields at generation {generation + 1}",
    }


def orphans(
    *, db_session: Connection, resource: Resource, unknown: Sequence[dict[str, Any]]
) -> list[uuid.UUID]:
    """Of cluster_svc's live objects not in the page, those unknown here that belong to an account.

    Read after cluster_svc's answer, so an object created (and pushed) since
    the page was read is found here and is not taken for an orphan.
    """
    candidates = [item for item in unknown if item["alive"] and item["owner"] is not None]
    if not candidates:
        return []
    table = resource.table
    known = set(db_session.execute(select(table.c.id).where(table.c.id.in_([c["id"] for c in candidates]))).scalars())
    owners = {c["owner"] for c in candidates}
    accounts = set(db_session.execute(select(Account.id).where(Account.id.in_(owners))).scalars())
    return [c["id"] for c in candidates if c["id"] not in known and c["owner"] in accounts]


# -- the pass ---------------------------------------------------------------------------


class Repairer:
    """Runs repair passes with one database and one client; owns each page's transactions."""

    def __init__(
        self, database: Database, client: InternalClient, *, page_size: int = PAGE_SIZE, horizon: Horizon = Horizon()
    ) -> None:
        self.database = database
        self.client = client
        self.page_size = page_size
        self.horizon = horizon

    def run(
        self,
        *,
        dry_run: bool = False,
        on_finding: Callable[[Finding], None] | None = None,
        on_page: Callable[[Report], None] | None = None,
        stop: threading.Event | None = None,
    ) -> Report:
        """One full comparison; return what it found. Findings whose row changed meanwhile are not counted.

        ``on_finding`` hears of each finding once its page is committed;
        ``on_page``, of the report so far after each page (the console's progress);
        ``stop``, once set, ends the pass after the page at hand.

        :raise RepairError: cluster_svc's listing could not be read (what was
            found before that stays found and repaired).
        """
        report = Report()
        # Parents first (the registry's order): a child's judgement reads its parent as this pass left it.
        for resource in RESOURCES:
            if not dry_run and resource.descendants:
                self._fail_waiting(resource)
            self._walk(
                resource, report, dry_run, on_finding or (lambda finding: None), on_page or (lambda report: None),
                stop or threading.Event(),
            )
        return report

    def _fail_waiting(self, resource: Resource) -> None:
        """Descendants still waiting on a row whose create failed for good fail with it (the pusher
        does this as it records the failure; a pusher that died in between, or rows from before
        this rule, are caught here)."""
        with self.database.begin() as db_session:
            count = fail_waiting_descendants(db_session=db_session, resource=resource)
        if count:
            log.info("repair: %d rows waiting on failed %ss failed with them", count, resource.words)

    def _walk(
        self,
        resource: Resource,
        report: Report,
        dry_run: bool,
        on_finding: Callable[[Finding], None],
        on_page: Callable[[Report], None],
        stop: threading.Event,
    ) -> None:
        downstream = Downstream(self.client, resource, self.page_size)
        after: uuid.UUID | None = None
        while not stop.is_set():
            with self.database.begin() as db_session:
                rows = read_page(db_session=db_session, resource=resource, after=after, limit=self.page_size)
            last_page = len(rows) < self.page_size
            # The last page takes the rest of cluster_svc's listing: everything beyond is an orphan candidate.
            theirs = {item["id"]: item for item in downstream.through(None if last_page else rows[-1]["id"])}
            judged = []
            for row in rows:
                other = theirs.pop(row["id"], None)  # what is left over is unknown to this page
                judged.append((row, other, judge(row, other, self.horizon, resource=resource)))
            report.compared[resource.label] += sum(  # an abandoned row is left alone: never compared
                row["sync_state"] == SyncState.SYNCED and row.get("abandoned_at") is None for row in rows)
            with self.database.begin() as db_session:
                found = [
                    Finding(resource.label, finding, row["id"], _detail(resource, row, finding, other))
                    for row, other, finding in judged
                    if finding is not None
                    and requeue(
                        db_session=db_session,
                        resource=resource,
                        row=row,
                        finding=finding,
                        theirs=other,
                        dry_run=dry_run,
                    )
                ]
                found += [
                    Finding(resource.label, "orphan", object_id)
                    for object_id in orphans(db_session=db_session, resource=resource, unknown=list(theirs.values()))
                ]
            for finding in found:  # committed: now it may be told
                report.counts[(finding.resource, finding.finding)] += 1
                count_repair(finding.resource, finding.finding)
                log.info("repair: %s", finding)
                on_finding(finding)
            on_page(report)
            if last_page:
                return
            after = rows[-1]["id"]


def _detail(resource: Resource, row: RowMapping, finding: str, theirs: dict[str, Any] | None) -> str:
    if finding == "diverged":
        return ", ".join(differing_fields(resource, row, theirs))
    if finding == "ahead":
        return f"generation {theirs['generation']} there, {row['generation']} here"
    return ""
