"""Resources by name, over the path-based calls: what :mod:`idempotent_pair_client.resources`
(generated from the resource declarations) builds its accessors from.

``client.clusters.create({...})`` is ``client.create("/v1/clusters", {...})`` with types: the
body a :class:`~typing.TypedDict` of the resource's fields (mypy checks every key), the result a
:class:`Record` (a frozen dataclass: mypy checks every attribute) carrying the answer's ``meta``.
One collection class per client shape (public or internal) and per flavour (sync, awaited): the
internal one's creates carry the caller's ID, its updates a generation.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, Literal, Self, TypeVar

from idempotent_pair_client.core import Deletion, Meta, Object

if TYPE_CHECKING:
    from idempotent_pair_client.aio import AsyncClusterClient, AsyncPlatformClient
    from idempotent_pair_client.cluster import ClusterClient
    from idempotent_pair_client.platform import PlatformClient


@dataclasses.dataclass(frozen=True, kw_only=True)
class Record:
    """An object as the service answered it, as a typed record; ``meta``: how it was answered (None in a listing).
    Fields a newer service adds are kept in ``extra``, never refused."""

    meta: Meta | None = dataclasses.field(default=None, compare=False, repr=False)
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, found: Mapping[str, Any], meta: Meta | None = None) -> Self:
        """The record of an answered object: its fields (None for one the answer lacks), ``meta``, and the rest."""
        known = {name: found.get(name) for name in _names(cls)}
        return cls(**known, meta=meta, extra={k: v for k, v in found.items() if k not in known})

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _names(type(self))} | dict(self.extra)


@functools.cache
def _names(record: type[Record]) -> tuple[str, ...]:
    """A record's fields, less ``meta`` and ``extra``."""
    return tuple(f.name for f in dataclasses.fields(record) if f.name not in ("meta", "extra"))


R = TypeVar("R", bound=Record)
C = TypeVar("C", bound=Mapping[str, Any])
U = TypeVar("U", bound=Mapping[str, Any])


class _Reads(Generic[R]):
    """What every collection reads the same way, whichever service: one object, and the listing."""

    def __init__(self, client: PlatformClient | ClusterClient, path: str, record: type[R]) -> None:
        self.client = client
        self.path = path
        self.record = record

    def get(self, object_id: str, *, timeout: float | None = None, retry_for: float | None = None) -> R:
        answered = self.client.get(f"{self.path}/{object_id}", timeout=timeout, retry_for=retry_for)
        return self.record.of(answered, answered.meta)

    def list(self, **filters: str | int | bool | None) -> Iterator[R]:
        """Every object, page after page, as the iterator is consumed."""
        return (self.record.of(found) for found in self.client.list(self.path, **filters))


class _AsyncReads(Generic[R]):
    """:class:`_Reads`, awaited."""

    def __init__(self, client: AsyncPlatformClient | AsyncClusterClient, path: str, record: type[R]) -> None:
        self.client = client
        self.path = path
        self.record = record

    async def get(self, object_id: str, *, timeout: float | None = None, retry_for: float | None = None) -> R:
        answered = await self.client.get(f"{self.path}/{object_id}", timeout=timeout, retry_for=retry_for)
        return self.record.of(answered, answered.meta)

    async def list(self, **filters: str | int | bool | None) -> AsyncIterator[R]:
        async for found in self.client.list(self.path, **filters):
            yield self.record.of(found)


class Collection(_Reads[R], Generic[R, C, U]):
    """One collection of platform_svc's public API (``path``), its objects as ``record`` s."""

    client: PlatformClient

    def create(
        self, body: C, *, idempotency_key: str | None = None, timeout: float | None = None,
        retry_for: float | None = None,
    ) -> R:
        """The object created (``meta.status`` 201), or the one this key made (200, ``meta.replayed``)."""
        return self._record(self.client.create(self.path, body, idempotency_key, timeout=timeout, retry_for=retry_for))

    def update(self, object_id: str, fields: U, *, timeout: float | None = None, retry_for: float | None = None) -> R:
        return self._record(self.client.update(f"{self.path}/{object_id}", fields, timeout=timeout,
                                               retry_for=retry_for))

    def delete(self, object_id: str, *, timeout: float | None = None, retry_for: float | None = None) -> Deletion:
        return self.client.delete(f"{self.path}/{object_id}", timeout=timeout, retry_for=retry_for)

    def find_by_idempotency_key(self, key: str) -> R | None:
        found = self.client.find_by_idempotency_key(self.path, key)
        return None if found is None else self.record.of(found)

    def _record(self, answered: Object) -> R:
        return self.record.of(answered, answered.meta)


