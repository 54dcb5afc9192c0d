"""The reconciler: push every row whose downstream state is behind, until none is.

Level-triggered: it reads what is due from the rows themselves (see
:mod:`platform_svc.sync`), so it needs no operations log, forgets nothing when
it crashes, and any number of reconcilers can run side by side.
"""
from __future__ import annotations

import logging
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import func, select

from platform_svc.sync import KINDS, Pusher, claim_due

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReconcilerSettings:
    batch: int = 100
    concurrency: int = 8
    # Longer than one push can take with all its quick retries.
    lease: timedelta = timedelta(seconds=60)
    idle_interval: float = 1.0


def reconcile_once(pusher: Pusher, settings: ReconcilerSettings = ReconcilerSettings()) -> Counter[str]:
    """Drain what is due now; return the sync states the pushed rows reached."""
    states: Counter[str] = Counter()
    with ThreadPoolExecutor(settings.concurrency, thread_name_prefix="push") as pool:
        while True:
            claimed_any = False
            for kind in KINDS:
                with pusher.database.begin() as db_session:
                    rows = claim_due(db_session=db_session, kind=kind, limit=settings.batch, lease=settings.lease)
                if rows:
                    claimed_any = True
                    states.update(row["sync_state"] for row in pusher.push_many(kind, rows, pool))
            if not claimed_any:
                return states


def run(pusher: Pusher, settings: ReconcilerSettings, stop: threading.Event) -> None:
    """Reconcile until ``stop`` is set, resting when nothing is due."""
    while not stop.is_set():
        try:
            states = reconcile_once(pusher, settings)
        except Exception:  # a database restart, say: log it, rest, carry on
            log.exception("reconcile pass failed")
            states = Counter()
        if states:
            log.info("reconciled: %s", ", ".join(f"{n} {state}" for state, n in sorted(states.items())))
        else:
            stop.wait(settings.idle_interval)


def count_failed(pusher: Pusher) -> int:
    with pusher.database.engine.connect() as db_session:
        return sum(
            db_session.execute(select(func.count()).where(kind.resource.table.c.sync_state == "failed")).scalar_one()
            for kind in KINDS
        )
