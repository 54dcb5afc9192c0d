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

from collections.abc import Callable, Mapping
from typing import Any

import uuid6

from idempotent_pair_client.core import (
    ClientError,
    Deletion,
    NoAnswer,
    Object,
    ProblemError,
    ServiceClient,
    body_of,
    from_environment,
    waiting,
)
from idempotent_pair_client.journal import Journal, key_for, note_answer
from idempotent_pair_client.resources import PlatformResources
from idempotent_pair_client.transport import Attempt

__all__ = ["ClientError", "NoAnswer", "PlatformClient", "ProblemError"]

URL_VARIABLE, KEY_VARIABLE = "PAIR_PLATFORM_URL", "PAIR_API_KEY"


def endpoint(base_url: str | None, api_key: str | None) -> tuple[str, str]:
    """platform_svc's URL and the account's API key, each given or from the environment, for either
    flavour of its client. :raise ValueError: one is in neither."""
    url = from_environment(base_url, URL_VARIABLE, "platform_svc URL")
    return url, from_environment(api_key, KEY_VARIABLE, "API key")


class PlatformClient(ServiceClient, PlatformResources):
    """platform_svc's public API as one account (its API key); thread-safe, pooled, keep-alive.

    ``base_url`` and ``api_key``: when not given, ``PAIR_PLATFORM_URL`` and ``PAIR_API_KEY``.
    ``timeout``: seconds each attempt may wait to connect, and again to read.
    ``retry_for``: seconds during which failed attempts are retried; a call takes
    at most that plus one attempt (both may be given to any call, for it alone).

    Each collection has an accessor by name (``client.clusters.create({...})``,
    ``client.firewall_rules(cluster_id).list()``: :mod:`idempotent_pair_client.resources`,
    generated from the declarations), typed; the path-based calls (``create(path, body)``,
    paths as the API's ``/v1/...``) stay for whatever has none.

    :raise ValueError: no URL or no key, given or in the environment.
    """

    def __init__(
        self, base_url: str | None = None, *, api_key: str | None = None, timeout: float = 10.0,
        retry_for: float = 60.0, pool_size: int = 10, on_attempt: Callable[[Attempt], None] | None = None,
        journal: Journal | None = None,
    ) -> None:
        super().__init__(*endpoint(base_url, api_key), timeout=timeout, retry_for=retry_for, pool_size=pool_size,
                         on_attempt=on_attempt)
        self.journal = journal  # named operations' keys, kept across crashes (idempotent_pair_client.journal)

    @staticmethod
    def new_idempotency_key() -> str:
        """A fresh key (a UUIDv7), for a caller that keeps it before the call to recover after a crash."""
        return str(uuid6.uuid7())

    def create(
        self, path: str, body: Mapping[str, Any], idempotency_key: str | None = None, *,
        timeout: float | None = None, retry_for: float | None = None, wait: int | None = None,
        operation: str | None = None,
    ) -> Object:
        """Create an object in the collection at ``path``: the object (``meta.status`` 201), or the one this
        key made (200, ``meta.replayed``). With ``wait``: answered once cluster_svc has it (or it failed),
        or after that many seconds (``meta.idempotency_status``: ``completed``, ``failed``, ``processing``).
        With ``operation`` (a name of the caller's, and a client given a journal): the key is the
        operation's, written to the journal before anything is sent, so the same name sends the same
        key in any process, after a crash too (:meth:`resume`).

        :raise ValidationFailed: 422 ``validation_error`` (``fields``: what is wrong with each).
        :raise IdempotencyKeyReused: the key went with another body.
        :raise Gone: the key's object was deleted. :raise NotFound: no such parent. :raise NoAnswer:
        :raise TypeError: ``body`` is not a mapping.
        :raise ValueError: ``operation`` without a journal, or with an ``idempotency_key``.
        :raise OperationReused: ``operation`` was begun with another request.
        """
        body = body_of(body, "body")
        key = key_for(self.journal, operation, idempotency_key, path, body) or self.new_idempotency_key()
        prefer, timeout = waiting(wait, timeout, self.policy)
        try:
            made = self._object("POST", path, body, ok=(200, 201), headers={"Idempotency-Key": key, **prefer},
                                timeout=timeout, retry_for=retry_for)
        except ProblemError as refused:
            note_answer(self.journal, operation, refused.status)
            raise
        note_answer(self.journal, operation, made.meta.status)
        return made

    def resume(self, *, timeout: float | None = None, retry_for: float | None = None) -> list[Object | ProblemError]:
        """Send again every operation of the journal begun and not answered (a crash, or no answer
        within ``retry_for``), each with its own key: the object it made (or makes now), or the
        refusal it meets; in the order they were begun (``timeout``, ``retry_for``: each one's).

        :raise ValueError: the client has no journal. :raise NoAnswer: (the rest stays for later)
        """
        if self.journal is None:
            raise ValueError("resume() needs a journal: PlatformClient(..., journal=Journal(path))")
        results: list[Object | ProblemError] = []
        for begun in self.journal.unanswered():
            try:
                results.append(self.create(begun.path, begun.body, operation=begun.name, timeout=timeout,
                                           retry_for=retry_for))
            except ProblemError as refused:
                results.append(refused)
        return results

    def update(
        self, path: str, fields: Mapping[str, Any], *, timeout: float | None = None, retry_for: float | None = None,
        wait: int | None = None,
    ) -> Object:
        """Change the object at ``path`` (PATCH ``fields``): the object as it is now (with ``wait``, as
        :meth:`create` waits).

        :raise NotFound: :raise Gone: (deleted) :raise ValidationFailed: ... :raise NoAnswer:
        :raise TypeError: ``fields`` is not a mapping.
        """
        prefer, timeout = waiting(wait, timeout, self.policy)
        return self._object("PATCH", path, body_of(fields, "fields"), headers=prefer, timeout=timeout,
                            retry_for=retry_for)

    def delete(
        self, path: str, *, timeout: float | None = None, retry_for: float | None = None, wait: int | None = None,
    ) -> Deletion:
        """Delete the object at ``path``: ``DELETED`` (204, or 202: cluster_svc not told yet), or
        ``ALREADY_GONE`` (410: a retry after a lost answer meets it, as does a delete of an object
        deleted before). Either way it is deleted. With ``wait``, as :meth:`create` waits: a 204
        then says cluster_svc has it deleted too.

        :raise NotFound: no such object in this account. :raise NoAnswer:
        """
        prefer, timeout = waiting(wait, timeout, self.policy)
        reply = self._call("DELETE", path, ok=(202, 204, 410), headers=prefer, timeout=timeout, retry_for=retry_for)
        return Deletion.of(reply)

    def find_by_idempotency_key(
        self, path: str, key: str, *, timeout: float | None = None, retry_for: float | None = None,
    ) -> Object | None:
        """The live object a create with ``key`` made in the collection at ``path``, or None (none, or
        deleted since): how a caller that lost a create's answer learns its outcome without sending the
        body again (``GET path?idempotency_key=key``; ``meta``: that call's).

        :raise ProblemError: :raise NoAnswer:
        """
        found = self.list(path, idempotency_key=key, timeout=timeout, retry_for=retry_for)
        return Object(found.data[0], found.meta) if found.data else None
