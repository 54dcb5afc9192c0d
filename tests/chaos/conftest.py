"""Fixtures of the chaos suite: its size, its seed, a pair of services per
module, and the figures of each scenario (tests/conftest.py prints their
table at the end of the run, gathered from every pytest-xdist worker).

``CHAOS_SCALE=full`` runs every scenario at full size (``make chaos``); the
default, ``ci``, keeps ``make test`` quick. ``CHAOS_SEED=N`` replays a run's
faults and data; a failing test prints the seed it ran with. (Unset, the run's
seed is drawn once in tests/conftest.py, so every pytest-xdist worker has it.)
"""
from __future__ import annotations

import os
import random

import pytest

from cluster_svc.cli import MIGRATIONS as CLUSTER_MIGRATIONS
from platform_svc.cli import MIGRATIONS as PLATFORM_MIGRATIONS
from tests.chaos.convergence import FIGURES, Figures, install_audit, read_audit
from tests.chaos.harness import PURGE_EVERY, scale_from_env
from tooling.pair import Pair
from tooling.testing import fresh_database, own_postgres

SEED = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(2**31))


def seed_for(name: str) -> int:
    """A seed of its own for each use, all derived from the run's seed."""
    return random.Random(f"{SEED}:{name}").randrange(2**31)


@pytest.fixture(scope="session")
def scale():
    return scale_from_env()


@pytest.fixture
def rng(request):
    """Randomness for the test's data, replayable from the run's seed."""
    return random.Random(seed_for(request.node.nodeid))


def running_pair(
    request, tmp_path_factory, *, platform_server: str, cluster_server: str, horizon: int | None = None,
    purge: bool = True,
):
    """Both services as processes on fresh databases of these servers, with the fault proxy between them.

    Purge runs on both sides as an operator runs it (``cluster-svc purge --every``
    beside the pair, every reconciler with ``--purge-interval``, both every
    :data:`PURGE_EVERY` seconds), unless ``purge`` is false; both services'
    horizon is ``horizon`` seconds (the scale's unless given). Both databases
    are audited (see :func:`install_audit`) from the start, and after the
    module's scenarios neither may have lost a row purge may not remove.
    """
    cluster_db_url = fresh_database(cluster_server, "chaos_cluster", migrations=CLUSTER_MIGRATIONS)
    platform_db_url = fresh_database(platform_server, "chaos_platform", migrations=PLATFORM_MIGRATIONS)
    install_audit(cluster_db_url)
    install_audit(platform_db_url)
    with Pair(
        platform_db_url=platform_db_url,
        cluster_db_url=cluster_db_url,
        workdir=tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]),
        env={"ID_HORIZON_SECONDS": str(horizon or scale_from_env().horizon)},
        proxy=True,
        purge_every=PURGE_EVERY if purge else None,
    ) as pair:
        yield pair
        # Whatever the module's scenarios did: purge removed nothing on either side but deleted
        # rows whose ID was past the horizon.
        for platform in (False, True):
            audit = read_audit(pair, platform=platform)
            assert audit.hard_deletes == 0, f"{'platform' if platform else 'cluster_svc'}: {audit}"


@pytest.fixture(scope="module")
def pair(pg_server_url, tmp_path_factory, request):
    """Both services on the run's PostgreSQL (a module that needs its own server overrides this)."""
    yield from running_pair(request, tmp_path_factory, platform_server=pg_server_url, cluster_server=pg_server_url)


@pytest.fixture(scope="module")
def cluster_pg():
    """A PostgreSQL server for cluster_svc alone, to restart, dump or restore under it."""
    with own_postgres("pgc") as server:
        yield server


@pytest.fixture(scope="module")
def platform_pg():
    """A PostgreSQL server for platform_svc alone, to restart under it."""
    with own_postgres("pgp") as server:
        yield server


@pytest.fixture
def figures(request) -> list[Figures]:
    """Append one :class:`Figures` per scenario; they are printed after the run."""
    return request.config.stash.setdefault(FIGURES, [])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        report.sections.append(
            ("chaos replay", f"CHAOS_SEED={SEED} CHAOS_SCALE={scale_from_env().name} (test {item.nodeid})")
        )
    return report


def pytest_sessionfinish(session):
    """In a pytest-xdist worker: hand this worker's figures to the controller, which prints them."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["chaos_figures"] = [row.to_dict() for row in session.config.stash.get(FIGURES, [])]
