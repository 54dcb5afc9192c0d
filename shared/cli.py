"""Pieces of the services' command lines: serving with gunicorn, migrating,
purging, stopping a long-running command on a signal, and turning a
configuration error into one line on stderr."""
from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from gunicorn.app.base import BaseApplication

from shared.config import MULTIPROC_DIR, ConfigError, database_url
from shared.db import Database
from shared.horizon import Horizon
from shared.logs import configure_logging, log_format, logging_config
from shared.purge import BATCH, Purger, run_every

# serve's defaults. A worker serves CONNECTIONS connections at once; those
# waiting on the database queue for one of its exactly POOL_SIZE pooled
# connections (no overflow, see shared.db), so PostgreSQL sees a bounded
# number however many clients come.
POOL_SIZE = 8
# An idle or silent connection costs a worker a greenlet and a few kilobytes, no CPU: room for
# thousands, so that a client holding many costs nothing. Past 90% of them the oldest waiting
# for a request are closed first (shared.gunicorn_worker).
CONNECTIONS = 4096
READ_TIMEOUT = 10
WORKER_TIMEOUT = 30  # gunicorn's own default


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


def stop_on_signals(stop: threading.Event | None = None) -> threading.Event:
    """An event that SIGTERM and SIGINT (Ctrl-C) set, in place of their default handlers.

    A long-running command then ends its loop and finishes what it holds
    instead of dying in the middle of it (SIGINT no longer raises
    KeyboardInterrupt). ``stop`` is that event if given, else a new one.

    :raise ValueError: called from a thread other than the main thread
        (only there can Python install signal handlers).
    """
    stop = stop if stop is not None else threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return stop


