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
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Generic, Literal, Protocol, Self, TypeVar

from idempotent_pair_client.core import Deletion, Meta, Object
from idempotent_pair_client.pages import AsyncPage, AsyncPager, Page

Unknown = Literal["tombstone", "refuse"]


# What a collection calls on its client, by path: the clients above this module
# (PlatformClient, ClusterClient and their async twins) have these calls, and
# this module needs nothing else of them.


class ReadCalls(Protocol):
    def get(self, path: str, *, timeout: float | None = ..., retry_for: float | None = ...) -> Object: ...

    def list(self, path: str, *, timeout: float | None = ..., retry_for: float | None = ...,
             **filters: str | int | bool | None) -> Page[dict[str, Any]]: ...


class PublicCalls(ReadCalls, Protocol):
    """platform_svc's calls (:class:`~idempotent_pair_client.platform.PlatformClient`'s)."""

    def create(self, path: str, body: Mapping[str, Any], idempotency_key: str | None = ..., *,
               timeout: float | None = ..., retry_for: float | None = ..., wait: int | None = ...,
               operation: str | None = ...) -> Object: ...

    def update(self, path: str, fields: Mapping[str, Any], *, timeout: float | None = ...,
               retry_for: float | None = ..., wait: int | None = ...) -> Object: ...

    def delete(self, path: str, *, timeout: float | None = ..., retry_for: float | None = ...,
               wait: int | None = ...) -> Deletion: ...

    def find_by_idempotency_key(self, path: str, key: str, *, timeout: float | None = ...,
                                retry_for: float | None = ...) -> Object | None: ...


class InternalCalls(ReadCalls, Protocol):
    """cluster_svc's calls (:class:`~idempotent_pair_client.cluster.ClusterClient`'s)."""

    def create(self, path: str, body: Mapping[str, Any], *, timeout: float | None = ...,
               retry_for: float | None = ...) -> Object: ...

    def update(self, path: str, fields: Mapping[str, Any], *, generation: int, timeout: float | None = ...,
               retry_for: float | None = ...) -> Object: ...

    def delete(self, path: str, *, unknown: Unknown = ..., timeout: float | None = ...,
               retry_for: float | None = ...) -> Deletion: ...


class AsyncReadCalls(Protocol):
    async def get(self, path: str, *, timeout: float | None = ..., retry_for: float | None = ...) -> Object: ...

    def list(self, path: str, *, timeout: float | None = ..., retry_for: float | None = ...,
             **filters: str | int | bool | None) -> AsyncPager[dict[str, Any]]: ...


class AsyncPublicCalls(AsyncReadCalls, Protocol):
    """:class:`PublicCalls`, awaited (:class:`~idempotent_pair_client.aio.AsyncPlatformClient`'s)."""

    async def create(self, path: str, body: Mapping[str, Any], idempotency_key: str | None = ..., *,
                     timeout: float | None = ..., retry_for: float | None = ..., wait: int | None = ...,
                     operation: str | None = ...) -> Object: ...

    async def update(self, path: str, fields: Mapping[str, Any], *, timeout: float | None = ...,
                     retry_for: float | None = ..., wait: int | None = ...) -> Object: ...

    async def delete(self, path: str, *, timeout: float | None = ..., retry_for: float | None = ...,
                     wait: int | None = ...) -> Deletion: ...

    async def find_by_idempotency_key(self, path: str, key: str, *, timeout: float | None = ...,
                                      retry_for: float | None = ...) -> Object | None: ...


class AsyncInternalCalls(AsyncReadCalls, Protocol):
    """:class:`InternalCalls`, awaited (:class:`~idempotent_pair_client.aio.AsyncClusterClient`'s)."""

    async def create(self, path: str, body: Mapping[str, Any], *, timeout: float | None = ...,
                     retry_for: float | None = ...) -> Object: ...

    async def update(self, path: str, fields: Mapping[str, Any], *, generation: int,
                     timeout: float | None = ..., retry_for: float | None = ...) -> Object: ...

    async def delete(self, path: str, *, unknown: Unknown = ..., timeout: float | None = ...,
                     retry_for: float | None = ...) -> Deletion: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class Record:
    """An object as the service answered it, as a typed record (times as aware ``datetime`` s);
    ``meta``: how the call that answered it was answered (a listing's: its page's). Fields a newer
    service adds are kept in ``extra``, never refused."""

    meta: Meta = dataclasses.field(compare=False, repr=False)
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, found: Mapping[str, Any], meta: Meta) -> Self:
        """The record of an answered object: its fields (None for one the answer lacks), ``meta``, and the rest."""
        names, times = _fields(cls)
        known = {name: _time(found.get(name)) if name in times else found.get(name) for name in names}
        return cls(**known, meta=meta, extra={k: v for k, v in found.items() if k not in known})

    def to_dict(self) -> dict[str, Any]:
        """The record's fields and ``extra``, as Python values (less ``meta``)."""
        return {name: getattr(self, name) for name in _fields(type(self))[0]} | dict(self.extra)


