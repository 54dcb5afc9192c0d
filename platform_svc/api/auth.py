"""Who may call the public API, and how often: API keys and the per-account rate limit.

An API key is ``<key_id>.<secret>``. An account may hold several keys (a new
one is issued, the callers move to it, the old one is revoked); only the
secret's SHA-256 is stored. The rate limit is a fixed one-second window per
account, counted in PostgreSQL, so every worker of every replica shares it.

Every public request is authenticated **and** counted by one statement, in
a transaction of its own, with nothing cached in the process: a key revoked, or an
account or key removed by hand, answers 401 on the very next request in
every worker and replica. Measured cost: docs/performance.md, "Per-request
authentication". ``last_used_at`` is written by that statement at most once a
minute per key, so a request costs no write to a logged table; the counter
lives in an UNLOGGED table (:class:`platform_svc.models.RateWindow`), whose
commit waits for no WAL flush. A key that admits nothing counts against its
source address, in the worker and with no database (:class:`Strangers`).

Functions that change keys or limits take the session as ``db_session`` and
never commit.
"""
from __future__ import annotations

import hashlib
import math
import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from flask import Response, g, request
from sqlalchemy import Connection, bindparam, func, insert, select, text, update
from sqlalchemy.engine import Row

from platform_svc.models import Account, ApiKey
from shared.db import Database
from shared.errors import HttpProblem

WINDOW_SECONDS = 1
LAST_USED_EVERY = "1 minute"  # how stale a key's last_used_at may get: one write per key per minute at most


class TooManyRequests(HttpProblem):
    status, code = 429, "too_many_requests"


# Keys ------------------------------------------------------------------------------


def hash_secret(secret: str) -> str:
    # A fast hash is enough: the secret is 32 random bytes, nothing a dictionary could guess.
    return hashlib.sha256(secret.encode()).hexdigest()


def issue_key(*, db_session: Connection, account_id: uuid.UUID) -> str:
    """A new API key for the account, beside those it has; returned once, never stored.

    :raise LookupError: no such account.
    """
    if db_session.execute(select(Account.id).where(Account.id == account_id)).first() is None:
        raise LookupError(f"no account {account_id}")
    key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    db_session.execute(insert(ApiKey).values(key_id=key_id, account_id=account_id, key_hash=hash_secret(secret)))
    return f"{key_id}.{secret}"


def list_keys(*, db_session: Connection, account_id: uuid.UUID) -> Sequence[Row]:
    """The account's keys, oldest first: key id, created, last used (to the minute), revoked. Never a secret."""
    return db_session.execute(
        select(ApiKey.key_id, ApiKey.created_at, ApiKey.last_used_at, ApiKey.revoked_at)
        .where(ApiKey.account_id == account_id)
        .order_by(ApiKey.created_at, ApiKey.key_id)
    ).all()


def revoke_key(*, db_session: Connection, key_id: str) -> Row | None:
    """Revoke a key: from the commit on, it answers 401 everywhere. Revoking it again changes nothing.

    Returns the key's row (``account_id``, ``revoked_at``), or None when there is no such key.
    """
    revoked = db_session.execute(
        update(ApiKey)
        .where(ApiKey.key_id == key_id, ApiKey.revoked_at.is_(None))
        .values(revoked_at=func.now())
        .returning(ApiKey.account_id, ApiKey.revoked_at)
    ).first()
    if revoked is not None:
        return revoked
    return db_session.execute(select(ApiKey.account_id, ApiKey.revoked_at).where(ApiKey.key_id == key_id)).first()


def set_rate_limit(*, db_session: Connection, account_id: uuid.UUID, limit: int | None) -> bool:
    """Give the account its own limit (requests per second), or None for the default. False: no such account."""
    changed = db_session.execute(update(Account).where(Account.id == account_id).values(rate_limit=limit))
    return changed.rowcount == 1


# Admission -------------------------------------------------------------------------

# One statement: the key (unrevoked, its account still there, the secret's hash
# matching) is found, its account's window counted, and its last use recorded
# when older than a minute. The CTEs that write run whether or not the final
# SELECT reads them; a key that does not match writes nothing (a stranger who
# knows a key id cannot spend its account's requests). The window is the
# database's second, so every process counts in the same one.
ADMIT = text(f"""
WITH key AS (
    SELECT k.key_id, k.account_id, k.last_used_at, coalesce(a.rate_limit, :default_limit) AS rate_limit
    FROM api_keys k JOIN accounts a ON a.id = k.account_id
    WHERE k.key_id = :key_id AND k.key_hash = :key_hash AND k.revoked_at IS NULL
), counted AS (
    INSERT INTO rate_windows AS w (account_id, window_start, used)
    SELECT account_id, date_trunc('second', now()), 1 FROM key
    ON CONFLICT (account_id) DO UPDATE
    SET used = CASE WHEN w.window_start = excluded.window_start THEN w.used + 1 ELSE 1 END,
        window_start = excluded.window_start
    RETURNING w.used, w.window_start
), touched AS (
    UPDATE api_keys SET last_used_at = now()
    WHERE key_id = (SELECT key_id FROM key WHERE last_used_at IS NULL OR last_used_at < now() - interval '{LAST_USED_EVERY}')
    RETURNING 1
)
SELECT key.account_id, key.rate_limit, counted.used,
       extract(epoch FROM counted.window_start + interval '{WINDOW_SECONDS} second' - now()) AS reset
FROM key, counted
""").bindparams(bindparam("key_id"), bindparam("key_hash"), bindparam("default_limit"))


