"""The reconciler: push every row whose downstream state is behind, until none is.

Level-triggered: it reads what is due from the rows themselves (see
:mod:`platform_svc.sync`), so it needs no operations log, forgets nothing when
it crashes, and any number of reconcilers can run side by side.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import func, select

from platform_svc.sync import KINDS, Pusher, claim_due

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReconcilerSettings:
    batch: int = 10  # rows one worker claims at a time
    concurrency: int = 8  # workers, so pushes in flight
    # How long a claim keeps a row; a worker stops pushing its batch before
    # then, so a row is never pushed by two workers at once.
    lease: timedelta = timedelta(seconds=60)
    idle_interval: float = 1.0


def reconcile_once(pusher: Pusher, settings: ReconcilerSettings = ReconcilerSettings()) -> Counter[str]:
    """Drain what is due now; return the sync states the pushed rows reached.

    ``concurrency`` workers each claim, push and record their own small
    batches, so no worker waits for another's slowest push. A pass ends when
    no worker finds anything due; a push can make its row due again (a create
    that found an older generation downstream still needs its update), so
    passes repeat until one pushes nothing.
    """
    states: Counter[str] = Counter()
    while True:
        with ThreadPoolExecutor(settings.concurrency, thread_name_prefix="push") as pool:
            workers = [pool.submit(_drain, pusher, settings) for _ in range(settings.concurrency)]
            pushed = sum((worker.result() for worker in workers), Counter())
        if not pushed:
            return states
        states += pushed


def _drain(pusher: Pusher, settings: ReconcilerSettings) -> Counter[str]:
    """One worker: claim a few due rows, push them, record them; until none is due."""
    states: Counter[str] = Counter()
    while True:
        claimed_any = False
        for kind in KINDS:
            with pusher.database.begin() as db_session:
                rows = claim_due(db_session=db_session, kind=kind, limit=settings.batch, lease=settings.lease)
            if rows:
                claimed_any = True
                deadline = time.monotonic() + settings.lease.total_seconds() * 0.8
                states.update(row["sync_state"] for row in pusher.push_many(kind, rows, deadline=deadline))
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
