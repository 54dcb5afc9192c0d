"""The one comparison of the two databases: every platform object against
cluster_svc's row with the same ID.

e2e tests and the chaos scenarios both call :func:`compare` (through
``Pair.compare``); what it compares is :func:`compared`, one entry per
resource, derived from the platform's registry: nothing here names a table or a column.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from sqlalchemy import Engine, text

from platform_svc.models import RESOURCES
from platform_svc.push.content import owned
from shared.horizon import Horizon


@dataclass(frozen=True)
class Compared:
    """One resource as both databases hold it."""

    table: str  # the same name in both databases
    # (platform column, cluster_svc column) that must hold the same value on a live object
    fields: tuple[tuple[str, str], ...]
    # (the column naming the object's parent, the parent's table), if it has one: a deleted
    # object its parent's tombstone answers for may be missing downstream.
    parent: tuple[str, str] | None = None


def compared() -> tuple[Compared, ...]:
    """What is compared, resource by resource (the platform's registry), parents first.

    The fields are those the platform owns and pushes (:mod:`platform_svc.push.content`),
    the columns naming the object's ancestors, and the generation. The first
    field of a resource without a parent says whose an object is (the
    platform's account, cluster_svc's team); an object with a parent is its
    parent's owner's.
    """
    kinds = []
    for resource in RESOURCES:
        owner = resource.declaration.owner
        owner_columns = (("account_id", owner),) if owner else ()
        names = [*resource.scope_columns, *sorted(owned(resource) - {owner}), "generation"]
        parent = None if resource.parent is None else (resource.parent_column, resource.parent.table.name)
        kinds.append(Compared(resource.table.name, (*owner_columns, *((name, name) for name in names)), parent))
    return tuple(kinds)


@dataclass(frozen=True)
class Problem:
    """One way the two databases disagree about one object."""

    table: str
    object_id: str
    what: str

    def __str__(self) -> str:
        return f"{self.table[:-1]} {self.object_id}: {self.what}"


@dataclass
class Comparison:
    """Both databases side by side; ``problems`` is empty when they agree exactly."""

    platform: Counter[str] = field(default_factory=Counter)  # "clusters live", "clusters deleted", ...
    downstream: Counter[str] = field(default_factory=Counter)  # "clusters live", "clusters tombstones", ...
    problems: list[Problem] = field(default_factory=list)
    unsynced: int = 0
    orphans: int = 0

    @property
    def exact(self) -> bool:
        return not self.problems

    def live_and_deleted(self, side: Counter[str]) -> tuple[int, int]:
        return (
            sum(n for key, n in side.items() if key.endswith(" live")),
            sum(n for key, n in side.items() if not key.endswith(" live")),
        )

    def describe(self, limit: int = 25) -> str:
        shown = [str(problem) for problem in self.problems[:limit]]
        more = len(self.problems) - len(shown)
        return "\n".join([*shown, *([f"... and {more} more"] if more > 0 else [])])


def compare(
    platform: Engine, downstream: Engine, *, account_id: str | None = None, horizon: Horizon = Horizon()
) -> Comparison:
    """Every platform object against cluster_svc's row with the same ID.

    A live platform object must be synced and equal downstream field by field;
    a deleted one must have its delete confirmed and be a tombstone downstream.
    Two exceptions, by cluster_svc's design: an object (a firewall rule) that
    never reached cluster_svc before its parent was deleted has no row there;
    its parent's tombstone answers for it (a late create of it gets 410). And
    a deleted object whose ID is past the ``horizon`` may have been purged on
    either side first: its tombstone missing downstream, or its deleted row
    missing on the platform, is the bound holding (no create of it can come
    any more), as repair judges it. Nothing else may exist downstream that the
    platform does not know.

    With ``account_id``, only that account's objects, and downstream only
    theirs and rows of its team: what other tests sharing the databases did is
    none of this comparison's business.
    """
    result = Comparison()
    ours: dict[str, dict[str, dict]] = {}
    theirs: dict[str, dict[str, dict]] = {}
    kinds = compared()
    for kind in kinds:
        ours[kind.table] = _rows(platform, kind.table)
        theirs[kind.table] = _rows(downstream, kind.table)
        if account_id is not None:
            _scope(kind, ours, theirs, str(account_id))
    for kind in kinds:
        for object_id, row in ours[kind.table].items():
            problem = lambda what, table=kind.table, oid=object_id: result.problems.append(Problem(table, oid, what))
            deleted = row["deleted_at"] is not None
            result.platform[f"{kind.table} {'deleted' if deleted else 'live'}"] += 1
            if row["sync_state"] != "synced":
                result.unsynced += 1
                problem(f"platform sync_state {row['sync_state']} ({row['sync_error']})")
            other = theirs[kind.table].get(object_id)
            if other is None:
                if deleted and kind.parent is not None and _parent_tombstone(kind, row, theirs):
                    result.downstream[f"{kind.table} covered by their parent's tombstone"] += 1
                    continue
                if deleted and row["delete_synced_at"] is not None and horizon.expired(object_id):
                    continue  # purged downstream
                problem("missing from cluster_svc")
                continue
            if deleted:
                if other["deleted_at"] is None:
                    problem("deleted on the platform, alive in cluster_svc")
                if row["delete_synced_at"] is None:
                    problem("deleted, but the delete was never confirmed")
                continue
            if other["deleted_at"] is not None:
                problem("alive on the platform, a tombstone in cluster_svc")
                continue
            if row["synced_generation"] != row["generation"]:
                problem(f"synced_generation {row['synced_generation']} != generation {row['generation']}")
            for ours_name, theirs_name in kind.fields:
                if str(row[ours_name]) != str(other[theirs_name]):
                    problem(f"{ours_name} is {row[ours_name]!r} on the platform, {other[theirs_name]!r} in cluster_svc")
        for object_id, other in theirs[kind.table].items():
            result.downstream[f"{kind.table} {'tombstones' if other['deleted_at'] is not None else 'live'}"] += 1
            if object_id not in ours[kind.table]:
                if other["deleted_at"] is not None and horizon.expired(object_id):
                    continue  # purged on the platform first
                result.orphans += 1
                result.problems.append(Problem(kind.table, object_id, "in cluster_svc, unknown to the platform"))
    return result


def _scope(kind: Compared, ours: dict, theirs: dict, account_id: str) -> None:
    """Keep the account's objects, and downstream the rows that are theirs or its team's."""
    ours[kind.table] = {i: row for i, row in ours[kind.table].items() if str(row["account_id"]) == account_id}
    if kind.parent is None:
        owner = kind.fields[0][1]
        keep = lambda i, row: i in ours[kind.table] or str(row[owner]) == account_id
    else:
        column, table = kind.parent
        parents = theirs[table].keys() | ours[table].keys()
        keep = lambda i, row: i in ours[kind.table] or str(row[column]) in parents
    theirs[kind.table] = {i: row for i, row in theirs[kind.table].items() if keep(i, row)}


def _parent_tombstone(kind: Compared, row: dict, theirs: dict) -> bool:
    column, table = kind.parent
    parent = theirs[table].get(str(row[column]))
    return parent is not None and parent["deleted_at"] is not None


def _rows(engine: Engine, table: str) -> dict[str, dict]:
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT * FROM {table}")).mappings().all()  # fixed names
    return {str(row["id"]): dict(row) for row in rows}
