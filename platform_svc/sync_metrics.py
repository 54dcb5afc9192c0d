"""``sync_rows`` and ``sync_oldest_pending_seconds``, read from the database at scrape time.

Not kept in memory: every worker, the reconciler and the CLI change sync
states, so only the table knows the truth. Each scrape costs one statement
per table (a GROUP BY on ``sync_state``), under a statement timeout so a
slow database delays a scrape by at most that much.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from sqlalchemy import Interval, bindparam, extract, func, select, text

from platform_svc.sync import KINDS, STALLED_AFTER
from shared.counters import resource_label
from shared.db import Database

log = logging.getLogger(__name__)

STATES = ("pending", "stalled", "synced", "failed")
SCRAPE_STATEMENT_TIMEOUT = "2s"


def _statement(table):
    pending_for = func.now() - table.c.updated_at
    return select(
        table.c.sync_state,
        func.count(),
        func.count().filter(pending_for > bindparam("stalled_after", type_=Interval())),
        extract("epoch", func.max(pending_for)),
    ).group_by(table.c.sync_state)


class SyncRowsCollector:
    """A prometheus-client collector over the platform's object tables."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self._statements = [(resource_label(kind.resource.name), _statement(kind.resource.table)) for kind in KINDS]

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(self._families())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rows, oldest = self._families()
        try:
            with self.database.begin() as db_session:
                db_session.execute(text(f"SET LOCAL statement_timeout = '{SCRAPE_STATEMENT_TIMEOUT}'"))
                for resource, statement in self._statements:
                    counts = dict.fromkeys(STATES, 0)
                    age = 0.0
                    answer = db_session.execute(statement, {"stalled_after": STALLED_AFTER})
                    for state, count, stalled, max_age in answer:
                        if state == "pending":
                            counts["pending"], counts["stalled"] = count - stalled, stalled
                            age = float(max_age or 0)
                        else:
                            counts[state] = count
                    for state in STATES:
                        rows.add_metric([resource, state], counts[state])
                    oldest.add_metric([resource], age)
        except Exception as exc:  # the scrape still serves the counters
            log.warning("sync metrics: the database did not answer (%s)", type(exc).__name__)
            return iter(())
        return iter((rows, oldest))

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "sync_rows",
                "Platform rows by sync state; 'pending' counts rows pending for up to "
                f"{int(STALLED_AFTER.total_seconds())} s, 'stalled' those pending longer (still retried).",
                labels=["resource", "state"],
            ),
            GaugeMetricFamily(
                "sync_oldest_pending_seconds",
                "Age of the oldest pending row (now - updated_at); 0 when none is pending.",
                labels=["resource"],
            ),
        )