_FIELDS: dict[type, tuple[tuple[str, ...], frozenset[str]]] = {}


def _fields(record: type) -> tuple[tuple[str, ...], frozenset[str]]:
    """A record's fields (less ``meta`` and ``extra``), and those that hold a time (read once a class)."""
    if record not in _FIELDS:
        found = [f for f in dataclasses.fields(record) if f.name not in ("meta", "extra")]
        _FIELDS[record] = tuple(f.name for f in found), frozenset(f.name for f in found if _is_time(f.type))
    return _FIELDS[record]


def _is_time(annotation: object) -> bool:
    return annotation is datetime or datetime in getattr(annotation, "__args__", ())


def _time(value: Any) -> Any:
    """An answered time (ISO 8601 text) as a ``datetime``; None stays None."""
    return datetime.fromisoformat(value) if isinstance(value, str) else value


R = TypeVar("R", bound=Record)
C = TypeVar("C", bound=Mapping[str, Any])
U = TypeVar("U", bound=Mapping[str, Any])


class _Reads(Generic[R]):
    """What every collection reads the same way, whichever service: one object, and the listing
    (each generated collection's ``list`` names its own filters)."""

    def __init__(self, client: ReadCalls, path: str, record: type[R]) -> None:
        self.client = client
        self.path = path
        self.record = record

    def get(self, object_id: str, *, timeout: float | None = None, retry_for: float | None = None) -> R:
        """The object with this ID. :raise NotFound: :raise Gone: (deleted) :raise NoAnswer:"""
        answered = self.client.get(f"{self.path}/{object_id}", timeout=timeout, retry_for=retry_for)
        return self.record.of(answered, answered.meta)

    def _list(self, filters: Mapping[str, str | int | bool | None], timeout: float | None,
              retry_for: float | None) -> Page[R]:
        return self.client.list(self.path, timeout=timeout, retry_for=retry_for, **filters).map(self.record.of)


class _AsyncReads(Generic[R]):
    """:class:`_Reads`, awaited."""

    def __init__(self, client: AsyncReadCalls, path: str, record: type[R]) -> None:
        self.client = client
        self.path = path
        self.record = record

    async def get(self, object_id: str, *, timeout: float | None = None, retry_for: float | None = None) -> R:
        """The object with this ID. :raise NotFound: :raise Gone: (deleted) :raise NoAnswer:"""
        answered = await self.client.get(f"{self.path}/{object_id}", timeout=timeout, retry_for=retry_for)
        return self.record.of(answered, answered.meta)

    def _list(self, filters: Mapping[str, str | int | bool | None], timeout: float | None,
              retry_for: float | None) -> AsyncPager[R]:
        listed = self.client.list(self.path, timeout=timeout, retry_for=retry_for, **filters)

        async def first() -> AsyncPage[R]:
            return (await listed).map(self.record.of)

        return AsyncPager(first)


class Collection(_Reads[R], Generic[R, C, U]):
    """One collection of platform_svc's public API (``path``), its objects as ``record`` s: each call
    is :class:`~idempotent_pair_client.platform.PlatformClient`'s of the same name, typed."""

    client: PublicCalls

    def create(
        self, body: C, *, idempotency_key: str | None = None, timeout: float | None = None,
        retry_for: float | None = None, wait: int | None = None, operation: str | None = None,
    ) -> R:
        """The object created (``meta.status`` 201), or the one this key (or ``operation``) made (200,
        ``meta.replayed``); ``wait``: answered once cluster_svc has it, or after that many seconds.

        :raise ValidationFailed: :raise IdempotencyKeyReused: :raise NotFound: (no such parent) :raise NoAnswer:"""
        answered = self.client.create(self.path, body, idempotency_key, timeout=timeout, retry_for=retry_for,
                                      wait=wait, operation=operation)
        return self.record.of(answered, answered.meta)

    def update(
        self, object_id: str, fields: U, *, timeout: float | None = None, retry_for: float | None = None,
        wait: int | None = None,
    ) -> R:
        """Change the object (PATCH ``fields``): the object as it is now, one generation on.

        :raise NotFound: :raise Gone: (deleted) :raise ValidationFailed: :raise NoAnswer:"""
        answered = self.client.update(f"{self.path}/{object_id}", fields, timeout=timeout, retry_for=retry_for,
                                      wait=wait)
        return self.record.of(answered, answered.meta)

    def delete(
        self, object_id: str, *, timeout: float | None = None, retry_for: float | None = None,
        wait: int | None = None,
    ) -> Deletion:
        """Delete the object: ``DELETED``, or ``ALREADY_GONE`` (deleted before); either way it is deleted.

        :raise NotFound: :raise NoAnswer:"""
        return self.client.delete(f"{self.path}/{object_id}", timeout=timeout, retry_for=retry_for, wait=wait)

    def find_by_idempotency_key(
        self, key: str, *, timeout: float | None = None, retry_for: float | None = None,
    ) -> R | None:
        """The live object a create with ``key`` made, or None: a lost answer's outcome, no body resent."""
        found = self.client.find_by_idempotency_key(self.path, key, timeout=timeout, retry_for=retry_for)
        return None if found is None else self.record.of(found, found.meta)


