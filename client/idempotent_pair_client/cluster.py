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

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from idempotent_pair_client.core import (
    ClientError,
    Deletion,
    NoAnswer,
    Object,
    ServiceClient,
    body_of,
    from_environment,
    item_results,
)
from idempotent_pair_client.errors import ProblemError
from idempotent_pair_client.limits import MAX_BATCH_ITEMS, MAX_BODY_BYTES
from idempotent_pair_client.resources import ClusterResources
from idempotent_pair_client.transport import Attempt, send_in_batches

__all__ = ["ClientError", "ClusterClient", "NoAnswer", "ProblemError"]

URL_VARIABLE, TOKEN_VARIABLE = "PAIR_CLUSTER_URL", "PAIR_INTERNAL_TOKEN"


def endpoint(base_url: str | None, token: str | None) -> tuple[str, str]:
    """cluster_svc's URL and the token sent (the first of a rotation's), each given or from the
    environment, for either flavour of its client. :raise ValueError: one is in neither."""
    sent = from_environment(token, TOKEN_VARIABLE, "internal token").split(",", 1)[0].strip()
    return from_environment(base_url, URL_VARIABLE, "cluster_svc URL"), sent


class ClusterClient(ServiceClient, ClusterResources):
    """cluster_svc's internal API with the internal token; thread-safe, pooled, keep-alive.

    ``base_url`` and ``token``: when not given, ``PAIR_CLUSTER_URL`` and ``PAIR_INTERNAL_TOKEN``.
    ``token``: the internal token, or ``INTERNAL_TOKEN`` as set during a rotation (several,
    comma-separated): the first is the one sent, as the services send it.
    ``timeout``: seconds each attempt may wait to connect, and again to read.
    ``retry_for``: seconds during which failed attempts are retried; a call takes
    at most that plus one attempt (both may be given to any call, for it alone).
    Paths are the API's (``/v1/...``).

    :raise ValueError: no URL or no token, given or in the environment.
    """

    def __init__(
        self, base_url: str | None = None, *, token: str | None = None, timeout: float = 10.0,
        retry_for: float = 60.0, pool_size: int = 10, on_attempt: Callable[[Attempt], None] | None = None,
    ) -> None:
        super().__init__(*endpoint(base_url, token), timeout=timeout, retry_for=retry_for, pool_size=pool_size,
                         on_attempt=on_attempt)

    def create(
        self, path: str, body: Mapping[str, Any], *, timeout: float | None = None, retry_for: float | None = None
    ) -> Object:
        """Create-or-return ``body`` (it carries the caller's ``id``) in the collection at ``path``: the
        object, created (``meta.status`` 201) or already there (200: an earlier attempt, or call, made it).

        :raise Conflict: 409 ``id_conflict`` (the ID holds other immutable fields). :raise Gone: deleted,
            or ``id_expired``. :raise NotFound: no such parent. :raise ValidationFailed: ... :raise NoAnswer:
        :raise TypeError: ``body`` is not a mapping.
        """
        return self._object("POST", path, body_of(body, "body"), ok=(200, 201), timeout=timeout,
                            retry_for=retry_for)

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
            lambda chunk: self.transport.send("POST", route, {"items": chunk}, on_attempt=self.on_attempt),
            [body_of(item, f"items[{index}]") for index, item in enumerate(items)],
            max_items=MAX_BATCH_ITEMS, max_bytes=MAX_BODY_BYTES, too_large=lambda reply: reply.status == 413,
        )
        for chunk, reply in calls:
            results += item_results(route, len(results), chunk, reply)
        return results

    def update(
        self, path: str, fields: Mapping[str, Any], *, generation: int, timeout: float | None = None,
        retry_for: float | None = None,
    ) -> Object:
        """PUT ``fields`` at ``generation``: applied when that is above the stored one, else nothing changes;
        either way the object as it is now.

        :raise NotFound: :raise Gone: (deleted) :raise ValidationFailed: ... :raise NoAnswer:
        :raise TypeError: ``fields`` is not a mapping.
        """
        return self._object("PUT", path, {**body_of(fields, "fields"), "generation": generation}, timeout=timeout,
                            retry_for=retry_for)

    def delete(
        self, path: str, *, unknown: Literal["tombstone", "refuse"] = "tombstone", timeout: float | None = None,
        retry_for: float | None = None,
    ) -> Deletion:
        """Delete the object at ``path``: ``DELETED`` (204), ``ALREADY_GONE`` (410: deleted before, by an
        earlier attempt whose answer was lost, say) or ``NEVER_SEEN`` (404).

        cluster_svc records a tombstone for an ID it never held, so that a create arriving later
        never makes it: that is ``unknown="tombstone"``. With ``unknown="refuse"`` an ID it never
        held is not deleted at all (it is read first) and :class:`NotFound` is raised instead.

        :raise NotFound: (``unknown="refuse"``) :raise NoAnswer:
        """
        if unknown == "refuse":  # NotFound, raised by the read, before any delete is sent
            self._call("GET", path, ok=(200, 410), timeout=timeout, retry_for=retry_for)
        reply = self._call("DELETE", path, ok=(204, 404, 410), timeout=timeout, retry_for=retry_for)
        return Deletion.of(reply)
