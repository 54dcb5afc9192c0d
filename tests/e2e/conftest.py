"""Both services as a user runs them: gunicorn processes, the CLI, real HTTP
(:class:`tooling.pair.Pair`).

``pair``: the module's pair (two databases, cluster_svc and platform_svc on
loopback ports), shared by its tests, with an account of the test's own (made
by what ``platform-svc create-account`` calls, in this process: the command
itself is tested in tests/platform_svc and used by every chaos scenario).
What the test then checks through the
pair (``assert_downstream_matches``, ``all_synced``, ``platform_rows``) is
about that account's rows only, so the rows other tests leave behind cannot
change what it sees.

``fresh_pair`` / ``new_pair``: a pair of the test's own, for a test that
stops, kills, freezes or reconfigures a process, or that reads something of
the whole pair (every row's state in ``sync-status`` or a metric, a repair
pass over every object, the reconciler pushing every due row): each such test
says which.
"""
from __future__ import annotations

import pytest

from tests.helpers import with_account
from tooling.pair import Pair, start_pair


@pytest.fixture(scope="session")
def module_pair(pg_server_url, tmp_path_factory):
    """One pair for every test of this run's worker that only makes and reads rows of its own
    (each starting a pair of its own cost the suite a pair's start-up, about 2.5 s of CPU, per
    module); a module whose tests need another overrides it."""
    pair = start_pair(pg_server_url, tmp_path_factory.mktemp("shared_pair"))
    try:
        yield pair
    finally:
        pair.stop()


@pytest.fixture
def pair(module_pair, request):
    """The module's pair, with an account of this test's own."""
    return with_account(module_pair, request)


@pytest.fixture
def new_pair(pg_server_url, tmp_path_factory, request):
    """Start a pair of the test's own, with an account; stopped after the test.

    Its databases are on ``server_url`` (the run's PostgreSQL unless given);
    other options: see :func:`start_pair` and :class:`Pair`.
    """
    started: list[Pair] = []

    def new(*, server_url: str = pg_server_url, **options) -> Pair:
        workdir = tmp_path_factory.mktemp(request.node.name[:40])
        started.append(start_pair(server_url, workdir, **options))
        return with_account(started[-1], request)

    yield new
    for pair in started:
        pair.stop()


@pytest.fixture
def fresh_pair(new_pair):
    """A pair of the test's own: see the module's docstring for when a test needs one."""
    return new_pair()
