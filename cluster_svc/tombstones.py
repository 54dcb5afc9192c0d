"""cluster_svc's tombstones: what may be purged, and the gauges that show the bound hold.

Every tombstone whose ID is past the horizon may go (:mod:`shared.purge`):
no create of that ID is accepted any more, so the tombstone holds nothing
back. ``tombstones`` and ``tombstone_oldest_seconds`` are read at scrape time
through the index on deleted rows (``ix_<table>_deleted``: an index-only
count and its first entry), never the table; with purge running, both stay
bounded by what is deleted within one horizon. ``id_horizon_seconds`` says
which horizon, so an alert can tell when the oldest tombstone outlives it
(deploy/prometheus/alerts.yml).
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta

from prometheus_client.core import GaugeMetricFamily
from sqlalchemy import Connection, func, select, text
from sqlalchemy.sql import ColumnElement

from cluster_svc.models import RESOURCES
from shared.db import Database
from shared.horizon import Horizon
from shared.registry import Registry, Resource

log = logging.getLogger(__name__)

SCRAPE_STATEMENT_TIMEOUT = "2s"


def purgeable(resource: Resource) -> list[ColumnElement]:
    """Besides an expired ID, nothing: every tombstone of an expired ID may go."""
    return []


def tombstone_stats(*, db_session: Connection, resource: Resource) -> tuple[int, timedelta | None]:
    """How many tombstones the resource holds, and how long ago the oldest was deleted (None: none)."""
    table = resource.table
    count, oldest = db_session.execute(
        select(func.count(), func.now() - func.min(table.c.deleted_at)).where(table.c.deleted_at.is_not(None))
    ).one()
    return count, oldest


class TombstonesCollector:
    """A prometheus-client collector: ``tombstones`` and ``tombstone_oldest_seconds`` per resource,
    and the ``id_horizon_seconds`` they are bounded by (served even when the database does not answer)."""

    def __init__(self, database: Database, horizon: Horizon, registry: Registry = RESOURCES) -> None:
        self.database = database
        self.horizon = horizon
        self.registry = registry

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter((*self._families(), self._horizon()))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        horizon = self._horizon()
        horizon.add_metric([], self.horizon.seconds)
        count, oldest = self._families()
        try:
            with self.database.begin() as db_session:
                db_session.execute(text(f"SET LOCAL statement_timeout = '{SCRAPE_STATEMENT_TIMEOUT}'"))
                for resource in self.registry:
                    tombstones, age = tombstone_stats(db_session=db_session, resource=resource)
                    count.add_metric([resource.label], tombstones)
                    oldest.add_metric([resource.label], age.total_seconds() if age is not None else 0.0)
        except Exception as exc:  # the scrape still serves the counters
            log.warning("tombstone metrics: the database did not answer (%s)", type(exc).__name__)
            return iter((horizon,))
        return iter((count, oldest, horizon))

    @staticmethod
    def _horizon() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "id_horizon_seconds",
            "The ID horizon (ID_HORIZON_SECONDS): no create of a UUIDv7 older than this is accepted, and "
            "purge removes its tombstone.",
        )

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "tombstones",
                "Deleted rows kept as tombstones; purge removes those whose ID is past the horizon.",
                labels=["resource"],
            ),
            GaugeMetricFamily(
                "tombstone_oldest_seconds",
                "Seconds since the oldest tombstone was deleted (0 when none is kept); with purge running it "
                "stays below the horizon plus the purge interval, but for IDs that are not UUIDv7s.",
                labels=["resource"],
            ),
        )
