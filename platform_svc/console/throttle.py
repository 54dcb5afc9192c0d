"""Console logins throttled per operator name and per source address, in the database so that
every worker and replica counts together.

Five refused logins within 15 minutes lock the name, or the source, out for a while: a name for
5 s, doubling with each further refusal up to a minute, so that a guesser cannot keep a real
operator out for long; a source for 30 s, doubling up to 15 minutes. A locked login is refused
(429 with Retry-After) before its secret is checked; a successful login clears both counts.
Nothing a person typed is stored or logged: a name is kept as the start of its SHA-256 (a
secret pasted into the name field stays secret), and only a lockout writes a log line.
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from sqlalchemy import Connection, bindparam, text

FAILURES = 5  # refused logins within WINDOW before a lockout
WINDOW = "15 minutes"
LOCKS = {"name": (5, 60), "source": (30, 900)}  # first lockout and the longest, seconds

COUNT = text(f"""
INSERT INTO console_login_failures AS f (key, failures, first_at) VALUES (:key, 1, now())
ON CONFLICT (key) DO UPDATE SET
    failures = CASE WHEN f.first_at < now() - interval '{WINDOW}' THEN 1 ELSE f.failures + 1 END,
    first_at = CASE WHEN f.first_at < now() - interval '{WINDOW}' THEN now() ELSE f.first_at END
RETURNING failures
""")
LOCK = text("UPDATE console_login_failures SET locked_until = now() + make_interval(secs => :seconds) WHERE key = :key")
LOCKED = text("""
SELECT max(extract(epoch FROM locked_until - now())) FROM console_login_failures
WHERE key = ANY(:keys) AND locked_until > now()
""").bindparams(bindparam("keys"))
CLEAR = text("DELETE FROM console_login_failures WHERE key = ANY(:keys)").bindparams(bindparam("keys"))


def keys(name: str, source: str) -> list[str]:
    """What a login is counted under: its name (hashed) and its source address."""
    return [f"name:{hashlib.sha256(name.encode()).hexdigest()[:16]}", f"source:{source}"]


def locked_for(db_session: Connection, counted: Sequence[str]) -> int:
    """Whole seconds until none of ``counted`` is locked out (0: none is)."""
    seconds = db_session.execute(LOCKED, {"keys": list(counted)}).scalar()
    return 0 if seconds is None else max(1, math.ceil(seconds))


def refused(db_session: Connection, counted: Sequence[str]) -> list[tuple[str, int, int]]:
    """Count a refused login under each key; the keys it locked out: (key, failures, seconds)."""
    locked = []
    for key in counted:
        failures = db_session.execute(COUNT, {"key": key}).scalar_one()
        if failures >= FAILURES:
            first, longest = LOCKS[key.partition(":")[0]]
            seconds = min(longest, first * 2 ** (failures - FAILURES))
            db_session.execute(LOCK, {"key": key, "seconds": seconds})
            locked.append((key, failures, seconds))
    return locked


def admitted(db_session: Connection, counted: Sequence[str]) -> None:
    db_session.execute(CLEAR, {"keys": list(counted)})
