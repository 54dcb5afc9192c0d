"""A program's client of platform_svc's public API: each call takes effect once, whatever the network does.

::

    from idempotent_pair_client.platform import PlatformClient, ProblemError

    with PlatformClient("http://localhost:8000", api_key=API_KEY) as api:
        made = api.create("/v1/<collection>", body)        # an Idempotency-Key of its own, on every retry
        api.update(f"/v1/<collection>/{made['id']}", {...})
        for obj in api.list("/v1/<collection>"):          # every page
            ...
        api.delete(f"/v1/<collection>/{made['id']}")

A create sends an Idempotency-Key (a UUIDv7 the client makes once per call,
unless given) and sends the same key with every retry, so a retry after a lost
answer is answered 200 with the object the first attempt made, never a second
one. A caller that must survive its own crash gives its own key, kept before the
call (:meth:`PlatformClient.new_idempotency_key`), and after a restart finds
what that key made with :meth:`PlatformClient.find_by_idempotency_key`, without
sending the body again.

Retries and errors: :mod:`idempotent_pair_client.core` (:class:`ProblemError` for a
refusal, :class:`NoAnswer` when nothing answered within ``retry_for``). Light to
import: nothing of the service's web or database stack is loaded.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import uuid6

from idempotent_pair_client.core import ClientError, NoAnswer, ProblemError, ServiceClient, with_query  # noqa: F401 (raised to the caller)

__all__ = ["ClientError", "NoAnswer", "PlatformClient", "ProblemError"]


class PlatformClient(ServiceClient):
    """platform_svc's public API as one account (its API key); thread-safe, pooled, keep-alive.

    ``timeout``: seconds each attempt may wait to connect, and again to read.
    ``retry_for``: seconds during which failed attempts are retried; a call takes
    at most that plus one attempt. Paths are the API's (``/v1/...``).
    """

    def __init__(
        self, base_url: str, *, api_key: str, timeout: float = 10.0, retry_for: float = 60.0, pool_size: int = 10
    ) -> None:
        super().__init__(base_url, api_key, timeout=timeout, retry_for=retry_for, pool_size=pool_size)

    @staticmethod
    def new_idempotency_key() -> str:
        """A fresh key (a UUIDv7), for a caller that keeps it before the call to recover after a crash."""
        return str(uuid6.uuid7())

    def create(self, path: str, body: Mapping[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        """Create an object in the collection at ``path``: the object (201), or the one this key made (200).

        :raise ProblemError: 422 ``validation_error`` (per-field ``errors``) or
            ``idempotency_key_reused`` (the key went with another body), 400
            ``invalid_idempotency_key``, 410 (the key's object was deleted), 404 (no such parent), ...
        :raise NoAnswer:
        """
        key = idempotency_key if idempotency_key is not None else self.new_idempotency_key()
        return self._object("POST", path, dict(body), ok=(200, 201), headers={"Idempotency-Key": key})

    def update(self, path: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """Change the object at ``path`` (PATCH ``fields``): the object as it is now.

        :raise ProblemError: 404, 410 (deleted), 422 ... :raise NoAnswer:
        """
        return self._object("PATCH", path, dict(fields))

    def delete(self, path: str) -> None:
        """Delete the object at ``path``. Done when it is deleted: 204, 202 (cluster_svc not told yet), and
        410, which a retry after a lost answer meets (the first attempt deleted it), as does a delete of an
        object deleted before.

        :raise ProblemError: 404 (no such object in this account), ... :raise NoAnswer:
        """
        self._call("DELETE", path, ok=(202, 204, 410))

    def find_by_idempotency_key(self, path: str, key: str) -> dict[str, Any] | None:
        """The live object a create with ``key`` made in the collection at ``path``, or None (none, or
        deleted since): how a caller that lost a create's answer learns its outcome without sending the
        body again (``GET path?idempotency_key=key``).

        :raise ProblemError: :raise NoAnswer:
        """
        page = self._call("GET", with_query(path, {"idempotency_key": key})).body
        items = page.get("items") if isinstance(page, dict) else None
        if not isinstance(items, list):
            raise ClientError(f"GET {path}: 200 without a page (items, next_after)")
        return items[0] if items else None
