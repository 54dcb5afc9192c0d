"""Pieces of the services' command lines: serving with gunicorn, migrating,
and turning a configuration error into one line on stderr."""
from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from alembic import command
from alembic.config import Config
from gunicorn.app.base import BaseApplication

from shared.config import ConfigError


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


def serve_options(default_port: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        options = [
            click.option("--host", default="127.0.0.1", show_default=True, envvar="HOST", help="Address to bind."),
            click.option("--port", default=default_port, show_default=True, type=click.IntRange(1, 65535)),
            click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 64), envvar="WORKERS"),
            click.option("--threads", default=4, show_default=True, type=click.IntRange(1, 256), envvar="THREADS"),
        ]
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


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
            "worker_class": "gthread",
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


def alembic_config(migrations: Path, url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations))
    # ConfigParser interpolation would read a '%' in a password as syntax.
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg
