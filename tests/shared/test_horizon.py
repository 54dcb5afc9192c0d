"""The UUIDv7 horizon (shared.horizon): which IDs are expired, which come from the
future, and the SQL test purge uses, which must agree with the Python one."""
from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone

import pytest
import uuid6
from sqlalchemy import Uuid as SqlUuid
from sqlalchemy import create_engine, literal, select

from shared.config import ConfigError, id_horizon_seconds
from shared.horizon import FUTURE_TOLERANCE, Horizon, is_uuid7, purgeable_id, uuid7_millis
from tooling.testing import uuid7_at

DAY = 86400.0
NOW = 1_800_000_000.0  # a fixed "now", so no assertion depends on how fast the test runs


def test_the_time_a_uuid7_carries_is_its_top_48_bits():
    born = uuid7_at(NOW)
    assert uuid7_millis(born) == int(NOW * 1000)
    assert uuid7_millis(str(born)) == int(NOW * 1000)


def test_a_generated_uuid7_carries_the_time_it_was_made():
    before = int(time.time() * 1000)
    made = uuid6.uuid7()
    assert before <= uuid7_millis(made) <= int(time.time() * 1000)


@pytest.mark.parametrize(
    "other",
    [uuid.uuid4(), uuid.uuid1(), uuid6.uuid6(), uuid.UUID(int=uuid7_at(NOW).int & ~(0b11 << 62)), "not-a-uuid"],
    ids=["v4", "v1", "v6", "v7 bits with the NCS variant", "garbage"],
)
def test_no_other_uuid_carries_a_time(other):
    assert uuid7_millis(other) is None


def test_an_id_older_than_the_horizon_is_expired_and_a_younger_one_is_not():
    horizon = Horizon(30 * DAY)
    assert horizon.expired(uuid7_at(NOW - 30 * DAY - 1), now=NOW)
    assert not horizon.expired(uuid7_at(NOW - 30 * DAY + 1), now=NOW)
    assert not horizon.expired(uuid7_at(NOW), now=NOW)


def test_ids_of_other_versions_never_expire():
    horizon = Horizon(1)
    assert not horizon.expired(uuid.uuid1(), now=NOW + 100 * 365 * DAY)  # v1 carries a time too, not ours
    assert not horizon.expired(uuid.uuid4(), now=NOW + 100 * 365 * DAY)


def test_the_horizon_reads_its_clock_when_no_time_is_given():
    ticking = Horizon(60, clock=lambda: NOW)
    assert ticking.expired(uuid7_at(NOW - 61)) and not ticking.expired(uuid7_at(NOW - 59))


def test_a_uuid7_more_than_five_minutes_ahead_comes_from_the_future():
    horizon = Horizon()
    tolerance = FUTURE_TOLERANCE.total_seconds()
    assert horizon.from_the_future(uuid7_at(NOW + tolerance + 1), now=NOW)
    assert not horizon.from_the_future(uuid7_at(NOW + tolerance - 1), now=NOW)
    assert not horizon.from_the_future(uuid.uuid4(), now=NOW)


@pytest.mark.parametrize(("seconds", "grace"), [(30 * DAY, 300), (3600, 300), (1000, 100), (2, 0.2)])
def test_the_grace_is_five_minutes_or_a_tenth_of_a_shorter_horizon(seconds, grace):
    assert Horizon(seconds).grace == pytest.approx(grace)


def test_a_row_landed_in_time_unless_a_purge_may_have_passed_its_id():
    horizon = Horizon(1000)  # grace 100 s
    assert horizon.landed_in_time(uuid7_at(NOW - 1000 - 49), now=NOW)  # expired, but not yet purgeable
    assert not horizon.landed_in_time(uuid7_at(NOW - 1000 - 51), now=NOW)  # past horizon + grace/2
    assert horizon.landed_in_time(uuid.uuid4(), now=NOW)


def test_the_purge_cutoff_lies_horizon_plus_grace_before_the_databases_now():
    horizon = Horizon(1000)  # grace 100 s
    cutoff = horizon.purge_cutoff(datetime.fromtimestamp(NOW, timezone.utc))
    assert uuid7_at(NOW - 1101) < cutoff < uuid7_at(NOW - 1099)


@pytest.mark.parametrize(
    ("environ", "seconds"),
    [({}, 2_592_000), ({"ID_HORIZON_SECONDS": ""}, 2_592_000), ({"ID_HORIZON_SECONDS": "60"}, 60)],
)
def test_id_horizon_seconds_defaults_to_thirty_days(environ, seconds):
    assert id_horizon_seconds(environ) == seconds


@pytest.mark.parametrize("bad", ["0", "-5", "30d", "1.5"])
def test_a_malformed_id_horizon_stops_start_up_with_one_line_naming_it(bad):
    with pytest.raises(ConfigError, match="ID_HORIZON_SECONDS") as raised:
        id_horizon_seconds({"ID_HORIZON_SECONDS": bad})
    assert "\n" not in str(raised.value)


def test_postgresql_tells_uuid7s_and_purgeable_ids_as_python_does(pg_server_url):
    horizon = Horizon(1000)
    database_now = datetime.fromtimestamp(NOW, timezone.utc)
    cutoff = horizon.purge_cutoff(database_now)
    ids = [
        uuid7_at(NOW - 1200), uuid7_at(NOW - 1101), uuid7_at(NOW - 1099), uuid7_at(NOW), uuid7_at(NOW + 600),
        uuid.uuid4(), uuid.uuid1(), uuid.UUID(int=0), uuid.UUID(int=(1 << 128) - 1),
        uuid.UUID(int=uuid7_at(NOW - 1200).int & ~(0b11 << 62)),  # version 7, another variant
    ]
    engine = create_engine(pg_server_url)
    try:
        with engine.connect() as conn:
            found = [
                conn.execute(select(is_uuid7(value), purgeable_id(value, cutoff))).one()
                for value in (literal(object_id, SqlUuid()) for object_id in ids)
            ]
    finally:
        engine.dispose()
    expected = [
        (uuid7_millis(object_id) is not None, uuid7_millis(object_id) is not None and object_id < cutoff)
        for object_id in ids
    ]
    assert [tuple(row) for row in found] == expected
    assert expected[:5] == [(True, True), (True, True), (True, False), (True, False), (True, False)]
