"""``cluster-svc``: serve, migrate and purge."""
from __future__ import annotations

import signal
import threading
from pathlib import Path

import click

from cluster_svc import Settings, create_app
from shared import config
from shared.cli import add_service_commands, fail_fast

MIGRATIONS = Path(__file__).with_name("migrations")


@click.group(help="cluster_svc: the internal service that creates-or-returns by the caller's ID.")
def main() -> None:
    pass


add_service_commands(
    main,
    name="cluster-svc",
    default_port=8001,
    database_setting="CLUSTER_DATABASE_URL",
    migrations=MIGRATIONS,
    load_settings=Settings.from_env,
    create_app=create_app,
)


@main.command(help="Remove tombstones whose ID is past the horizon (ID_HORIZON_SECONDS), in short batches.")
@click.option("--dry-run", is_flag=True, help="Count what would be removed; remove nothing.")
@click.option(
    "--every", type=click.FloatRange(min=0.01), default=None,
    help="Purge again every SECONDS, until stopped (SIGTERM or Ctrl-C); one summary line per pass.",
)
@click.option(
    "--batch", default=1000, show_default=True, type=click.IntRange(1, 100_000),
    help="Tombstones read, and at most removed, per short transaction.",
)
@fail_fast
def purge(dry_run: bool, every: float | None, batch: int) -> None:
    from shared.db import Database
    from shared.horizon import Horizon
    from shared.logs import configure_logging
    from shared.purge import Purger, run_every
    from cluster_svc.models import RESOURCES
    from cluster_svc.tombstones import purgeable

    database = Database(config.database_url("CLUSTER_DATABASE_URL"), pool_size=1)
    purger = Purger(database, RESOURCES, Horizon.from_env(), purgeable, batch=batch)
    if every is None:
        click.echo(purger.run(dry_run=dry_run).summary())
        return
    configure_logging("purge")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    run_every(purger, every, stop, lambda report: click.echo(report.summary()), dry_run=dry_run)
