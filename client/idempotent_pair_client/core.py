"""What the clients a program uses to call the pair have in common (``idempotent_pair_client.platform``,
``idempotent_pair_client.cluster``): they send through the one HTTP core (:mod:`idempotent_pair_client.transport`)
with a caller's policy, and raise instead of classifying.

A call either returns what the service answered, or raises:

- :class:`ProblemError` for a refusal: any 4xx but those worth another try
  (408, 429, a 409 whose problem code says the request is still in flight), at
  once, with no retry; or the 5xx (or 429, 408) still answered when
  ``retry_for`` ran out. It carries the status, the problem's ``code`` and the
  whole RFC 9457 body.
- :class:`~idempotent_pair_client.transport.NoAnswer` when no attempt got an answer before
  ``retry_for`` ran out (refused, reset, timed out).

Both are :class:`~idempotent_pair_client.transport.ClientError`. The clients know no resource:
every method takes the route's path (``/v1/...``), so a resource added by
declaration needs no change here.
"""
from __future__ import annotations

import builtins
from collections.abc import Collection, Iterator, Mapping
from typing import Any, Self
from urllib.parse import urlencode

from idempotent_pair_client.transport import ClientError, ClientPolicy, NoAnswer, Reply, Transport, reason

__all__ = ["IN_FLIGHT_CODES", "ClientError", "NoAnswer", "ProblemError", "ServiceClient", "caller_policy"]

# A 409 with one of these problem codes: the same request (same Idempotency-Key) is still being served; worth
# another try. Neither service answers one today (platform_svc answers 200 with the object: decision 0005).
IN_FLIGHT_CODES = ("request_in_flight", "in_flight")
CALLER_RETRY_STATUSES = frozenset({408, 429, *range(500, 600)})


def caller_policy(*, timeout: float, retry_for: float, pool_size: int = 10) -> ClientPolicy:
    """The retries of a program's call: every fault that can pass, until ``retry_for`` seconds have passed.

    Each attempt waits up to ``timeout`` to connect and again to read. Retried:
    no answer, 408, 429, every 5xx, a 409 in flight. The first retry goes at
    once; later ones wait a random time up to 0.5, 1, 2, 4, then 8 s (full
    jitter), or what ``Retry-After`` asks (up to 60 s; more than is left of
    ``retry_for`` ends the call with that answer). A call takes at most
    ``retry_for`` plus one attempt.
    """
    if timeout <= 0 or retry_for < 0:
        raise ValueError(f"timeout must be positive and retry_for at least 0, got {timeout} and {retry_for}")
    return ClientPolicy(
        connect_timeout=timeout,
        read_timeout=timeout,
        retries=None,
        retry_for=retry_for,
        backoff_factor=0.25,
        backoff_max=8.0,
        full_jitter=True,
        retry_after_max=60,
        pool_size=pool_size,
        retry_statuses=CALLER_RETRY_STATUSES,
        retry_problems=frozenset((409, code) for code in IN_FLIGHT_CODES),
    )


class ProblemError(ClientError):
    """The service refused the call: ``status``, the problem's ``code`` (None without one) and ``problem``,
    the RFC 9457 body (``{}`` when the answer had none), e.g. a ``validation_error``'s per-field ``errors``."""

    def __init__(self, call: str, status: int, problem: Any) -> None:
        self.call = call  # "POST /v1/...", what was refused
        self.status = status
        self.problem: dict[str, Any] = problem if isinstance(problem, dict) else {}
        code = self.problem.get("code")
        self.code: str | None = code if isinstance(code, str) else None
        super().__init__(reason(call, status, self.problem))


class ServiceClient:
    """A client of one service, calling with a bearer ``credential``; thread-safe, pooled, keep-alive."""

    def __init__(self, base_url: str, credential: str, *, timeout: float, retry_for: float, pool_size: int) -> None:
        self.transport = Transport(
            base_url,
            {"Authorization": f"Bearer {credential}"},
            caller_policy(timeout=timeout, retry_for=retry_for, pool_size=pool_size),
        )

    def get(self, path: str) -> dict[str, Any]:
        """The object at ``path``. :raise ProblemError: 404, 410 (deleted), ... :raise NoAnswer:"""
        return self._object("GET", path)

    def list(self, path: str, **filters: str | int | bool | None) -> Iterator[dict[str, Any]]:
        """Every object of the listing at ``path``, page after page (keyset: each page's ``next_after``
        is the next one's ``after``), fetched as the iterator is consumed.

        ``filters`` go in the query string (``limit`` is the page size; None leaves one out).
        :raise ProblemError: :raise NoAnswer: (while iterating)
        """
        query = {name: _query_value(value) for name, value in filters.items() if value is not None}
        while True:
            page = self._call("GET", with_query(path, query)).body
            if not isinstance(page, dict) or not isinstance(page.get("items"), builtins.list):
                raise ClientError(f"GET {path}: 200 without a page (items, next_after)")
            yield from page["items"]
            if not page.get("next_after"):
                return
            query["after"] = str(page["next_after"])

    def close(self) -> None:
        """Close the pooled connections (the client is not used after)."""
        self.transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _object(
        self, method: str, path: str, body: Any = None, *, ok: Collection[int] = (200,),
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """One call whose answer is an object (a JSON object body)."""
        reply = self._call(method, path, body, ok=ok, headers=headers)
        if not isinstance(reply.body, dict):
            raise ClientError(f"{method} {path}: {reply.status} without an object")
        return reply.body

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        ok: Collection[int] = (200,),
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """One call with its retries; an answer other than ``ok`` raises."""
        reply = self.transport.send(method, path, body, headers=headers)
        if reply.status not in ok:
            raise ProblemError(f"{method} {path}", reply.status, reply.body)
        return reply


def with_query(path: str, query: Mapping[str, str]) -> str:
    if not query:
        return path
    return f"{path}{'&' if '?' in path else '?'}{urlencode(query)}"


def _query_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
