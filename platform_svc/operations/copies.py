"""cluster_svc's copies as repair reads them: its bulk listing of a resource, walked page by page in
ID order (tombstones included), and one object's copy wherever it lies.

Reads only; no transaction is open while a page is fetched.
"""
from __future__ import annotations

import uuid
from typing import Any

from platform_svc.push import content
from shared.client import InternalClient
from shared.registry import Resource

PAGE_SIZE = 500  # the most cluster_svc's listing answers at once


def listing(resource: Resource) -> str:
    """cluster_svc's bulk read of a resource: every object in id order, across parents."""
    return f"/v1/{resource.segment}"


class RepairError(Exception):
    """cluster_svc's listing could not be read; the pass stopped where it was."""


class Downstream:
    """cluster_svc's bulk read of one resource, consumed in id order.

    Every row handed out was fetched after the platform page it is compared
    with was read: rows fetched beyond that page are dropped and asked for
    again with the next page, so a push that lands between the two reads
    cannot look like drift.
    """

    def __init__(self, client: InternalClient, resource: Resource, page_size: int) -> None:
        self.client = client
        self.listing = listing(resource)
        self.compared = content.compared(resource)
        self.owner = resource.root.declaration.owner  # the bulk listing gives every object its tree's owner
        self.page_size = page_size
        self.position: uuid.UUID | None = None

    def through(self, last: uuid.UUID | None) -> list[dict[str, Any]]:
        """Every object after the current position up to ``last`` (None: to the end)."""
        items: list[dict[str, Any]] = []
        while True:
            page, next_after = self._fetch(self.position)
            within = [item for item in page if last is None or item["id"] <= last]
            items += within
            if next_after is None or len(within) < len(page):
                break
            self.position = next_after
            if last is not None and self.position >= last:
                break
        if last is not None:
            self.position = last
        return items

    def _fetch(self, after: uuid.UUID | None) -> tuple[list[dict[str, Any]], uuid.UUID | None]:
        return read_listing(self.client, self.listing, self.compared, self.owner, after, self.page_size)


def read_listing(
    client: InternalClient, path: str, compared: frozenset[str], owner: str, after: uuid.UUID | None, limit: int
) -> tuple[list[dict[str, Any]], uuid.UUID | None]:
    """One page of cluster_svc's bulk read after ``after``, tombstones included: each object's
    generation, whether it is alive, its tree's owner and the ``compared`` fields; and the next cursor.

    :raise RepairError: cluster_svc did not answer the page.
    """
    path = f"{path}?include_deleted=true&limit={limit}"
    if after is not None:
        path += f"&after={after}"
    answer = client.read(path)
    if answer.status != 200 or not isinstance(answer.body, dict):
        raise RepairError(f"could not read cluster_svc's listing: {answer.reason}")
    items = []
    for item in answer.body["items"]:
        owned_by = item.get(owner)
        items.append(
            {
                "id": uuid.UUID(item["id"]),
                "generation": item["generation"],
                "alive": item["deleted_at"] is None,
                "owner": uuid.UUID(owned_by) if owned_by else None,
                "fields": {name: value for name, value in item.items() if name in compared},
            }
        )
    next_after = answer.body.get("next_after")
    return items, uuid.UUID(next_after) if next_after else None


def copy_of(client: InternalClient, resource: Resource, object_id: uuid.UUID) -> dict[str, Any] | None:
    """cluster_svc's copy of one object wherever it lies (under any parent, of any team, tombstone
    or not), as :class:`Downstream` hands it out; None when cluster_svc has no row for it.

    Read from the bulk listing, whose keyset cursor is exclusive: the page of one
    that starts right after the ID before this one.

    :raise RepairError: cluster_svc did not answer.
    """
    before = uuid.UUID(int=object_id.int - 1) if object_id.int > 1 else None  # (the nil UUID is no cursor)
    items, _ = read_listing(
        client, listing(resource), content.compared(resource), resource.root.declaration.owner, before, 1
    )
    return next((item for item in items if item["id"] == object_id), None)
