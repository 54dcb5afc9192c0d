"""platform_svc's settings: what the service reads from the environment, and the inline push's policy.

Light to import (no Flask, no SQLAlchemy until a method needs it): the console scripts, the
reconciler and the tests read it before anything else.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from idempotent_pair_client.transport import ClientPolicy

from shared import config
from shared.client import InternalClient

if TYPE_CHECKING:
    from shared.db import Database
    from shared.horizon import Horizon

# The inline push after a public write: a short budget, since the reconciler
# finishes whatever it does not (a long Retry-After is the reconciler's to wait).
# One second in all, whatever cluster_svc does (total_timeout): per-attempt
# timeouts alone would let a frozen cluster_svc hold each public write for every
# attempt and pause until the worker's breaker opens. Quick retries (a kept-alive
# connection closed under it, a refused connect) still fit in that second.
# A gevent worker pushes for every public write it has in flight, so its pool
# keeps as many connections to cluster_svc as it has writes in flight, rather
# than opening and dropping one per push beyond the pool.
INLINE_POLICY = ClientPolicy(
    connect_timeout=0.5,
    read_timeout=1.0,
    retries=2,
    backoff_factor=0.1,
    backoff_max=0.5,
    retry_after_max=1,
    pool_size=64,
    total_timeout=1.0,
)


def inline_lease(environ: Mapping[str, str] | None = None) -> timedelta:
    """How long a public write's row is leased to its inline push: ``INLINE_LEASE_SECONDS``, 15 by default.

    It must outlast the push with its quick retries, ``INLINE_POLICY.longest_call()``:
    one second, the policy's ``total_timeout``, however many retries fit in it. If
    the process dies first, the lease runs out and the reconciler takes over.

    :raise ConfigError: it is set but not a positive number.
    """
    return timedelta(seconds=config.seconds("INLINE_LEASE_SECONDS", 15, environ))


DEFAULT_RATE_LIMIT = 100  # public requests per second per account, as Stripe allows
MAX_RATE_LIMIT = 1_000_000


def default_rate_limit(environ: Mapping[str, str] | None = None) -> int:
    """``ACCOUNT_RATE_LIMIT``: public requests per second an account may make unless it has a limit
    of its own (``platform-svc set-rate-limit``); 100 by default.

    :raise ConfigError: set, but not an integer from 1 to 1,000,000.
    """
    limit = config.integer("ACCOUNT_RATE_LIMIT", DEFAULT_RATE_LIMIT, environ)
    if not 1 <= limit <= MAX_RATE_LIMIT:
        raise config.ConfigError(f"ACCOUNT_RATE_LIMIT must be from 1 to {MAX_RATE_LIMIT:,} requests per second, got {limit}")
    return limit


@dataclass(frozen=True)
class Settings:
    database_url: str
    cluster_svc_url: str
    internal_token: str  # INTERNAL_TOKEN as set; the first of several (comma-separated) is the one sent
    pool_size: int = 5
    breaker_cool_down: int = 5  # seconds the inline breaker stays open before one request probes
    id_horizon_seconds: int = config.DEFAULT_ID_HORIZON_SECONDS
    inline_lease: timedelta = timedelta(seconds=15)  # see inline_lease()
    rate_limit: int = DEFAULT_RATE_LIMIT  # see default_rate_limit()
    database_wait: float = 0.0  # DATABASE_WAIT_SECONDS: see shared.db.Database

    @classmethod
    def from_env(cls) -> Settings:
        """:raise ConfigError: a required setting is missing (or one is malformed)."""
        return cls(
            database_url=config.database_url("PLATFORM_DATABASE_URL"),
            cluster_svc_url=config.require("CLUSTER_SVC_URL", why="where cluster_svc listens, e.g. http://127.0.0.1:8001"),
            internal_token=config.checked_internal_token(why="the bearer token cluster_svc accepts"),
            pool_size=config.integer("PLATFORM_DB_POOL_SIZE", 5),
            breaker_cool_down=config.integer("INLINE_BREAKER_COOL_DOWN_SECONDS", 5),
            id_horizon_seconds=config.id_horizon_seconds(),
            inline_lease=inline_lease(),
            rate_limit=default_rate_limit(),
            database_wait=config.seconds("DATABASE_WAIT_SECONDS", 0.0),
        )

    @property
    def horizon(self) -> Horizon:
        from shared.horizon import Horizon

        return Horizon(self.id_horizon_seconds)

    def database(self) -> Database:
        from shared.db import Database

        return Database(self.database_url, pool_size=self.pool_size, connect_wait=self.database_wait)

    def client(self, policy: ClientPolicy) -> InternalClient:
        """A client of cluster_svc presenting the first of the internal tokens (the others are only accepted)."""
        return InternalClient(self.cluster_svc_url, config.internal_tokens(self.internal_token)[0], policy)
