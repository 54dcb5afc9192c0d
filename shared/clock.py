"""How far this host's clock is from its database's, and what a service does when it is too far.

Every judgement of an ID's age is made on a host's clock: platform_svc mints
UUIDv7s from it, and cluster_svc refuses IDs from the future (422) or older
than the horizon (410 ``id_expired``) by it. Purge, on the other hand, reads
the database's clock (:mod:`shared.horizon`). So a host whose clock is off
mints IDs that are refused downstream, or refuses good IDs, and past half the
purge grace it could let a purged ID be created again. Nothing of that heals
by retrying, so a service measures its clock instead of trusting it
(docs/decisions/0016-clocks.md):

- :class:`ClockWatch` compares this host's clock with the database's
  (``SELECT clock_timestamp()``) at start-up, whenever readiness is checked
  (every scrape of ``/metrics`` checks it), at least every
  ``CLOCK_CHECK_SECONDS`` (:data:`CHECK_EVERY` by default) when asked, and at
  once when the host's clock has stepped (its wall clock moved against its
  monotonic one, as an NTP step or a resumed VM moves it): a clock that jumps is
  measured again before the next ID it would judge. No request pays a query:
  the check between measurements is two clock reads.
- Past :func:`safe_offset`, the service stops minting or accepting IDs: its
  writes answer 503 ``clock_skew`` with ``Retry-After`` (:class:`ClockSkew`),
  reads go on, and a log line names the offset. Skew is a transient fault: a
  caller (and the reconciler) tries again, and no row is failed for it.
- platform_svc also compares with cluster_svc's ``Date`` on every answer
  (:meth:`ClockWatch.observe_date`), for the gauge and its alert.

Both offsets are served as ``clock_offset_seconds{reference=...}``
(:class:`ClockCollector`): the reference's clock minus this host's, so a host
10 minutes ahead reads -600.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

from shared import config
from shared.errors import HttpProblem
from shared.horizon import FUTURE_TOLERANCE, Horizon

if TYPE_CHECKING:
    from prometheus_client.core import GaugeMetricFamily
    from sqlalchemy import Connection

    from shared.db import Database

log = logging.getLogger(__name__)

DATABASE = "database"  # the references of clock_offset_seconds
CLUSTER_SVC = "cluster_svc"
REFERENCES = (DATABASE, CLUSTER_SVC)

# The share of the exact limits a clock may use up (CockroachDB stops a node at
# 80 % of its --max-offset): the rest is left to the measurement and to the time
# between a measurement and the IDs judged after it.
SAFETY = 0.8
CHECK_EVERY = 10.0  # seconds between measurements while the clock looks steady
CHECK_EVERY_WHILE_SKEWED = 1.0  # so a clock corrected by slewing is noticed within a second
# How far the wall clock may move against the monotonic one between measurements
# before it counts as a step (NTP slews by at most 0.5 ms per second).
STEP_TOLERANCE = 0.05
RETRY_AFTER_SECONDS = 10  # a skewed clock is a person's or NTP's to fix, not a matter of milliseconds
DATE_RESOLUTION = 1.0  # an HTTP Date names a whole second


def safe_offset(horizon: Horizon) -> float:
    """The largest offset from its database's clock at which a host may still mint or accept IDs, in seconds.

    Two limits, each exact, and :data:`SAFETY` of the smaller one:

    - **The purge race** (:meth:`Horizon.landed_in_time`): a create checks its
      ID on its host's clock, purge on the database's; no purge can race a
      create into bringing an ID back while the two agree within half the
      grace ``G`` (5 minutes, or a tenth of the horizon when shorter).
    - **The future tolerance** ``F`` (5 minutes): an ID minted on a platform
      host ``b`` ahead of the true time is judged by a cluster_svc host that may
      be ``b`` behind it; it is refused as from the future once ``2b > F``.
      (The other way, an ID is refused as expired only past the horizon, days
      away.)

    So the bound is ``SAFETY * min(G / 2, F / 2)``: 2 minutes with the default
    30-day horizon, a tenth of a second or so with the horizons of seconds the tests use.
    """
    return SAFETY * min(horizon.grace / 2, FUTURE_TOLERANCE.total_seconds() / 2)


def offset_within(earliest: float, latest: float) -> float:
    """The offset a measurement proves: the smallest in size of ``[earliest, latest]`` (0 when it holds 0).

    A reference read at an unknown moment between two readings of this host's
    clock, or known only to the second, gives an interval of offsets, not one:
    only what lies outside it for certain is reported, so a right clock
    always reads 0, however slow the round trip.
    """
    if earliest > 0:
        return earliest
    if latest < 0:
        return latest
    return 0.0


class ClockSkew(HttpProblem):
    """This host's clock is too far from its database's to mint or judge an ID: try again later."""

    status, code = 503, "clock_skew"

    def __init__(self, detail: str) -> None:
        super().__init__(detail, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


class ClockWatch:
    """One process's measure of its host's clock against its database's (and cluster_svc's).

    ``clock`` and ``steady`` are the host's wall and monotonic clocks
    (``time.time`` and ``time.monotonic`` unless a test gives others);
    ``every``: the longest time between two measurements, when asked.
    """

    def __init__(
        self,
        database: Database,
        horizon: Horizon,
        *,
        every: float = CHECK_EVERY,
        clock: Callable[[], float] = time.time,
        steady: Callable[[], float] = time.monotonic,
    ) -> None:
        self.database = database
        self.bound = safe_offset(horizon)
        self.every = every
        self.clock = clock
        self.steady = steady
        self.offsets: dict[str, float] = {}  # by reference: the last measured offset
        self._anchor: float | None = None  # wall minus monotonic at the last measurement
        self._measured_at = -math.inf  # monotonic
        self._lock = threading.Lock()
        self._measuring = threading.Lock()  # held by the one refresh that measures; the others go on
        self._skewed = False

    @classmethod
    def from_env(cls, database: Database, horizon: Horizon) -> ClockWatch:
        """:raise ConfigError: ``CLOCK_CHECK_SECONDS`` is not a number."""
        return cls(database, horizon, every=config.seconds("CLOCK_CHECK_SECONDS", CHECK_EVERY))

    # -- measuring -----------------------------------------------------------------

    def measure(self) -> float | None:
        """Compare with the database now (one ``SELECT clock_timestamp()``); the offset, or None
        when the database did not answer (the last measurement stands)."""
        try:
            with self.database.engine.connect() as connection:
                return self.measure_on(connection)
        except Exception as exc:  # noqa: BLE001 (no answer: readiness and the queries say so themselves)
            log.debug("clock: the database did not answer (%s)", type(exc).__name__)
            return None

    def measure_on(self, connection: Connection) -> float:
        """:meth:`measure` on a connection the caller holds (readiness's).

        :raise sqlalchemy.exc.DBAPIError: the database did not answer.
        """
        from sqlalchemy import text

        sent, sent_steady = self.clock(), self.steady()
        theirs = float(connection.execute(text("SELECT extract(epoch FROM clock_timestamp())")).scalar_one())
        received = self.clock()
        offset = offset_within(theirs - received, theirs - sent)
        with self._lock:
            self._anchor, self._measured_at = sent - sent_steady, sent_steady
        self._observe(DATABASE, offset)
        return offset

    def observe_date(self, date: str | None, sent: float, received: float) -> None:
        """An answer's ``Date`` (cluster_svc's clock, to the second), read between ``sent`` and
        ``received`` on this host's clock."""
        if not date:
            return
        try:
            theirs = parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError):
            return
        self._observe(CLUSTER_SVC, offset_within(theirs - received, theirs + DATE_RESOLUTION - sent))

    def _observe(self, reference: str, offset: float) -> None:
        self.offsets[reference] = offset
        if reference != DATABASE:
            return
        skewed = abs(offset) > self.bound
        if skewed != self._skewed:
            self._skewed = skewed
            if skewed:
                log.error("clock: this host's clock is %s its database's: past the %.3g s bound, IDs are "
                          "neither minted nor accepted until it is corrected", _describe(offset), self.bound)
            else:
                log.warning("clock: this host's clock is within %.3g s of its database's again (offset %.3f s)",
                            self.bound, offset)

    def refresh(self) -> None:
        """Measure again if the last measurement is old, or the wall clock stepped since."""
        with self._lock:
            anchor, measured_at = self._anchor, self._measured_at
        now_steady = self.steady()
        every = min(CHECK_EVERY_WHILE_SKEWED, self.every) if self._skewed else self.every
        stepped = anchor is not None and abs(self.clock() - now_steady - anchor) > STEP_TOLERANCE
        # A monotonic clock that went back was stepped itself (libfaketime steps both clocks together).
        if not (stepped or now_steady < measured_at or now_steady - measured_at > every):
            return
        # One measurement at a time: the writes that find it due meanwhile judge by the last one
        # (and a step is measured before any of them mints: see check_minted).
        if self._measuring.acquire(blocking=False):
            try:
                self.measure()
            finally:
                self._measuring.release()

    # -- judging -------------------------------------------------------------------

    def check(self) -> None:
        """:raise ClockSkew: this host's clock is past the bound from its database's (a log line names it)."""
        self.refresh()
        offset = self.offsets.get(DATABASE)
        if offset is not None and abs(offset) > self.bound:
            detail = (f"This server's clock is {_describe(offset)} its database's (more than {self.bound:.3g} s): "
                      "it neither mints nor accepts IDs until the clock is corrected. Reads go on; try again later.")
            log.warning("503 clock_skew: %s", detail)
            raise ClockSkew(detail)

    def check_minted(self, minted_millis: int, database_time: float, received: float | None = None) -> None:
        """An ID minted on this host's clock, against the database's time in the statement that stored it,
        which came back at ``received`` on this host's clock (now, unless given). The database took its
        time at some moment between the two: only what lies outside that is skew (:func:`offset_within`),
        so a statement that waited for a starved server is no clock behind.

        :raise ClockSkew: they differ by more than the bound (the caller's transaction rolls back).
        """
        received = self.clock() if received is None else received
        offset = offset_within(database_time - received, database_time - minted_millis / 1000)
        if abs(offset) > self.bound:
            self._observe(DATABASE, offset)
            detail = (f"This server's clock is {_describe(offset)} its database's (more than {self.bound:.3g} s): "
                      "nothing was stored; try again once the clock is corrected.")
            log.warning("503 clock_skew: %s", detail)
            raise ClockSkew(detail)

    def database_now(self) -> float:
        """The database's time, measured now (one query: for judgements that are rare), or this
        host's clock plus the last measured offset when the database does not answer."""
        self.measure()
        return self.clock() + self.offsets.get(DATABASE, 0.0)


def _describe(offset: float) -> str:
    """``offset`` (the reference minus this host) as words: "600.0 s ahead of"."""
    return f"{abs(offset):.1f} s {'behind' if offset > 0 else 'ahead of'}"


class ClockCollector:
    """``clock_offset_seconds{reference}``: the reference's clock minus this host's, as last measured.

    In a service it is registered after the readiness collector, whose check
    measures the database again, so a scrape shows the offset of that very
    moment; where nothing else measures (the reconciler), ``measure`` makes
    each scrape measure it.
    """

    def __init__(self, watch: ClockWatch, *, measure: bool = False) -> None:
        self.watch = watch
        self.measure = measure

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter((self._family(),))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self.measure:
            self.watch.measure()
        family = self._family()
        for reference, offset in sorted(self.watch.offsets.items()):
            family.add_metric([reference], offset)
        return iter((family,))

    @staticmethod
    def _family() -> GaugeMetricFamily:
        from prometheus_client.core import GaugeMetricFamily

        return GaugeMetricFamily(
            "clock_offset_seconds",
            "The reference's clock minus this host's (database: its own database's; cluster_svc: its Date), "
            "as last measured; past the bound the service refuses to mint or accept IDs (503 clock_skew).",
            labels=["reference"],
        )
