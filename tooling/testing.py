"""Test helpers: a real PostgreSQL, fresh databases, live gunicorn processes,
and a counter of the SQL statements an engine sends."""
from __future__ import annotations

import atexit
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from sqlalchemy import Connection, Engine, event, text

from shared.cli import migrate
from tooling import embedded_pg


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yield a SQLAlchemy URL for a PostgreSQL server tests may create databases on.

    ``TEST_DATABASE_URL`` names one; otherwise an embedded server is started in
    a temporary directory (in memory when there is room: see :func:`_data_root`)
    and deleted afterwards.
    """
    given = os.environ.get("TEST_DATABASE_URL", "").strip()
    if given:
        yield given.replace("postgresql://", "postgresql+psycopg2://", 1)
        return
    with own_postgres("pgt") as server:
        yield embedded_pg.admin_url(server)


@contextmanager
def own_postgres(prefix: str = "pgo") -> Iterator[Any]:
    """An embedded PostgreSQL server of the caller's own, deleted afterwards.

    For tests that stop, restart, dump or restore the database under a
    service without touching the server every other test shares.
    """
    server = embedded_pg.start(_initialized_data(prefix))
    try:
        yield server
    finally:
        embedded_pg.stop(server, delete=True)


@contextmanager
def frozen_postgres(server: Any) -> Iterator[None]:
    """A server of :func:`own_postgres` hung, not dead, for the block: its postmaster and every
    backend SIGSTOPped, as a stalled disk or a host paused by its hypervisor looks. Connections
    stay open and new ones are still accepted by the kernel; nothing is ever answered."""
    import psutil

    pid = int((Path(server.pgdata) / "postmaster.pid").read_text().split()[0])
    postmaster = psutil.Process(pid)
    postmaster.suspend()  # first: it forks nothing after this
    backends = postmaster.children(recursive=True)
    for backend in backends:
        backend.suspend()
    try:
        yield
    finally:
        for process in [*backends, postmaster]:
            try:
                process.resume()
            except psutil.NoSuchProcess:
                pass


_initialized: list[Path] = []  # a data directory initdb made once in this process, stopped
_initialized_lock = threading.Lock()


def _initialized_data(prefix: str) -> Path:
    """A new data directory in a short path (it holds a Unix socket), ready to start.

    initdb takes several seconds; it runs once per process, and every server
    after the first starts on a copy (owner and modes kept) of what it made.
    """
    with _initialized_lock:
        if not _initialized:
            made = Path(tempfile.mkdtemp(prefix="pgi", dir=_data_root()))
            embedded_pg.stop(embedded_pg.start(made))  # initdb, and a clean stop: a consistent copy
            atexit.register(shutil.rmtree, made, ignore_errors=True)
            _initialized.append(made)
    pgdata = Path(tempfile.mkdtemp(prefix=prefix, dir=_data_root()))
    subprocess.run(["cp", "-a", f"{_initialized[0]}/.", str(pgdata)], check=True, timeout=120)
    return pgdata


def _data_root() -> str | None:
    """Where test servers keep their data: /dev/shm (memory) when it and the machine have
    room to spare, else the temporary directory.

    A run makes some 70 databases: in memory each copy takes a third of the
    time, and deleting them all at the end a fraction of a second instead of
    10-20 s. Nothing a test checks depends on the data reaching a disk.
    """
    try:
        shm = os.statvfs("/dev/shm")
        meminfo = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    available = next((int(line.split()[1]) * 1024 for line in meminfo.splitlines() if line.startswith("MemAvailable:")), 0)
    enough = 4 * 1024**3
    if shm.f_bavail * shm.f_frsize >= enough and available >= enough and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return None


def fresh_database(server_url: str, prefix: str, *, migrations: Path | None = None) -> str:
    """Create a database with a unique name, migrated by ``migrations`` if given; return its URL.

    A migrated one is a copy of a template database that ``migrations`` were
    applied to once (per server and process): a copy takes a few milliseconds,
    running the migrations again a second or so.
    """
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    template = None if migrations is None else migrated_template(server_url, migrations)
    return embedded_pg.ensure_database(server_url, name, recreate=True, template=template)


_templates: dict[tuple[str, Path], str] = {}
_templates_lock = threading.Lock()


def migrated_template(server_url: str, migrations: Path) -> str:
    """The name of a database on the server that ``migrations`` were applied to, made on first use.

    Nothing ever connects to it but :func:`fresh_database`'s copies (PostgreSQL
    copies a database only while no one is connected to it). Its name is this
    process's own, so test processes sharing one server (TEST_DATABASE_URL,
    pytest-xdist) never copy a template another one is still migrating.
    """
    key = (server_url, Path(migrations).resolve())
    with _templates_lock:
        if key not in _templates:
            name = f"tmpl_{key[1].parent.name}_{uuid.uuid4().hex[:12]}"
            migrate(migrations, embedded_pg.ensure_database(server_url, name, recreate=True))
            _templates[key] = name
        return _templates[key]


# Ports handed out, from below Linux's ephemeral range (32768-60999): a port the kernel picked
# for any client's connection meanwhile cannot be taken from a server before it binds it.
PORTS = range(20000, 32768)
_handed_out: set[int] = set()
_chance = random.SystemRandom()  # not the seeded module-level one: every pytest worker would pick alike


def free_port() -> int:
    """A loopback port nothing listens on, never handed out before by this process, from this
    process's own share of :data:`PORTS` (:func:`own_ports`)."""
    ports = own_ports()
    while True:
        port = _chance.choice(ports)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port


