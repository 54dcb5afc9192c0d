"""The one HTTP client for calls to cluster_svc.

Every call to cluster_svc is idempotent by ID, so POST, PUT and DELETE are all
retried: urllib3's ``Retry`` on a pooled, keep-alive urllib3 connection pool,
with exponential backoff and jitter, honouring ``Retry-After``. urllib3
directly, not ``requests`` on top of it: requests' per-call preparation
(settings merging, hooks, cookies, its Response) cost as much CPU as the rest
of platform_svc's public create, for nothing these calls use. Connect and read
timeouts are always set. Every call carries ``X-Request-ID``: the current
request's (so platform_svc's inline push shows up under the caller's ID in
cluster_svc's log), or a fresh one per call (the reconciler's pushes). Each
answer is classified for the caller:

- ``DONE``: the object is where the caller wants it (201 or 200; for a delete
  also 204, 404 and 410).
- ``TRANSIENT``: try again later (connection errors, timeouts, 5xx, 429, and
  401/403, which an operator fixes by correcting the token).
- ``PERMANENT``: retrying cannot help (409 ``id_conflict``, 410 on a create or
  update, 422, and any other 4xx).
"""
from __future__ import annotations

import enum
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import urllib3
from urllib3.connectionpool import connection_from_url
from urllib3.exceptions import HTTPError, MaxRetryError, NewConnectionError, ResponseError
from urllib3.exceptions import TimeoutError as CallTimedOut
from urllib3.util.retry import Retry

from shared import request_id
from shared.api import MAX_BATCH_ITEMS, MAX_BODY_BYTES

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class Outcome(enum.Enum):
    DONE = "done"
    TRANSIENT = "transient"
    PERMANENT = "permanent"


class Operation(enum.Enum):
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    READ = "read"  # a GET (the drift repair's bulk read); not a push


@dataclass(frozen=True)
class Answer:
    outcome: Outcome
    status: int | None  # None when no HTTP answer came back
    body: Any  # the decoded JSON body, if any
    reason: str  # one line for sync_error and logs
    operation: Operation | None = None  # what was asked (for the push metrics)
    sent: Any = None  # the body the call sent (a batch item's own), what the answer is judged against

    @property
    def done(self) -> bool:
        return self.outcome is Outcome.DONE

    @property
    def unavailable(self) -> bool:
        """cluster_svc itself could not serve the call (down, frozen, overloaded, its database gone).

        A transient 404 (a rule whose cluster is not there yet) is about one
        object, not about cluster_svc, so it does not count.
        """
        return self.outcome is Outcome.TRANSIENT and self.status != 404


def classify(operation: Operation, status: int) -> Outcome:
    if status in (200, 201) or (operation is Operation.DELETE and status in (204, 404, 410)):
        return Outcome.DONE
    if status >= 500 or status in (401, 403, 408, 429):
        return Outcome.TRANSIENT
    if operation is Operation.CREATE and status == 404:
        return Outcome.TRANSIENT  # the parent is not there yet
    return Outcome.PERMANENT


@dataclass(frozen=True)
class ClientPolicy:
    """How hard one call tries before giving its answer."""

    connect_timeout: float = 2.0
    read_timeout: float = 10.0
    retries: int = 3
    backoff_factor: float = 0.2
    backoff_max: float = 5.0
    backoff_jitter: float = 0.2
    retry_after_max: int = 30  # a longer Retry-After is cut to this; the row's own backoff does the rest
    pool_size: int = 10
    # Seconds one call may take in all (connects, reads, pauses and retries), or
    # None: only the per-attempt timeouts above bound it. Near the end of this
    # budget an attempt's timeouts shrink to what is left, no retry starts when
    # too little is left, and a Retry-After longer than what is left is not
    # waited for (the last answer is the call's answer).
    total_timeout: float | None = None

    def longest_call(self) -> float:
        """Seconds one call can take at most, all its retries included (a lease must outlast it)."""
        attempts = self.retries + 1
        pause = max(self.backoff_max + self.backoff_jitter, self.retry_after_max)
        longest = attempts * (self.connect_timeout + self.read_timeout) + self.retries * pause
        return longest if self.total_timeout is None else min(longest, self.total_timeout)


