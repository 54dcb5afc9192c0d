"""A real PgBouncer (Debian's ``pgbouncer`` package) in transaction mode, in front of a PostgreSQL server.

For tests and run targets that put the production shape's pooler between the
services and their databases::

    with PgBouncer(server_url, workdir) as bouncer:
        url = bouncer.url(database_url)   # the same database, through PgBouncer

It listens on a free loopback port; every database name is routed to the
same-named database of the server (a wildcard entry), so databases created
later (a test's fresh ones) need no new configuration. Clients are not
authenticated (``auth_type = any``): PgBouncer logs in to the server as the
server URL's user, with its password if it has one. Its configuration is
written to ``workdir/pgbouncer.ini`` and its log to ``workdir/pgbouncer.log``.

PgBouncer refuses to run as root: started by root it drops to another user
(``-u``): by default the owner of the server's Unix socket directory when the
server is reached through a socket (only that user may enter the directory of
an embedded server), else ``postgres``.
"""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import psycopg2
from sqlalchemy.engine import make_url

from tooling.testing import free_port, stop_process_group

BINARY = "pgbouncer"
DEBIAN_BINARY = "/usr/sbin/pgbouncer"


def binary() -> str | None:
    """The pgbouncer executable, or None when it is not installed (``apt-get install pgbouncer``)."""
    return shutil.which(BINARY) or (DEBIAN_BINARY if os.access(DEBIAN_BINARY, os.X_OK) else None)


class PgBouncer:
    """One PgBouncer process in front of the server at ``server_url``; see the module docstring.

    ``pool_size``: server connections per (database, user) pair; ``settings``:
    more ``[pgbouncer]`` settings, written as given (they win over the defaults).
    """

    def __init__(
        self,
        server_url: str,
        workdir: Path,
        *,
        port: int | None = None,
        pool_mode: str = "transaction",
        pool_size: int = 20,
        max_client_conn: int = 1000,
        run_as: str | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.server = make_url(server_url)
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.max_client_conn = max_client_conn
        self.run_as = run_as
        self.settings = settings or {}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def ini(self) -> Path:
        return self.workdir / "pgbouncer.ini"

    @property
    def log(self) -> Path:
        return self.workdir / "pgbouncer.log"

    def url(self, database_url: str | None = None) -> str:
        """``database_url`` (default: the server URL's database) reached through PgBouncer."""
        target = make_url(database_url) if database_url else self.server
        through = target.set(host="127.0.0.1", port=self.port, query={})
        return through.render_as_string(hide_password=False)

    # -- lifecycle -------------------------------------------------------------------

    def command(self) -> list[str]:
        """Write the configuration; the command that runs PgBouncer on it (in the foreground,
        its log on stderr). A supervisor runs it so, or :meth:`start` does."""
        program = binary()
        if program is None:
            raise FileNotFoundError("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ini.write_text(self._config())
        argv = [program]
        if os.geteuid() == 0:
            argv += ["-u", self._system_user()]
        return [*argv, str(self.ini)]

    def start(self, timeout: float = 30.0) -> PgBouncer:
        """Write the configuration, start PgBouncer and wait until it accepts connections."""
        argv = self.command()
        # Logs go to stderr (no logfile setting), into a file this process opens:
        # the dropped user needs no access to the work folder.
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, sig: int = signal.SIGINT) -> None:
        """Stop it (SIGINT: at once, dropping every connection; SIGTERM waits for clients to leave)."""
        stop_process_group(self.process, sig)

    def __enter__(self) -> PgBouncer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- details ---------------------------------------------------------------------

    def _upstream(self) -> str:
        """The ``[databases]`` connection string of the wildcard entry."""
        host = self.server.query.get("host") or self.server.host or "127.0.0.1"
        parts = [f"host={host}", f"port={self.server.port or 5432}", f"user={self.server.username or 'postgres'}"]
        if self.server.password:
            parts.append(f"password={self.server.password}")
        return " ".join(parts)

    def _config(self) -> str:
        settings = {
            "listen_addr": "127.0.0.1",
            "listen_port": str(self.port),
            "unix_socket_dir": "",
            "auth_type": "any",
            "pool_mode": self.pool_mode,
            "default_pool_size": str(self.pool_size),
            "max_client_conn": str(self.max_client_conn),
            # What a transaction-mode pooler must not carry from one client to the next.
            "server_reset_query": "DISCARD ALL",
            "server_reset_query_always": "0",
            "ignore_startup_parameters": "extra_float_digits",
            "server_login_retry": "1",
            "log_connections": "0",
            "log_disconnections": "0",
            **self.settings,
        }
        lines = ["[databases]", f"* = {self._upstream()}", "", "[pgbouncer]"]
        lines += [f"{name} = {value}" for name, value in settings.items()]
        return "\n".join(lines) + "\n"

    def _system_user(self) -> str:
        if self.run_as:
            return self.run_as
        host = self.server.query.get("host")
        if host and Path(host).is_dir():
            return pwd.getpwuid(Path(host).stat().st_uid).pw_name
        return "postgres"

    def wait_ready(self, timeout: float) -> None:
        """Until a query through it is answered (so the upstream is reachable too)."""
        deadline = time.monotonic() + timeout
        url = make_url(self.url())
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with {self.process.returncode}:\n{self._log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
                conn = psycopg2.connect(
                    host="127.0.0.1", port=self.port, user=url.username or "postgres",
                    password=url.password or "", dbname=url.database or "postgres", connect_timeout=2,
                )
                conn.close()
                return
            except (OSError, psycopg2.Error) as exc:
                last = exc
                time.sleep(0.05)
        raise TimeoutError(f"pgbouncer did not accept connections on port {self.port}: {last}\n{self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return ""