def own_ports(environ: Mapping[str, str] = os.environ) -> range:
    """The share of :data:`PORTS` of this pytest-xdist worker (all of them outside xdist).

    A port is free when it is checked, and taken only when the server started on it binds it,
    seconds later on a busy machine. Workers drawing from one range met in that moment: a
    server of one found its port in use and exited (Errno 98). Disjoint shares never meet."""
    worker, count = environ.get("PYTEST_XDIST_WORKER", ""), int(environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count <= 1:
        return PORTS
    share = len(PORTS) // count
    start = PORTS.start + int(worker[2:]) * share
    return range(start, start + share)


@dataclass
class Ports:
    """The ports of a topology: consecutive from ``base`` (``make run-ha``), or any free ones (tests)."""

    base: int | None = None
    taken: dict[str, int] = field(default_factory=dict)

    def __getitem__(self, name: str) -> int:
        if name not in self.taken:
            self.taken[name] = free_port() if self.base is None else self.base + len(self.taken)
        return self.taken[name]


class LiveServer:
    """A service started through its console script, as a user would, on loopback."""

    def __init__(
        self, argv: list[str], env: Mapping[str, str], *, port: int | None = None, output: Path | None = None
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [*argv, "--port", str(self.port)]
        self.env = {**os.environ, **env}
        self.output = output  # where stdout and stderr go (appended), if not inherited
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> LiveServer:
        if self.output is None:
            self.process = subprocess.Popen(self.argv, env=self.env, start_new_session=True)
        else:
            with self.output.open("ab") as sink:
                self.process = subprocess.Popen(
                    self.argv, env=self.env, start_new_session=True, stdout=sink, stderr=subprocess.STDOUT
                )
        try:
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()  # never leave a half-started server behind
            raise
        return self

    def wait_healthy(self, timeout: float) -> None:
        """Until it answers /healthz, and (with an ``output`` file) its master says it listens on
        its port: another process that took the port first must not pass for it."""
        deadline = time.monotonic() + timeout
        listening = f"Listening at: {self.url} ({self.process.pid})".encode()
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.argv[0]} exited with {self.process.returncode}")
            try:
                ours = self.output is None or listening in self.output.read_bytes()
                if ours and requests.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except requests.RequestException:  # not listening yet, or too busy starting to answer
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{self.argv[0]} did not become healthy on port {self.port}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        stop_process_group(self.process, sig)

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def worker_pids(self) -> list[int]:
        """The gunicorn workers: the children of the master this server started."""
        pids = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # the process is gone
            if int(fields[1]) == self.process.pid:
                pids.append(int(stat.parent.name))
        return sorted(pids)


def stop_process_group(process: subprocess.Popen | None, sig: int, timeout: float = 15) -> None:
    """Send ``sig`` to a process started in a session of its own (and its children), and wait
    for it; SIGKILL if it is not gone within ``timeout`` seconds. Nothing if it is not running."""
    if process is None or process.poll() is not None:
        return
    os.killpg(process.pid, sig)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def installed(command: str) -> str:
    """The path of ``command``. Missing, the test fails (it never skips: a skipped test would
    stand in for a check never made), naming the Debian package that brings it."""
    from tooling import packages

    path = packages.find(command)
    if path is None:
        import pytest

        pytest.fail(f"{command} is not installed: it comes with Debian's {packages.package_of(command)} package,"
                    " which make test installs when run as root (tooling/packages.py)", pytrace=False)
    return path


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


def assert_reads_through(engine: Engine, index: str, read: Callable[[Connection], object]) -> str:
    """Assert that the last statement ``read`` sends is planned through ``index``, never a
    scan of the table; return the plan.

    The statement is EXPLAINed with the parameters it was sent with and with
    sequential scans turned off: a plan that still scans the table has no index
    it can use, whatever the table's size (a small test table would be scanned anyway).
    """
    sent: list[tuple[str, Any]] = []

    def record(conn, cursor, statement, parameters, context, executemany) -> None:
        sent.append((statement, parameters))

    with engine.begin() as conn:
        event.listen(engine, "before_cursor_execute", record)
        try:
            read(conn)
        finally:
            event.remove(engine, "before_cursor_execute", record)
        statement, parameters = sent[-1]
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(row[0] for row in conn.exec_driver_sql(f"EXPLAIN {statement}", parameters))
    assert index in plan and "Seq Scan" not in plan, plan
    return plan


ROOT = Path(__file__).resolve().parent.parent


def fuzzing_config() -> Any:
    """schemathesis' configuration for these APIs: the project's schemathesis.toml."""
    from schemathesis.config import SchemathesisConfig

    return SchemathesisConfig.from_path(ROOT / "schemathesis.toml")


def every_check(path: str = "") -> list[Any]:
    """All of schemathesis' built-in checks that apply to the operation at ``path``.

    A batch create validates each item on its own: an invalid item answers 422
    in its place inside a 200, and never fails the others. So for a batch,
    "schema-violating request accepted" is the contract, not a finding.
    """
    from schemathesis.checks import CHECKS, load_all_checks

    load_all_checks()
    checks = CHECKS.get_all()
    if path.endswith("/batch"):
        checks = [check for check in checks if check.__name__ != "negative_data_rejection"]
    return checks


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


def schema_drift(database_url: str, metadata: Any) -> list:
    """What Alembic's autogenerate would change to make a migrated database match ``metadata``: [] when they agree."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy import create_engine

    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
            return compare_metadata(context, metadata)
    finally:
        engine.dispose()


def uuid7_at(unix_seconds: float) -> uuid.UUID:
    """A UUIDv7 born at ``unix_seconds``, its 128 bits built here (RFC 9562): the unix time in
    milliseconds in the top 48 bits, version 7, 74 random bits, variant 10. For IDs of the past
    (or the future) that no generator would give today."""
    millis = int(unix_seconds * 1000)
    random_bits = int.from_bytes(os.urandom(10), "big")
    rand_a, rand_b = random_bits >> 68, random_bits & ((1 << 62) - 1)
    return uuid.UUID(int=(millis << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b)


def uuid7_ago(seconds: float) -> uuid.UUID:
    """A UUIDv7 born ``seconds`` ago (negative: in the future)."""
    return uuid7_at(time.time() - seconds)


def wait_for(
    condition: Callable[[], Any], *, timeout: float = 20.0, what: str | Callable[[], str] = "condition",
    poll: float = 0.05, ignoring: tuple[type[Exception], ...] = (),
) -> Any:
    """Poll ``condition`` until it returns something truthy, and return that; an exception of
    ``ignoring`` counts as a falsy answer.

    :raise TimeoutError: not within ``timeout`` seconds (naming ``what``; a callable is asked then,
        to say how far it got).
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = condition()
        except ignoring:
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what() if callable(what) else what}: not within {timeout} s")
        time.sleep(poll)

