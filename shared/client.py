"""The one HTTP client for calls to cluster_svc.

Every call to cluster_svc is idempotent by ID, so POST, PUT and DELETE are all
retried: urllib3's ``Retry`` on a pooled, keep-alive ``requests`` session, with
exponential backoff and jitter, honouring ``Retry-After``. Connect and read
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
from dataclasses import dataclass
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import ReadTimeoutError
from urllib3.util.retry import Retry

from shared import request_id

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

    def longest_call(self) -> float:
        """Seconds one call can take at most, all its retries included (a lease must outlast it)."""
        attempts = self.retries + 1
        pause = max(self.backoff_max + self.backoff_jitter, self.retry_after_max)
        return attempts * (self.connect_timeout + self.read_timeout) + self.retries * pause


class InternalClient:
    """Calls cluster_svc with the internal token; thread-safe, pooled, keep-alive."""

    def __init__(self, base_url: str, token: str, policy: ClientPolicy = ClientPolicy()) -> None:
        self.base_url = base_url.rstrip("/")
        self.policy = policy
        retry = Retry(
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
        adapter = HTTPAdapter(max_retries=retry, pool_connections=1, pool_maxsize=policy.pool_size)
        self.session = requests.Session()
        # Proxy settings from the environment are looked up on every call
        # otherwise (a tenth of the reconciler's CPU); cluster_svc is reached directly.
        self.session.trust_env = False
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.headers.update({"Authorization": f"Bearer {token}", "Accept": "application/json"})
        self._probe_session = requests.Session()  # no Retry mounted: a probe is one attempt
        self._probe_session.trust_env = False
        self._probe_session.headers.update(self.session.headers)

    def create(self, path: str, body: dict[str, Any]) -> Answer:
        return self.call(Operation.CREATE, "POST", path, body)

    def create_batch(self, path: str, items: list[dict[str, Any]]) -> list[Answer]:
        """Create-or-return ``items`` with one call to a batch route; one answer per item, in order.

        Each item's own status (201, 200, 404, 409, 410, 422) is classified as
        its single create's would be. When the call as a whole fails (no
        answer, a non-200 status, a body without one result per item), every
        item gets that one answer.
        """
        answer = self.call(Operation.CREATE, "POST", path, {"items": items})
        results = answer.body.get("results") if answer.status == 200 and isinstance(answer.body, dict) else None
        if not isinstance(results, list) or len(results) != len(items) or not all(_is_result(r) for r in results):
            if answer.status == 200:  # not what a batch route answers: the call did not do its job
                answer = Answer(
                    Outcome.TRANSIENT, 200, answer.body, f"POST {path}: 200 without one result per item", Operation.CREATE
                )
            return [answer] * len(items)
        return [_item_answer(path, index, result) for index, result in enumerate(results)]

    def update(self, path: str, body: dict[str, Any]) -> Answer:
        return self.call(Operation.UPDATE, "PUT", path, body)

    def delete(self, path: str) -> Answer:
        return self.call(Operation.DELETE, "DELETE", path, None)

    def read(self, path: str) -> Answer:
        """A GET; DONE only for a 200."""
        return self.call(Operation.READ, "GET", path, None)

    def call(self, operation: Operation, method: str, path: str, body: dict[str, Any] | None) -> Answer:
        try:
            response = self.session.request(
                method,
                self.base_url + path,
                json=body,
                headers={request_id.HEADER: request_id.current_request_id() or request_id.new_request_id()},
                timeout=(self.policy.connect_timeout, self.policy.read_timeout),
                # A redirect is not cluster_svc's answer: following a 302 with a
                # GET would report a create that never happened as done.
                allow_redirects=False,
            )
        except requests.RequestException as exc:
            return Answer(Outcome.TRANSIENT, None, None, f"{method} {path}: {_describe(exc)}", operation)
        payload = _json_or_none(response)
        outcome = classify(operation, response.status_code)
        return Answer(
            outcome, response.status_code, payload, _reason(f"{method} {path}", response.status_code, payload), operation
        )

    def probe(self, path: str = "/v1/clusters?limit=1", timeout: float = 1.0) -> bool:
        """Whether cluster_svc serves a cheap authenticated read (its database included) right now.

        One attempt, no retries: the caller asks again in a second anyway.
        """
        try:
            response = self._probe_session.get(self.base_url + path, timeout=(timeout, timeout), allow_redirects=False)
        except requests.RequestException:
            return False
        return 200 <= response.status_code < 300

    def close(self) -> None:
        self.session.close()
        self._probe_session.close()


def _is_result(result: Any) -> bool:
    return isinstance(result, dict) and isinstance(result.get("status"), int) and not isinstance(result["status"], bool)


def _item_answer(path: str, index: int, result: dict[str, Any]) -> Answer:
    status = result["status"]
    body = result.get("object") if status in (200, 201) else result.get("problem")
    reason = _reason(f"POST {path} item {index}", status, body)
    return Answer(classify(Operation.CREATE, status), status, body, reason, Operation.CREATE)


def _reason(call: str, status: int, payload: Any) -> str:
    """One line: the call, the status and, for a problem, its code and detail."""
    reason = f"{call}: {status}"
    if isinstance(payload, dict) and payload.get("code"):
        reason += f" {payload['code']}"
        if payload.get("detail"):
            reason += f": {payload['detail']}"
    return reason


def _json_or_none(response: requests.Response) -> Any:
    try:
        return response.json() if response.content else None
    except ValueError:
        return None


def _describe(exc: requests.RequestException) -> str:
    # With Retry mounted, a read timeout that used up its retries arrives as a
    # ConnectionError wrapping urllib3's MaxRetryError(reason=ReadTimeoutError).
    cause = getattr(exc.args[0], "reason", None) if exc.args else None
    if isinstance(exc, requests.Timeout) or isinstance(cause, ReadTimeoutError):
        return "timed out"
    if isinstance(exc, requests.ConnectionError):
        return "connection failed"
    if isinstance(exc, requests.exceptions.RetryError):
        return "gave up after retries"
    return type(exc).__name__
