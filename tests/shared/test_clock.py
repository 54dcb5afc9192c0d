"""The clock watch against a real PostgreSQL, with the host's clocks given by the test.

The database's clock is the real one; the host's wall and monotonic clocks are
functions the test moves, as an NTP step, a resumed VM or libfaketime would.
"""
from __future__ import annotations

import logging
import time
from email.utils import formatdate

import pytest
from sqlalchemy import event

from shared.clock import CLUSTER_SVC, DATABASE, ClockSkew, ClockWatch, offset_within, safe_offset
from shared.db import Database
from shared.horizon import Horizon
from tooling.testing import fresh_database


class HostClock:
    """A host's wall clock ``skew`` seconds off the real one, and its monotonic clock (``steady``)."""

    def __init__(self) -> None:
        self.skew = 0.0
        self.steady_skew = 0.0

    def wall(self) -> float:
        return time.time() + self.skew

    def steady(self) -> float:
        return time.monotonic() + self.steady_skew

    def step(self, seconds: float, *, monotonic_too: bool = False) -> None:
        self.skew = seconds
        if monotonic_too:
            self.steady_skew = seconds


@pytest.fixture(scope="module")
def database(pg_server_url):
    database = Database(fresh_database(pg_server_url, "clock"), pool_size=2)
    yield database
    database.dispose()


@pytest.fixture
def host():
    return HostClock()


@pytest.fixture
def watch(database, host):
    watch = ClockWatch(database, Horizon(), every=3600, clock=host.wall, steady=host.steady)
    watch.measure()
    return watch


def test_the_bound_is_four_fifths_of_half_the_grace_or_of_half_the_future_tolerance():
    assert safe_offset(Horizon()) == pytest.approx(0.8 * 150)  # 30 days: grace 5 min, tolerance 5 min
    assert safe_offset(Horizon(600)) == pytest.approx(0.8 * 30)  # grace: a tenth of the horizon
    assert safe_offset(Horizon(6)) == pytest.approx(0.24)


@pytest.mark.parametrize(("earliest", "latest", "offset"), [(-0.2, 0.3, 0.0), (1.5, 2.0, 1.5), (-3.0, -2.5, -2.5)])
def test_a_measurement_reports_only_the_offset_it_proves(earliest, latest, offset):
    assert offset_within(earliest, latest) == offset


def test_a_right_clock_reads_zero_and_every_write_is_allowed(watch):
    assert watch.offsets[DATABASE] == 0.0
    watch.check()  # does not raise


@pytest.mark.parametrize("skew", [600, -40 * 86400])
def test_a_step_of_the_wall_clock_is_measured_at_the_next_check_and_refused(watch, host, skew, caplog):
    host.step(skew)  # the monotonic clock is left alone, as by a real step
    with caplog.at_level(logging.WARNING, logger="shared.clock"), pytest.raises(ClockSkew) as refused:
        watch.check()

    assert refused.value.status == 503 and refused.value.headers["Retry-After"]
    assert watch.offsets[DATABASE] == pytest.approx(-skew, abs=1)
    assert f"{abs(skew)}." in refused.value.detail
    assert any(f"{abs(skew)}." in record.getMessage() for record in caplog.records)  # a log line names it

    host.step(0)
    watch.check()  # corrected: measured again at once, and allowed
    assert watch.offsets[DATABASE] == 0.0


def test_a_clock_stepped_with_its_monotonic_one_is_measured_again_both_ways(watch, host):
    watch.every = 300
    host.step(600, monotonic_too=True)
    with pytest.raises(ClockSkew):
        watch.check()  # monotonic forward by 600 s: the measurement is older than `every`
    host.step(0, monotonic_too=True)
    watch.check()  # monotonic back by 600 s: measured again, allowed


def test_between_measurements_a_steady_clock_costs_no_query(watch, database, host):
    queries = []

    def count(*args):
        queries.append(1)

    event.listen(database.engine, "before_cursor_execute", count)
    try:
        for _ in range(100):
            watch.check()
    finally:
        event.remove(database.engine, "before_cursor_execute", count)
    assert queries == []


def test_an_id_minted_far_from_the_database_time_that_stores_it_is_refused(watch):
    now = time.time()
    watch.check_minted(int(now * 1000), now + 0.5, received=now + 0.5)  # a moment apart
    with pytest.raises(ClockSkew):
        watch.check_minted(int((now + 600) * 1000), now, received=now)  # minted 10 minutes ahead
    with pytest.raises(ClockSkew):
        watch.check_minted(int(now * 1000), now + 600, received=now + 1)  # stored 10 minutes after it came back


def test_a_statement_that_waited_for_a_starved_server_is_no_skew(watch):
    """The database's time was taken at an unknown moment between the mint and the statement's
    return: a statement that came back 5 s later (a server starved of CPU) proves no clock behind."""
    now = time.time()
    watch.check_minted(int(now * 1000), now + 5, received=now + 5.1)


def test_a_date_header_gives_cluster_svc_offset_to_the_second(watch):
    now = time.time()
    watch.observe_date(formatdate(now, usegmt=True), now - 0.01, now + 0.01)
    assert watch.offsets[CLUSTER_SVC] == 0.0  # a second's resolution: a right clock reads 0
    watch.observe_date(formatdate(now - 600, usegmt=True), now - 0.01, now + 0.01)
    assert watch.offsets[CLUSTER_SVC] == pytest.approx(-599, abs=1.1)
    watch.observe_date("not a date", now, now)
    assert watch.offsets[CLUSTER_SVC] == pytest.approx(-599, abs=1.1)  # an unreadable Date changes nothing


def test_the_database_time_is_measured_for_each_judgement(watch, host):
    host.step(-86400, monotonic_too=True)  # even a step nothing noticed yet
    assert watch.database_now() == pytest.approx(time.time(), abs=1)
