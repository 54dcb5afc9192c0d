"""``cluster-svc``: serve, migrate and purge."""
from __future__ import annotations

from pathlib import Path

from cluster_svc import Settings, create_app
from shared.cli import add_purge_command, service_group
from shared.db import Database
from shared.horizon import Horizon
from shared.purge import BATCH, Purger

MIGRATIONS = Path(__file__).with_name("migrations")

main = service_group(
    "cluster_svc: the internal service that creates-or-returns by the caller's ID.",
    name="cluster-svc", default_port=8001, database_setting="CLUSTER_DATABASE_URL", migrations=MIGRATIONS,
    load_settings=Settings.from_env, create_app=create_app,
)


def _purger(database: Database, horizon: Horizon, *, batch: int = BATCH) -> Purger:
    # Imported only when purge runs: tombstones.py imports prometheus-client,
    # which serve must be the first to import (see shared.metrics).
    from cluster_svc.models import RESOURCES
    from cluster_svc.tombstones import purgeable

    return Purger(database, RESOURCES, horizon, purgeable, batch=batch)


add_purge_command(
    main,
    help="Remove tombstones whose ID is past the horizon (ID_HORIZON_SECONDS), in short batches.",
    database_setting="CLUSTER_DATABASE_URL",
    rows="Tombstones",
    purger=_purger,
    repeat=True,
)
