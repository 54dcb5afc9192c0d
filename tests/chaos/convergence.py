"""Comparing the two databases row by row, the audit trail of cluster_svc's
tables, and the figures every scenario reports.

The audit is a trigger the suite installs on cluster_svc's database (the
application knows nothing of it): every INSERT, UPDATE and DELETE of a cluster
or firewall rule is written down with the generation and tombstone mark before
and after, so "generations only move forward" and "nothing is resurrected"
are checked over every write the run made, not only over the final state.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from sqlalchemy import Engine, text

AUDIT_SQL = """
CREATE TABLE chaos_audit (
    seq bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    tbl text NOT NULL,
    id uuid NOT NULL,
    op text NOT NULL,
    old_generation integer,
    new_generation integer,
    old_deleted boolean,
    new_deleted boolean
);
CREATE FUNCTION chaos_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO chaos_audit (tbl, id, op, new_generation, new_deleted)
        VALUES (TG_TABLE_NAME, NEW.id, TG_OP, NEW.generation, NEW.deleted_at IS NOT NULL);
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO chaos_audit (tbl, id, op, old_generation, new_generation, old_deleted, new_deleted)
        VALUES (TG_TABLE_NAME, NEW.id, TG_OP, OLD.generation, NEW.generation,
                OLD.deleted_at IS NOT NULL, NEW.deleted_at IS NOT NULL);
    ELSE
        INSERT INTO chaos_audit (tbl, id, op, old_generation, old_deleted)
        VALUES (TG_TABLE_NAME, OLD.id, TG_OP, OLD.generation, OLD.deleted_at IS NOT NULL);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_audit AFTER INSERT OR UPDATE OR DELETE ON clusters
    FOR EACH ROW EXECUTE FUNCTION chaos_audit();
CREATE TRIGGER chaos_audit AFTER INSERT OR UPDATE OR DELETE ON firewall_rules
    FOR EACH ROW EXECUTE FUNCTION chaos_audit();
"""


def install_audit(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(AUDIT_SQL)


@dataclass(frozen=True)
class Audit:
    """What cluster_svc's tables went through (should all be zero)."""

    regressions: int  # an update that moved a generation backwards
    resurrections: int  # a tombstone made alive again
    tombstone_writes: int  # any other write to a row already deleted
    duplicates: int  # an ID inserted more than once
    hard_deletes: int  # a row removed instead of tombstoned

    @property
    def clean(self) -> bool:
        return not any(vars(self).values())


def read_audit(engine: Engine) -> Audit:
    with engine.connect() as conn:
        row = conn.execute(
            text(
                """
                SELECT count(*) FILTER (WHERE op = 'UPDATE' AND new_generation < old_generation),
                       count(*) FILTER (WHERE op = 'UPDATE' AND old_deleted AND NOT new_deleted),
                       count(*) FILTER (WHERE op = 'UPDATE' AND old_deleted AND new_deleted),
                       (SELECT count(*) FROM (SELECT 1 FROM chaos_audit WHERE op = 'INSERT'
                                              GROUP BY tbl, id HAVING count(*) > 1) AS twice),
                       count(*) FILTER (WHERE op = 'DELETE')
                FROM chaos_audit
                """
            )
        ).one()
    return Audit(*row)


def updates_of(engine: Engine, object_id: str) -> int:
    """How many times cluster_svc's row for ``object_id`` was written after its insert."""
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT count(*) FROM chaos_audit WHERE id = :id AND op = 'UPDATE'"), {"id": object_id}
        ).scalar_one()


# -- the row-by-row comparison ---------------------------------------------------


@dataclass(frozen=True)
class Kind:
    table: str
    # (platform column, cluster_svc column) that must hold the same value on a live object
    fields: tuple[tuple[str, str], ...]


KINDS = (
    Kind(
        "clusters",
        (
            ("account_id", "team_id"),
            ("name", "name"),
            ("region", "region"),
            ("postgres_version", "postgres_version"),
            ("plan", "plan"),
            ("storage_gb", "storage_gb"),
            ("generation", "generation"),
        ),
    ),
    Kind(
        "firewall_rules",
        (("cluster_id", "cluster_id"), ("cidr", "cidr"), ("description", "description"), ("generation", "generation")),
    ),
)


@dataclass
class Comparison:
    """Both databases side by side; ``problems`` is empty when they agree exactly."""

    platform: Counter[str] = field(default_factory=Counter)  # "clusters live", "clusters deleted", ...
    downstream: Counter[str] = field(default_factory=Counter)  # "clusters live", "clusters tombstones", ...
    problems: list[str] = field(default_factory=list)
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
        shown = self.problems[:limit]
        more = len(self.problems) - len(shown)
        return "\n".join([*shown, *([f"... and {more} more"] if more > 0 else [])])