def service_group(help: str, **commands: Any) -> click.Group:
    """A service's command group, described by ``help``, with its ``serve`` and ``migrate``
    commands (``commands``: :func:`add_service_commands`' keyword arguments)."""

    @click.group(help=help)
    def main() -> None:
        pass

    add_service_commands(main, **commands)
    return main


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
    must be a dataclass with a ``pool_size`` field, set from ``--pool-size``.
    """

    @group.command("serve", help="Serve the API with gunicorn (gevent workers, keep-alive).")
    @click.option("--host", default="127.0.0.1", show_default=True, envvar="HOST", help="Address to bind.")
    @click.option("--port", default=default_port, show_default=True, type=click.IntRange(1, 65535))
    @click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 64), envvar="WORKERS")
    # --threads is the name this option had under the threaded worker, where
    # each thread held one connection; scripts that pass it keep working.
    @click.option("--pool-size", "--threads", "pool_size", default=POOL_SIZE, show_default=True,
                  type=click.IntRange(1, 256), envvar="DB_POOL_SIZE",
                  help="Database connections each worker keeps; requests beyond them wait for one.")
    @click.option("--connections", default=CONNECTIONS, show_default=True, type=click.IntRange(1, 100_000),
                  help="Connections each worker serves at once (idle and slow ones included).")
    @click.option("--read-timeout", default=READ_TIMEOUT, show_default=True, type=click.IntRange(1, 3600),
                  help="Seconds a client has to send a request's headers (idle keep-alive time included), "
                  "and again for its body; then it is disconnected.")
    @click.option("--pidfile", type=click.Path(dir_okay=False), default=None,
                  help="Write the server's process id here (its workers are its children).")
    @click.option("--worker-timeout", default=WORKER_TIMEOUT, show_default=True, type=click.IntRange(0, 3600),
                  envvar="WORKER_TIMEOUT_SECONDS",
                  help="Seconds a worker may go without a heartbeat (stuck, not merely busy) before it is "
                  "restarted; 0: never.")
    @fail_fast
    def serve_command(
        host: str, port: int, workers: int, pool_size: int, connections: int, read_timeout: int, pidfile: str | None,
        worker_timeout: int,
    ) -> None:
        settings = dataclasses.replace(load_settings(), pool_size=pool_size)  # fails here, before forking
        run_gunicorn(
            lambda: create_app(settings), name=name, host=host, port=port, workers=workers, connections=connections,
            read_timeout=read_timeout, pidfile=pidfile, worker_timeout=worker_timeout,
            log_format=log_format(),  # fails here too, on a LOG_FORMAT it does not know
        )

    @group.command("migrate", help=f"Apply the database migrations ({database_setting}).")
    @fail_fast
    def migrate_command() -> None:
        migrate(migrations, database_url(database_setting))
        click.echo(f"{name.replace('-', '_')} database is up to date.")


def add_purge_command(
    group: click.Group,
    *,
    help: str,
    database_setting: str,
    rows: str,
    purger: Callable[..., Purger],
    repeat: bool = False,
    recorded: Callable[[Database, str], None] | None = None,
) -> None:
    """Give a service's command group its ``purge`` command (described by ``help``): one pass
    over the database named by ``database_setting``, in windows of ``--batch`` ``rows``.

    ``purger(database, horizon, batch=batch)`` builds the service's purger
    when the command runs. With ``repeat``, ``--every SECONDS`` runs a pass
    every so often until SIGTERM or Ctrl-C. ``recorded(database, summary)``, when
    given, hears of each pass's summary line (platform_svc keeps the last for its console).
    """
    every_option = click.option(
        "--every", type=click.FloatRange(min=0.01), default=None,
        help="Purge again every SECONDS, until stopped (SIGTERM or Ctrl-C); one summary line per pass.",
    )

    @group.command("purge", help=help)
    @click.option("--dry-run", is_flag=True, help="Count what would be removed; remove nothing.")
    @(every_option if repeat else (lambda command: command))
    @click.option(
        "--batch", default=BATCH, show_default=True, type=click.IntRange(1, 100_000),
        help=f"{rows} read, and at most removed, per short transaction.",
    )
    @fail_fast
    def purge_command(dry_run: bool, batch: int, every: float | None = None) -> None:
        database = Database(database_url(database_setting), pool_size=1)
        passes = purger(database, Horizon.from_env(), batch=batch)

        def report(done: Any) -> None:
            click.echo(done.summary())
            if recorded is not None:
                recorded(database, done.summary())

        if every is None:
            report(passes.run(dry_run=dry_run))
            return
        configure_logging("purge")
        run_every(passes, every, stop_on_signals(), report, dry_run=dry_run)


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


def run_gunicorn(
    load_app: Callable[[], Any],
    *,
    name: str,
    host: str,
    port: int,
    workers: int,
    connections: int = CONNECTIONS,
    read_timeout: int = READ_TIMEOUT,
    pidfile: str | None = None,
    log_format: str = "text",
    worker_timeout: int = WORKER_TIMEOUT,
) -> None:
    """Serve the app with gevent workers (see shared/gunicorn_worker.py).

    ``read_timeout`` is gunicorn's keep-alive: how long a connection may stay
    silent, or take to send a request's headers; the worker gives the body
    the same time again.

    Every worker writes its metrics into a directory of this serve's own,
    made empty here before the first fork (and removed when gunicorn exits),
    so counts from an earlier run never leak in and a scrape answered by any
    worker adds up all of them. The app must not have imported
    prometheus-client before this point (see shared.metrics).
    """
    open_files_for(connections + 256)  # its connections, its pools, its logs and a margin
    metrics_dir = tempfile.mkdtemp(prefix=f"{name}-metrics-")
    os.environ[MULTIPROC_DIR] = metrics_dir
    _Gunicorn(
        load_app,
        {
            "bind": f"{host}:{port}",
            "workers": workers,
            "worker_connections": connections,
            "worker_class": "shared.gunicorn_worker.ProblemGeventWorker",
            "keepalive": read_timeout,
            "pidfile": pidfile,
            "proc_name": name,
            "graceful_timeout": 10,
            "timeout": worker_timeout,
            "errorlog": "-",
            # Several services (and test servers) run side by side; gunicorn's
            # control socket would make them fight over one path.
            "control_socket_disable": True,
            "loglevel": "info",
            # gunicorn's own lines in the same shape as the services' (shared.logs).
            "logconfig_dict": logging_config(name.replace("-", "_"), log_format),
            "logger_class": "shared.gunicorn_worker.AccessLoggedByApp",
            "child_exit": _worker_exited,
            "on_exit": lambda server: shutil.rmtree(metrics_dir, ignore_errors=True),
        },
    ).run()


def open_files_for(needed: int) -> None:
    """Raise this process's (and so its workers') limit of open files to ``needed`` when it is lower,
    up to the hard limit (many systems' soft default, 1,024, is less than a worker's connections)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed if hard == resource.RLIM_INFINITY else min(needed, hard), hard))


def _worker_exited(server: Any, worker: Any) -> None:
    """In the master, after a worker exited (or was killed): its counter files stay and
    keep counting in every scrape; only its live-gauge files (none today) go."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def migrate(migrations: Path, url: str) -> None:
    """Bring a service's database to its newest Alembic revision.

    Alembic is imported here, not with the module: every other command (each service's
    ``serve``, the reconciler, the CLI) starts without it (about 80 ms a process).
    """
    from alembic import command

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


def alembic_config(migrations: Path, url: str) -> Any:
    """Alembic's ``Config`` for ``migrations`` on ``url``."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations))
    # ConfigParser interpolation would read a '%' in a password as syntax.
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg
