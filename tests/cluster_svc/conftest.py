from __future__ import annotations

import pytest

from cluster_svc import Settings, create_app
from cluster_svc.cli import MIGRATIONS
from tests.helpers import internal_cluster_body, internal_rule_body
from tooling.pair import TOKEN
from tooling.testing import fresh_database


@pytest.fixture(scope="session")
def cluster_db_url(pg_server_url):
    return fresh_database(pg_server_url, "cluster", migrations=MIGRATIONS)


@pytest.fixture(scope="session")
def app(cluster_db_url):
    return create_app(Settings(database_url=cluster_db_url, internal_token=TOKEN), testing=True)


@pytest.fixture(scope="session")
def engine(app):
    return app.extensions["database"].engine


@pytest.fixture
def client(app):
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {TOKEN}"
    return client


@pytest.fixture
def anon(app):
    """A client without credentials."""
    return app.test_client()


@pytest.fixture
def cluster(client):
    """A freshly created cluster's body, as cluster_svc answered it."""
    response = client.post("/v1/clusters", json=internal_cluster_body())
    assert response.status_code == 201
    return response.get_json()


@pytest.fixture
def rule(client, cluster):
    """A freshly created firewall rule under ``cluster``, as cluster_svc answered it."""
    response = client.post(f"/v1/clusters/{cluster['id']}/firewall-rules", json=internal_rule_body())
    assert response.status_code == 201
    return response.get_json()
