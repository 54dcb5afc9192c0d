"""``sync_rows`` and ``sync_oldest_pending_seconds``, read from the database at scrape time;
and the reconciler's ``sync_repair_leader``.

Not kept in memory: every worker, the reconciler and the CLI change sync
states, so only the table knows the truth. Each scrape costs one statement
per table (the one ``sync-status`` counts with), under a statement timeout so
a slow database delays a scrape by at most that much.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from sqlalchemy import text

from platform_svc.models import RESOURCES
from platform_svc.operations.status import count_states
from platform_svc.states import SHOWN, stalled_after
from shared.db import Database

log = logging.getLogger(__name__)

SCRAPE_STATEMENT_TIMEOUT = "2s"


class SyncRowsCollector:
    """A prometheus-client collector over the platform's object tables."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.stalled_after = stalled_after()

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(self._families())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rows, oldest = self._families()
        try:
            with self.database.begin() as db_session:
                db_session.execute(text(f"SET LOCAL statement_timeout = '{SCRAPE_STATEMENT_TIMEOUT}'"))
                for resource in RESOURCES:
                    counts, oldest_pending = count_states(
                        db_session=db_session, resource=resource, stalled_after=self.stalled_after
                    )
                    for state in SHOWN:
                        rows.add_metric([resource.label, state], counts[state])
                    oldest.add_metric([resource.label], oldest_pending.total_seconds() if oldest_pending else 0.0)
        except Exception as exc:  # the scrape still serves the counters
            log.warning("sync metrics: the database did not answer (%s)", type(exc).__name__)
            return iter(())
        return iter((rows, oldest))

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "sync_rows",
                "Platform rows by sync state; 'pending' counts rows pending for up to the stalled "
                "threshold (SYNC_STALLED_AFTER_SECONDS, default 300 s), 'stalled' those pending longer (still retried).",
                labels=["resource", "state"],
            ),
            GaugeMetricFamily(
                "sync_oldest_pending_seconds",
                "Age of the oldest pending row (now - updated_at); 0 when none is pending.",
                labels=["resource"],
            ),
        )


class LeaderCollector:
    """``sync_repair_leader``: 1 while this reconciler holds the lease and runs the periodic passes, else 0.

    Read at each scrape from the process's own view of its lease (no database
    round trip): summed over every reconciler it is 1, and 0 only while the
    lease of one that crashed runs out.
    """

    def __init__(self, leadership: Any) -> None:  # a platform_svc.operations.leadership.Leadership
        self.leadership = leadership

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter((self._family(),))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        family.add_metric([], 1.0 if self.leadership.holding() else 0.0)
        return iter((family,))

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "sync_repair_leader",
            "1 while this reconciler holds the lease on the periodic passes (repair, purge) and runs them, else 0.",
        )
