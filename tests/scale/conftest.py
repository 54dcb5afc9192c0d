"""The production shape's pieces as real processes: PgBouncer in transaction mode in front of
PostgreSQL (:mod:`tooling.pgbouncer`), the pair's services and reconcilers behind it
(:mod:`tooling.pair`), and an admin connection straight to the server for the faults.
"""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from cluster_svc.cli import MIGRATIONS as CLUSTER_MIGRATIONS
from platform_svc.cli import MIGRATIONS as PLATFORM_MIGRATIONS
from tooling import pgbouncer
from tooling.pair import Pair
from tooling.testing import fresh_database, wait_for


@pytest.fixture
def bouncer(pg_server_url, tmp_path) -> Iterator[pgbouncer.PgBouncer]:
    """A PgBouncer in transaction mode in front of the run's PostgreSQL (Debian's package: .ci/run installs it)."""
    if pgbouncer.binary() is None:
        pytest.fail("pgbouncer is not installed: Debian's pgbouncer package, which make test-scale installs"
                    " when run as root (tooling/packages.py)")
    with pgbouncer.PgBouncer(pg_server_url, tmp_path / "pgbouncer") as running:
        yield running


class Admin:
    """The server itself, bypassing any pooler: what the faults are made with."""

    def __init__(self, server_url: str) -> None:
        self.engine = create_engine(server_url, poolclass=NullPool, isolation_level="AUTOCOMMIT")

    def sessions(self, database_url: str) -> int:
        with self.engine.connect() as conn:
            return conn.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE datname = :name AND pid <> pg_backend_pid()"),
                {"name": make_url(database_url).database},
            ).scalar_one()

    def terminate_all(self, *database_urls: str) -> int:
        """pg_terminate_backend on every session of the databases; return how many, once they are gone."""
        names = [make_url(url).database for url in database_urls]
        with self.engine.connect() as conn:
            ended = conn.execute(
                text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                     " WHERE datname = ANY(:names) AND pid <> pg_backend_pid()"),
                {"names": names},
            ).scalar_one()
        wait_for(lambda: sum(self.sessions(url) for url in database_urls) == 0, what="the terminated sessions to end")
        return ended

    def read_only(self, database_url: str, on: bool) -> None:
        """``default_transaction_read_only`` for the database's new sessions, as a standby would refuse writes."""
        name = make_url(database_url).database
        with self.engine.connect() as conn:
            if on:
                conn.execute(text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'))
            else:
                conn.execute(text(f'ALTER DATABASE "{name}" RESET default_transaction_read_only'))

    def dispose(self) -> None:
        self.engine.dispose()


@pytest.fixture
def admin(pg_server_url) -> Iterator[Admin]:
    admin = Admin(pg_server_url)
    yield admin
    admin.dispose()


@pytest.fixture
def databases(pg_server_url) -> tuple[str, str]:
    """Fresh, migrated cluster_svc and platform_svc databases on the run's server (direct URLs)."""
    return (
        fresh_database(pg_server_url, "cluster", migrations=CLUSTER_MIGRATIONS),
        fresh_database(pg_server_url, "platform", migrations=PLATFORM_MIGRATIONS),
    )


@pytest.fixture
def scale_pair(databases, tmp_path, request):
    """``scale_pair(through=bouncer or None, **options)``: a started pair on :func:`databases`, its
    services (its CLI, its reconcilers) reaching them through ``through``; an account of the test's own."""
    started: list[Pair] = []

    def start(*, through: pgbouncer.PgBouncer | None = None, **options) -> Pair:
        cluster_url, platform_url = databases
        if through is not None:
            cluster_url, platform_url = through.url(cluster_url), through.url(platform_url)
        workdir = tmp_path / f"pair-{len(started)}"
        workdir.mkdir()
        pair = Pair(cluster_db_url=cluster_url, platform_db_url=platform_url, workdir=workdir, **options)
        started.append(pair.__enter__())
        pair.use_account(pair.account(f"scale {request.node.name}"[:100]))
        return pair

    yield start
    for pair in started:
        pair.stop()
