"""A program's client of cluster_svc's internal API, with its own IDs: each create happens once.

::

    from idempotent_pair_client.cluster import ClusterClient

    with ClusterClient("http://localhost:8001", token=INTERNAL_TOKEN) as internal:
        body = {"id": str(uuid6.uuid7()), ...}                  # the caller's ID is the idempotency key
        internal.create("/v1/<collection>", body)               # 201 created, or 200: it was there already
        internal.update(f"/v1/<collection>/{body['id']}", {...}, generation=2)
        internal.delete(f"/v1/<collection>/{body['id']}")       # 204, or 404/410: nothing left to delete

The same core as platform_svc's pushes (:mod:`idempotent_pair_client.transport`), with a
caller's policy: retries and errors as :mod:`idempotent_pair_client.core` says
(:class:`~idempotent_pair_client.core.ProblemError` for a refusal, such as 409
``id_conflict``; :class:`~idempotent_pair_client.transport.NoAnswer` when nothing answered
within ``retry_for``). Light to import: nothing of the service's web or
database stack is loaded.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from idempotent_pair_client.core import ClientError, NoAnswer, ProblemError, ServiceClient  # noqa: F401 (raised to the caller)
from idempotent_pair_client.limits import MAX_BATCH_ITEMS, MAX_BODY_BYTES
from idempotent_pair_client.transport import Reply, send_in_batches


class ClusterClient(ServiceClient):
    """cluster_svc's internal API with the internal token; thread-safe, pooled, keep-alive.

    ``token``: the internal token, or ``INTERNAL_TOKEN`` as set during a rotation (several,
    comma-separated): the first is the one sent, as the services send it.
    ``timeout``: seconds each attempt may wait to connect, and again to read.
    ``retry_for``: seconds during which failed attempts are retried; a call takes
    at most that plus one attempt. Paths are the API's (``/v1/...``).
    """

    def __init__(
        self, base_url: str, *, token: str, timeout: float = 10.0, retry_for: float = 60.0, pool_size: int = 10
    ) -> None:
        super().__init__(base_url, token.split(",", 1)[0].strip(), timeout=timeout, retry_for=retry_for,
                         pool_size=pool_size)

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create-or-return ``body`` (it carries the caller's ``id``) in the collection at ``path``: the
        object, created (201) or already there (200: an earlier attempt, or call, made it).

        :raise ProblemError: 409 ``id_conflict`` (the ID holds other immutable fields), 410 (deleted, or
            ``id_expired``), 404 (no such parent), 422 ... :raise NoAnswer:
        """
        return self._object("POST", path, dict(body), ok=(200, 201))

    def create_batch(self, path: str, items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any] | ProblemError]:
        """Create-or-return every item with the collection's batch route (``path`` + ``/batch``, or ``path``
        if it ends so): one entry per item, in order, the object or the :class:`ProblemError` its own create
        would have raised (a refused item never fails the others).

        As few calls as cluster_svc's limits allow (1,000 items, 1 MiB of body), a
        call answered 413 anyway split in two (the push path's cutting). Each call
        is retried as any call; a batch is safe to send again whole.

        :raise ProblemError: a call refused as a whole. :raise NoAnswer:
        """
        route = path if path.endswith("/batch") else f"{path.rstrip('/')}/batch"
        results: list[dict[str, Any] | ProblemError] = []
        calls = send_in_batches(
            lambda chunk: self.transport.send("POST", route, {"items": chunk}), [dict(item) for item in items],
            max_items=MAX_BATCH_ITEMS, max_bytes=MAX_BODY_BYTES, too_large=lambda reply: reply.status == 413,
        )
        for chunk, reply in calls:
            results += _item_results(route, len(results), chunk, reply)
        return results

    def update(self, path: str, fields: Mapping[str, Any], *, generation: int) -> dict[str, Any]:
        """PUT ``fields`` at ``generation``: applied when that is above the stored one, else nothing changes;
        either way the object as it is now.

        :raise ProblemError: 404, 410 (deleted), 422 ... :raise NoAnswer:
        """
        return self._object("PUT", path, {**fields, "generation": generation})

    def delete(self, path: str) -> None:
        """Delete the object at ``path``. Done when nothing is left there: 204, 410 (deleted already: an
        earlier attempt whose answer was lost, say) and 404 (never made; a tombstone is recorded).

        :raise ProblemError: :raise NoAnswer:
        """
        self._call("DELETE", path, ok=(204, 404, 410))


def _item_results(
    route: str, first: int, chunk: Sequence[Mapping[str, Any]], reply: Reply
) -> list[dict[str, Any] | ProblemError]:
    """One batch call's answer, one entry per item of ``chunk`` (item ``first`` of the whole batch onward)."""
    if reply.status == 413 and len(chunk) == 1:  # this item alone is too large
        return [ProblemError(f"POST {route} item {first}", 413, reply.body)]
    if reply.status != 200:
        raise ProblemError(f"POST {route}", reply.status, reply.body)
    answers = reply.body.get("results") if isinstance(reply.body, dict) else None
    if not isinstance(answers, list) or len(answers) != len(chunk) or not all(map(_is_result, answers)):
        raise ClientError(f"POST {route}: 200 without one result per item")
    return [
        answer.get("object") if answer.get("status") in (200, 201)
        else ProblemError(f"POST {route} item {first + index}", answer.get("status"), answer.get("problem"))
        for index, answer in enumerate(answers)
    ]


def _is_result(answer: Any) -> bool:
    status = answer.get("status") if isinstance(answer, dict) else None
    return isinstance(status, int) and not isinstance(status, bool)