@dataclass(frozen=True)
class Admission:
    """A request let in: its account, and where the account stands in its window."""

    account_id: uuid.UUID
    limit: int
    used: int
    reset: float  # seconds until the window ends

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.used)

    def headers(self) -> dict[str, str]:
        """The rate-limit fields of the IETF httpapi draft (RateLimit-Limit, -Remaining, -Reset, -Policy)."""
        return {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(self.remaining),
            "RateLimit-Reset": str(self.reset_seconds),
            "RateLimit-Policy": f"{self.limit};w={WINDOW_SECONDS}",
        }

    @property
    def reset_seconds(self) -> int:
        """Whole seconds until the window ends, at least 1 (a caller waiting 0 s would only be refused again)."""
        return max(1, math.ceil(self.reset))


class Authenticator:
    """Maps an API key to an :class:`Admission` (or None), counting the request against its account
    (``default_limit``: an account's requests per second when it has no limit of its own).

    Nothing is cached: one statement per request, so a revocation or a removal
    holds at once in every process. The statement runs in a transaction of its own
    (BEGIN and COMMIT: two round trips more than autocommitting it): an autocommitted
    connection has its isolation level reset as it goes back to the pool, and on a
    connection a failover has just ended that reset fails inside SQLAlchemy's pool, where
    the error is not the DBAPIError the 503 handler knows (a 500 instead of a 503).

    :raise TooManyRequests: the key is valid, and its account has used its window (raised when
        that window ends).
    """

    def __init__(self, database: Database, default_limit: int) -> None:
        self.database = database
        self.default_limit = default_limit

    def __call__(self, api_key: str) -> Admission | None:
        key_id, _, secret = api_key.partition(".")
        # Key ids are hex; anything else (a NUL PostgreSQL would refuse, say) is no key, not a 500.
        if not secret or not (key_id.isascii() and key_id.isalnum() and len(key_id) <= 32):
            return None
        with self.database.begin() as connection:
            row = connection.execute(
                ADMIT, {"key_id": key_id, "key_hash": hash_secret(secret), "default_limit": self.default_limit}
            ).first()
        if row is None:
            return None
        admission = Admission(row.account_id, row.rate_limit, row.used, float(row.reset))
        if admission.used > admission.limit:
            # Answered when the window ends, not at once: a client that ignores Retry-After then gets
            # one answer per connection per window, instead of making the service spend its CPU on
            # refusing it as fast as it can send (which slowed every other account down as much as
            # serving it had). The wait holds a greenlet, not a database connection; the caller may
            # try again at once.
            time.sleep(min(max(admission.reset, 0.0), WINDOW_SECONDS))
            raise TooManyRequests(
                f"This account may make {admission.limit} requests per second; this one came after"
                f" {admission.limit} in its second, and was answered when that second ended: try again now.",
                headers={"Retry-After": "0", **admission.headers(), "RateLimit-Remaining": "0", "RateLimit-Reset": "0"},
            )
        return admission


# The request hooks (platform_svc.create_app) -------------------------------------------


class Strangers:
    """Requests with a key that admits nothing (unknown, revoked, malformed), counted per source
    address in this worker, at no database cost: each source has a bucket of ``burst`` such
    requests, refilled at ``rate`` a second. Once it is empty, the source's requests with a key
    this worker has not admitted are refused (429 with Retry-After) before the key is looked up,
    so a flood of made-up keys costs the database at most ``rate`` lookups a second per source
    and worker. A key this worker admitted goes on being looked up (a caller behind the same
    address as a flood keeps working); one that stops admitting is forgotten.
    """

    def __init__(
        self, *, rate: float = 20.0, burst: float = 100.0, sources: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate, self.burst, self.sources, self.clock = rate, burst, sources, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # source -> (level, when)
        self._admitted: OrderedDict[str, None] = OrderedDict()  # key ids this worker admitted (bounded)

    def check(self, source: str, key_id: str) -> None:
        """:raise TooManyRequests: ``source`` sent too many keys that admit nothing, and this is not one
        this worker has admitted."""
        if key_id in self._admitted or self._level(source) >= 1:
            return
        raise TooManyRequests(
            "Too many requests from this address carried an API key that is not valid; try again later.",
            headers={"Retry-After": str(math.ceil(1 / self.rate))},
        )

    def refused(self, source: str, key_id: str) -> None:
        """A request from ``source`` whose key admitted nothing."""
        self._admitted.pop(key_id, None)
        self._buckets[source] = (self._level(source) - 1, self.clock())
        self._buckets.move_to_end(source)
        if len(self._buckets) > self.sources:
            self._buckets.popitem(last=False)

    def admitted(self, key_id: str) -> None:
        self._admitted[key_id] = None
        self._admitted.move_to_end(key_id)
        if len(self._admitted) > self.sources:
            self._admitted.popitem(last=False)

    def _level(self, source: str) -> float:
        level, when = self._buckets.get(source, (self.burst, self.clock()))
        return min(self.burst, level + (self.clock() - when) * self.rate)


def admit(authenticator: Authenticator, strangers: Strangers, api_key: str) -> uuid.UUID | None:
    """The bearer check's ``authenticate``: the key's account (``g.principal``), its admission kept
    in ``g.admission`` for the answer's headers. A key that admits nothing counts against its
    source (:class:`Strangers`).

    :raise TooManyRequests: the account's limit, or its source's of keys that admit nothing.
    """
    source, key_id = request.remote_addr or "-", api_key.partition(".")[0]
    strangers.check(source, key_id)
    admission = authenticator(api_key)
    if admission is None:
        strangers.refused(source, key_id)
        return None
    strangers.admitted(key_id)
    g.admission = admission
    return admission.account_id


def rate_limit_headers(response: Response) -> Response:
    """Every answer to a request let in says where its account stands (a 429 says it itself)."""
    admission = g.get("admission")
    if admission is not None:
        response.headers.update(admission.headers())
    return response
