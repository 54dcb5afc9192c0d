"""Admitting a public request with no database round trip of its own (docs/decisions/0018).

Each web worker keeps a copy of the keys it has seen (:class:`Key`) and
spends tokens it leased from its account's one-second window (:class:`Budget`);
in the steady state a request is checked and counted in memory. The database
is consulted a bounded number of times a second per worker, whatever the
request rate:

- **every 0.25 s at most** (:data:`REFRESH_SECONDS`), one statement reads
  ``key_changes.generation`` (raised by triggers whenever a key is added,
  revoked or removed, or an account's limit changes or it is removed). When it
  moved, one more re-reads every key this worker holds. The request that finds
  the copy older than that runs the statement before it is admitted, so a
  revoked key or a removed account is refused by every worker within 0.25 s
  and the time of one statement. A poll, not ``LISTEN``: PgBouncer in
  transaction mode passes no notification.
- **the set of every live key id** (:attr:`Authenticator.ids`) is read with the
  generation and again whenever it moves; and every key id the platform issues
  carries a mark only it can make (:mod:`platform_svc.api.key_ids`: an HMAC of the id under
  a secret the processes share). So a made-up key id costs no statement at
  all, from one address or thousands: outside the set and unmarked, it is no
  key. The set's memory: about 11 MB a worker at 100,000 keys
  (docs/decisions/0022).
- **a key not seen before**, whose id is in the set or carries the mark (a key
  issued since the set was read: it works at its first use), is looked up once
  (and its last use written); one that matches nothing (revoked since) is
  remembered as such until the next change. Only ids the platform issued get
  this far, so made-up ones never evict a key. A wrong secret for a key held is
  refused in memory: it never evicts the key nor refuses its owner.
- **tokens are leased** from the account's window row (``rate_windows``, one
  per account, the database's second) ``limit // 10`` at a time, at least 1:
  at most about ten leases per account and window across every worker. The
  row never lends more than the limit in a window, so the limit holds across
  every worker and replica; tokens expire with their window, and once a lease
  comes back empty the worker refuses that account's requests locally, before
  any refresh and with no statement, until the window ends.
- **last use** is written when a key is first looked up and then at most once
  a minute per key and worker, by the same refresh statement.

Failure modes: a worker that dies holding tokens takes them with it (its
account may get up to one lease fewer that second). While the database is
away, a request is admitted from the copy for at most 0.25 s after the last
refresh (its own statements then fail with 503); after that the refresh fails
and every request answers 503 with Retry-After, as any request would. While it
hangs instead (:mod:`shared.deadline`), one request's refresh waits for it, up
to the database's timeout (and, where the service waits for its database through
a failover, that wait); the requests that queue behind that refresh wait no
longer than it may, and once it has failed they answer 503 at once, until the
next refresh is due.

Statements run in transactions of their own (BEGIN and COMMIT): an autocommitted connection
has its isolation level reset as it goes back to the pool, and on a connection a failover has
just ended that reset fails inside SQLAlchemy's pool, where the error is not the DBAPIError
the 503 handler knows (a 500 instead of a 503).
"""
from __future__ import annotations

import hashlib
import hmac
import math
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NoReturn

from sqlalchemy import bindparam, text
from sqlalchemy.engine import Row
from sqlalchemy.exc import TimeoutError as NoDatabaseInTime

from platform_svc.api.key_ids import issued_here, key_id_secret
from shared.db import Database
from shared.deadline import stalled
from shared.errors import HttpProblem

WINDOW_SECONDS = 1
REFRESH_SECONDS = 0.25  # how stale a worker's copy of the keys may get: a revocation holds everywhere within this
TOUCH_SECONDS = 60  # how stale a key's last_used_at may get
LEASES_PER_WINDOW = 10  # a lease is limit // this many tokens, at least 1
KEPT = 10_000  # keys (and accounts' budgets) one worker keeps, least recently used dropped first


class TooManyRequests(HttpProblem):
    status, code = 429, "too_many_requests"


def hash_secret(secret: str) -> str:
    # A fast hash is enough: the secret is 32 random bytes, nothing a dictionary could guess.
    return hashlib.sha256(secret.encode()).hexdigest()


