"""Fixtures every test package shares: one real PostgreSQL per test run (per
pytest-xdist worker); schemathesis told what the documents' own ``cidr``
format looks like; the end of every process log of a failed test's pair
(:class:`tooling.pair.Pair`) in its report; and the chaos scenarios' seed and
table of figures, for the whole run whichever worker ran them."""
from __future__ import annotations

import os
import random
import socket
from pathlib import Path

import pytest

import tooling.fuzzing  # noqa: F401  (what schemathesis is told of these APIs: the cidr format, unique keys)
from tooling.pair import Pair
from tooling.scripted import ScriptedServer
from tooling.testing import postgres_server


@pytest.fixture(scope="session")
def pg_server_url():
    """A PostgreSQL server (embedded, or TEST_DATABASE_URL) for the whole run."""
    with postgres_server() as url:
        yield url


@pytest.fixture
def server():
    """A scripted HTTP server (tooling.scripted) the test tells what to answer."""
    scripted = ScriptedServer().start()
    try:
        yield scripted
    finally:
        scripted.stop()


@pytest.fixture
def closed_port():
    """A port on 127.0.0.1 where nothing listens: bound, never listening, so connects are refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


@pytest.fixture
def silent_port():
    """A port where the kernel accepts connections but nobody ever reads or answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        for name, value in getattr(item, "funcargs", {}).items():
            if isinstance(value, Pair):
                report.sections.append((f"process logs of {name}", value.logs()))
    return report


def pytest_configure(config):
    # One seed for the run's chaos scenarios, drawn here (before any pytest-xdist
    # worker starts, so each inherits it) unless CHAOS_SEED gives it.
    os.environ.setdefault("CHAOS_SEED", str(random.SystemRandom().randrange(2**31)))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """In the pytest-xdist controller: the figures a worker's chaos scenarios made."""
    from tests.chaos.convergence import FIGURES, Figures

    rows = getattr(node, "workeroutput", {}).get("chaos_figures", [])
    node.config.stash.setdefault(FIGURES, []).extend(Figures.from_dict(row) for row in rows)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    from tests.chaos.convergence import FIGURES, render
    from tests.chaos.harness import scale_from_env

    rows = config.stash.get(FIGURES, [])
    if rows:
        terminalreporter.write_sep("=", "chaos figures")
        name, seed = scale_from_env().name, os.environ["CHAOS_SEED"]
        header = (
            f"scale {name}, seed {seed} (replay: CHAOS_SEED={seed} CHAOS_SCALE={name})\n"
            "objects as live/deleted, counted in each scenario's databases; deleted in cluster_svc means a"
            " tombstone (or a rule its deleted cluster answers for); purged as platform/cluster_svc, deleted rows"
            " purge removed in the scenario's module so far"
        )
        terminalreporter.write_line(render(rows, header))


SCALE = Path(__file__).parent / "scale"


def pytest_ignore_collect(collection_path, config):
    """tests/scale (the heavy process tests, ``make test-scale``) only when the command line names it
    (or something in it): ``make test`` and a bare ``pytest`` leave it out."""
    if collection_path != SCALE:
        return None
    named = (config.invocation_params.dir / arg.split("::")[0] for arg in config.args)
    return None if any(path.resolve().is_relative_to(SCALE) for path in named) else True


# Modules whose tests run long, handed out first: pytest-xdist's loadscope gives
# whole modules to its workers in collection order (with --no-loadscope-reorder, as
# make test runs it; by default it orders them by their number of tests), and one
# long module handed out last keeps one worker busy while the other idles.
# tests/clients waits on its scripted servers more than it computes: started early, its waits overlap the rest.
LONG_FIRST = ("tests/tooling/test_devrun.py", "tests/clients/", "tests/chaos/", "tests/e2e/")


def pytest_collection_modifyitems(config, items):
    """The long modules first, each module's tests in their own order (a stable sort)."""
    items.sort(key=lambda item: next((i for i, p in enumerate(LONG_FIRST) if item.nodeid.startswith(p)), len(LONG_FIRST)))