def compare(platform: Engine, downstream: Engine) -> Comparison:
    """Every platform object against cluster_svc's row with the same ID.

    A live platform object must be synced and equal downstream field by field;
    a deleted one must have its delete confirmed and be a tombstone downstream.
    One exception, by cluster_svc's design: a firewall rule that never reached
    cluster_svc before its cluster was deleted has no row there; its cluster's
    tombstone answers for it (a late create of it gets 410). Nothing may exist
    downstream that the platform does not know.
    """
    result = Comparison()
    ours = {kind.table: _rows(platform, kind.table) for kind in KINDS}
    theirs = {kind.table: _rows(downstream, kind.table) for kind in KINDS}
    for kind in KINDS:
        for object_id, row in ours[kind.table].items():
            label = f"{kind.table[:-1]} {object_id}"
            deleted = row["deleted_at"] is not None
            result.platform[f"{kind.table} {'deleted' if deleted else 'live'}"] += 1
            if row["sync_state"] != "synced":
                result.unsynced += 1
                result.problems.append(f"{label}: platform sync_state {row['sync_state']} ({row['sync_error']})")
            other = theirs[kind.table].get(object_id)
            if other is None:
                if deleted and _under_a_tombstone(row, theirs):
                    result.downstream[f"{kind.table} covered by their cluster's tombstone"] += 1
                    continue
                result.problems.append(f"{label}: missing from cluster_svc")
                continue
            if deleted:
                if other["deleted_at"] is None:
                    result.problems.append(f"{label}: deleted on the platform, alive in cluster_svc")
                if row["delete_synced_at"] is None:
                    result.problems.append(f"{label}: deleted, but the delete was never confirmed")
                continue
            if other["deleted_at"] is not None:
                result.problems.append(f"{label}: alive on the platform, a tombstone in cluster_svc")
                continue
            if row["synced_generation"] != row["generation"]:
                result.problems.append(
                    f"{label}: synced_generation {row['synced_generation']} != generation {row['generation']}"
                )
            for ours_name, theirs_name in kind.fields:
                if str(row[ours_name]) != str(other[theirs_name]):
                    result.problems.append(
                        f"{label}: {ours_name} is {row[ours_name]!r} on the platform,"
                        f" {other[theirs_name]!r} in cluster_svc"
                    )
        for object_id, other in theirs[kind.table].items():
            result.downstream[f"{kind.table} {'tombstones' if other['deleted_at'] is not None else 'live'}"] += 1
            if object_id not in ours[kind.table]:
                result.orphans += 1
                result.problems.append(f"{kind.table[:-1]} {object_id}: in cluster_svc, unknown to the platform")
    return result


def _under_a_tombstone(row: dict, theirs: dict[str, dict[str, dict]]) -> bool:
    parent = theirs["clusters"].get(str(row.get("cluster_id")))
    return parent is not None and parent["deleted_at"] is not None


def _rows(engine: Engine, table: str) -> dict[str, dict]:
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT * FROM {table}")).mappings().all()  # noqa: S608 (fixed names)
    return {str(row["id"]): dict(row) for row in rows}


def fingerprint(engine: Engine, tables: tuple[str, ...], *, excluding: str | None = None) -> dict[str, tuple]:
    """Each table's row count and a digest of every row in it (but the one with ID ``excluding``).

    Equal fingerprints mean no row was added, removed or changed.
    """
    with engine.connect() as conn:
        return {
            table: tuple(
                conn.execute(
                    text(
                        f"SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), ''))"
                        f" FROM {table} AS t WHERE t.id::text IS DISTINCT FROM :excluding"
                    ),
                    {"excluding": excluding},
                ).one()
            )
            for table in tables
        }


# -- the figures -------------------------------------------------------------------


@dataclass
class Figures:
    """One row of the table ``make chaos`` prints."""

    scenario: str
    public_requests: int = 0
    public_5xx: int = 0
    downstream_requests: int = 0
    downstream_5xx: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    expected: tuple[int, int] = (0, 0)  # live, deleted
    platform: tuple[int, int] = (0, 0)
    cluster_svc: tuple[int, int] = (0, 0)  # live, tombstones
    unsynced: int = 0  # platform rows not synced at the end (failed or still pending)
    duplicates: int = 0
    resurrections: int = 0
    seconds: float = 0.0
    notes: str = ""


COLUMNS = (
    ("scenario", 28),
    ("public", 6),
    ("5xx", 3),
    ("downstream", 10),
    ("5xx", 3),
    ("expected", 9),
    ("platform", 9),
    ("cluster_svc", 11),
    ("unsynced", 8),
    ("dup", 3),
    ("resurr.", 7),
    ("secs", 4),
    ("faults injected", 0),
)


def render(rows: list[Figures], header: str) -> str:
    """The table, one line per scenario; object counts as ``live/deleted``."""

    def line(cells):
        return "  ".join(str(cell).ljust(width) for cell, (_, width) in zip(cells, COLUMNS)).rstrip()

    out = [header, line(name for name, _ in COLUMNS), line("-" * (width or 15) for _, width in COLUMNS)]
    for row in sorted(rows, key=lambda row: row.scenario):
        faults = ", ".join(f"{name} {n}" for name, n in sorted(row.faults.items())) or "none"
        out.append(
            line(
                [
                    row.scenario,
                    row.public_requests,
                    row.public_5xx,
                    row.downstream_requests,
                    row.downstream_5xx,
                    "%d/%d" % row.expected,
                    "%d/%d" % row.platform,
                    "%d/%d" % row.cluster_svc,
                    row.unsynced,
                    row.duplicates,
                    row.resurrections,
                    f"{row.seconds:.0f}",
                    faults,
                ]
            )
        )
        if row.notes:
            out.append(" " * 30 + row.notes)
    return "\n".join(out)