class AsyncCollection(_AsyncReads[R], Generic[R, C, U]):
    """:class:`Collection`, awaited: one collection of an :class:`~idempotent_pair_client.aio.AsyncPlatformClient`."""

    client: AsyncPublicCalls

    async def create(
        self, body: C, *, idempotency_key: str | None = None, timeout: float | None = None,
        retry_for: float | None = None, wait: int | None = None, operation: str | None = None,
    ) -> R:
        """:meth:`Collection.create`, awaited."""
        answered = await self.client.create(self.path, body, idempotency_key, timeout=timeout, retry_for=retry_for,
                                            wait=wait, operation=operation)
        return self.record.of(answered, answered.meta)

    async def update(
        self, object_id: str, fields: U, *, timeout: float | None = None, retry_for: float | None = None,
        wait: int | None = None,
    ) -> R:
        """:meth:`Collection.update`, awaited."""
        answered = await self.client.update(f"{self.path}/{object_id}", fields, timeout=timeout, retry_for=retry_for,
                                            wait=wait)
        return self.record.of(answered, answered.meta)

    async def delete(
        self, object_id: str, *, timeout: float | None = None, retry_for: float | None = None,
        wait: int | None = None,
    ) -> Deletion:
        """:meth:`Collection.delete`, awaited."""
        return await self.client.delete(f"{self.path}/{object_id}", timeout=timeout, retry_for=retry_for, wait=wait)

    async def find_by_idempotency_key(
        self, key: str, *, timeout: float | None = None, retry_for: float | None = None,
    ) -> R | None:
        """:meth:`Collection.find_by_idempotency_key`, awaited."""
        found = await self.client.find_by_idempotency_key(self.path, key, timeout=timeout, retry_for=retry_for)
        return None if found is None else self.record.of(found, found.meta)


class InternalCollection(_Reads[R], Generic[R, C, U]):
    """One collection of cluster_svc's internal API: creates carry the caller's ``id``, updates a ``generation``."""

    client: InternalCalls

    def create(self, body: C, *, timeout: float | None = None, retry_for: float | None = None) -> R:
        """The object created (``meta.status`` 201) or already there (200).

        :raise Conflict: (``id_conflict``: the ID is another object's) :raise Gone: (deleted) :raise NoAnswer:"""
        answered = self.client.create(self.path, body, timeout=timeout, retry_for=retry_for)
        return self.record.of(answered, answered.meta)

    def update(
        self, object_id: str, fields: U, *, generation: int, timeout: float | None = None,
        retry_for: float | None = None,
    ) -> R:
        """Bring the object to ``generation`` (PUT every mutable field): the object as it is now.

        :raise Conflict: (a newer generation is there) :raise NotFound: :raise Gone: :raise NoAnswer:"""
        answered = self.client.update(f"{self.path}/{object_id}", fields, generation=generation, timeout=timeout,
                                      retry_for=retry_for)
        return self.record.of(answered, answered.meta)

    def delete(
        self, object_id: str, *, unknown: Unknown = "tombstone", timeout: float | None = None,
        retry_for: float | None = None,
    ) -> Deletion:
        """Delete the object: ``DELETED``, ``ALREADY_GONE``, or ``NEVER_SEEN`` (a tombstone keeps the ID);
        ``unknown="refuse"``: an unknown ID raises NotFound and nothing is sent.

        :raise NotFound: :raise NoAnswer:"""
        return self.client.delete(f"{self.path}/{object_id}", unknown=unknown, timeout=timeout, retry_for=retry_for)


class AsyncInternalCollection(_AsyncReads[R], Generic[R, C, U]):
    """:class:`InternalCollection`, awaited."""

    client: AsyncInternalCalls

    async def create(self, body: C, *, timeout: float | None = None, retry_for: float | None = None) -> R:
        """:meth:`InternalCollection.create`, awaited."""
        answered = await self.client.create(self.path, body, timeout=timeout, retry_for=retry_for)
        return self.record.of(answered, answered.meta)

    async def update(
        self, object_id: str, fields: U, *, generation: int, timeout: float | None = None,
        retry_for: float | None = None,
    ) -> R:
        """:meth:`InternalCollection.update`, awaited."""
        answered = await self.client.update(f"{self.path}/{object_id}", fields, generation=generation,
                                            timeout=timeout, retry_for=retry_for)
        return self.record.of(answered, answered.meta)

    async def delete(
        self, object_id: str, *, unknown: Unknown = "tombstone", timeout: float | None = None,
        retry_for: float | None = None,
    ) -> Deletion:
        """:meth:`InternalCollection.delete`, awaited."""
        return await self.client.delete(f"{self.path}/{object_id}", unknown=unknown, timeout=timeout,
                                        retry_for=retry_for)