# One statement for every read of the keys: the generation, and (for ``ids``) each key still
# callable with its account's limit, in one snapshot; ``touch`` writes those keys' last use
# when it is a minute old. With no ``ids``, it is the refresh's poll.
KEYS = text("""
WITH touched AS (
    UPDATE api_keys SET last_used_at = now()
    WHERE key_id = ANY(:touch) AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')
    RETURNING 1
)
SELECT c.generation, k.key_id, k.key_hash, k.account_id, coalesce(k.rate_limit, :default_limit) AS rate_limit
FROM key_changes c LEFT JOIN (
    SELECT k.key_id, k.key_hash, k.account_id, a.rate_limit
    FROM api_keys k JOIN accounts a ON a.id = k.account_id
    WHERE k.key_id = ANY(:ids) AND k.revoked_at IS NULL
) k ON true
""").bindparams(bindparam("touch"), bindparam("ids"), bindparam("default_limit"))

# Every live key id, with the generation it belongs to, in one snapshot.
KEY_IDS = text("""
SELECT c.generation, coalesce((SELECT array_agg(key_id) FROM api_keys WHERE revoked_at IS NULL), '{}') AS ids
FROM key_changes c
""")

# A lease of up to :n tokens from the account's window (the database's second, so every process
# counts in the same one): the window's count after it, and the seconds until the window ends.
LEASE = text(f"""
INSERT INTO rate_windows AS w (account_id, window_start, used)
VALUES (:account_id, date_trunc('second', now()), :n)
ON CONFLICT (account_id) DO UPDATE
SET used = CASE WHEN w.window_start = excluded.window_start THEN w.used + excluded.used ELSE excluded.used END,
    window_start = excluded.window_start
RETURNING w.used, extract(epoch FROM w.window_start + interval '{WINDOW_SECONDS} second' - now()) AS reset
""").bindparams(bindparam("account_id"), bindparam("n"))


def rate_limit_fields(limit: int, *, remaining: int, reset: int) -> dict[str, str]:
    """The rate-limit fields of the IETF httpapi draft (RateLimit-Limit, -Remaining, -Reset, -Policy)."""
    return {
        "RateLimit-Limit": str(limit),
        "RateLimit-Remaining": str(remaining),
        "RateLimit-Reset": str(reset),
        "RateLimit-Policy": f"{limit};w={WINDOW_SECONDS}",
    }


@dataclass(frozen=True)
class Admission:
    """A request let in: its account, and where the account stands in its window."""

    account_id: uuid.UUID
    limit: int
    remaining: int
    reset: float  # seconds until the window ends

    def headers(self) -> dict[str, str]:
        return rate_limit_fields(self.limit, remaining=self.remaining, reset=self.reset_seconds)

    @property
    def reset_seconds(self) -> int:
        """Whole seconds until the window ends, at least 1 (a caller waiting 0 s would only be refused again)."""
        return max(1, math.ceil(self.reset))


@dataclass
class Key:
    """What a worker holds of one key: never the secret, only its hash."""

    key_hash: str
    account_id: uuid.UUID
    rate_limit: int
    touch_due: float  # when its last use is next written, on the worker's clock

    def matches(self, secret: str) -> bool:
        return hmac.compare_digest(self.key_hash, hash_secret(secret))


