"""The leader's periodic passes: each duty (drift repair, purge) every interval, while this reconciler
holds the lease (:class:`~platform_svc.operations.leadership.Leadership`).
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from platform_svc.operations.leadership import Leadership, WhileLeading
from platform_svc.operations.passes import record_pass
from shared.errors import database_unavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Periodic:
    """One of the leader's periodic passes: a name, its interval, and the pass
    (given its stop signal, set once the reconciler stops or loses the lease:
    anything with ``is_set()``, as the passes' ``stop``; returns its summary line)."""

    name: str
    interval: float
    run: Callable[[Any], str | None]  # None: nothing to say (the pass recorded itself, or there was nothing to do)
    expected: tuple[type[Exception], ...] = ()  # failures that need one line, not a traceback (cluster_svc away)


def run_periodically(leadership: Leadership, duties: Sequence[Periodic], stop: threading.Event) -> None:
    """Each duty every ``interval`` seconds until ``stop`` is set (the reconciler's thread),
    while this reconciler leads (:class:`Leadership`): drift repair, and purge.

    The lease is kept by a thread of its own, which the manager starts beside
    this one. The first pass of each duty comes one interval after start-up,
    so reconcilers restarted together do not all walk both databases at once. A pass ends after the page at hand once ``stop`` is
    set or the lease could not be renewed in time. A pass that fails
    (cluster_svc or the database away) is one line, and is tried again at its
    next interval.
    """
    due = {duty.name: time.monotonic() + duty.interval for duty in duties}
    while not stop.wait(max(0.0, min(due.values()) - time.monotonic())):
        for duty in duties:
            if due[duty.name] > time.monotonic():
                continue
            due[duty.name] = time.monotonic() + duty.interval
            if not leadership.leads_now():
                continue
            until = WhileLeading(stop, leadership)
            try:
                summary = duty.run(until)
            except Exception as exc:  # noqa: BLE001 (one line, or a traceback for a bug; tried again later)
                if isinstance(exc, duty.expected) or database_unavailable(exc):  # cluster_svc or the database away
                    log.warning("%s pass stopped: %s", duty.name, str(exc).splitlines()[0])
                else:
                    log.exception("%s pass failed", duty.name)
                continue
            if not stop.is_set() and not leadership.holding():
                log.warning("%s pass stopped: the lease could not be renewed in time", duty.name)
                leadership.leads_now()
                continue
            if summary is None:
                continue
            log.info("%s", summary)
            record_pass(leadership.database, duty.name, leadership.holder, summary)  # the console shows it
