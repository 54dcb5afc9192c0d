"""What the clients a program uses to call the pair have in common (:mod:`idempotent_pair_client.platform`,
:mod:`idempotent_pair_client.cluster`): they send through the one HTTP core
(:mod:`idempotent_pair_client.transport`) with a caller's policy, and raise instead of classifying.

A call either returns what the service answered, or raises:

- a :class:`~idempotent_pair_client.errors.ProblemError` of the refusal's kind
  (:mod:`idempotent_pair_client.errors`): any 4xx but those worth another try (408,
  429, a 409 whose problem code says the request is still in flight), at once, with
  no retry; or the 5xx (or 429, 408) still answered when ``retry_for`` ran out.
- :class:`~idempotent_pair_client.transport.NoAnswer` when no attempt got an answer
  before ``retry_for`` ran out (refused, reset, timed out).

Every object returned is an :class:`Object` (a ``dict``) whose ``meta`` says how it was
answered (:class:`Meta`: the status, replayed or not, the request ID, the rate-limit
state, ``Location``), so no second call is needed to learn it. Every method takes
``timeout`` and ``retry_for`` for that call alone.
"""
from __future__ import annotations

import builtins
import dataclasses
import enum
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self
from urllib.parse import urlencode

from idempotent_pair_client.errors import ClientError, NoAnswer, ProblemError, problem_error
from idempotent_pair_client.meta import IdempotencyStatus, Meta, RateLimit
from idempotent_pair_client.pages import Page
from idempotent_pair_client.transport import Attempt, ClientPolicy, Reply, Transport, is_item_result

__all__ = [
    "IN_FLIGHT_CODES", "ClientError", "Deletion", "IdempotencyStatus", "Meta", "NoAnswer", "Object", "Outcome", "Page",
    "ProblemError", "RateLimit", "ServiceClient", "caller_policy",
]

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


class Object(dict[str, Any]):
    """An object as the service answered it (its fields, as a ``dict``), with ``meta``: how it was answered."""

    meta: Meta

    def __init__(self, fields: Mapping[str, Any], meta: Meta) -> None:
        super().__init__(fields)
        self.meta = meta


class Outcome(enum.Enum):
    """What a delete found."""

    DELETED = "deleted"  # it was alive, and is deleted now (202: the platform tells cluster_svc next)
    ALREADY_GONE = "already gone"  # 410: deleted before (by an earlier attempt whose answer was lost, say)
    NEVER_SEEN = "never seen"  # 404 from cluster_svc: no such object; a tombstone keeps its ID from ever being made


@dataclass(frozen=True)
class Deletion:
    """A delete's outcome, and how it was answered."""

    outcome: Outcome
    meta: Meta

    @classmethod
    def of(cls, reply: Reply) -> Deletion:
        """A delete's answer, whichever service gave it: 204 (or 202) deleted, 410 already gone, 404 never seen."""
        outcome = {410: Outcome.ALREADY_GONE, 404: Outcome.NEVER_SEEN}.get(reply.status, Outcome.DELETED)
        return cls(outcome, Meta.of(reply))


def from_environment(given: str | None, variable: str, what: str) -> str:
    """``given``, else the environment's ``variable``. :raise ValueError: neither (naming both ways)."""
    value = given if given is not None else os.environ.get(variable, "").strip()
    if not value:
        raise ValueError(f"no {what}: pass it, or set {variable}")
    return value


class ClientBase:
    """What a client of either flavour is built from: its calls' policy, its flavour's transport
    (:attr:`transport_type`) sending a bearer ``credential``, and whom to tell of each attempt."""

    transport_type: ClassVar[type[Any]] = Transport  # built with (base_url, headers, policy)

    def __init__(
        self, base_url: str, credential: str, *, timeout: float, retry_for: float, pool_size: int,
        on_attempt: Callable[[Attempt], None] | None = None,
    ) -> None:
        self.policy = caller_policy(timeout=timeout, retry_for=retry_for, pool_size=pool_size)
        self.transport = self.transport_type(base_url, {"Authorization": f"Bearer {credential}"}, self.policy)
        self.on_attempt = on_attempt


class ServiceClient(ClientBase):
    """A client of one service, calling with a bearer ``credential``; thread-safe, pooled, keep-alive.

    ``on_attempt``, when given, is told every attempt of every call (:class:`~idempotent_pair_client.transport.Attempt`):
    what it got and the pause before the next. Retries are also logged at DEBUG on ``idempotent_pair_client``.
    """

    transport: Transport

    def get(self, path: str, *, timeout: float | None = None, retry_for: float | None = None) -> Object:
        """The object at ``path``. :raise NotFound: :raise Gone: (deleted) ... :raise NoAnswer:"""
        return self._object("GET", path, timeout=timeout, retry_for=retry_for)

    def list(
        self, path: str, *, timeout: float | None = None, retry_for: float | None = None,
        **filters: str | int | bool | None,
    ) -> Page[dict[str, Any]]:
        """The listing at ``path``: its first :class:`~idempotent_pair_client.pages.Page` (``.data``,
        ``.has_more``, ``.next_after``); iterating it walks every object, each later page fetched as
        the iteration reaches it (keyset: each page's ``next_after`` is the next one's ``after``).

        ``filters`` go in the query string (``limit`` is the page size; None leaves one out).
        :raise ProblemError: :raise NoAnswer: (here, and while iterating)
        """
        query = query_of(filters)

        def fetch(after: str | None) -> Page[dict[str, Any]]:
            reply = self._call("GET", with_query(path, paged(query, after)), timeout=timeout, retry_for=retry_for)
            return Page(*page_of(reply, path), Meta.of(reply), fetch)

        return fetch(None)

    def close(self) -> None:
        """Close the pooled connections (the client is not used after)."""
        self.transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _object(
        self, method: str, path: str, body: Any = None, *, ok: Collection[int] = (200,),
        headers: Mapping[str, str] | None = None, timeout: float | None = None, retry_for: float | None = None,
    ) -> Object:
        """One call whose answer is an object (a JSON object body)."""
        return as_object(self._call(method, path, body, ok=ok, headers=headers, timeout=timeout,
                                    retry_for=retry_for), method, path)

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        ok: Collection[int] = (200,),
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        retry_for: float | None = None,
    ) -> Reply:
        """One call with its retries (``timeout`` and ``retry_for``: this call's own); an answer other than
        ``ok`` raises the :class:`ProblemError` of its kind."""
        policy = call_policy(self.policy, timeout, retry_for)
        reply = self.transport.send(method, path, body, headers=headers, policy=policy, on_attempt=self.on_attempt)
        return expect(reply, ok, method, path)


