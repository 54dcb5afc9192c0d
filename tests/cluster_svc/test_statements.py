"""Create-or-return costs one statement, a replay two: INSERT ... ON CONFLICT
DO NOTHING RETURNING first, and a read only when it returned nothing (never
SELECT-then-INSERT)."""
from __future__ import annotations

import pytest

from tooling.testing import StatementCounter
from tests.cluster_svc.conftest import cluster_body, rule_body


@pytest.fixture
def counter(engine, client):
    # Warm the pool first so connection set-up queries are not counted.
    assert client.get("/healthz").status_code == 200
    assert client.get("/v1/clusters?limit=1").status_code == 200
    return StatementCounter(engine)


def kinds(statements):
    return [statement.split(None, 1)[0].upper() for statement in statements]


def test_a_create_is_exactly_one_insert(client, counter):
    with counter.counting() as statements:
        response = client.post("/v1/clusters", json=cluster_body())

    assert response.status_code == 201
    assert kinds(statements) == ["INSERT"], statements
    assert "ON CONFLICT (id) DO NOTHING" in statements[0]
    assert "RETURNING" in statements[0]


def test_a_replay_is_the_insert_then_one_select(client, counter):
    body = cluster_body()
    assert client.post("/v1/clusters", json=body).status_code == 201

    with counter.counting() as statements:
        response = client.post("/v1/clusters", json=body)

    assert response.status_code == 200
    assert kinds(statements) == ["INSERT", "SELECT"], statements
    assert "ON CONFLICT (id) DO NOTHING" in statements[0]


def test_a_firewall_rule_create_is_exactly_one_guarded_insert(client, counter, cluster):
    with counter.counting() as statements:
        response = client.post(f"/v1/clusters/{cluster['id']}/firewall-rules", json=rule_body())

    assert response.status_code == 201
    assert kinds(statements) == ["INSERT"], statements
    assert "ON CONFLICT (id) DO NOTHING" in statements[0]


def test_a_firewall_rule_replay_is_the_insert_then_one_select(client, counter, cluster):
    body = rule_body()
    url = f"/v1/clusters/{cluster['id']}/firewall-rules"
    assert client.post(url, json=body).status_code == 201

    with counter.counting() as statements:
        response = client.post(url, json=body)

    assert response.status_code == 200
    assert kinds(statements) == ["INSERT", "SELECT"], statements
