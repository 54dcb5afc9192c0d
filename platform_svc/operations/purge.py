"""What the platform may purge: deleted rows whose delete cluster_svc confirmed, once their ID is past the horizon.

A deleted row is the platform's record that the object is gone and that
cluster_svc was told; it also holds the object's Idempotency-Key. Once its
ID is past the horizon (:mod:`shared.horizon`) no create of that ID is
accepted anywhere, so the row holds nothing back: :mod:`shared.purge` removes
it (children first), and with it the key, which is free again. A row whose
delete is still pending or failed is never purged: it is work not done, or
waiting for a person.

``platform-svc purge`` runs one pass; the reconciler that leads the periodic
passes runs one every ``--purge-interval`` seconds.
"""
from __future__ import annotations

from sqlalchemy.sql import ColumnElement

from platform_svc.models import RESOURCES
from platform_svc.states import SyncState
from shared.db import Database
from shared.horizon import Horizon
from shared.purge import BATCH, Purger
from shared.registry import Resource


def purgeable(resource: Resource) -> list[ColumnElement]:
    """Deleted, and the delete confirmed by cluster_svc (synced: neither pending nor failed)."""
    table = resource.table
    return [table.c.delete_synced_at.is_not(None), table.c.sync_state == SyncState.SYNCED]


def purger(database: Database, horizon: Horizon, *, batch: int = BATCH) -> Purger:
    return Purger(database, RESOURCES, horizon, purgeable, batch=batch)
