"""``cluster-svc``: serve and migrate."""
from __future__ import annotations

from pathlib import Path

import click

from shared.cli import fail_fast, migrate as run_migrations, run_gunicorn, serve_options

MIGRATIONS = Path(__file__).with_name("migrations")


@click.group(help="cluster_svc: the internal service that creates-or-returns by the caller's ID.")
def main() -> None:
    pass


@main.command(help="Serve the API with gunicorn.")
@serve_options(default_port=8001)
@fail_fast
def serve(host: str, port: int, workers: int, threads: int) -> None:
    from cluster_svc import Settings, create_app

    settings = Settings.from_env()  # fail here, once, before forking workers
    run_gunicorn(
        lambda: create_app(Settings(**{**settings.__dict__, "pool_size": threads})),
        name="cluster-svc",
        host=host,
        port=port,
        workers=workers,
        threads=threads,
    )


@main.command(help="Apply the database migrations (CLUSTER_DATABASE_URL).")
@fail_fast
def migrate() -> None:
    from shared import config

    run_migrations(MIGRATIONS, config.database_url("CLUSTER_DATABASE_URL"))
    click.echo("cluster_svc database is up to date.")
