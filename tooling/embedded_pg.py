"""An embedded PostgreSQL from the ``pgserver`` wheel, for ``make run`` and tests.

It needs nothing installed on the machine and works as root. It listens on a
Unix socket inside its data directory, so that path must stay short (sockets
are limited to about 100 bytes).
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

import psycopg2
from psycopg2 import sql
from sqlalchemy.engine import make_url


def start(pgdata: Path):
    """Start (or reuse) the server whose data lives in ``pgdata``; see :func:`stop`."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset, as it is in CI.
        warnings.simplefilter("ignore")
        import pgserver

        _ensure_system_user()
        # Stopping is ours to do: pgserver's own reference counting leaves the
        # server running for ever once a process holding it was killed.
        server = pgserver.get_server(pgdata, cleanup_mode=None)
        # pgserver hands back its cached handle for a directory it has seen,
        # even after stop(): make sure the server really runs.
        server.ensure_postgres_running()
        return server


def _ensure_system_user() -> None:
    """As root, pgserver runs PostgreSQL as a system user ``pgserver`` it adds with
    ``useradd`` the first time. Processes that start servers at once on a new machine
    (pytest-xdist's workers) raced there: two ``useradd`` runs, a data directory
    chowned to a uid that the other one's run replaced, and initdb failing for one
    worker's whole share of the suite. The first one adds the user under a lock every
    process on the machine takes; the others find it added."""
    if os.geteuid() != 0:
        return
    from pgserver.utils import ensure_user_exists

    with open(Path(tempfile.gettempdir()) / "pgserver-useradd.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_user_exists("pgserver")


def stop(server, *, delete: bool = False) -> None:
    """Stop the server (fast shutdown), and delete its data if asked.

    A server whose data is deleted anyway stops at once (immediate shutdown):
    its shutdown checkpoint would write out every database a test run made.
    """
    import pgserver

    mode = "immediate" if delete else "fast"
    try:
        pgserver.pg_ctl(["-w", "-m", mode, "stop"], pgdata=server.pgdata, user=server.system_user)
    except subprocess.CalledProcessError:
        pass  # already stopped
    if delete:
        shutil.rmtree(server.pgdata, ignore_errors=True)


def admin_url(server) -> str:
    """A SQLAlchemy URL for the server's ``postgres`` database."""
    return server.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1)


def database_url(server_url: str, name: str) -> str:
    """``server_url`` pointing at database ``name`` instead."""
    return make_url(server_url).set(database=name).render_as_string(hide_password=False)


def ensure_database(server_url: str, name: str, *, recreate: bool = False, template: str | None = None) -> str:
    """Create database ``name`` on the server unless it exists (a copy of database
    ``template`` if given); return its URL."""
    conn = _admin_connection(server_url)
    try:
        with conn.cursor() as cur:
            if recreate:
                cur.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cur.fetchone() is None:
                create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
                if template is not None:
                    create += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
                cur.execute(create)
    finally:
        conn.close()
    return database_url(server_url, name)


def _admin_connection(server_url: str):
    url = make_url(server_url)
    conn = psycopg2.connect(
        dbname=url.database or "postgres",
        user=url.username,
        password=url.password,
        host=url.query.get("host") or url.host,
        port=url.port,
    )
    conn.autocommit = True
    return conn


def dump(url: str, path: Path) -> None:
    """Dump the database at ``url`` into ``path`` (pg_dump's custom format)."""
    _client_program("pg_dump", url, ["--format=custom", f"--file={path}"])


def restore(url: str, path: Path) -> None:
    """Put the database at ``url`` back to the dump in ``path``: every table dropped and reloaded, at once."""
    _client_program("pg_restore", url, ["--clean", "--if-exists", "--single-transaction", "--exit-on-error", str(path)])


def _client_program(name: str, url: str, args: list[str]) -> None:
    """Run one of the PostgreSQL client programs the pgserver wheel ships, against ``url``.

    They match the embedded server's version; a server of another (newer)
    major version may refuse them.
    """
    import pgserver

    program = Path(pgserver.__file__).with_name("pginstall") / "bin" / name
    parsed = make_url(url)
    connection = ["--host", parsed.query.get("host") or parsed.host or "127.0.0.1", "--port", str(parsed.port or 5432)]
    connection += ["--username", parsed.username or "postgres", "--dbname", parsed.database]
    env = {**os.environ, "PGPASSWORD": parsed.password or ""}
    subprocess.run([str(program), *connection, *args], env=env, check=True, capture_output=True, timeout=300)
