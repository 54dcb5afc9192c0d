"""The reconciler: push every row whose downstream state is behind, until none is.

Level-triggered: it reads what is due from the rows themselves (see
:mod:`platform_svc.push`), so it needs no operations log, forgets nothing when
it crashes, and any number of reconcilers can run side by side.

Shaped like a controller's work queue. One scheduler thread leases due rows
(never more than the workers can start soon), cuts them into units of work
(creates to one collection go together, up to ``batch`` in one batch call;
every update or delete alone) and hands each unit to a pool of
``concurrency`` workers; a worker pushes its unit with one call and records
the answers with one statement. So up to ``concurrency`` units are in flight
whatever the others do: a call that hangs until its timeout holds its own
rows and worker only, and the scheduler hands the next unit to the next free
worker without waiting for any pass to end. Beside it, a :class:`RecoveryWatch` notices
cluster_svc failing and answering again, logs both, and then makes every row
waiting on a backoff due.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from idempotent_pair_client import request_id
from sqlalchemy import func, select

from platform_svc.operations.passes import record_pass, this_process
from platform_svc.push.pusher import UnitPusher
from platform_svc.push.schedule import Claim, claim_due, claims_of, in_backoff, wake_backed_off
from platform_svc.reconciler.settings import ReconcilerSettings
from platform_svc.states import SyncState
from platform_svc.operations.sightings import PROBE  # what an outage probe asks: a cheap read
from shared.client import Answer
from shared.errors import database_unavailable, describe_database_error

log = logging.getLogger(__name__)


class RecoveryWatch:
    """Notices cluster_svc failing and serving again; then logs it and wakes the rows waiting on a backoff.

    It *sees an outage* when cluster_svc itself does not serve: a probe (a
    cheap authenticated read, its database included) fails, or
    ``failures_to_suspect`` pushes in a row could not be served. A probe goes
    out at the next :meth:`check` (about once a second) whenever a push
    failed since cluster_svc last served anything, or a push has been waiting
    for its answer longer than ``slow_push`` seconds: a frozen cluster_svc
    accepts connections and answers nothing, so a push can wait out its read
    timeout and retry, and succeed once cluster_svc thaws, without ever
    failing. While an outage is seen (or, with ``suspect``, from the start:
    rows may be in backoff from before this process) it probes every check.

    The first push or probe served after an outage ends it: "cluster_svc
    answers again" is logged, and every row waiting on a backoff is made due at
    once, however far its backoff had grown. A lone row that keeps failing
    among healthy ones is not an outage: a probe (or another push) is served,
    and the count of failures in a row restarts with every push or probe served.
    """

    def __init__(
        self,
        pusher: UnitPusher,
        *,
        suspect: bool,
        failures_to_suspect: int = 3,
        slow_push: float = 2.0,
        wake_batch: int = 10_000,
        on_wake=lambda: None,
    ) -> None:
        self.pusher = pusher
        self.failures_to_suspect = failures_to_suspect
        self.slow_push = slow_push
        self.wake_batch = wake_batch
        self.on_wake = on_wake
        self._lock = threading.Lock()  # guards the fields below; never held across a call
        self._failures = 0  # pushes in a row cluster_svc could not serve
        self._failed_total = 0  # every such push, to know whether one came in during a probe
        self._unsure = False  # a push failed: is it cluster_svc, or that row? The next check probes.
        self._suspect = suspect  # rows may be waiting on an outage: probe, and wake them when it ends
        self._seen = False  # this process saw cluster_svc fail (a failed probe, or failures in a row)
        self._pushing: dict[int, float] = {}  # pushes in flight: their start (time.monotonic())

    @contextmanager
    def pushing(self) -> Iterator[None]:
        """Around one push (a worker's call to cluster_svc): a push waiting too long makes the next check probe."""
        token = object()
        with self._lock:
            self._pushing[id(token)] = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                del self._pushing[id(token)]

    def observe(self, answer: Answer) -> None:
        """Told every push's answer (from the workers)."""
        with self._lock:
            if answer.unavailable:
                self._failures += 1
                self._failed_total += 1
                self._unsure = True
                if self._failures >= self.failures_to_suspect:
                    self._outage_seen(f"{self._failures} pushes in a row failed")
                return
            self._failures, self._unsure = 0, False
            recovered, seen = self._suspect, self._seen
            self._suspect = self._seen = False
        if recovered:
            self._wake_or_suspect_again(seen)

    def check(self) -> int:
        """Probe cluster_svc when there is reason to; return the rows woken if it serves after an outage."""
        with self._lock:
            suspect, seen, unsure, failed_before = self._suspect, self._seen, self._unsure, self._failed_total
            slow = any(time.monotonic() - started > self.slow_push for started in self._pushing.values())
        if not (seen or unsure or slow):
            if not suspect:
                return 0
            with self.pusher.path.database.engine.connect() as db_session:
                if not in_backoff(db_session=db_session):
                    with self._lock:  # suspected from the start, and nothing waits from before: drop it
                        if not (self._seen or self._unsure):
                            self._suspect = False
                    return 0
        if not self.pusher.path.client.probe(PROBE):
            with self._lock:
                self._unsure = False
                self._outage_seen("a probe failed")
            return 0
        with self._lock:
            if self._failed_total == failed_before:  # no push failed meanwhile
                self._failures, self._unsure = 0, False
            recovered, seen = self._suspect, self._seen
            self._suspect = self._seen = False
        return self._wake_or_suspect_again(seen) if recovered else 0

    def _outage_seen(self, why: str) -> None:
        """(Lock held.) cluster_svc fails as a whole: say so once, and wait for it to serve again."""
        if not self._seen:
            log.warning("cluster_svc does not answer (%s): rows wait, and go as soon as it answers again", why)
        self._suspect = self._seen = True

    def _wake_or_suspect_again(self, seen: bool) -> int:
        """Wake the rows; if that fails (the database is away), the next check tries again."""
        try:
            return self.wake(after_outage=seen)
        except Exception as exc:  # noqa: BLE001 (never into the push that noticed the recovery)
            with self._lock:
                self._suspect = True
                self._seen = self._seen or seen
            _log_failure("waking rows after recovery", exc)
            return 0

    def wake(self, *, after_outage: bool = False) -> int:
        """Make every row waiting on a transient backoff due now (in bounded batches).

        Logs "cluster_svc answers again" when ``after_outage`` (this process
        saw cluster_svc fail) or when rows were woken.
        """
        woken = 0
        for resource in self.pusher.resources:
            while True:
                with self.pusher.path.database.begin() as db_session:
                    count = wake_backed_off(db_session=db_session, resource=resource, limit=self.wake_batch)
                woken += count
                if count < self.wake_batch:
                    break
        if woken:
            log.info("cluster_svc answers again: %d rows waiting on a backoff are due now", woken)
        elif after_outage:
            log.info("cluster_svc answers again")
        self.on_wake()
        return woken

    def run(self, stop: threading.Event, interval: float) -> None:
        while not stop.wait(interval):
            try:
                self.check()
            except Exception as exc:  # noqa: BLE001 (the database restarting, say: try again)
                _log_failure("recovery check", exc)


class Reconciler:
    """The scheduler and its workers over one :class:`~platform_svc.push.pusher.UnitPusher`."""

    def __init__(self, pusher: UnitPusher, settings: ReconcilerSettings = ReconcilerSettings(), *, suspect: bool) -> None:
        """``suspect``: rows may wait on an outage from before this process (:class:`RecoveryWatch`)."""
        self.pusher = pusher
        self.settings = settings
        self._nudge = threading.Event()  # set when rows became due (a wake): stop resting
        self._due_by: datetime | None = None
        self.watch = RecoveryWatch(pusher, suspect=suspect, on_wake=self._woken)

    def drain(self) -> Counter[str]:
        """Push what is due now and every row that becomes due through it; return the states reached.

        "Now" is fixed at the start: a row that fails transiently goes back to
        its backoff and is not pushed again in this run (unless cluster_svc
        is seen recovering), so this ends even during an outage.
        """
        self._due_by = self._database_now()
        return self._schedule(stop=threading.Event(), until_idle=True)

    def run(self, stop: threading.Event) -> None:
        """Reconcile until ``stop`` is set; then finish the pushes in flight and return.

        The recovery watch's thread (``self.watch.run``) is the manager's to start beside it.
        """
        # Rows left waiting on a backoff by an earlier process are woken now if
        # cluster_svc serves (and an outage is seen now if it does not), before
        # any push of this process can fail and be taken for a recovery.
        try:
            self.watch.check()
        except Exception as exc:  # noqa: BLE001 (the database not up yet, say: the watch tries again)
            _log_failure("recovery check", exc)
        while not stop.is_set():
            try:
                self._schedule(stop=stop, until_idle=False)
            except Exception as exc:  # noqa: BLE001 (the database restarting, say: rest, carry on)
                _log_failure("scheduling", exc)
                stop.wait(self.settings.idle_interval)

    def _schedule(self, *, stop: threading.Event, until_idle: bool) -> Counter[str]:
        reached: dict[tuple[str, Any], str] = {}  # each row pushed: the state its last push left it in
        burst: dict[tuple[str, Any], str] = {}  # the same, since the last pass was recorded
        pushes = 0
        # Units pushing, plus as many waiting for a worker: a freed worker never
        # waits for a claim, and a unit never waits long for a worker.
        capacity = 2 * self.settings.concurrency
        in_flight: set[Future] = set()
        with ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="push") as pool:
            while True:
                if not stop.is_set() and len(in_flight) < capacity:
                    for claim in self._claim(capacity - len(in_flight)):
                        in_flight.add(pool.submit(self._work, claim, stop))
                if not in_flight:
                    if until_idle or stop.is_set():
                        return Counter(reached.values())
                    if burst:
                        # What the console's overview shows as the reconciler's last pass: this burst.
                        line = _states_line(Counter(burst.values()), pushes)
                        log.info("%s", line)
                        record_pass(self.pusher.path.database, "reconcile", this_process(), line)
                        burst, pushes = {}, 0
                    self._nudge.wait(self.settings.idle_interval)
                    self._nudge.clear()
                    continue
                done, in_flight = wait(in_flight, timeout=self.settings.idle_interval, return_when=FIRST_COMPLETED)
                for future in done:
                    for row, state in future.result():
                        reached[row] = burst[row] = state
                        pushes += 1

    def _claim(self, room: int) -> list[Claim]:
        """Lease due rows (parents first) for up to about ``room`` units, in one short transaction.

        Per resource, creates first (up to ``batch`` per unit), then the rest (one
        per unit). Firewall rules of many clusters can make more units than
        ``room``: the surplus waits for a worker (or is released if it waits
        too long), which is cheap since each is a small call.
        """
        push_by = time.monotonic() + self.settings.lease_margin
        claims: list[Claim] = []
        batch = self.settings.batch
        with self.pusher.path.database.begin() as db_session:
            for resource in self.pusher.resources:
                for creates, per_unit in ((True, batch), (False, 1)):
                    left = room - len(claims)
                    if left <= 0:
                        return claims
                    rows = claim_due(
                        db_session=db_session, resource=resource, limit=left * per_unit, lease=self.settings.lease,
                        due_by=self._due_by, creates=creates,
                    )
                    claims += claims_of(resource, rows, batch=batch, push_by=push_by)
        return claims

    def _work(self, claim: Claim, stop: threading.Event) -> list[tuple[tuple[str, Any], str]]:
        """A worker: push one unit and record it; each row pushed (by resource and ID) and the state
        it reached.

        Each unit is one request: its own request ID goes down with every call
        it makes and onto every line logged about it, here and in cluster_svc.
        """
        token = request_id.bind(request_id.new_request_id())
        try:
            with self.watch.pushing():
                rows = self.pusher.push_claimed(claim, cancelled=stop.is_set, observe=self.watch.observe)
            if rows is not None:
                self.pusher.path.fail_waiting(claim.resource, rows)
        except Exception as exc:  # noqa: BLE001 (their leases run out; they are pushed again later)
            ids = ", ".join(str(row["id"]) for row in claim.rows[:3]) + (" ..." if len(claim.rows) > 3 else "")
            _log_failure(f"push of {len(claim.rows)} {claim.resource.words} ({ids})", exc)
            return []
        finally:
            request_id.unbind(token)
        return [] if rows is None else [((claim.resource.key, row["id"]), row["sync_state"]) for row in rows]

    def _woken(self) -> None:
        if self._due_by is not None:  # a drain: the woken rows are due "now" too
            self._due_by = self._database_now()
        self._nudge.set()

    def _database_now(self) -> datetime:
        with self.pusher.path.database.engine.connect() as db_session:
            return db_session.execute(select(func.now())).scalar_one()


def count_failed(pusher: UnitPusher) -> int:
    with pusher.path.database.engine.connect() as db_session:
        return sum(
            db_session.execute(select(func.count()).where(resource.table.c.sync_state == SyncState.FAILED)).scalar_one()
            for resource in pusher.resources
        )


def _states_line(rows: Counter[str], pushes: int) -> str:
    """What a pass did: the rows it pushed, by the state each was left in, and how many pushes that
    took (a row cluster_svc would not take is pushed again and again, and counted once)."""
    return f"reconciled {rows.total()} rows in {pushes} pushes: " + \
        ", ".join(f"{n} {state}" for state, n in sorted(rows.items()))


def _log_failure(what: str, exc: Exception) -> None:
    """One line when the database is away (no traceback storm); a traceback for anything else."""
    if database_unavailable(exc):
        log.warning("%s: database unavailable (%s)", what, describe_database_error(exc))
    else:
        log.exception("%s failed", what)
