"""Console logins throttled so that a guesser cannot lock a known operator out (OWASP's "device
cookies" against lockout denial of service), in the database so that every worker and replica
counts together.

A login is counted under several keys, each with its own allowance of refused logins within
15 minutes (:data:`LIMITS`); past it, that key is locked for a while, doubling with each further
refusal up to its longest:

- a browser that has logged in as this operator before carries a *device cookie* for the name
  (signed, :func:`device_cookie`): its logins count under that cookie alone, so nobody guessing
  the name elsewhere, from any number of addresses, holds it back;
- any other login counts under the name from that address (the guesser's own: 5, then 30 s up to
  15 minutes), under the name from anywhere (a slower brake on guessing spread over many
  addresses: 20, then 5 s up to a minute), and under the address for any name (a shared address
  is held back for at most a minute by others' mistakes).

A locked login is refused (429 with Retry-After) before its secret is checked. The count is
atomic: an attempt takes its keys' rows (in one order, so two attempts never deadlock) for its
transaction, so concurrent guesses queue there and each sees the refusals before it: at most a
key's allowance of secrets is checked per lock, whatever the concurrency. A successful login
clears its keys. Nothing a person typed is stored or logged: a name is kept as the start of its
SHA-256 (a secret pasted into the name field stays secret), and only a lockout writes a log line.
"""
from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Sequence
from typing import NamedTuple

from itsdangerous import BadSignature, URLSafeSerializer
from sqlalchemy import Connection, bindparam, text

WINDOW = "15 minutes"
DEVICE_COOKIE = "console_device"
DEVICE_COOKIE_DAYS = 365


class Limit(NamedTuple):
    failures: int  # refused logins within WINDOW before a lockout
    first: int  # the first lockout, seconds
    longest: int  # the longest, seconds


LIMITS = {
    "device": Limit(5, 30, 900),  # a browser that logged in before: its own allowance
    "pair": Limit(5, 30, 900),  # one name from one address
    "name": Limit(20, 5, 60),  # one name from anywhere: the brake a device cookie passes
    "source": Limit(30, 5, 60),  # one address, any names
}

# Takes the key's row for the attempt's transaction (a new window when the last has passed): how
# many refusals it holds, and the seconds its lock has left.
TAKE = text(f"""
INSERT INTO console_login_failures AS f (key, failures, first_at) VALUES (:key, 0, now())
ON CONFLICT (key) DO UPDATE SET
    failures = CASE WHEN f.first_at < now() - interval '{WINDOW}' THEN 0 ELSE f.failures END,
    first_at = CASE WHEN f.first_at < now() - interval '{WINDOW}' THEN now() ELSE f.first_at END
RETURNING extract(epoch FROM f.locked_until - now()) AS locked_for
""")
COUNT = text("UPDATE console_login_failures SET failures = failures + 1 WHERE key = :key RETURNING failures")
LOCK = text("UPDATE console_login_failures SET locked_until = now() + make_interval(secs => :seconds) WHERE key = :key")
CLEAR = text("DELETE FROM console_login_failures WHERE key = ANY(:keys)").bindparams(bindparam("keys"))


def _named(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:16]


def keys(name: str, source: str, device: str | None = None) -> list[str]:
    """What a login is counted under: the device cookie's own key when it has one for this name
    (:func:`device_of`), else the name from this source, the name, and the source."""
    if device is not None:
        return [f"device:{device}"]
    named = _named(name)
    return [f"pair:{named}:{source}", f"name:{named}", f"source:{source}"]


def take(db_session: Connection, counted: Sequence[str]) -> int:
    """Take ``counted``'s rows for this transaction: whole seconds until none of them is locked
    (0: the secret may be checked). Attempts on the same keys wait here for this one to end."""
    locked_for = 0.0
    for key in sorted(counted):
        seconds = db_session.execute(TAKE, {"key": key}).scalar()
        locked_for = max(locked_for, seconds or 0.0)
    return max(1, math.ceil(locked_for)) if locked_for > 0 else 0


def refused(db_session: Connection, counted: Sequence[str]) -> list[tuple[str, int, int]]:
    """Count a refused login under each of its keys (taken by :func:`take`); the keys it locked
    out: (key, failures, seconds)."""
    locked = []
    for key in sorted(counted):
        failures = db_session.execute(COUNT, {"key": key}).scalar_one()
        limit = LIMITS[key.partition(":")[0]]
        if failures >= limit.failures:
            seconds = min(limit.longest, limit.first * 2 ** (failures - limit.failures))
            db_session.execute(LOCK, {"key": key, "seconds": seconds})
            locked.append((key, failures, seconds))
    return locked


def admitted(db_session: Connection, counted: Sequence[str]) -> None:
    db_session.execute(CLEAR, {"keys": list(counted)})


# Device cookies --------------------------------------------------------------------------


def _devices(signing_key: str) -> URLSafeSerializer:
    return URLSafeSerializer(signing_key, salt="console-device")


def device_cookie(signing_key: str, name: str) -> str:
    """A new device cookie's value for a browser that just logged in as ``name``: the name's hash
    and a random device id, signed (with the sessions' key, for another purpose)."""
    return _devices(signing_key).dumps({"name": _named(name), "device": secrets.token_urlsafe(16)})


def device_of(signing_key: str, cookie: str | None, name: str) -> str | None:
    """The device id of a cookie :func:`device_cookie` made for ``name`` (None: no such cookie, a
    forged one, or one made for another name)."""
    if not cookie:
        return None
    try:
        payload = _devices(signing_key).loads(cookie)
    except BadSignature:
        return None
    if not isinstance(payload, dict) or payload.get("name") != _named(name):
        return None
    device = payload.get("device")
    return device if isinstance(device, str) else None