class AsyncCollection(_AsyncReads[R], Generic[R, C, U]):
    """:class:`Collection`, awaited: one collection of an :class:`~idempotent_pair_client.aio.AsyncPlatformClient`."""

    client: AsyncPlatformClient

    async def create(
        self, body: C, *, idempotency_key: str | None = None, timeout: float | None = None,
        retry_for: float | None = None,
    ) -> R:
        answered = await self.client.create(self.path, body, idempotency_key, timeout=timeout, retry_for=retry_for)
        return self.record.of(answered, answered.meta)

    async def update(
        self, object_id: str, fields: U, *, timeout: float | None = None, retry_for: float | None = None
    ) -> R:
        answered = await self.client.update(f"{self.path}/{object_id}", fields, timeout=timeout, retry_for=retry_for)
        return self.record.of(answered, answered.meta)

    async def delete(self, object_id: str, *, timeout: float | None = None, retry_for: float | None = None) -> Deletion:
        return await self.client.delete(f"{self.path}/{object_id}", timeout=timeout, retry_for=retry_for)

    async def find_by_idempotency_key(self, key: str) -> R | None:
        found = await self.client.find_by_idempotency_key(self.path, key)
        return None if found is None else self.record.of(found)


class InternalCollection(_Reads[R], Generic[R, C, U]):
    """One collection of cluster_svc's internal API: creates carry the caller's ``id``, updates a ``generation``."""

    client: ClusterClient

    def create(self, body: C, *, timeout: float | None = None, retry_for: float | None = None) -> R:
        """The object created (``meta.status`` 201) or already there (200)."""
        answered = self.client.create(self.path, body, timeout=timeout, retry_for=retry_for)
        return self.record.of(answered, answered.meta)

    def update(
        self, object_id: str, fields: U, *, generation: int, timeout: float | None = None,
        retry_for: float | None = None,
    ) -> R:
        answered = self.client.update(f"{self.path}/{object_id}", fields, generation=generation, timeout=timeout,
                                      retry_for=retry_for)
        return self.record.of(answered, answered.meta)

    def delete(
        self, object_id: str, *, unknown: Literal["tombstone", "refuse"] = "tombstone", timeout: float | None = None,
        retry_for: float | None = None,
    ) -> Deletion:
        return self.client.delete(f"{self.path}/{object_id}", unknown=unknown, timeout=timeout, retry_for=retry_for)


class AsyncInternalCollection(_AsyncReads[R], Generic[R, C, U]):
    """:class:`InternalCollection`, awaited."""

    client: AsyncClusterClient

    async def create(self, body: C, *, timeout: float | None = None, retry_for: float | None = None) -> R:
        answered = await self.client.create(self.path, body, timeout=timeout, retry_for=retry_for)
        return self.record.of(answered, answered.meta)

    async def update(
        self, object_id: str, fields: U, *, generation: int, timeout: float | None = None,
        retry_for: float | None = None,
    ) -> R:
        answered = await self.client.update(f"{self.path}/{object_id}", fields, generation=generation,
                                            timeout=timeout, retry_for=retry_for)
        return self.record.of(answered, answered.meta)

    async def delete(
        self, object_id: str, *, unknown: Literal["tombstone", "refuse"] = "tombstone", timeout: float | None = None,
        retry_for: float | None = None,
    ) -> Deletion:
        return await self.client.delete(f"{self.path}/{object_id}", unknown=unknown, timeout=timeout,
                                        retry_for=retry_for)
