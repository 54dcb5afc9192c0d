"""A listing's pages, as a caller reads them: one :class:`Page` at a time (``.data``, ``.has_more``,
``.next_after``), or every object by iterating it (each next page fetched as the iteration
reaches it, as openai-python's pages do). :class:`AsyncPage` is the same, awaited; an async
``list()`` answers an :class:`AsyncPager`: awaited, its first page; iterated with ``async for``,
every object.

The pages are keyset pages: a page's ``next_after`` is the next one's ``after``, so a listing
walked while objects are created never repeats or skips one that was there before it began.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from idempotent_pair_client.meta import Meta

T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing: its objects (``data``), the ``next_after`` to ask for the next one
    (None on the last page), and how the call that fetched it was answered (``meta``).
    Iterating it walks every object from here to the end of the listing, page after page."""

    data: list[T]
    next_after: str | None
    meta: Meta
    _fetch: Callable[[str], Page[T]] = field(repr=False, compare=False)

    @property
    def has_more(self) -> bool:
        """Whether a page follows this one."""
        return self.next_after is not None

    def next_page(self) -> Page[T] | None:
        """The page after this one (one call), or None on the last page.

        :raise ProblemError: :raise NoAnswer:"""
        return self._fetch(self.next_after) if self.next_after is not None else None

    def iter_pages(self) -> Iterator[Page[T]]:
        """This page, then every later one, each fetched as the iteration reaches it."""
        page: Page[T] | None = self
        while page is not None:
            yield page
            page = page.next_page()

    def __iter__(self) -> Iterator[T]:
        for page in self.iter_pages():
            yield from page.data

    def map(self, convert: Callable[[T, Meta], U]) -> Page[U]:
        """This page with each object converted (``convert(obj, meta)``), and every later page alike."""
        return Page([convert(item, self.meta) for item in self.data], self.next_after, self.meta,
                    lambda after: self._fetch(after).map(convert))


@dataclass(frozen=True)
class AsyncPage(Generic[T]):
    """:class:`Page`, awaited: ``await page.next_page()``, ``async for obj in page``."""

    data: list[T]
    next_after: str | None
    meta: Meta
    _fetch: Callable[[str], Awaitable[AsyncPage[T]]] = field(repr=False, compare=False)

    @property
    def has_more(self) -> bool:
        """Whether a page follows this one."""
        return self.next_after is not None

    async def next_page(self) -> AsyncPage[T] | None:
        """The page after this one (one call), or None on the last page.

        :raise ProblemError: :raise NoAnswer:"""
        return await self._fetch(self.next_after) if self.next_after is not None else None

    async def iter_pages(self) -> AsyncIterator[AsyncPage[T]]:
        """This page, then every later one, each fetched as the iteration reaches it."""
        page: AsyncPage[T] | None = self
        while page is not None:
            yield page
            page = await page.next_page()

    async def __aiter__(self) -> AsyncIterator[T]:
        async for page in self.iter_pages():
            for item in page.data:
                yield item

    def map(self, convert: Callable[[T, Meta], U]) -> AsyncPage[U]:
        """This page with each object converted (``convert(obj, meta)``), and every later page alike."""

        async def fetch(after: str) -> AsyncPage[U]:
            return (await self._fetch(after)).map(convert)

        return AsyncPage([convert(item, self.meta) for item in self.data], self.next_after, self.meta, fetch)


class AsyncPager(Generic[T]):
    """What an async ``list()`` answers: ``await`` it for the first :class:`AsyncPage`, or
    ``async for`` over it for every object of the listing (no call is made until either)."""

    def __init__(self, first: Callable[[], Awaitable[AsyncPage[T]]]) -> None:
        self._first = first

    def __await__(self) -> Generator[Any, None, AsyncPage[T]]:
        return self._first().__await__()

    async def __aiter__(self) -> AsyncIterator[T]:
        async for item in await self._first():
            yield item
