"""The audit trail of cluster_svc's tables, and the figures every scenario
reports. (The two databases are compared row by row by :mod:`tooling.compare`.)

The audit is a trigger the suite installs on both databases (the
application knows nothing of it): every INSERT, UPDATE and DELETE of a cluster
or firewall rule is written down with the generation and tombstone mark before
and after, so "generations only move forward" and "nothing is resurrected"
are checked over every write the run made to cluster_svc, not only over the
final state. A DELETE is purge's: on either side it may only ever remove a
deleted row whose ID was past the horizon at that moment.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool

from tooling.compare import Comparison
from tooling.faultproxy import Fault
from tooling.pair import Mark, Pair

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


def install_audit(database_url: str) -> None:
    """The audit trigger on a database of either service, before anything writes to it."""
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(AUDIT_SQL)
    finally:
        engine.dispose()


@dataclass(frozen=True)
class Audit:
    """What a service's tables went through: all zero for cluster_svc's (see :attr:`clean`), but ``purged``."""

    regressions: int  # an update that moved a generation backwards
    resurrections: int  # a tombstone made alive again
    tombstone_writes: int  # any other write to a row already deleted
    duplicates: int  # an ID inserted more than once (after a purge too)
    hard_deletes: int  # a row removed that purge may not remove: alive, or its ID not yet past the horizon
    purged: int = 0  # deleted rows purge removed, every one's ID past the horizon

    @property
    def clean(self) -> bool:
        return not any(n for name, n in vars(self).items() if name != "purged")


# A DELETE the horizon allows: of a deleted row whose ID is a UUIDv7 (version nibble 7)
# older than the horizon when it was removed.
PURGE_ALLOWED = """
    old_deleted AND substr(id::text, 15, 1) = '7'
    AND ('x' || lpad(substr(replace(id::text, '-', ''), 1, 12), 16, '0'))::bit(64)::bigint
        < (EXTRACT(EPOCH FROM at) - :horizon) * 1000
"""


def read_audit(pair: Pair, *, platform: bool = False) -> Audit:
    """What cluster_svc's tables (or, with ``platform``, the platform's) went through so far
    (see :func:`install_audit`). On the platform only ``hard_deletes`` and ``purged`` say
    something: its deleted rows are written again as their delete is confirmed."""
    engine = pair.platform_engine if platform else pair.cluster_engine
    with engine.connect() as conn:
        row = conn.execute(
            text(
                f"""
                SELECT count(*) FILTER (WHERE op = 'UPDATE' AND new_generation < old_generation),
                       count(*) FILTER (WHERE op = 'UPDATE' AND old_deleted AND NOT new_deleted),
                       count(*) FILTER (WHERE op = 'UPDATE' AND old_deleted AND new_deleted),
                       (SELECT count(*) FROM (SELECT 1 FROM chaos_audit WHERE op = 'INSERT'
                                              GROUP BY tbl, id HAVING count(*) > 1) AS twice),
                       count(*) FILTER (WHERE op = 'DELETE' AND NOT ({PURGE_ALLOWED})),
                       count(*) FILTER (WHERE op = 'DELETE' AND {PURGE_ALLOWED})
                FROM chaos_audit
                """
            ),
            {"horizon": pair.horizon.seconds},
        ).one()
    return Audit(*row)


def updates_of(engine: Engine, object_id: str) -> int:
    """How many times cluster_svc's row for ``object_id`` was written after its insert."""
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT count(*) FROM chaos_audit WHERE id = :id AND op = 'UPDATE'"), {"id": object_id}
        ).scalar_one()


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
    purged: tuple[int, int] = (0, 0)  # deleted rows purge removed so far: platform's, cluster_svc's
    unsynced: int = 0  # platform rows not synced at the end (failed or still pending)
    duplicates: int = 0
    resurrections: int = 0
    seconds: float = 0.0
    notes: str = ""

    def to_dict(self) -> dict:
        """Plain values, as a pytest-xdist worker sends them to the controller."""
        return {**vars(self), "faults": dict(self.faults)}

    @classmethod
    def from_dict(cls, values: dict) -> Figures:
        return cls(
            **{**values, "faults": Counter(values["faults"]), "expected": tuple(values["expected"]),
               "platform": tuple(values["platform"]), "cluster_svc": tuple(values["cluster_svc"]),
               "purged": tuple(values["purged"])}
        )


# Where the figures of a run's scenarios are kept (pytest's stash of the controller's config).
FIGURES = pytest.StashKey[list[Figures]]()


def scenario_figures(
    pair: Pair, scenario: str, mark: Mark, comparison: Comparison, *, expected: tuple[int, int], notes: str = ""
) -> Figures:
    """The scenario's row of the table, from what the pair counted since ``mark``."""
    log = pair.proxy.log[mark.log:]
    public = pair.tally.snapshot()
    public.subtract(mark.public)
    trail = read_audit(pair)
    return Figures(
        scenario=scenario,
        public_requests=sum(public.values()),
        public_5xx=sum(n for status, n in public.items() if status is not None and status >= 500),
        downstream_requests=len(log),
        downstream_5xx=sum(1 for e in log if e.status is not None and e.status >= 500),
        faults=Counter(e.fault.value for e in log if e.fault is not Fault.PASS) + (pair.events - mark.events),
        expected=expected,
        platform=comparison.live_and_deleted(comparison.platform),
        cluster_svc=comparison.live_and_deleted(comparison.downstream),
        purged=(read_audit(pair, platform=True).purged, trail.purged),
        unsynced=comparison.unsynced,
        duplicates=trail.duplicates + comparison.orphans,
        resurrections=trail.resurrections,
        seconds=time.monotonic() - mark.started,
        notes=notes,
    )


COLUMNS = (
    ("scenario", 28),
    ("public", 6),
    ("5xx", 3),
    ("downstream", 10),
    ("5xx", 3),
    ("expected", 9),
    ("platform", 9),
    ("cluster_svc", 11),
    ("purged", 7),
    ("unsynced", 8),
    ("dup", 3),
    ("resurr.", 7),
    ("secs", 4),
    ("faults injected", 0),
)


def render(rows: list[Figures], header: str) -> str:
    """The table, one line per scenario; object counts as ``live/deleted``, purged ones as
    ``platform/cluster_svc`` (so far in the scenario's module)."""

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
                    "%d/%d" % row.purged,
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
