from __future__ import annotations

import uuid

import pytest

from cluster_svc import Settings, create_app
from cluster_svc.cli import MIGRATIONS
from tooling.testing import fresh_database

TOKEN = "test-internal-token"


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


def cluster_body(**overrides):
    body = {
        "id": str(uuid.uuid4()),
        "team_id": str(uuid.uuid4()),
        "name": "main-db",
        "region": "eu-west-1",
        "postgres_version": 16,
        "plan": "standard-2",
        "storage_gb": 100,
    }
    body.update(overrides)
    return body


@pytest.fixture
def cluster(client):
    """A freshly created cluster's body, as cluster_svc answered it."""
    response = client.post("/v1/clusters", json=cluster_body())
    assert response.status_code == 201
    return response.get_json()


def rule_body(**overrides):
    body = {"id": str(uuid.uuid4()), "cidr": "10.0.0.0/8", "description": "office"}
    body.update(overrides)
    return body


@pytest.fixture
def rule(client, cluster):
    """A freshly created firewall rule under ``cluster``, as cluster_svc answered it."""
    response = client.post(f"/v1/clusters/{cluster['id']}/firewall-rules", json=rule_body())
    assert response.status_code == 201
    return response.get_json()