@dataclass
class Budget:
    """The tokens one worker holds of its account's current window."""

    limit: int
    tokens: int = 0
    used: int = 0  # the window's count right after this worker's last lease (every worker's leases)
    ends: float = 0.0  # when the window ends, on the worker's clock
    empty: bool = False  # the last lease in this window got nothing: refuse until it ends
    lock: threading.Lock = field(default_factory=threading.Lock)

    def lease_size(self) -> int:
        return max(1, self.limit // LEASES_PER_WINDOW)


class Authenticator:
    """Maps an API key to an :class:`Admission` (or None), counting the request against its account
    (``default_limit``: an account's requests per second when it has no limit of its own).

    :raise TooManyRequests: the key is valid, and its account has used its window (raised when
        that window ends).
    """

    def __init__(
        self, database: Database, default_limit: int, *, clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.database, self.default_limit, self.clock, self.sleep = database, default_limit, clock, sleep
        self._keys: OrderedDict[str, Key | None] = OrderedDict()  # None: matches nothing (until the next change)
        # (Its clock and sleep read through this object's, which a test may replace.)
        self.tokens = Tokens(database, clock=lambda: self.clock(), sleep=lambda seconds: self.sleep(seconds))
        self._generation = 0  # of the keys held (0: none read yet)
        self._refreshed = -math.inf  # when the last refresh started, on ``clock``
        self._failed = -math.inf  # when the last refresh waited in vain for a hung database, on ``clock``
        self._touch: set[str] = set()  # keys whose last use is due
        self._refreshing = threading.Lock()
        self.ids: frozenset[str] | None = None  # every live key id (None: not read yet)
        self._key_id_secret: str | None = None
        self._ids_generation = 0  # of ``ids``

    def __call__(self, api_key: str) -> Admission | None:
        key_id, _, secret = api_key.partition(".")
        # Key ids are hex; anything else (a NUL PostgreSQL would refuse, say) is no key, not a 500.
        if not secret or not (key_id.isascii() and key_id.isalnum() and len(key_id) <= 32):
            return None
        held = self._keys.get(key_id)
        if held is not None and held.matches(secret):
            if self.tokens.spent(held):
                self.tokens.refuse(held)  # refused either way: no refresh, no statement
            if self.clock() >= held.touch_due:  # its last use is written by the refresh below
                held.touch_due = self.clock() + TOUCH_SECONDS
                self._touch.add(key_id)
        if self._touch or not 0 <= self.clock() - self._refreshed < REFRESH_SECONDS:  # (a clock set back: due)
            self._refresh()
        if key_id in self._keys:  # as the refresh left it: a revoked key is None now
            self._keys.move_to_end(key_id)
            key = self._keys[key_id]
        elif self._unknown(key_id):
            return None
        else:
            key = self._look_up(key_id)
        if key is None or not key.matches(secret):
            return None
        return self.tokens.spend(key)

    # Keys ------------------------------------------------------------------------------

    def _unknown(self, key_id: str) -> bool:
        """Whether ``key_id`` is no key the platform issued, told with no statement: outside the set
        of live ids, and without the platform's mark."""
        if self.ids is None:
            self._read_ids()
        return key_id not in self.ids and not issued_here(self._key_id_secret, key_id)

    def _read_ids(self) -> None:
        def read() -> tuple[Row, str]:
            with self.database.begin() as connection:
                return connection.execute(KEY_IDS).one(), self._key_id_secret or key_id_secret(connection)

        row, self._key_id_secret = self.database.through_failover(read)
        self.ids, self._ids_generation = frozenset(row.ids), row.generation

    def _refresh(self) -> None:
        """Poll the generation (writing the last uses due); re-read the keys held, and the ids,
        when it moved. The requests that queue behind a refresh wait no longer than it does (the
        database's deadline bounds it): once it has waited in vain for a hung database, they
        answer 503 at once.

        :raise NoDatabaseInTime: the last refresh waited in vain less than :data:`REFRESH_SECONDS`
            ago (a 503, as its failure was).
        """
        with self._refreshing:
            started, touch = self.clock(), sorted(self._touch)
            if 0 <= started - self._refreshed < REFRESH_SECONDS and not touch:
                return  # another request refreshed while this one waited
            if 0 <= started - self._failed < REFRESH_SECONDS:  # (a clock set back: the database is tried again)
                raise NoDatabaseInTime("the keys' last refresh waited on the database in vain a moment ago")
            if not self._keys and self.ids is None:  # nothing held that a change could make stale
                self._refreshed = started
                return
            try:
                generation = self._read(ids=[], touch=touch)[0].generation
                self._touch.difference_update(touch)
                if generation != self._generation:
                    self._reload()
                if generation != self._ids_generation:
                    self._read_ids()
            except Exception as error:
                if stalled(error):  # the others would each wait as long: they answer 503 at once
                    self._failed = self.clock()
                raise
            self._refreshed = started

    def _reload(self) -> None:
        """Re-read the keys held, and forget those that matched nothing (a key may have come since).

        Only the keys asked for are judged by the answer: other requests go on while the statement
        runs, and a key one of them looked up meanwhile was not asked for, so is not revoked."""
        held = [key_id for key_id, key in self._keys.items() if key is not None]
        unknown = [key_id for key_id, key in self._keys.items() if key is None]
        rows = self._read(ids=held, touch=[])
        found = {row.key_id: row for row in rows if row.key_id is not None}
        for key_id in unknown:
            if key_id in self._keys and self._keys[key_id] is None:
                del self._keys[key_id]
        for key_id in held:
            key, row = self._keys.get(key_id), found.get(key_id)
            if key is None:
                continue  # dropped to make room, or revoked, while the statement ran
            if row is None:
                self._keys[key_id] = None  # revoked or removed: it never matches again
                continue
            if (row.account_id, row.rate_limit) != (key.account_id, key.rate_limit):
                self.tokens.forget(key.account_id)  # a new limit applies from the next lease
            key.key_hash, key.account_id, key.rate_limit = row.key_hash, row.account_id, row.rate_limit
        self._generation = rows[0].generation

    def _look_up(self, key_id: str) -> Key | None:
        """A key this worker does not hold, whose id the platform issued (in the set, or marked):
        read (its last use written), and kept unless the read is older than what the worker holds;
        one that matches nothing (revoked) is remembered as such until the next change."""
        rows = self._read(ids=[key_id], touch=[key_id])
        row = rows[0]
        key = None if row.key_id is None else Key(
            row.key_hash, row.account_id, row.rate_limit, self.clock() + TOUCH_SECONDS
        )
        if not self._keys:
            self._generation = row.generation  # all the worker holds is this read's
        if row.generation >= self._generation:
            self._keys[key_id] = key
            self._keys.move_to_end(key_id)
            if len(self._keys) > KEPT:
                self._keys.popitem(last=False)
        return key

    def _read(self, *, ids: Sequence[str], touch: Sequence[str]) -> Sequence[Row]:
        def read() -> Sequence[Row]:
            with self.database.begin() as connection:
                return connection.execute(
                    KEYS, {"ids": list(ids), "touch": list(touch), "default_limit": self.default_limit}
                ).all()

        return self.database.through_failover(read)


class Tokens:
    """Each account's requests per second, counted in memory from tokens leased from its window
    row (:class:`Budget`: ``limit // 10`` a lease), refused locally once a lease comes back empty."""

    def __init__(self, database: Database, *, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
        self.database, self.clock, self.sleep = database, clock, sleep
        self._budgets: OrderedDict[uuid.UUID, Budget] = OrderedDict()

    def spend(self, key: Key) -> Admission:
        """Count one request against the key's account. :raise TooManyRequests: its window is used."""
        budget = self._budgets.get(key.account_id)
        if budget is None or budget.limit != key.rate_limit:
            budget = self._budgets[key.account_id] = Budget(key.rate_limit)
            if len(self._budgets) > KEPT:
                self._budgets.popitem(last=False)
        self._budgets.move_to_end(key.account_id)
        with budget.lock:
            now = self.clock()
            if now >= budget.ends or (budget.tokens == 0 and not budget.empty):
                self._lease(budget, key.account_id)
                now = self.clock()
            if budget.tokens > 0:
                budget.tokens -= 1
                remaining = max(0, budget.limit - budget.used + budget.tokens)
                return Admission(key.account_id, budget.limit, remaining, budget.ends - now)
        self._refuse(budget)

    def refuse(self, key: Key) -> NoReturn:
        """Refuse a request of the key's account, whose window :meth:`spent` says is used."""
        self._refuse(self._budgets[key.account_id])

    def forget(self, account_id: uuid.UUID) -> None:
        """Drop the account's tokens: its next request leases under its limit as it is now."""
        self._budgets.pop(account_id, None)

    def spent(self, key: Key) -> bool:
        """The key's account has used its window, as far as this worker knows."""
        budget = self._budgets.get(key.account_id)
        return budget is not None and budget.empty and budget.limit == key.rate_limit and self.clock() < budget.ends

    def _refuse(self, budget: Budget) -> NoReturn:
        # Answered when the window ends, not at once: a client that ignores Retry-After then gets
        # one answer per connection per window, instead of making the service spend its CPU on
        # refusing it as fast as it can send. The wait holds a greenlet, not a database
        # connection; the caller may try again at once.
        self.sleep(min(max(budget.ends - self.clock(), 0.0), WINDOW_SECONDS))
        raise TooManyRequests(
            f"This account may make {budget.limit} requests per second; this one came after"
            f" {budget.limit} in its second, and was answered when that second ended: try again now.",
            headers={"Retry-After": "0", **rate_limit_fields(budget.limit, remaining=0, reset=0)},
        )

    def _lease(self, budget: Budget, account_id: uuid.UUID) -> None:
        size, started = budget.lease_size(), self.clock()

        def lease() -> Row:
            with self.database.begin() as connection:
                return connection.execute(LEASE, {"account_id": account_id, "n": size}).one()

        row = self.database.through_failover(lease)
        granted = max(0, min(size, budget.limit - (row.used - size)))
        # The window's end on this worker's clock, from before the statement: never later than the database's.
        budget.tokens, budget.used, budget.ends = granted, row.used, started + float(row.reset)
        budget.empty = granted == 0
