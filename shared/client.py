"""The push path's client of cluster_svc: platform_svc's inline pushes, the reconciler and repair.

It sends through the one HTTP core (:class:`idempotent_pair_client.transport.Transport`: pooled,
keep-alive urllib3, every call retried within its :class:`ClientPolicy`, the
request ID on every call) with the internal token, and never raises: each answer
is classified for the caller, who records it and retries later on its own:

- ``DONE``: the object is where the caller wants it (201 or 200; for a delete
  also 204, 404 and 410).
- ``TRANSIENT``: try again later (connection errors, timeouts, 5xx, 429, and
  401/403, which an operator fixes by correcting the token). A 503 ``clock_skew``
  is one of these: cluster_svc's clock is too far from its database's to judge IDs.
- ``PERMANENT``: retrying cannot help (409 ``id_conflict``, 410 on a create or
  update, 422, and any other 4xx).

A program calling cluster_svc uses ``idempotent_pair_client.cluster.ClusterClient``, on the
same core, which raises instead.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from idempotent_pair_client.limits import MAX_BATCH_ITEMS, MAX_BODY_BYTES
from idempotent_pair_client.transport import (
    RETRY_STATUSES,
    ClientPolicy,
    NoAnswer,
    Transport,
    encode,
    is_item_result,
    reason,
    send_in_batches,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from shared.clock import ClockWatch

__all__ = [
    "RETRY_STATUSES", "Answer", "InternalClient", "Operation", "Outcome", "classify", "encode",
]


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


class InternalClient:
    """Calls cluster_svc with the internal token; thread-safe, pooled, keep-alive."""

    # A batch call's body at most (cluster_svc's body limit) and its items at most.
    max_body = MAX_BODY_BYTES

    def __init__(self, base_url: str, token: str, policy: ClientPolicy = ClientPolicy()) -> None:
        self.transport = Transport(base_url, {"Authorization": f"Bearer {token}"}, policy)
        self.base_url = self.transport.base_url
        self.policy = policy
        self.clock: ClockWatch | None = None  # told every answer's Date, when set (platform_svc's pushers)
        # Told whether cluster_svc served each call, and the call's line, when set (platform_svc's sightings).
        self.seen: Callable[[bool, str], None] | None = None

    def create(self, path: str, body: dict[str, Any], *, deadline: float | None = None) -> Answer:
        return self.call(Operation.CREATE, "POST", path, body, deadline=deadline)

    def create_batch(self, path: str, items: list[dict[str, Any]], *, deadline: float | None = None) -> list[Answer]:
        """Create-or-return ``items`` with calls to a batch route; one answer per item, in order.

        As few calls as the body limit allows: items go in order, as many to a
        call as fit in ``max_body`` bytes (cluster_svc's limit, 1 MiB; at most
        1,000 items), and a call answered 413 anyway is split in two and each
        half sent again: a 413 is never an item's answer unless the item alone
        is too large (:func:`idempotent_pair_client.transport.send_in_batches`). Each item's own
        status (201, 200, 404, 409, 410, 422) is classified as its single
        create's would be. When a call as a whole fails (no answer, a non-200
        status, a body without one result per item), each of its items gets that
        one answer. ``deadline``: as :meth:`call`.
        """
        calls = send_in_batches(
            lambda chunk: self.call(Operation.CREATE, "POST", path, {"items": chunk}, deadline=deadline),
            items, max_items=MAX_BATCH_ITEMS, max_bytes=self.max_body, too_large=lambda answer: answer.status == 413,
        )
        answers: list[Answer] = []
        for chunk, answer in calls:
            answers += _item_answers(path, chunk, answer)
        return answers

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
        try:
            reply = self.transport.send(method, path, body, deadline=deadline)
        except NoAnswer as exc:
            answer = Answer(Outcome.TRANSIENT, None, None, f"{method} {path}: {exc.reason}", operation, body)
        else:
            if self.clock is not None:
                self.clock.observe_date(reply.headers.get("Date"), reply.sent_at, reply.received_at)
            outcome = classify(operation, reply.status)
            answer = Answer(outcome, reply.status, reply.body, reason(f"{method} {path}", reply.status, reply.body),
                            operation, body)
        if self.seen is not None:
            self.seen(not answer.unavailable, answer.reason)
        return answer

    def probe(self, path: str, timeout: float = 1.0) -> bool:
        """Whether cluster_svc serves a cheap authenticated read of ``path`` (its database included) right now.

        One attempt, no retries: the caller asks again in a second anyway.
        """
        served = self.transport.probe(path, timeout)
        if self.seen is not None:
            self.seen(served, f"GET {path}: {'served' if served else 'not served'} (a probe)")
        return served

    def close(self) -> None:
        self.transport.close()


def _item_answers(path: str, items: list[dict[str, Any]], answer: Answer) -> list[Answer]:
    """One batch call's answer, one per item: each item's own result, or the call's answer for all."""
    results = answer.body.get("results") if answer.status == 200 and isinstance(answer.body, dict) else None
    if not isinstance(results, list) or len(results) != len(items) or not all(map(is_item_result, results)):
        if answer.status == 200:  # not what a batch route answers: the call did not do its job
            answer = Answer(
                Outcome.TRANSIENT, 200, answer.body, f"POST {path}: 200 without one result per item", Operation.CREATE
            )
        return [answer] * len(items)
    return [_item_answer(path, index, result, item) for index, (result, item) in enumerate(zip(results, items))]


def _item_answer(path: str, index: int, result: dict[str, Any], sent: dict[str, Any]) -> Answer:
    status = result["status"]
    body = result.get("object") if status in (200, 201) else result.get("problem")
    line = reason(f"POST {path} item {index}", status, body)
    return Answer(classify(Operation.CREATE, status), status, body, line, Operation.CREATE, sent)
