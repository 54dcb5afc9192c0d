"""Fixtures of the chaos suite: its size, its seed, a pair of services per
module, and the figures of each scenario (tests/conftest.py prints their
table at the end of the run, gathered from every pytest-xdist worker).

``CHAOS_SCALE=full`` runs every scenario at full size (``make chaos``); the
default, ``ci``, keeps ``make test`` quick. ``CHAOS_SEED=N`` replays a run's
faults and data; a failing test prints the seed it ran with. (Unset, the run's
seed is drawn once in tests/conftest.py, so every pytest-xdist worker has it.)
"""
from __future__ import annotations

import random

import pytest

from tests.chaos.convergence import FIGURES, Figures
from tests.chaos.harness import SEED, running_pair, scale_from_env, seed_for
from tooling.testing import own_postgres


@pytest.fixture(scope="session")
def scale():
    return scale_from_env()


@pytest.fixture
def rng(request):
    """Randomness for the test's data, replayable from the run's seed."""
    return random.Random(seed_for(request.node.nodeid))


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