class InternalClient:
    """Calls cluster_svc with the internal token; thread-safe, pooled, keep-alive."""

    # A batch call's body at most (cluster_svc's body limit) and its items at most.
    max_body = MAX_BODY_BYTES

    def __init__(self, base_url: str, token: str, policy: ClientPolicy = ClientPolicy()) -> None:
        self.base_url = base_url.rstrip("/")
        self.policy = policy
        self._retry_settings = dict(
            total=policy.retries,
            connect=policy.retries,
            read=policy.retries,
            status=policy.retries,
            other=0,
            # All of them: cluster_svc makes every call safe to repeat.
            allowed_methods=frozenset({"GET", "POST", "PUT", "DELETE"}),
            status_forcelist=RETRY_STATUSES,
            backoff_factor=policy.backoff_factor,
            backoff_max=policy.backoff_max,
            backoff_jitter=policy.backoff_jitter,
            respect_retry_after_header=True,
            retry_after_max=policy.retry_after_max,
            raise_on_status=False,  # the last answer is classified, not raised
        )
        self._retry = Retry(**self._retry_settings)
        self._timeout = urllib3.Timeout(connect=policy.connect_timeout, read=policy.read_timeout)
        # Not blocking: a call finding every pooled connection busy opens one
        # more (dropped afterwards) rather than waiting, as requests did.
        self._pool = connection_from_url(self.base_url, maxsize=policy.pool_size, block=False)
        self._prefix = urlsplit(self.base_url).path  # what the pool's requests put before a route's path
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._json_headers = {**self._headers, "Content-Type": "application/json"}

    def create(self, path: str, body: dict[str, Any], *, deadline: float | None = None) -> Answer:
        return self.call(Operation.CREATE, "POST", path, body, deadline=deadline)

    def create_batch(self, path: str, items: list[dict[str, Any]], *, deadline: float | None = None) -> list[Answer]:
        """Create-or-return ``items`` with calls to a batch route; one answer per item, in order.

        As few calls as the body limit allows: items go in order, as many to a
        call as fit in ``max_body`` bytes (cluster_svc's limit, 1 MiB; at most
        1,000 items), and a call answered 413 anyway is split in two and each
        half sent again: a 413 is never an item's answer unless the item alone
        is too large. Each item's own status (201, 200, 404, 409, 410, 422) is
        classified as its single create's would be. When a call as a whole
        fails (no answer, a non-200 status, a body without one result per
        item), each of its items gets that one answer. ``deadline``: as :meth:`call`.
        """
        answers: list[Answer] = []
        for chunk in batches(items, max_items=MAX_BATCH_ITEMS, max_bytes=self.max_body):
            answers += self._create_batch(path, chunk, deadline)
        return answers

    def _create_batch(self, path: str, items: list[dict[str, Any]], deadline: float | None) -> list[Answer]:
        answer = self.call(Operation.CREATE, "POST", path, {"items": items}, deadline=deadline)
        if answer.status == 413 and len(items) > 1:
            half = len(items) // 2
            return self._create_batch(path, items[:half], deadline) + self._create_batch(path, items[half:], deadline)
        results = answer.body.get("results") if answer.status == 200 and isinstance(answer.body, dict) else None
        if not isinstance(results, list) or len(results) != len(items) or not all(_is_result(r) for r in results):
            if answer.status == 200:  # not what a batch route answers: the call did not do its job
                answer = Answer(
                    Outcome.TRANSIENT, 200, answer.body, f"POST {path}: 200 without one result per item", Operation.CREATE
                )
            return [answer] * len(items)
        return [_item_answer(path, index, result, item) for index, (result, item) in enumerate(zip(results, items))]

    def update(self, path: str, body: dict[str, Any]) -> Answer:
        return self.call(Operation.UPDATE, "PUT", path, body)

    def delete(self, path: str) -> Answer:
        return self.call(Operation.DELETE, "DELETE", path, None)

    def read(self, path: str) -> Answer:
        """A GET; DONE only for a 200."""
        return self.call(Operation.READ, "GET", path, None)

    def call(
        self,
        operation: Operation,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        *,
        deadline: float | None = None,
    ) -> Answer:
        """One call with its retries; ``deadline`` (a time.monotonic() value) ends it sooner
        than the policy's ``total_timeout`` would (a caller's budget already partly spent)."""
        headers = dict(self._headers if body is None else self._json_headers)
        headers[request_id.HEADER] = request_id.current_request_id() or request_id.new_request_id()
        retries, timeout = self._retry, self._timeout
        if self.policy.total_timeout is not None:
            own = time.monotonic() + self.policy.total_timeout
            deadline = own if deadline is None else min(deadline, own)
        if deadline is not None:
            retries = _DeadlineRetry(deadline=deadline, **self._retry_settings)
            timeout = _DeadlineTimeout(deadline, connect=self.policy.connect_timeout, read=self.policy.read_timeout)
        try:
            response = self._pool.urlopen(
                method,
                self._prefix + path,
                body=None if body is None else encode(body),
                headers=headers,
                retries=retries,
                timeout=timeout,
                # A redirect is not cluster_svc's answer: following a 302 with a
                # GET would report a create that never happened as done.
                redirect=False,
            )
        except HTTPError as exc:
            return Answer(Outcome.TRANSIENT, None, None, f"{method} {path}: {_describe(exc)}", operation, body)
        payload = _json_or_none(response.data)
        outcome = classify(operation, response.status)
        reason = _reason(f"{method} {path}", response.status, payload)
        return Answer(outcome, response.status, payload, reason, operation, body)

    def probe(self, path: str, timeout: float = 1.0) -> bool:
        """Whether cluster_svc serves a cheap authenticated read of ``path`` (its database included) right now.

        One attempt, no retries: the caller asks again in a second anyway.
        """
        try:
            response = self._pool.urlopen(
                "GET", self._prefix + path, headers=self._headers, retries=False,
                timeout=urllib3.Timeout(connect=timeout, read=timeout), redirect=False,
            )
        except HTTPError:
            return False
        return 200 <= response.status < 300

    def close(self) -> None:
        self._pool.close()


