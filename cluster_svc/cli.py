"""``cluster-svc``: serve and migrate."""
from __future__ import annotations

from pathlib import Path

import click

from cluster_svc import Settings, create_app
from shared.cli import add_service_commands

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
