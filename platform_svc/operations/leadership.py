"""Who leads: which of several processes runs the periodic passes (drift repair, purge) and the
console's real repair runs, by one lease row in the platform's database (docs/decisions/0011).

Every reconciler competes for it (:mod:`platform_svc.reconciler.manager` keeps it renewed in a
thread of its own); a console's real repair run takes the same lease for as long as it runs
(:meth:`Leadership.kept`), so two repairs never change rows side by side.
"""
from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import KW_ONLY, dataclass, field
from datetime import timedelta

from sqlalchemy import Connection, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError

from platform_svc.models import Lease
from shared.db import Database
from shared.errors import describe_database_error

log = logging.getLogger(__name__)

LEASE_NAME = "periodic-passes"  # the lease row whose holder runs the periodic passes
LEASE_SECONDS = 15.0  # `reconcile --leader-lease`


@dataclass(eq=False)
class Leadership:
    """Which of several reconcilers runs the periodic passes (drift repair, purge): the one holding
    the ``periodic-passes`` row of the platform's ``leases`` table (docs/decisions/0011).

    The lease is taken and renewed by one autocommit statement that succeeds
    only when the lease has expired or is already this process's, and sets
    its expiry ``ttl`` seconds past the database's ``now()``: no session
    state, so it works through a pooler in transaction mode, and no process's
    clock decides who leads. :meth:`keep` (a thread of its own) renews it
    every third of ``ttl``, a pass running or not.

    This process counts itself the leader (:meth:`holding`) only until
    ``ttl`` seconds after it *sent* its last successful renewal, measured on
    its monotonic clock: the database set the expiry no earlier than that, so
    a leader that cannot renew (the database or the pooler away, the renewal
    thread stuck) stops counting itself the leader before anyone else can take
    the lease, and its pass stops after the page at hand. When it stops
    cleanly it gives the lease back (:meth:`release`), so another, if one runs,
    takes over at its next try (within a third of the lease); when it crashes,
    another takes over once the lease expires.
    """

    database: Database
    _: KW_ONLY
    ttl: float = LEASE_SECONDS
    name: str = LEASE_NAME
    clock: Callable[[], float] = time.monotonic  # this process's monotonic clock (a test's controllable one)
    holder: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}")
    _renewed: float | None = field(default=None, init=False)  # clock() when the last successful take or renewal was sent
    _told: bool | None = field(default=None, init=False)  # what was last logged: leading or not
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def holding(self) -> bool:
        """Whether this process holds the lease now, by its own clock (no database round trip)."""
        renewed = self._renewed
        return renewed is not None and self.clock() - renewed < self.ttl

    def renew(self) -> float:
        """Take the lease if it is free, or renew it if it is ours; return the seconds until the next try.

        A database error leaves :meth:`holding` to run out by itself (and the
        next try comes sooner).
        """
        lease = Lease.__table__
        sent = self.clock()
        try:
            with self._autocommit() as db_session:
                take = (
                    insert(lease)
                    .values(name=self.name, holder=self.holder, expires_at=func.now() + self._ttl)
                    .on_conflict_do_update(
                        index_elements=[lease.c.name],
                        set_={"holder": self.holder, "expires_at": func.now() + self._ttl},
                        where=or_(lease.c.expires_at < func.now(), lease.c.holder == self.holder),
                    )
                    .returning(lease.c.expires_at)
                )
                taken = db_session.execute(take).first() is not None
                left = None
                if not taken:  # someone else's: try again soon after it would expire
                    left = db_session.execute(
                        select(func.extract("epoch", lease.c.expires_at - func.now())).where(lease.c.name == self.name)
                    ).scalar()
        except DBAPIError as exc:
            log.warning("periodic passes: the lease could not be renewed (%s)", describe_database_error(exc))
            self.leads_now()
            return min(self.ttl / 3, 1.0)
        with self._lock:
            self._renewed = sent if taken else None
        self.leads_now()
        if taken or left is None:
            return self.ttl / 3
        return max(0.05, min(self.ttl / 3, float(left) + 0.05))

    def release(self) -> None:
        """Give the lease back if it is ours (its expiry set to now), so another reconciler, if one runs, takes
        it at its next try (within a third of the lease) instead of when it would have expired."""
        with self._lock:
            held, self._renewed = self._renewed is not None, None
        if not held:
            return
        lease = Lease.__table__
        try:
            with self._autocommit() as db_session:
                db_session.execute(
                    update(lease)
                    .where(lease.c.name == self.name, lease.c.holder == self.holder)
                    .values(expires_at=func.now())
                )
        except DBAPIError as exc:  # it expires by itself
            log.warning("periodic passes: the lease could not be given back (%s)", describe_database_error(exc))
            return
        with self._lock:
            self._told = False
        # Whether another reconciler runs is not known here: say what happens if one does, and when.
        log.info("periodic passes: the lease is given back; a reconciler still running takes the passes over"
                 " within %.3g s (a third of the lease)", self.ttl / 3)

    def keep(self, stop: threading.Event) -> None:
        """Take or renew the lease at once, then every third of its time, until ``stop`` is set.

        Never gives it back: whoever runs the passes does (:meth:`release`), once the one running has ended.
        """
        while not stop.wait(self.renew()):
            pass

    @contextmanager
    def kept(self) -> Iterator[None]:
        """Keep the lease renewed (a thread of its own) for the block, then give it back."""
        stop = threading.Event()
        keeper = threading.Thread(target=self.keep, args=(stop,), name="leader-lease", daemon=True)
        keeper.start()
        try:
            yield
        finally:
            stop.set()
            keeper.join(timeout=30)
            self.release()

    def leads_now(self) -> bool:
        """Log when this process starts or stops leading; return whether it leads."""
        leading = self.holding()
        with self._lock:
            changed, self._told = leading != self._told, leading
        if changed:
            log.info("periodic passes: %s", "this reconciler runs the passes" if leading
                     else "another reconciler runs the passes (or none holds the lease); this one takes over when"
                     " the lease is free")
        return leading

    @property
    def _ttl(self) -> timedelta:
        return timedelta(seconds=self.ttl)

    def _autocommit(self) -> AbstractContextManager[Connection]:
        """One statement, one transaction: nothing held between statements."""
        return self.database.engine.connect().execution_options(isolation_level="AUTOCOMMIT")


class WhileLeading:
    """A pass's stop signal: ``stop`` set, or this process no longer holding the lease."""

    def __init__(self, stop: threading.Event, leadership: Leadership) -> None:
        self.stop = stop
        self.leadership = leadership

    def is_set(self) -> bool:
        return self.stop.is_set() or not self.leadership.holding()
