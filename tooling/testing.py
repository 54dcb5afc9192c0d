"""Test helpers: a real PostgreSQL, fresh databases, live gunicorn processes,
and a counter of the SQL statements an engine sends."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import requests
from sqlalchemy import Engine, event, text

from tooling import embedded_pg
from shared.cli import migrate


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yield a SQLAlchemy URL for a PostgreSQL server tests may create databases on.

    ``TEST_DATABASE_URL`` names one; otherwise an embedded server is started in
    a temporary directory and deleted afterwards.
    """
    given = os.environ.get("TEST_DATABASE_URL", "").strip()
    if given:
        yield given.replace("postgresql://", "postgresql+psycopg2://", 1)
        return
    server = embedded_pg.start(Path(tempfile.mkdtemp(prefix="pgt")))
    try:
        yield embedded_pg.admin_url(server)
    finally:
        embedded_pg.stop(server, delete=True)


def fresh_database(server_url: str, prefix: str, *, migrations: Path | None = None) -> str:
    """Create a database with a unique name, migrated by ``migrations`` if given; return its URL."""
    url = embedded_pg.ensure_database(server_url, f"{prefix}_{uuid.uuid4().hex[:12]}", recreate=True)
    if migrations is not None:
        migrate(migrations, url)
    return url


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LiveServer:
    """A service started through its console script, as a user would, on loopback."""

    def __init__(self, argv: list[str], env: Mapping[str, str], *, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [*argv, "--port", str(self.port)]
        self.env = {**os.environ, **env}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> LiveServer:
        self.process = subprocess.Popen(self.argv, env=self.env, start_new_session=True)
        try:
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()  # never leave a half-started server behind
            raise
        return self

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.argv[0]} exited with {self.process.returncode}")
            try:
                if requests.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except requests.RequestException:  # not listening yet, or too busy starting to answer
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{self.argv[0]} did not become healthy on port {self.port}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, sig)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def console_script(name: str) -> str:
    """The path of a console script installed beside this interpreter."""
    return str(Path(sys.executable).with_name(name))


class StatementCounter:
    """Records the SQL statements an engine sends while ``counting()`` is open."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.statements: list[str] = []

    def _record(self, conn, cursor, statement, parameters, context, executemany) -> None:
        self.statements.append(statement)

    @contextmanager
    def counting(self) -> Iterator[list[str]]:
        self.statements = []
        event.listen(self.engine, "before_cursor_execute", self._record)
        try:
            yield self.statements
        finally:
            event.remove(self.engine, "before_cursor_execute", self._record)


def assert_problem(response, status: int, code: str) -> dict:
    """The Flask test response is an RFC 9457 problem document with this status and code."""
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/problem+json"
    body = response.get_json()
    assert body["status"] == status
    assert body["code"] == code
    assert body["type"] and body["title"] and body["detail"]
    return body


def db_row(engine: Engine, table: str, object_id: object) -> dict | None:
    """The stored row (as a dict) or None; ``table`` is a trusted literal."""
    with engine.connect() as conn:
        row = conn.execute(text(f"SELECT * FROM {table} WHERE id = :id"), {"id": str(object_id)}).mappings().first()
    return None if row is None else dict(row)
