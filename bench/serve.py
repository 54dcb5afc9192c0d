"""Serve a reference app with gunicorn, exactly as the services are served.

``python -m bench.serve limit|keytable [--port N] [--workers N] [--pool-size N]``
with ``BENCH_DATABASE_URL`` set (a SQLAlchemy URL, like the services take).
It reuses :func:`shared.cli.run_gunicorn`, so the worker class, keep-alive and
the meaning of ``--workers``/``--pool-size`` (alias ``--threads``) are the services' own.
"""
from __future__ import annotations

import importlib
from typing import Any

import click
from sqlalchemy.engine import make_url

from shared import config
from shared.cli import POOL_SIZE, fail_fast, run_gunicorn


def connect_kwargs(url: str) -> dict[str, Any]:
    """psycopg2.connect() arguments for a SQLAlchemy URL (Unix socket or TCP)."""
    parsed = make_url(url)
    kwargs = {
        "dbname": parsed.database,
        "user": parsed.username,
        "password": parsed.password,
        "host": parsed.query.get("host") or parsed.host,
        "port": parsed.port,
    }
    return {key: value for key, value in kwargs.items() if value}


@click.command(help="Serve a benchmark reference app (limit or keytable) with gunicorn.")
@click.argument("which", type=click.Choice(["limit", "keytable"]))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8010, show_default=True, type=click.IntRange(1, 65535))
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 64))
@click.option("--pool-size", "--threads", "pool_size", default=POOL_SIZE, show_default=True, type=click.IntRange(1, 256))
@fail_fast
def main(which: str, host: str, port: int, workers: int, pool_size: int) -> None:
    url = config.database_url("BENCH_DATABASE_URL")
    module = importlib.import_module(f"bench.{which}_app")
    run_gunicorn(
        # As many pooled connections per worker as cluster_svc keeps.
        lambda: module.create_app(connect_kwargs(url), pool_size=pool_size),
        name=f"bench-{which}",
        host=host,
        port=port,
        workers=workers,
    )


if __name__ == "__main__":
    main()
