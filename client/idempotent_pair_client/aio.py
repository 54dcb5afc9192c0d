"""The asyncio twin of the clients: :class:`AsyncPlatformClient` and :class:`AsyncClusterClient`,
the same surface and the same retries, awaited.

Built on httpx (``pip install './client[async]'``). Each call is planned by the same
:class:`~idempotent_pair_client.transport.CallPlan` as the sync transport's, so it retries alike:
the same Idempotency-Key (or the caller's ID) and ``X-Request-ID`` on every attempt, ``Retry-After``
honoured, ``retry_for`` a window, the same errors (:mod:`idempotent_pair_client.errors`). Only the
I/O differs: httpx's pooled keep-alive connections instead of urllib3's, and ``asyncio.sleep``.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Literal, Self

import httpx
import uuid6

from idempotent_pair_client import cluster, platform, request_id
from idempotent_pair_client.core import (
    ClientBase,
    Deletion,
    Meta,
    Object,
    as_object,
    body_of,
    call_policy,
    expect,
    item_results,
    page_of,
    paged,
    query_of,
    waiting,
    with_query,
)
from idempotent_pair_client.errors import ProblemError
from idempotent_pair_client.journal import Journal, key_for, note_answer
from idempotent_pair_client.limits import MAX_BATCH_ITEMS, MAX_BODY_BYTES
from idempotent_pair_client.pages import AsyncPage, AsyncPager
from idempotent_pair_client.resources import AsyncClusterResources, AsyncPlatformResources
from idempotent_pair_client.transport import (
    USER_AGENT,
    Attempt,
    CallPlan,
    ClientPolicy,
    Reply,
    batches,
    decode,
    prepared,
)

__all__ = ["AsyncClusterClient", "AsyncPlatformClient"]

# No answer, and worth another attempt: refused, reset, closed early, timed out (as the sync transport's).
_RETRYABLE = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


class AsyncTransport:
    """Sends calls to one service with ``headers`` (its credentials) on every one; one httpx pool."""

    def __init__(self, base_url: str, headers: Mapping[str, str], policy: ClientPolicy) -> None:
        self.base_url = base_url.rstrip("/")
        self.policy = policy
        self._headers = {"User-Agent": USER_AGENT, **headers, "Accept": "application/json"}
        self._client = httpx.AsyncClient(
            limits=httpx.Limits(max_keepalive_connections=policy.pool_size), follow_redirects=False, trust_env=False,
        )

    async def send(
        self, method: str, path: str, body: Any = None, *, headers: Mapping[str, str] | None = None,
        policy: ClientPolicy | None = None, on_attempt: Callable[[Attempt], None] | None = None,
    ) -> Reply:
        """One call with its retries: the answer it ended with. :raise NoAnswer: no attempt got one."""
        sent, payload = prepared(self._headers, body, headers)
        plan = CallPlan(policy or self.policy, method, path, sent[request_id.HEADER], None, on_attempt)
        while True:
            connect, read, total = plan.begin()
            sent_at = time.time()
            try:
                async with asyncio.timeout(total):  # the attempt's whole, as urllib3's total is the sync one's
                    response = await self._client.request(
                        method, self.base_url + path, content=payload, headers=sent,
                        timeout=httpx.Timeout(connect=connect, read=read, write=read, pool=connect),
                    )
            except TimeoutError as exc:  # the total ran out: no answer, as a read timeout is
                pause = plan.failed(exc, retryable=True, reason="timed out")
            except httpx.HTTPError as exc:
                timed_out = isinstance(exc, httpx.TimeoutException)
                pause = plan.failed(exc, retryable=isinstance(exc, _RETRYABLE),
                                    reason="timed out" if timed_out else "connection failed")
            else:
                outcome = plan.answered(response.status_code, response.headers, decode(response.content), sent_at)
                if isinstance(outcome, Reply):
                    return outcome
                pause = outcome
            if pause > 0:
                await asyncio.sleep(pause)

    async def close(self) -> None:
        await self._client.aclose()


class AsyncServiceClient(ClientBase):
    """What the two async clients share: as :class:`~idempotent_pair_client.core.ServiceClient`, awaited."""

    transport_type = AsyncTransport
    transport: AsyncTransport

    async def get(self, path: str, *, timeout: float | None = None, retry_for: float | None = None) -> Object:
        """:meth:`~idempotent_pair_client.core.ServiceClient.get`, awaited."""
        return as_object(await self._call("GET", path, timeout=timeout, retry_for=retry_for), "GET", path)

    def list(
        self, path: str, *, timeout: float | None = None, retry_for: float | None = None,
        **filters: str | int | bool | None,
    ) -> AsyncPager[dict[str, Any]]:
        """The listing at ``path``: ``await`` it for its first page, ``async for`` over it for every object."""
        query = query_of(filters)

        async def fetch(after: str | None = None) -> AsyncPage[dict[str, Any]]:
            reply = await self._call("GET", with_query(path, paged(query, after)), timeout=timeout,
                                     retry_for=retry_for)
            return AsyncPage(*page_of(reply, path), Meta.of(reply), fetch)

        return AsyncPager(fetch)

    async def close(self) -> None:
        """:meth:`~idempotent_pair_client.core.ServiceClient.close`, awaited."""
        await self.transport.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(
        self, method: str, path: str, body: Any = None, *, ok: Collection[int] = (200,),
        headers: Mapping[str, str] | None = None, timeout: float | None = None, retry_for: float | None = None,
    ) -> Reply:
        reply = await self.transport.send(method, path, body, headers=headers, on_attempt=self.on_attempt,
                                          policy=call_policy(self.policy, timeout, retry_for))
        return expect(reply, ok, method, path)


class AsyncPlatformClient(AsyncServiceClient, AsyncPlatformResources):
    """:class:`~idempotent_pair_client.platform.PlatformClient`, awaited: by path, and by name
    (``await client.clusters.create({...})``, ``async for rule in client.firewall_rules(id).list()``)."""

    def __init__(
        self, base_url: str | None = None, *, api_key: str | None = None, timeout: float = 10.0,
        retry_for: float = 60.0, pool_size: int = 10, on_attempt: Callable[[Attempt], None] | None = None,
        journal: Journal | None = None,
    ) -> None:
        super().__init__(*platform.endpoint(base_url, api_key), timeout=timeout, retry_for=retry_for,
                         pool_size=pool_size, on_attempt=on_attempt)
        self.journal = journal  # a local file: its writes are brief, and made before anything is sent

    @staticmethod
    def new_idempotency_key() -> str:
        """A fresh key (a UUIDv7), as :meth:`~idempotent_pair_client.platform.PlatformClient.new_idempotency_key`."""
        return str(uuid6.uuid7())

    async def create(
        self, path: str, body: Mapping[str, Any], idempotency_key: str | None = None, *,
        timeout: float | None = None, retry_for: float | None = None, wait: int | None = None,
        operation: str | None = None,
    ) -> Object:
        """:meth:`~idempotent_pair_client.platform.PlatformClient.create`, awaited."""
        body = body_of(body, "body")
        key = key_for(self.journal, operation, idempotency_key, path, body) or self.new_idempotency_key()
        prefer, timeout = waiting(wait, timeout, self.policy)
        try:
            reply = await self._call("POST", path, body, ok=(200, 201), timeout=timeout, retry_for=retry_for,
                                     headers={"Idempotency-Key": key, **prefer})
        except ProblemError as refused:
            note_answer(self.journal, operation, refused.status)
            raise
        note_answer(self.journal, operation, reply.status)
        return as_object(reply, "POST", path)

    async def resume(
        self, *, timeout: float | None = None, retry_for: float | None = None,
    ) -> list[Object | ProblemError]:
        """:meth:`~idempotent_pair_client.platform.PlatformClient.resume`, awaited."""
        if self.journal is None:
            raise ValueError("resume() needs a journal: AsyncPlatformClient(..., journal=Journal(path))")
        results: list[Object | ProblemError] = []
        for begun in self.journal.unanswered():
            try:
                results.append(await self.create(begun.path, begun.body, operation=begun.name, timeout=timeout,
                                                 retry_for=retry_for))
            except ProblemError as refused:
                results.append(refused)
        return results

    async def update(
        self, path: str, fields: Mapping[str, Any], *, timeout: float | None = None, retry_for: float | None = None,
        wait: int | None = None,
    ) -> Object:
        """:meth:`~idempotent_pair_client.platform.PlatformClient.update`, awaited."""
        prefer, timeout = waiting(wait, timeout, self.policy)
        reply = await self._call("PATCH", path, body_of(fields, "fields"), timeout=timeout, retry_for=retry_for,
                                 headers=prefer)
        return as_object(reply, "PATCH", path)

    async def delete(
        self, path: str, *, timeout: float | None = None, retry_for: float | None = None, wait: int | None = None,
    ) -> Deletion:
        """:meth:`~idempotent_pair_client.platform.PlatformClient.delete`, awaited."""
        prefer, timeout = waiting(wait, timeout, self.policy)
        reply = await self._call("DELETE", path, ok=(202, 204, 410), timeout=timeout, retry_for=retry_for,
                                 headers=prefer)
        return Deletion.of(reply)

    async def find_by_idempotency_key(
        self, path: str, key: str, *, timeout: float | None = None, retry_for: float | None = None,
    ) -> Object | None:
        """:meth:`~idempotent_pair_client.platform.PlatformClient.find_by_idempotency_key`, awaited."""
        found = await self.list(path, idempotency_key=key, timeout=timeout, retry_for=retry_for)
        return Object(found.data[0], found.meta) if found.data else None


class AsyncClusterClient(AsyncServiceClient, AsyncClusterResources):
    """:class:`~idempotent_pair_client.cluster.ClusterClient`, awaited."""

    def __init__(
        self, base_url: str | None = None, *, token: str | None = None, timeout: float = 10.0,
        retry_for: float = 60.0, pool_size: int = 10, on_attempt: Callable[[Attempt], None] | None = None,
    ) -> None:
        super().__init__(*cluster.endpoint(base_url, token), timeout=timeout, retry_for=retry_for,
                         pool_size=pool_size, on_attempt=on_attempt)

    async def create(
        self, path: str, body: Mapping[str, Any], *, timeout: float | None = None, retry_for: float | None = None
    ) -> Object:
        """:meth:`~idempotent_pair_client.cluster.ClusterClient.create`, awaited."""
        reply = await self._call("POST", path, body_of(body, "body"), ok=(200, 201), timeout=timeout,
                                 retry_for=retry_for)
        return as_object(reply, "POST", path)

    async def create_batch(
        self, path: str, items: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any] | ProblemError]:
        """As the sync client's: one entry per item, cut to cluster_svc's limits (a 413 split in two)."""
        route = path if path.endswith("/batch") else f"{path.rstrip('/')}/batch"
        results: list[dict[str, Any] | ProblemError] = []
        bodies = [body_of(item, f"items[{index}]") for index, item in enumerate(items)]
        pending = list(batches(bodies, max_items=MAX_BATCH_ITEMS, max_bytes=MAX_BODY_BYTES))
        while pending:
            chunk = pending.pop(0)
            reply = await self.transport.send("POST", route, {"items": chunk}, on_attempt=self.on_attempt)
            if reply.status == 413 and len(chunk) > 1:
                half = len(chunk) // 2
                pending[:0] = [chunk[:half], chunk[half:]]
                continue
            results += item_results(route, len(results), chunk, reply)
        return results

    async def update(
        self, path: str, fields: Mapping[str, Any], *, generation: int, timeout: float | None = None,
        retry_for: float | None = None,
    ) -> Object:
        """:meth:`~idempotent_pair_client.cluster.ClusterClient.update`, awaited."""
        reply = await self._call("PUT", path, {**body_of(fields, "fields"), "generation": generation},
                                 timeout=timeout, retry_for=retry_for)
        return as_object(reply, "PUT", path)

    async def delete(
        self, path: str, *, unknown: Literal["tombstone", "refuse"] = "tombstone", timeout: float | None = None,
        retry_for: float | None = None,
    ) -> Deletion:
        """:meth:`~idempotent_pair_client.cluster.ClusterClient.delete`, awaited."""
        if unknown == "refuse":  # NotFound, raised by the read, before any delete is sent
            await self._call("GET", path, ok=(200, 410), timeout=timeout, retry_for=retry_for)
        reply = await self._call("DELETE", path, ok=(204, 404, 410), timeout=timeout, retry_for=retry_for)
        return Deletion.of(reply)