# Less than this left of a call's total_timeout: no attempt is started.
SHORTEST_ATTEMPT = 0.05


class _DeadlineRetry(Retry):
    """urllib3's Retry, bounded by ``deadline`` (a time.monotonic() value) as well as by counts.

    urllib3 asks :meth:`increment` before every retry and :meth:`sleep` for
    the pause before it: no retry once too little time is left, and no pause
    beyond what is left.
    """

    def __init__(self, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline = deadline

    def new(self, **kw: Any) -> _DeadlineRetry:
        return super().new(deadline=self.deadline, **kw)

    def increment(self, method=None, url=None, response=None, error=None, _pool=None, _stacktrace=None):
        retry = super().increment(method, url, response, error, _pool, _stacktrace)  # raises when out of retries
        left = self.deadline - time.monotonic()
        asked = self._asked(response)
        if left < SHORTEST_ATTEMPT or (asked is not None and asked > left - SHORTEST_ATTEMPT):
            raise MaxRetryError(_pool, url, error or ResponseError(f"no time left to retry a {response.status}"))
        return retry

    def sleep(self, response=None) -> None:
        asked = self._asked(response)
        pause = asked if asked else self.get_backoff_time()
        pause = min(pause, self.deadline - time.monotonic() - SHORTEST_ATTEMPT)
        if pause > 0:
            time.sleep(pause)

    def _asked(self, response) -> float | None:
        """The pause a Retry-After asks for (cut to retry_after_max), if any and if honoured."""
        if response is None or not self.respect_retry_after_header:
            return None
        try:
            return self.get_retry_after(response)
        except HTTPError:  # an unreadable Retry-After: the backoff applies
            return None


class _DeadlineTimeout(urllib3.Timeout):
    """Per-attempt timeouts that never reach past ``deadline``: urllib3 clones this for each attempt."""

    def __init__(self, deadline: float, *, connect: float, read: float) -> None:
        super().__init__(connect=connect, read=read)
        self.deadline = deadline

    def clone(self) -> urllib3.Timeout:
        left = max(self.deadline - time.monotonic(), 0.001)
        return urllib3.Timeout(connect=min(self._connect, left), read=min(self._read, left), total=left)


def encode(body: Any) -> bytes:
    """A request body as the client sends it (compact JSON)."""
    return json.dumps(body, separators=(",", ":")).encode()


def batches(items: list[dict[str, Any]], *, max_items: int, max_bytes: int) -> Iterator[list[dict[str, Any]]]:
    """``items`` in order, cut into lists of at most ``max_items`` whose batch body
    (``{"items": [...]}``, encoded) is at most ``max_bytes`` (an item too large
    alone goes alone: its answer says so)."""
    envelope = len(encode({"items": []})) - 1  # each item below adds its comma; the first needs none
    chunk: list[dict[str, Any]] = []
    size = envelope
    for item in items:
        item_size = len(encode(item)) + 1
        if chunk and (len(chunk) == max_items or size + item_size > max_bytes):
            yield chunk
            chunk, size = [], envelope
        chunk.append(item)
        size += item_size
    if chunk:
        yield chunk


def _is_result(result: Any) -> bool:
    return isinstance(result, dict) and isinstance(result.get("status"), int) and not isinstance(result["status"], bool)


def _item_answer(path: str, index: int, result: dict[str, Any], sent: dict[str, Any]) -> Answer:
    status = result["status"]
    body = result.get("object") if status in (200, 201) else result.get("problem")
    reason = _reason(f"POST {path} item {index}", status, body)
    return Answer(classify(Operation.CREATE, status), status, body, reason, Operation.CREATE, sent)


def _reason(call: str, status: int, payload: Any) -> str:
    """One line: the call, the status and, for a problem, its code and detail."""
    reason = f"{call}: {status}"
    if isinstance(payload, dict) and payload.get("code"):
        reason += f" {payload['code']}"
        if payload.get("detail"):
            reason += f": {payload['detail']}"
    return reason


def _json_or_none(data: bytes) -> Any:
    try:
        return json.loads(data) if data else None
    except ValueError:
        return None


def _describe(exc: HTTPError) -> str:
    # With retries, a failure that used up its retries arrives as MaxRetryError
    # naming the last one (its ``reason``); without, as itself.
    cause = exc.reason if isinstance(exc, MaxRetryError) and exc.reason is not None else exc
    if isinstance(cause, CallTimedOut) and not isinstance(cause, NewConnectionError):  # (a subclass, for history)
        return "timed out"
    if isinstance(exc, MaxRetryError) and cause is exc:
        return "gave up after retries"
    return "connection failed"
