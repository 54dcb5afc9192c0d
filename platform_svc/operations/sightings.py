"""Whether cluster_svc answers, as each process of the platform last saw it: one row per process
in ``cluster_svc_sightings``, which the console's overview reads (any worker shows them all).

Every call a process makes to cluster_svc (pushes, batch creates, the recovery watch's probes,
the console's reads) tells :meth:`Sightings.saw` whether cluster_svc served it. A row is written
when what the process sees changes (answers / does not answer), and otherwise at most every
:data:`REFRESH_SECONDS`: at most one small write a second per process while it calls. "When" must
stay that fresh: the overview takes the most recent row as cluster_svc's state, and a process that
saw it fail a moment ago must not lose to another that saw it answer before that. The write happens in a thread
of its own, never on the caller's path: a database that is away (or frozen) costs a request
nothing here, and the sighting is written once it is back.

The view heals by itself: while the last call a process made was not served, that thread probes
cluster_svc every :data:`PROBE_SECONDS` (one cheap read, :data:`PROBE`) until it is, so a web
worker that saw an outage and then gets no call that needs cluster_svc does not stay "not
answering" for minutes after it answers again.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import case, delete, func, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError

from platform_svc.models import RESOURCES, Sighting
from platform_svc.operations.passes import this_process
from shared.client import InternalClient
from shared.db import Database
from shared.errors import describe_database_error

log = logging.getLogger(__name__)

REFRESH_SECONDS = 1.0  # a process seeing the same thing writes it again after this long
PROBE_SECONDS = 5.0  # while cluster_svc did not serve this process's last call, it is probed this often
PROBE = f"/v1{RESOURCES.roots[0].collection_path()}?limit=1"  # an authenticated read, its database included
KEPT_FOR = "1 day"  # rows of processes silent this long (gone, most often) are dropped
OLD_AFTER = timedelta(minutes=3)  # a row this old is shown as old, not as what cluster_svc does now


@dataclass(eq=False)
class Sightings:
    """This process's view of cluster_svc, written for the console (``role``: ``web`` or ``reconciler``)."""

    database: Database
    role: str
    clock: Callable[[], float] = time.monotonic
    probe_every: float = PROBE_SECONDS
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _due: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _pending: tuple[bool, str] | None = field(default=None, init=False)
    _written: tuple[bool, float] | None = field(default=None, init=False)  # what was last written, and when
    _writer_pid: int | None = field(default=None, init=False)  # the process whose writer thread runs (gunicorn forks)
    _prober: InternalClient | None = field(default=None, init=False, repr=False)  # what the probes go through

    def watching(self, client: InternalClient) -> InternalClient:
        """``client``, telling this process's sightings whether each of its calls was served (the
        first one given also carries the probes while cluster_svc does not serve this process)."""
        client.seen = self.saw
        self._prober = self._prober or client
        return client

    def saw(self, served: bool, what: str) -> None:
        """cluster_svc served a call (``served``) or did not; ``what``: the call and its answer, one line."""
        now = self.clock()
        with self._lock:
            written = self._written
            if written is not None and written[0] == served and now - written[1] < REFRESH_SECONDS:
                return
            self._pending = (served, what[:300])
            self._written = (served, now)  # taken as written: one write per change, even while it is under way
            if self._writer_pid != os.getpid():
                self._writer_pid = os.getpid()
                threading.Thread(target=self._write_when_due, name="sightings", daemon=True).start()
        self._due.set()

    def _write_when_due(self) -> None:
        while True:
            unserved = self._written is not None and not self._written[0]
            if not self._due.wait(self.probe_every if unserved and self._prober is not None else None):
                self._prober.probe(PROBE)  # tells saw(): due again at once, served or not
                continue
            self._due.clear()
            with self._lock:
                pending, self._pending = self._pending, None
            if pending is not None and not self.write(*pending):
                with self._lock:
                    self._written = None  # written again at the next call
            if self._writer_pid != os.getpid():
                return

    def write(self, served: bool, what: str) -> bool:
        """One autocommit UPSERT of this process's row (``since`` moves only when ``served`` changed)."""
        table = Sighting.__table__
        values = {"role": self.role, "served": served, "what": what, "seen_at": func.now()}
        upsert = insert(table).values(observer=this_process(), since=func.now(), **values)
        changed = case((table.c.served == upsert.excluded.served, table.c.since), else_=func.now())
        try:
            with self.database.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as db_session:
                db_session.execute(upsert.on_conflict_do_update(
                    index_elements=[table.c.observer], set_={**values, "since": changed}
                ))
                db_session.execute(delete(table).where(table.c.seen_at < func.now() - text(f"interval '{KEPT_FOR}'")))
        except DBAPIError as exc:
            log.debug("cluster_svc sighting not recorded (%s)", describe_database_error(exc))
            return False
        return True
