"""Create-or-return costs one statement, a replay two: INSERT ... ON CONFLICT
DO NOTHING RETURNING first, and a read only when it returned nothing (never
SELECT-then-INSERT)."""
from __future__ import annotations

import math

import pytest

from tests.helpers import internal_cluster_body, internal_rule_body
from tooling.testing import StatementCounter


@pytest.fixture
def counter(engine, client, monkeypatch):
    # Warm the pool first so connection set-up queries are not counted.
    assert client.get("/healthz").status_code == 200
    assert client.get("/v1/clusters?limit=1").status_code == 200
    # The clock is measured now and not again while counting (a write past CLOCK_CHECK_SECONDS
    # since the last measurement measures first: one SELECT of the request's, not the create's).
    clock = client.application.extensions["clock"]
    monkeypatch.setattr(clock, "every", math.inf)
    clock.measure()
    return StatementCounter(engine)


def kinds(statements):
    return [statement.split(None, 1)[0].upper() for statement in statements]


def test_a_create_is_exactly_one_insert(client, counter):
    with counter.counting() as statements:
        response = client.post("/v1/clusters", json=internal_cluster_body())

    assert response.status_code == 201
    assert kinds(statements) == ["INSERT"], statements
    assert "ON CONFLICT (id) DO NOTHING" in statements[0]
    assert "RETURNING" in statements[0]


def test_a_replay_is_the_insert_then_one_select(client, counter):
    body = internal_cluster_body()
    assert client.post("/v1/clusters", json=body).status_code == 201

    with counter.counting() as statements:
        response = client.post("/v1/clusters", json=body)

    assert response.status_code == 200
    assert kinds(statements) == ["INSERT", "SELECT"], statements
    assert "ON CONFLICT (id) DO NOTHING" in statements[0]


def test_a_firewall_rule_create_is_exactly_one_guarded_insert(client, counter, cluster):
    with counter.counting() as statements:
        response = client.post(f"/v1/clusters/{cluster['id']}/firewall-rules", json=internal_rule_body())

    assert response.status_code == 201
    assert kinds(statements) == ["INSERT"], statements
    assert "ON CONFLICT (id) DO NOTHING" in statements[0]


def test_a_firewall_rule_replay_is_the_insert_then_one_select(client, counter, cluster):
    body = internal_rule_body()
    url = f"/v1/clusters/{cluster['id']}/firewall-rules"
    assert client.post(url, json=body).status_code == 201

    with counter.counting() as statements:
        response = client.post(url, json=body)

    assert response.status_code == 200
    assert kinds(statements) == ["INSERT", "SELECT"], statements


# --- batches (P4: one INSERT per batch of new items, one read more for existing ones) ---

BATCH = 50


def test_a_batch_of_new_clusters_is_exactly_one_insert(client, counter):
    with counter.counting() as statements:
        response = client.post("/v1/clusters/batch", json={"items": [internal_cluster_body() for _ in range(BATCH)]})

    assert response.status_code == 200
    assert [result["status"] for result in response.get_json()["results"]] == [201] * BATCH
    assert kinds(statements) == ["INSERT"], statements
    assert "ON CONFLICT (id) DO NOTHING" in statements[0] and "unnest" in statements[0]


def test_a_batch_with_existing_clusters_adds_exactly_one_select(client, counter):
    existing = [internal_cluster_body() for _ in range(BATCH)]
    assert client.post("/v1/clusters/batch", json={"items": existing}).status_code == 200
    items = [*existing, *[internal_cluster_body() for _ in range(BATCH)], existing[0]]

    with counter.counting() as statements:
        response = client.post("/v1/clusters/batch", json={"items": items})

    assert [result["status"] for result in response.get_json()["results"]] == [200] * BATCH + [201] * BATCH + [200]
    assert kinds(statements) == ["INSERT", "SELECT"], statements


def test_a_batch_of_new_firewall_rules_is_exactly_one_guarded_insert(client, counter, cluster):
    url = f"/v1/clusters/{cluster['id']}/firewall-rules/batch"

    with counter.counting() as statements:
        response = client.post(url, json={"items": [internal_rule_body() for _ in range(BATCH)]})

    assert [result["status"] for result in response.get_json()["results"]] == [201] * BATCH
    assert kinds(statements) == ["INSERT"], statements
    assert "FOR SHARE" in statements[0]


def test_a_batch_with_existing_firewall_rules_adds_exactly_one_select(client, counter, cluster):
    url = f"/v1/clusters/{cluster['id']}/firewall-rules/batch"
    existing = [internal_rule_body() for _ in range(BATCH)]
    assert client.post(url, json={"items": existing}).status_code == 200

    with counter.counting() as statements:
        response = client.post(url, json={"items": [*existing, internal_rule_body()]})

    assert [result["status"] for result in response.get_json()["results"]] == [200] * BATCH + [201]
    assert kinds(statements) == ["INSERT", "SELECT"], statements


def test_a_batch_of_one_is_the_single_create(client, counter):
    body = internal_cluster_body()

    with counter.counting() as batch_new:
        client.post("/v1/clusters/batch", json={"items": [body]})
    with counter.counting() as batch_replay:
        client.post("/v1/clusters/batch", json={"items": [body]})
    with counter.counting() as single_new:
        client.post("/v1/clusters", json=internal_cluster_body())
    with counter.counting() as single_replay:
        client.post("/v1/clusters", json=body)

    assert batch_new == single_new and kinds(batch_new) == ["INSERT"]
    assert batch_replay == single_replay and kinds(batch_replay) == ["INSERT", "SELECT"]


def test_a_batch_of_only_invalid_items_sends_no_statement(client, counter):
    with counter.counting() as statements:
        response = client.post("/v1/clusters/batch", json={"items": [internal_cluster_body(plan="x")] * 3})

    assert response.status_code == 200
    assert statements == []
