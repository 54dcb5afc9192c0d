"""Clients of the idempotent pair: each call takes effect once, however often it is retried.

- :class:`PlatformClient`: platform_svc's public API, as one account (its API key);
- :class:`ClusterClient`: cluster_svc's internal API, with the internal token and the caller's own IDs.

Both retry what can pass (no answer, 408, 429, every 5xx) until ``retry_for`` seconds have
passed, with the same Idempotency-Key (or ID) on every attempt, and raise
:class:`ProblemError` (one subclass per meaning, :mod:`idempotent_pair_client.errors`) for a
refusal, or :class:`NoAnswer`. Importing this package loads urllib3 and uuid6 only.

Everything a caller names is here: the clients, the errors, the records and bodies of each
resource (``Cluster``, ``ClusterCreate``, ...: :mod:`idempotent_pair_client.resources`), the closed
vocabularies (``Region``, ``Plan``, ``SyncState``), :class:`Page` and :class:`Meta`.

The pair's services send through the same HTTP core (:mod:`idempotent_pair_client.transport`).
"""
from __future__ import annotations

from idempotent_pair_client import resources
from idempotent_pair_client.accessors import Record
from idempotent_pair_client.cluster import ClusterClient
from idempotent_pair_client.core import Deletion, Object, Outcome
from idempotent_pair_client.errors import (
    ClientError,
    Conflict,
    Gone,
    IdempotencyKeyReused,
    NoAnswer,
    NotFound,
    ProblemError,
    RateLimited,
    Unauthorized,
    Unavailable,
    ValidationFailed,
)
from idempotent_pair_client.journal import Journal, OperationReused
from idempotent_pair_client.meta import IdempotencyStatus, Meta, RateLimit
from idempotent_pair_client.pages import AsyncPage, AsyncPager, Page
from idempotent_pair_client.platform import PlatformClient
from idempotent_pair_client.resources import *  # noqa: F403  (each resource's record, bodies and collection)
from idempotent_pair_client.transport import VERSION as __version__

__all__ = [
    "AsyncPage", "AsyncPager", "ClientError", "ClusterClient", "Conflict", "Deletion", "Gone", "IdempotencyKeyReused",
    "IdempotencyStatus", "Journal", "Meta", "NoAnswer", "NotFound", "Object", "OperationReused", "Outcome", "Page",
    "PlatformClient", "ProblemError", "RateLimit", "RateLimited", "Record", "Unauthorized", "Unavailable",
    "ValidationFailed", "__version__",
]
__all__ += resources.__all__
