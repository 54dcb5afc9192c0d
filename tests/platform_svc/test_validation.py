"""Bad input answers 4xx problem+json naming what is wrong, and stores nothing."""
from __future__ import annotations

import pytest
from sqlalchemy import text

from tests.helpers import cluster_body, rule_body
from tooling.testing import assert_problem


def count_rows(engine, table, account_id):
    with engine.connect() as conn:
        return conn.execute(text(f"SELECT count(*) FROM {table} WHERE account_id = :a"), {"a": account_id}).scalar()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**cluster_body(), "colour": "blue"}, "colour"),
        ({**cluster_body(), "id": "0190c1d2-0000-7000-8000-000000000001"}, "id"),  # the platform assigns ids
        ({**cluster_body(), "team_id": "0190c1d2-0000-7000-8000-000000000001"}, "team_id"),
        ({**cluster_body(), "generation": 5}, "generation"),
        (cluster_body(region="mars-1"), "region"),
        (cluster_body(postgres_version=13), "postgres_version"),
        (cluster_body(postgres_version=18), "postgres_version"),
        (cluster_body(postgres_version="16"), "postgres_version"),
        (cluster_body(plan="huge"), "plan"),
        (cluster_body(storage_gb=9), "storage_gb"),
        (cluster_body(storage_gb=4097), "storage_gb"),
        (cluster_body(storage_gb=True), "storage_gb"),
        (cluster_body(name="Main_DB"), "name"),
        (cluster_body(name=""), "name"),
        (cluster_body(name="x" * 64), "name"),
        ({k: v for k, v in cluster_body().items() if k != "region"}, "region"),
    ],
)
def test_invalid_cluster_create_is_422_naming_the_field(client, account, platform_engine, body, field):
    before = count_rows(platform_engine, "clusters", account[0])

    problem = assert_problem(client.post("/v1/clusters", json=body), 422, "validation_error")

    assert field in problem["errors"]["json"]
    assert count_rows(platform_engine, "clusters", account[0]) == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "_schema"),
        ({"region": "us-east-1"}, "region"),  # immutable: not part of a PATCH
        ({"postgres_version": 17}, "postgres_version"),
        ({"generation": 9}, "generation"),
        ({"plan": "huge"}, "plan"),
        ({"storage_gb": 5}, "storage_gb"),
        ({"name": "Bad Name"}, "name"),
    ],
)
def test_invalid_cluster_patch_is_422_and_changes_nothing(client, cluster, downstream_engine, body, field):
    problem = assert_problem(client.patch(f"/v1/clusters/{cluster['id']}", json=body), 422, "validation_error")

    assert field in problem["errors"]["json"]
    assert client.get(f"/v1/clusters/{cluster['id']}").get_json()["generation"] == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"description": "no cidr"}, "cidr"),
        (rule_body(cidr="10.0.0.1/8"), "cidr"),  # host bits set
        (rule_body(cidr="not-a-network"), "cidr"),
        (rule_body(cidr="fe80::%eth0/64"), "cidr"),
        (rule_body(description="x" * 256), "description"),
        ({**rule_body(), "cluster_id": "0190c1d2-0000-7000-8000-000000000001"}, "cluster_id"),
    ],
)
def test_invalid_rule_create_is_422_naming_the_field(client, cluster, account, platform_engine, body, field):
    before = count_rows(platform_engine, "firewall_rules", account[0])

    problem = assert_problem(
        client.post(f"/v1/clusters/{cluster['id']}/firewall-rules", json=body), 422, "validation_error"
    )

    assert field in problem["errors"]["json"]
    assert count_rows(platform_engine, "firewall_rules", account[0]) == before


@pytest.mark.parametrize("body", [{}, {"cidr": "192.168.0.0/16"}])
def test_invalid_rule_patch_is_422(client, cluster, rule, body):
    url = f"/v1/clusters/{cluster['id']}/firewall-rules/{rule['id']}"

    assert_problem(client.patch(url, json=body), 422, "validation_error")
    assert client.get(url).get_json()["generation"] == 1


def test_a_body_that_is_not_json_is_415(client):
    assert_problem(client.post("/v1/clusters", data="name=x", content_type="text/plain"), 415, "unsupported_media_type")


def test_malformed_json_is_400(client):
    problem = assert_problem(client.post("/v1/clusters", data="{", content_type="application/json"), 400, "bad_request")

    assert "JSON" in problem["detail"]


@pytest.mark.parametrize("path", ["/v1/clusters/abc", "/v1/clusters/00000000-0000-0000-0000-000000000000"])
def test_a_malformed_id_in_the_path_is_422(client, path):
    problem = assert_problem(client.get(path), 422, "validation_error")

    assert "path" in problem["errors"]


def test_an_unknown_route_is_404_problem_json(client):
    assert_problem(client.get("/v1/databases"), 404, "not_found")


def test_a_wrong_method_is_405_with_allow(client, cluster):
    response = client.put(f"/v1/clusters/{cluster['id']}", json=cluster_body())

    assert_problem(response, 405, "method_not_allowed")
    assert "PATCH" in response.headers["Allow"]
