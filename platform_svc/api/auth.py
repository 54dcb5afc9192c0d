"""Who may call the public API, and how often: API keys and the per-account rate limit.

An API key is ``<key_id>.<secret>``. An account may hold several keys (a new
one is issued, the callers move to it, the old one is revoked); only the
secret's SHA-256 is stored. The rate limit is a one-second window per
account, kept in PostgreSQL (``rate_windows``), so every worker of every
replica shares it.

A request is admitted by :class:`platform_svc.api.admission.Authenticator`,
from the worker's copy of the keys and tokens it leased from the window, with
no database round trip of its own in the steady state; a revocation holds in
every worker within 0.25 s. A key that admits nothing counts against its
source address, in the worker and with no database (:class:`Strangers`).

Functions that change keys or limits take the session as ``db_session`` and
never commit.
"""
from __future__ import annotations

import math
import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence

from flask import Response, g, request
from sqlalchemy import Connection, func, insert, select, update
from sqlalchemy.engine import Row

from platform_svc.api.admission import Authenticator, TooManyRequests, hash_secret
from platform_svc.models import Account, ApiKey

# Keys ------------------------------------------------------------------------------


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


# The request hooks (platform_svc.create_app) -------------------------------------------


class Strangers:
    """Requests with a key that admits nothing (unknown, revoked, malformed), counted per source
    address in this worker, at no database cost: each source has a bucket of ``burst`` such
    requests, refilled at ``rate`` a second. Once it is empty, the source's requests with a key
    this worker has not admitted are refused (429 with Retry-After) before the key is looked up,
    so a flood of made-up keys costs the database at most ``rate`` lookups a second per source
    and worker. A key this worker admitted goes on being looked up (a caller behind the same
    address as a flood keeps working); one that stops admitting is forgotten.

    A refusal is answered after ``hold`` seconds (the Retry-After it carries), as the account
    limit's is: a flood that ignores Retry-After then gets one answer per connection per
    second, instead of making the worker spend its CPU refusing it as fast as it can send.
    """

    def __init__(
        self, *, rate: float = 20.0, burst: float = 100.0, sources: int = 10_000, hold: float = 1.0,
        clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate, self.burst, self.sources, self.hold = rate, burst, sources, hold
        self.clock, self.sleep = clock, sleep
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # source -> (level, when)
        self._admitted: OrderedDict[str, None] = OrderedDict()  # key ids this worker admitted (bounded)

    def check(self, source: str, key_id: str) -> None:
        """:raise TooManyRequests: ``source`` sent too many keys that admit nothing, and this is not one
        this worker has admitted."""
        if key_id in self._admitted or self._level(source) >= 1:
            return
        self.sleep(self.hold)  # holds a greenlet, nothing else
        raise TooManyRequests(
            "Too many requests from this address carried an API key that is not valid; try again later.",
            headers={"Retry-After": str(math.ceil(self.hold))},
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
