"""``Prefer: wait=N`` (RFC 7240) on public writes: the answer waits until the object is completed
or failed (``Idempotency-Status``), or N seconds have passed, then answers as usual with
``Preference-Applied: wait=N``.

A caller that needs the object in cluster_svc before it goes on (a cluster provisioned before its
firewall rules are opened, say) then needs no loop of its own. Waiting holds no database
connection: the row's state is read again first after :data:`FIRST_LOOK` seconds, the pause
doubling up to :data:`LONGEST_PAUSE`, and the requests of one worker waiting at that moment share
one short statement (:class:`Rereads`, :mod:`shared.coalesce`): between reads a request holds a
greenlet and nothing else, and however many wait, a worker holds one session for their reads at
most, so callers waiting through an outage slow no one else's requests. The wait is capped at
:data:`MAX_WAIT` seconds (a larger N waits that long, and ``Preference-Applied`` says so).
Someone else does the work meanwhile: the reconciler pushes what the inline push could not.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.engine import RowMapping

from platform_svc.api import services
from platform_svc.states import IDEMPOTENCY_STATUS, SyncState
from shared.coalesce import Coalescer
from shared.db import Database
from shared.registry import Resource

MAX_WAIT = 30  # seconds: longer than any sensible client timeout would let a caller wait
FIRST_LOOK = 0.05
LONGEST_PAUSE = 0.5
_WAIT = re.compile(r"^\s*wait\s*=\s*(\d{1,6})\s*$", re.IGNORECASE)


def preferred_wait(values: list[str]) -> int | None:
    """The seconds a request's ``Prefer`` header fields ask to wait (capped at :data:`MAX_WAIT`), or
    None when they do not ask (or ask in a form RFC 7240 does not define: ignored, as it says)."""
    for value in values:
        for preference in value.split(","):
            matched = _WAIT.match(preference.split(";")[0])
            if matched:
                return min(int(matched.group(1)), MAX_WAIT)
    return None


def settled(row: RowMapping) -> bool:
    """Whether the object got as far as it will by itself: completed or failed."""
    return IDEMPOTENCY_STATUS[row["sync_state"]] != IDEMPOTENCY_STATUS[SyncState.PENDING]


READS_PER_STATEMENT = 500


class Rereads:
    """The rows one worker's waiting requests read again: those reading at one moment share one
    statement (``id IN (...)``) and one short transaction, per resource."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self._coalescers: dict[str, Coalescer[Any, Any]] = {}

    def row(self, resource: Resource, object_id: Any) -> RowMapping:
        """The row of ``object_id`` as it is now, whatever its state."""
        if resource.key not in self._coalescers:
            self._coalescers[resource.key] = Coalescer(
                lambda ids: self._read(resource, ids), max_items=READS_PER_STATEMENT,
            )
        return self._coalescers[resource.key].submit(object_id)

    def queued(self, resource: Resource) -> int:
        """The reads of ``resource`` waiting for the next statement (one is running meanwhile)."""
        coalescer = self._coalescers.get(resource.key)
        return 0 if coalescer is None else coalescer.queued

    def _read(self, resource: Resource, ids: Sequence[Any]) -> list[RowMapping | LookupError]:
        """Each row of ``ids``; one that is gone (purged while its request waited) fails its own caller."""
        with self.database.begin() as db_session:
            rows = services.read_rows(db_session, resource, ids)
        return [rows[object_id] if object_id in rows else LookupError(f"{resource.describe(object_id)} has no row")
                for object_id in ids]


def wait_for_outcome(
    rereads: Rereads, resource: Resource, row: RowMapping, seconds: int, *,
    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
) -> RowMapping:
    """``row`` as it is once it has settled (:func:`settled`), or after ``seconds``: read again
    through ``rereads``, no session held in between."""
    deadline, pause = clock() + seconds, FIRST_LOOK
    while not settled(row) and clock() < deadline:
        sleep(min(pause, max(0.0, deadline - clock())))
        pause = min(pause * 2, LONGEST_PAUSE)
        row = rereads.row(resource, row["id"])
    return row


def applied(seconds: int) -> dict[str, Any]:
    return {"Preference-Applied": f"wait={seconds}"}
