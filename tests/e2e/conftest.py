"""Both services as a user runs them: gunicorn processes, the CLI, real HTTP.

Each test gets its own pair (two fresh databases, cluster_svc and platform_svc
on loopback ports, one account made with ``platform-svc create-account``), so
the rows a test leaves behind cannot change what another one sees.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from sqlalchemy import create_engine, text

from cluster_svc.cli import MIGRATIONS as CLUSTER_MIGRATIONS
from platform_svc.cli import MIGRATIONS as PLATFORM_MIGRATIONS
from shared.cli import migrate
from tooling.testing import LiveServer, console_script, fresh_database

TOKEN = "e2e-internal-token"
CLUSTER_FIELDS = ("name", "region", "postgres_version", "plan", "storage_gb", "generation")
RULE_FIELDS = ("cluster_id", "cidr", "description", "generation")


def cluster_body(**overrides):
    body = {"name": "main-db", "region": "eu-west-1", "postgres_version": 16, "plan": "standard-2", "storage_gb": 100}
    body.update(overrides)
    return body


def wait_for(condition: Callable[[], object], *, timeout: float = 20.0, what: str = "condition") -> object:
    """Poll ``condition`` until it returns something truthy (and return that); fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.1)


class Pair:
    """cluster_svc and platform_svc running side by side, and their databases."""

    def __init__(
        self, cluster_db_url: str, platform_db_url: str, *, env: dict[str, str] | None = None, log_dir: Path | None = None
    ) -> None:
        """``env`` is added to both services' environment; with ``log_dir``, each
        service's output goes to ``cluster_svc.log`` / ``platform_svc.log`` there."""
        self.cluster_db_url = cluster_db_url
        self.platform_db_url = platform_db_url
        self.log_dir = log_dir
        self.cluster_env = {"CLUSTER_DATABASE_URL": cluster_db_url, "INTERNAL_TOKEN": TOKEN, **(env or {})}
        self.cluster_argv = [console_script("cluster-svc"), "serve", "--workers", "2", "--threads", "8"]
        self.cluster_svc = LiveServer(self.cluster_argv, self.cluster_env, output=self._log("cluster_svc"))
        self.platform_env = {
            "PLATFORM_DATABASE_URL": platform_db_url,
            "CLUSTER_SVC_URL": self.cluster_svc.url,
            "INTERNAL_TOKEN": TOKEN,
            **(env or {}),
        }
        self.platform_svc = LiveServer(
            [console_script("platform-svc"), "serve", "--workers", "2", "--threads", "8"],
            self.platform_env,
            output=self._log("platform_svc"),
        )
        self.cluster_engine = create_engine(cluster_db_url)
        self.platform_engine = create_engine(platform_db_url)
        self.http = requests.Session()
        self.account_id: str | None = None

    def start(self) -> None:
        """Both services and the account, side by side: each takes about a second to start."""
        with ThreadPoolExecutor(2) as pool:
            starting = [pool.submit(server.start) for server in (self.cluster_svc, self.platform_svc)]
            created = self.cli("create-account", "e2e-team", "--json")
            for started in starting:
                started.result()
        assert created.returncode == 0, created.stderr
        account = json.loads(created.stdout)
        self.account_id = account["account_id"]
        self.http.headers["Authorization"] = f"Bearer {account['api_key']}"

    def _log(self, service: str) -> Path | None:
        return None if self.log_dir is None else self.log_dir / f"{service}.log"

    def close(self) -> None:
        self.http.close()
        with ThreadPoolExecutor(2) as pool:  # each takes about a second to stop
            for stopped in [pool.submit(server.stop) for server in (self.platform_svc, self.cluster_svc)]:
                stopped.result()
        self.cluster_engine.dispose()
        self.platform_engine.dispose()

    # Processes -------------------------------------------------------------

    def stop_cluster_svc(self) -> None:
        self.cluster_svc.stop()

    def restart_cluster_svc(self) -> None:
        """cluster_svc back on the port platform_svc knows."""
        self.cluster_svc = LiveServer(
            self.cluster_argv, self.cluster_env, port=self.cluster_svc.port, output=self._log("cluster_svc")
        ).start()

    def cli(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run ``platform-svc ARGS`` to completion."""
        return subprocess.run(
            [console_script("platform-svc"), *args],
            env={**os.environ, **self.platform_env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    @contextmanager
    def reconciler(self, *args: str, env: dict[str, str] | None = None) -> Iterator[Reconciler]:
        """``platform-svc reconcile ARGS`` running until the block ends (then stopped with SIGTERM:
        exit 0), unless the block ended it itself."""
        with tempfile.NamedTemporaryFile() as log:  # a file, not a pipe: a full pipe would block its logging
            process = subprocess.Popen(
                [console_script("platform-svc"), "reconcile", *args],
                env={**os.environ, **self.platform_env, **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            reconciler = Reconciler(process, Path(log.name))
            try:
                yield reconciler
            finally:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGTERM)
                    process.wait(timeout=60)
                    assert process.returncode == 0, reconciler.output()[-5000:]

    # The public API --------------------------------------------------------

    def api(self, method: str, path: str, **kwargs) -> requests.Response:
        return self.http.request(method, self.platform_svc.url + path, timeout=30, **kwargs)

    def internal(self, method: str, path: str, **kwargs) -> requests.Response:
        """Call cluster_svc directly, with the internal token."""
        headers = {"Authorization": f"Bearer {TOKEN}"}
        return requests.request(method, self.cluster_svc.url + path, headers=headers, timeout=30, **kwargs)

    # The databases ---------------------------------------------------------

    def platform_rows(self, table: str) -> dict[str, dict]:
        return _rows(self.platform_engine, table)

    def cluster_svc_rows(self, table: str) -> dict[str, dict]:
        return _rows(self.cluster_engine, table)

    def all_synced(self) -> bool:
        """The platform has rows, and every one of them (clusters and rules) is synced."""
        tables = ("clusters", "firewall_rules")
        return {row["sync_state"] for table in tables for row in self.platform_rows(table).values()} == {"synced"}

    def assert_downstream_matches(self) -> None:
        """Every platform row is synced and cluster_svc holds exactly what it says."""
        for table, fields in (("clusters", CLUSTER_FIELDS), ("firewall_rules", RULE_FIELDS)):
            upstream, downstream = self.platform_rows(table), self.cluster_svc_rows(table)
            assert {row["sync_state"] for row in upstream.values()} <= {"synced"}, table
            assert set(downstream) <= set(upstream), table  # nothing the platform did not ask for
            for object_id, row in upstream.items():
                there = downstream.get(object_id)
                if row["deleted_at"] is not None:
                    if there is None:
                        # Only a rule that never got there before its cluster was deleted (it cannot now).
                        assert table == "firewall_rules", (table, object_id)
                    else:
                        assert there["deleted_at"] is not None, (table, object_id)
                    continue
                assert there is not None, (table, object_id)
                assert there["deleted_at"] is None, (table, object_id)
                assert {f: str(there[f]) for f in fields} == {f: str(row[f]) for f in fields}, (table, object_id)
                if table == "clusters":
                    assert str(there["team_id"]) == str(row["account_id"])


class Reconciler:
    """A running ``platform-svc reconcile`` (see :meth:`Pair.reconciler`) and what it printed so far."""

    def __init__(self, process: subprocess.Popen, log: Path) -> None:
        self.process = process
        self._log = log

    def output(self) -> str:
        return self._log.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL, as a crash would: no clean-up of any kind."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


def _rows(engine, table: str) -> dict[str, dict]:
    with engine.connect() as conn:
        return {str(row["id"]): dict(row) for row in conn.execute(text(f"SELECT * FROM {table}")).mappings()}


def start_pair(pg_server_url: str, **options) -> Pair:
    """A started pair on two fresh databases (``options``: see :class:`Pair`); close it."""
    cluster_db_url = fresh_database(pg_server_url, "e2e_cluster")
    platform_db_url = fresh_database(pg_server_url, "e2e_platform")
    migrate(CLUSTER_MIGRATIONS, cluster_db_url)
    migrate(PLATFORM_MIGRATIONS, platform_db_url)
    pair = Pair(cluster_db_url, platform_db_url, **options)
    try:
        pair.start()
    except BaseException:
        pair.close()
        raise
    return pair


@pytest.fixture
def pair(pg_server_url):
    pair = start_pair(pg_server_url)
    try:
        yield pair
    finally:
        pair.close()
