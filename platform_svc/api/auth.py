"""Who may call the public API, and how often: API keys and the per-account rate limit.

An API key is ``<key_id>.<secret>``. An account may hold several keys (a new
one is issued, the callers move to it, the old one is revoked); only the
secret's SHA-256 is stored. The rate limit is a one-second window per
account, kept in PostgreSQL (``rate_windows``), so every worker of every
replica shares it.

A request is admitted by :class:`platform_svc.api.admission.Authenticator`,
from the worker's copy of the keys and tokens it leased from the window, with
no database round trip of its own in the steady state; a revocation holds in
every worker within 0.25 s. A key id that does not exist is refused in the
worker with no database statement, whatever its source; a source that sends
many gets its refusals late (:class:`SlowRefusals`), never anyone else's.

Functions that change keys or limits take the session as ``db_session`` and
never commit.
"""
from __future__ import annotations

import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence

from flask import Response, g, request
from sqlalchemy import Connection, func, insert, select, update
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError

from platform_svc.api.admission import Authenticator, TooManyRequests, hash_secret
from platform_svc.api.key_ids import key_id_secret, new_key_id
from platform_svc.models import Account, ApiKey
from shared.errors import Unauthorized, database_error, problem_from, sqlstate

FOREIGN_KEY_VIOLATION = "23503"

# Keys ------------------------------------------------------------------------------


def issue_key(*, db_session: Connection, account_id: uuid.UUID) -> str:
    """A new API key for the account, beside those it has; returned once, never stored.

    :raise LookupError: no such account.
    """
    if db_session.execute(select(Account.id).where(Account.id == account_id)).first() is None:
        raise LookupError(f"no account {account_id}")
    key_id, secret = new_key_id(key_id_secret(db_session)), secrets.token_urlsafe(32)
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


class SlowRefusals:
    """Refusals of keys that admit nothing, counted per source address in this worker: each source
    has a bucket of ``burst`` of them, refilled at ``rate`` a second; once it is empty, its next
    refusals are answered after ``hold`` seconds. A refusal costs no statement (the worker holds
    the set of key ids), but it costs the worker's CPU: a flood over 64 connections answered at
    once would take the workers from everyone else. Held, it gets one answer per connection per
    ``hold``. Nothing is ever refused for it: a valid key from the same address is admitted as
    before, at once (a new key, the owner of a key id someone guesses at)."""

    def __init__(
        self, *, rate: float = 20.0, burst: float = 100.0, sources: int = 10_000, hold: float = 1.0,
        clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate, self.burst, self.sources, self.hold = rate, burst, sources, hold
        self.clock, self.sleep = clock, sleep
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # source -> (level, when)

    def refused(self, source: str) -> None:
        """A refusal for ``source``: returns at once, or after ``hold`` once its bucket is empty."""
        level, when = self._buckets.pop(source, (self.burst, self.clock()))
        now = self.clock()
        level = min(self.burst, level + (now - when) * self.rate) - 1
        self._buckets[source] = (max(level, 0.0), now)
        if len(self._buckets) > self.sources:
            self._buckets.popitem(last=False)
        if level < 0:
            self.sleep(self.hold)  # holds a greenlet, nothing else


def admit(authenticator: Authenticator, refusals: SlowRefusals, api_key: str) -> uuid.UUID | None:
    """The bearer check's ``authenticate``: the key's account (``g.principal``), its admission kept
    in ``g.admission`` for the answer's headers. A key that admits nothing costs no statement (the
    worker holds the set of key ids) and refuses nobody else: not its source's other callers, nor
    the key's owner; a source that sends many gets its refusals late (:class:`SlowRefusals`).

    :raise TooManyRequests: the account's limit.
    """
    admission = authenticator(api_key)
    if admission is None:
        refusals.refused(request.remote_addr or "-")
        return None
    g.admission = admission
    return admission.account_id


def refused_write(error: IntegrityError) -> Response:
    """The app's answer to a write the database refused. One refused because its account is gone
    is a 401: the key was admitted from a worker's copy in the moment before the removal reached
    it (:data:`platform_svc.api.admission.REFRESH_SECONDS`), and admits nothing any more, as from
    the next refresh on; never a 500. (A shared statement's refusal has been tried item by item
    before it gets here: only the removed account's write is refused.) Any other: as usual."""
    constraint = getattr(getattr(getattr(error, "orig", None), "diag", None), "constraint_name", None) or ""
    if sqlstate(error) == FOREIGN_KEY_VIOLATION and constraint.endswith("_account_id"):
        return problem_from(Unauthorized("This API key's account has been removed."))
    return database_error(error)


def rate_limit_headers(response: Response) -> Response:
    """Every answer to a request let in says where its account stands (a 429 says it itself)."""
    admission = g.get("admission")
    if admission is not None:
        response.headers.update(admission.headers())
    return response
