"""platform_svc through Flask's test client, pushing down to a real cluster_svc.

cluster_svc's real app is served over loopback HTTP from a thread of the test's
process, on its own fresh database; platform_svc runs in-process on another
fresh database, so a test can read both sides with SQL. The services as
processes (gunicorn, signals, the edge) are the e2e tests'.
"""
from __future__ import annotations

import pytest
from sqlalchemy import create_engine

from cluster_svc import Settings as ClusterSettings
from cluster_svc import create_app as create_cluster_app
from cluster_svc.cli import MIGRATIONS as CLUSTER_MIGRATIONS
from platform_svc import Settings, create_app
from platform_svc.cli import MIGRATIONS as PLATFORM_MIGRATIONS
from shared.db import Database
from tests.helpers import UNREACHED_RATE_LIMIT, SteppedClock, authed_client, cluster_body, make_account, rule_body
from tooling.pair import TOKEN
from tooling.inprocess import InProcessServer
from tooling.testing import free_port, fresh_database

# The tests' accounts send requests back to back, faster than the default limit
# (100 a second) allows: they get a limit no test reaches, and the tests of the
# limit give their accounts one of their own (tests/platform_svc/test_rate_limit.py).


@pytest.fixture(scope="session")
def downstream_db_url(pg_server_url):
    return fresh_database(pg_server_url, "pt_cluster", migrations=CLUSTER_MIGRATIONS)


@pytest.fixture(scope="session")
def platform_db_url(pg_server_url):
    return fresh_database(pg_server_url, "pt_platform", migrations=PLATFORM_MIGRATIONS)


@pytest.fixture(scope="session")
def cluster_svc(downstream_db_url):
    """cluster_svc's real app for the whole session, served over loopback HTTP from a thread of
    this process (its process, its signals and its edge are the e2e tests')."""
    app = create_cluster_app(ClusterSettings(database_url=downstream_db_url, internal_token=TOKEN), testing=True)
    with InProcessServer(app) as server:
        yield server
    app.extensions["database"].dispose()


def _app(platform_db_url, cluster_svc_url):
    app = create_app(
        Settings(
            database_url=platform_db_url, cluster_svc_url=cluster_svc_url, internal_token=TOKEN,
            rate_limit=UNREACHED_RATE_LIMIT,
        ),
        testing=True,
    )
    app.extensions["authenticator"].clock = SteppedClock()  # tests step past the key copies' refresh period
    return app


def _dispose(app):
    app.extensions["writes"].pusher.path.client.close()
    app.extensions["console"].client.close()
    app.extensions["database"].dispose()


@pytest.fixture(scope="session")
def app(platform_db_url, cluster_svc):
    app = _app(platform_db_url, cluster_svc.url)
    yield app
    _dispose(app)


@pytest.fixture(scope="session")
def unreachable_app(platform_db_url):
    """The same platform, but cluster_svc cannot be reached (nothing listens there):
    every inline push fails transiently and leaves its row pending. Its circuit
    breaker is taken out so that every inline push is really tried (the
    breaker has tests of its own)."""
    app = _app(platform_db_url, f"http://127.0.0.1:{free_port()}")
    app.extensions["writes"].pusher.breaker = None
    yield app
    _dispose(app)


@pytest.fixture(scope="session")
def platform_engine(platform_db_url):
    engine = create_engine(platform_db_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def downstream_engine(downstream_db_url):
    engine = create_engine(downstream_db_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def platform_database(platform_db_url):
    database = Database(platform_db_url, pool_size=2)
    yield database
    database.dispose()


@pytest.fixture
def account(platform_database):
    return make_account(platform_database, "account-a")


@pytest.fixture
def other_account(platform_database):
    return make_account(platform_database, "account-b")


@pytest.fixture
def client(app, account):
    return authed_client(app, account[1])


@pytest.fixture
def other_client(app, other_account):
    return authed_client(app, other_account[1])


@pytest.fixture
def offline_client(unreachable_app, account):
    """Account A's client on the platform whose inline pushes cannot reach cluster_svc."""
    return authed_client(unreachable_app, account[1])


@pytest.fixture
def cluster(client):
    """A cluster of account A, created and pushed down."""
    response = client.post("/v1/clusters", json=cluster_body())
    assert response.status_code == 201, response.get_data(as_text=True)
    assert response.get_json()["sync_state"] == "synced"
    return response.get_json()


@pytest.fixture
def rule(client, cluster):
    """A firewall rule on ``cluster``, created and pushed down."""
    response = client.post(f"/v1/clusters/{cluster['id']}/firewall-rules", json=rule_body())
    assert response.status_code == 201, response.get_data(as_text=True)
    assert response.get_json()["sync_state"] == "synced"
    return response.get_json()


@pytest.fixture
def live_pusher(platform_database, cluster_svc):
    """A reconciler's pusher that reaches cluster_svc."""
    from idempotent_pair_client.transport import ClientPolicy

    from platform_svc.models import RESOURCES
    from platform_svc.push.pusher import PushPath, UnitPusher
    from shared.client import InternalClient

    client = InternalClient(cluster_svc.url, TOKEN, ClientPolicy(connect_timeout=1, read_timeout=5, retries=1))
    yield UnitPusher(PushPath(platform_database, client), RESOURCES)
    client.close()


@pytest.fixture
def dead_pusher(platform_database):
    """Make a pusher, with a given RetryPolicy, whose calls cannot connect."""
    from idempotent_pair_client.transport import ClientPolicy

    from platform_svc.models import RESOURCES
    from platform_svc.push.pusher import PushPath, UnitPusher
    from shared.client import InternalClient

    clients = []

    def make(retry):
        clients.append(InternalClient(f"http://127.0.0.1:{free_port()}", TOKEN, ClientPolicy(retries=0)))
        return UnitPusher(PushPath(platform_database, clients[-1], retry), RESOURCES)

    yield make
    for client in clients:
        client.close()