WAIT_SLACK = 5.0  # seconds an attempt's timeout leaves beyond the server's wait for the outcome


def waiting(wait: int | None, timeout: float | None, policy: ClientPolicy) -> tuple[dict[str, str], float | None]:
    """The header that asks platform_svc to answer once the object is completed or failed, or after
    ``wait`` seconds (``Prefer: wait=N``, RFC 7240; the answer's ``meta.idempotency_status`` says
    which), and the attempt's timeout that leaves it the room. None: no wait, as the caller gave.

    :raise ValueError: ``wait`` below 0.
    """
    if wait is None:
        return {}, timeout
    if wait < 0:
        raise ValueError(f"wait must be 0 or more seconds, not {wait}")
    return {"Prefer": f"wait={wait}"}, max(timeout if timeout is not None else policy.read_timeout, wait + WAIT_SLACK)


def call_policy(policy: ClientPolicy, timeout: float | None, retry_for: float | None) -> ClientPolicy:
    """The client's ``policy``, with one call's own ``timeout`` and ``retry_for`` when given."""
    if timeout is None and retry_for is None:
        return policy
    return dataclasses.replace(
        caller_policy(timeout=timeout if timeout is not None else policy.read_timeout,
                      retry_for=retry_for if retry_for is not None else float(policy.retry_for or 0)),
        pool_size=policy.pool_size,
    )


def expect(reply: Reply, ok: Collection[int], method: str, path: str) -> Reply:
    """``reply`` when its status is ``ok``. :raise ProblemError: of its kind, otherwise."""
    if reply.status not in ok:
        raise problem_error(f"{method} {path}", reply.status, reply.body, reply.request_id)
    return reply


def as_object(reply: Reply, method: str, path: str) -> Object:
    """A reply whose body is an object. :raise ClientError: it is not."""
    if not isinstance(reply.body, dict):
        raise ClientError(f"{method} {path}: {reply.status} without an object")
    return Object(reply.body, Meta.of(reply))


def page_of(reply: Reply, path: str) -> tuple[list[dict[str, Any]], str | None]:
    """A listing's page: its items and ``next_after``. :raise ClientError: not a page."""
    page = reply.body
    if not isinstance(page, dict) or not isinstance(page.get("items"), builtins.list):
        raise ClientError(f"GET {path}: 200 without a page (items, next_after)")
    next_after = page.get("next_after")
    return page["items"], str(next_after) if next_after else None


def paged(query: Mapping[str, str], after: str | None) -> Mapping[str, str]:
    """A listing's ``query``, from the page after ``after`` (None: the first page)."""
    return query if after is None else {**query, "after": after}


def body_of(body: Any, argument: str) -> dict[str, Any]:
    """A call's JSON object, from a mapping. :raise TypeError: anything else, naming the argument."""
    if not isinstance(body, Mapping):
        raise TypeError(f"{argument} must be a mapping of field names to values, not {type(body).__name__}")
    return dict(body)


def with_query(path: str, query: Mapping[str, str]) -> str:
    if not query:
        return path
    return f"{path}{'&' if '?' in path else '?'}{urlencode(query)}"


def query_of(filters: Mapping[str, str | int | bool | None]) -> dict[str, str]:
    return {name: _query_value(value) for name, value in filters.items() if value is not None}


def _query_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def item_results(
    route: str, first: int, chunk: Sequence[Mapping[str, Any]], reply: Reply
) -> list[dict[str, Any] | ProblemError]:
    """One batch call's answer to a caller, one entry per item of ``chunk`` (item ``first`` of the whole batch onward)."""
    if reply.status == 413 and len(chunk) == 1:  # this item alone is too large
        return [problem_error(f"POST {route} item {first}", 413, reply.body, reply.request_id)]
    if reply.status != 200:
        raise problem_error(f"POST {route}", reply.status, reply.body, reply.request_id)
    answers = reply.body.get("results") if isinstance(reply.body, dict) else None
    if not isinstance(answers, list) or len(answers) != len(chunk) or not all(map(is_item_result, answers)):
        raise ClientError(f"POST {route}: 200 without one result per item")
    return [
        answer.get("object") if answer.get("status") in (200, 201)
        else problem_error(f"POST {route} item {first + index}", answer["status"], answer.get("problem"),
                           reply.request_id)
        for index, answer in enumerate(answers)
    ]
