"""How a call was answered, beside what it answered: :class:`Meta` (every record, object, page and
deletion the clients return carries one) and the account's :class:`RateLimit` window."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from idempotent_pair_client.transport import Reply

# How far a call's object got, as platform_svc's ``Idempotency-Status`` header says: ``processing``
# until cluster_svc confirmed it, ``completed`` once it has, ``failed`` when it never will.
IdempotencyStatus = Literal["processing", "completed", "failed"]
IDEMPOTENCY_STATUSES: tuple[IdempotencyStatus, ...] = ("processing", "completed", "failed")


@dataclass(frozen=True)
class RateLimit:
    """The account's window as the answer's ``RateLimit-*`` headers gave it (None: not given, as
    cluster_svc's answers do not)."""

    limit: int | None
    remaining: int | None
    reset: int | None  # seconds until the window ends


@dataclass(frozen=True)
class Meta:
    """How a call was answered: the final ``status`` (201 created, 200 there already, ...), whether
    the service ``replayed`` an earlier create's answer (Idempotent-Replayed), the ``request_id``
    every attempt carried, the ``rate_limit`` state, ``location``, how many ``attempts`` it took, and
    how far the object got (``idempotency_status``, platform_svc's ``Idempotency-Status``:
    ``processing`` until cluster_svc confirmed it, ``completed`` once it has, ``failed``; None from
    cluster_svc, and on a listing)."""

    status: int
    replayed: bool
    request_id: str | None
    rate_limit: RateLimit
    location: str | None
    attempts: int
    idempotency_status: IdempotencyStatus | None = None

    @classmethod
    def of(cls, reply: Reply) -> Meta:
        headers = reply.headers
        told = headers.get("Idempotency-Status")
        return cls(
            reply.status, headers.get("Idempotent-Replayed", "").lower() == "true", reply.request_id,
            RateLimit(*(_int(headers.get(f"RateLimit-{name}")) for name in ("Limit", "Remaining", "Reset"))),
            headers.get("Location"), reply.attempts, next((s for s in IDEMPOTENCY_STATUSES if s == told), None),
        )


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
