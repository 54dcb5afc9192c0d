"""Pieces of the services' command lines: serving with gunicorn, migrating,
and turning a configuration error into one line on stderr."""
from __future__ import annotations

import dataclasses
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from alembic import command
from alembic.config import Config
from gunicorn.app.base import BaseApplication

from shared.config import ConfigError, database_url


def fail_fast(func: Callable[..., Any]) -> Callable[..., Any]:
    """Report a ConfigError as ``<prog>: <message>`` and exit 2, no traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ConfigError as exc:
            click.echo(f"{click.get_current_context().find_root().info_name}: {exc}", err=True)
            sys.exit(2)

    return wrapper


def quiet_on_closed_pipe(func: Callable[..., Any]) -> Callable[..., Any]:
    """Exit 0 when the reader of our output went away (``| head -1``).

    Whatever the command did before printing is already committed; a closed
    pipe only means nobody reads the rest. Output is flushed inside the guard,
    so a pipe found closed at exit is caught too, and stdout is pointed at
    /dev/null so the interpreter's own last flush cannot fail again.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            result = func(*args, **kwargs)
            sys.stdout.flush()
            return result
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)

    return wrapper


def add_service_commands(
    group: click.Group,
    *,
    name: str,
    default_port: int,
    database_setting: str,
    migrations: Path,
    load_settings: Callable[[], Any],
    create_app: Callable[[Any], Any],
) -> None:
    """Give a service's command group its ``serve`` and ``migrate`` commands.

    ``load_settings`` reads the environment (raising ConfigError); the settings
    must be a dataclass with a ``pool_size`` field, set to the thread count so
    every gunicorn thread can hold a database connection.
    """

    @group.command("serve", help="Serve the API with gunicorn (threaded workers, keep-alive).")
    @click.option("--host", default="127.0.0.1", show_default=True, envvar="HOST", help="Address to bind.")
    @click.option("--port", default=default_port, show_default=True, type=click.IntRange(1, 65535))
    @click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 64), envvar="WORKERS")
    @click.option("--threads", default=4, show_default=True, type=click.IntRange(1, 256), envvar="THREADS")
    @fail_fast
    def serve_command(host: str, port: int, workers: int, threads: int) -> None:
        settings = dataclasses.replace(load_settings(), pool_size=threads)  # fails here, before forking
        run_gunicorn(
            lambda: create_app(settings), name=name, host=host, port=port, workers=workers, threads=threads
        )

    @group.command("migrate", help=f"Apply the database migrations ({database_setting}).")
    @fail_fast
    def migrate_command() -> None:
        migrate(migrations, database_url(database_setting))
        click.echo(f"{name.replace('-', '_')} database is up to date.")


class _Gunicorn(BaseApplication):
    def __init__(self, load_app: Callable[[], Any], options: dict[str, Any]) -> None:
        self._load_app = load_app
        self._options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        # Built in each worker after the fork, so no database connection is
        # ever shared between processes.
        return self._load_app()


def run_gunicorn(load_app: Callable[[], Any], *, name: str, host: str, port: int, workers: int, threads: int) -> None:
    """Serve the app with gunicorn's threaded workers (keep-alive capable)."""
    _Gunicorn(
        load_app,
        {
            "bind": f"{host}:{port}",
            "workers": workers,
            "threads": threads,
            "worker_class": "shared.gunicorn_worker.ProblemThreadWorker",
            "keepalive": 30,
            "proc_name": name,
            "graceful_timeout": 10,
            "errorlog": "-",
            # Several services (and test servers) run side by side; gunicorn's
            # control socket would make them fight over one path.
            "control_socket_disable": True,
            "loglevel": "info",
        },
    ).run()


def migrate(migrations: Path, url: str) -> None:
    """Bring a service's database to its newest Alembic revision."""
    command.upgrade(alembic_config(migrations, url), "head")


def run_migrations_online(metadata: Any) -> None:
    """The body of each service's Alembic ``env.py``."""
    from alembic import context
    from sqlalchemy import create_engine

    engine = create_engine(context.config.get_main_option("sqlalchemy.url"), hide_parameters=True)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=metadata, compare_type=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


def alembic_config(migrations: Path, url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations))
    # ConfigParser interpolation would read a '%' in a password as syntax.
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg
