"""The UUIDv7 horizon: how old an ID may be and still be created.

Every ID platform_svc invents is a UUIDv7, which carries its own birth time
(the unix time in milliseconds, in its top 48 bits). With a horizon ``H``
(``ID_HORIZON_SECONDS``, 30 days by default):

- an ID is *expired* when it is a UUIDv7 whose time is older than now - H.
  IDs of any other version never expire;
- no create of an expired ID is ever accepted (nor a tombstone recorded for
  one): where it has no row it answers 410 ``id_expired`` and stores nothing.
  A row that exists answers as always, whatever its age;
- so a tombstone whose ID is expired holds nothing back any more and can be
  purged: nothing can bring it back, since nothing can insert its ID again.

Purge waits a *grace* past the horizon (5 minutes, or a tenth of the horizon
when that is shorter) and reads the time from the database, while creates
read it from their own host. Each create checks its ID against the horizon
right before its INSERT and checks a row it created again right after
(:meth:`Horizon.landed_in_time`): a row that landed so late that a purge may
already have passed its ID is not committed. So as long as the hosts' clocks
agree with the database's within half the grace, no purge can race a create
into bringing an ID back (docs/decisions/0009-uuidv7-horizon.md); each
service measures that they do, and refuses IDs when they do not
(:mod:`shared.clock`, docs/decisions/0016-clocks.md).

A UUIDv7 more than :data:`FUTURE_TOLERANCE` ahead of now is refused (422):
it would escape the horizon for as long as it lies in the future.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func
from sqlalchemy.sql import ColumnElement

from shared.config import DEFAULT_ID_HORIZON_SECONDS, id_horizon_seconds

FUTURE_TOLERANCE = timedelta(minutes=5)
MAX_GRACE = timedelta(minutes=5)
_MS = 1000


def uuid7_millis(object_id: Any) -> int | None:
    """The unix time in milliseconds a UUIDv7 carries; None for any other UUID (or a non-UUID)."""
    try:
        value = object_id if isinstance(object_id, uuid.UUID) else uuid.UUID(str(object_id))
    except ValueError:
        return None
    if value.version != 7:  # None unless the variant is RFC 9562's (10xx)
        return None
    return value.int >> 80


def uuid7_floor(millis: int) -> uuid.UUID:
    """The lowest UUID whose top 48 bits are ``millis``: every UUIDv7 of an earlier millisecond is below it."""
    return uuid.UUID(int=max(0, millis) << 80)


@dataclass(frozen=True)
class Horizon:
    """One service's horizon, and its clock (``time.time`` unless a test gives another)."""

    seconds: float = DEFAULT_ID_HORIZON_SECONDS
    clock: Callable[[], float] = field(default=time.time, compare=False, repr=False)

    @classmethod
    def from_env(cls) -> Horizon:
        """:raise ConfigError: ``ID_HORIZON_SECONDS`` is set but not a positive integer."""
        return cls(id_horizon_seconds())

    @property
    def grace(self) -> float:
        """Seconds purge waits past the horizon: 5 minutes, or a tenth of the horizon when shorter."""
        return min(MAX_GRACE.total_seconds(), self.seconds / 10)

    def expired(self, object_id: Any, now: float | None = None) -> bool:
        """Whether ``object_id`` is a UUIDv7 older than the horizon (never, for another version)."""
        millis = uuid7_millis(object_id)
        return millis is not None and millis < self._millis(now, -self.seconds)

    def from_the_future(self, object_id: Any, now: float | None = None) -> bool:
        """Whether ``object_id`` is a UUIDv7 more than :data:`FUTURE_TOLERANCE` ahead of now."""
        millis = uuid7_millis(object_id)
        return millis is not None and millis > self._millis(now, FUTURE_TOLERANCE.total_seconds())

    def landed_in_time(self, object_id: Any, now: float | None = None) -> bool:
        """Checked after a row was inserted: no purge can have passed its ID before now.

        Purge removes only IDs older than the horizon plus the grace (by the
        database's clock); an ID still younger than the horizon plus half the
        grace (by this host's) cannot have been purged, while the clocks agree
        within half the grace.
        """
        millis = uuid7_millis(object_id)
        return millis is None or millis >= self._millis(now, -(self.seconds + self.grace / 2))

    def refusal(self, what: str) -> str:
        """The detail of a 410 ``id_expired`` about ``what`` ("Cluster 0190...")."""
        return (
            f"{what} has no row, and its ID is older than the {_duration(self.seconds)} horizon: an ID that old "
            "is never created or recorded again (any tombstone it had may have been purged)."
        )

    def future_refusal(self) -> str:
        return (
            f"A UUIDv7 more than {_duration(FUTURE_TOLERANCE.total_seconds())} in the future (by the server's "
            "clock) cannot name an object: it would escape the ID horizon."
        )

    def purge_cutoff(self, database_now: datetime) -> uuid.UUID:
        """The UUID below which every UUIDv7 is purgeable at ``database_now`` (the
        database's clock): older than the horizon plus the grace."""
        millis = int(database_now.timestamp() * _MS) - int((self.seconds + self.grace) * _MS)
        return uuid7_floor(millis)

    def _millis(self, now: float | None, offset: float) -> float:
        return ((self.clock() if now is None else now) + offset) * _MS


def is_uuid7(column: ColumnElement) -> ColumnElement:
    """SQL: the UUID in ``column`` is a UUIDv7 (version nibble 7, variant bits 10)."""
    raw = func.uuid_send(column)
    return (func.get_byte(raw, 6).op(">>")(4) == 7) & (func.get_byte(raw, 8).op(">>")(6) == 2)


def purgeable_id(column: ColumnElement, cutoff: uuid.UUID) -> ColumnElement:
    """SQL: the ID in ``column`` is a UUIDv7 below ``cutoff`` (:meth:`Horizon.purge_cutoff`).

    A comparison of the whole UUID, which orders UUIDv7s by their time (the
    primary key's order), and a check of the version and variant bits.
    """
    return (column < cutoff) & is_uuid7(column)


def _duration(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds:g} s"

