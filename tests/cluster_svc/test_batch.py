"""The batch create routes of cluster_svc's contract, through the test client:
one answer per item, in order, each what the item's single create answers."""
from __future__ import annotations

import json
import uuid

import pytest

from shared.api import MAX_BODY_BYTES
from tests.helpers import internal_cluster_body, internal_rule_body
from tooling.testing import assert_problem, db_row

CLUSTERS_BATCH = "/v1/clusters/batch"


def rules_batch(cluster_id):
    return f"/v1/clusters/{cluster_id}/firewall-rules/batch"


def post_batch(client, url, items):
    """POST the batch; assert the envelope is a 200 with one result per item; return the results."""
    response = client.post(url, json={"items": items})
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.mimetype == "application/json"
    results = response.get_json()["results"]
    assert len(results) == len(items)
    for result in results:
        assert set(result) == ({"status", "object"} if result["status"] in (200, 201) else {"status", "problem"})
        if "problem" in result:
            assert result["problem"]["status"] == result["status"]
            assert result["problem"]["type"] and result["problem"]["title"] and result["problem"]["detail"]
    return results


def statuses(results):
    return [result["status"] for result in results]


def codes(results):
    return [result.get("problem", {}).get("code") for result in results]


def created(client, body):
    response = client.post("/v1/clusters", json=body)
    assert response.status_code == 201
    return response.get_json()


def deleted(client, body):
    created(client, body)
    assert client.delete(f"/v1/clusters/{body['id']}").status_code == 204
    return body


# --- clusters: mixed items --------------------------------------------------


def test_mixed_items_answer_one_result_each_in_order(client, engine):
    existing = internal_cluster_body(name="existing")
    created(client, existing)
    tombstoned = deleted(client, internal_cluster_body())
    new_first, new_last = internal_cluster_body(name="first"), internal_cluster_body(name="last", generation=3)
    invalid = internal_cluster_body(plan="platinum")
    items = [
        new_first,
        dict(existing, name="renamed", storage_gb=999),  # mutable fields may differ on a replay
        dict(existing, region="us-east-1", postgres_version=14),
        tombstoned,
        invalid,
        new_last,
    ]

    results = post_batch(client, CLUSTERS_BATCH, items)

    assert statuses(results) == [201, 200, 409, 410, 422, 201]
    assert codes(results) == [None, None, "id_conflict", "gone", "validation_error", None]
    for result, sent in ((results[0], new_first), (results[5], new_last)):
        assert {key: result["object"][key] for key in sent} == sent
        assert client.get(f"/v1/clusters/{sent['id']}").get_json() == result["object"]
        row = db_row(engine, "clusters", sent["id"])
        assert (row["name"], row["generation"], row["deleted_at"]) == (sent["name"], sent.get("generation", 1), None)
    assert results[1]["object"] == client.get(f"/v1/clusters/{existing['id']}").get_json()
    assert results[1]["object"]["name"] == "existing"  # the current state, not the replay's
    assert results[2]["problem"]["conflicts"] == [
        {"field": "region", "stored": "eu-west-1", "sent": "us-east-1"},
        {"field": "postgres_version", "stored": 16, "sent": 14},
    ]
    assert list(results[4]["problem"]["errors"]["json"]) == ["plan"]
    assert db_row(engine, "clusters", invalid["id"]) is None
    assert db_row(engine, "clusters", existing["id"])["name"] == "existing"
    assert db_row(engine, "clusters", tombstoned["id"])["deleted_at"] is not None


def test_each_item_answers_what_its_single_create_answers(client):
    existing = internal_cluster_body()
    created(client, existing)
    tombstoned = deleted(client, internal_cluster_body())
    items = [dict(existing, team_id=str(uuid.uuid4())), tombstoned, internal_cluster_body(storage_gb="10")]

    results = post_batch(client, CLUSTERS_BATCH, items)

    for result, item in zip(results, items):
        single = client.post("/v1/clusters", json=item)
        assert result == {"status": single.status_code, "problem": single.get_json()}


def test_a_batch_of_only_invalid_items_stores_nothing(client, engine):
    items = [internal_cluster_body(region="mars-1"), {"id": str(uuid.uuid4())}, "not an object", None, []]

    results = post_batch(client, CLUSTERS_BATCH, items)

    assert statuses(results) == [422] * 5
    assert list(results[0]["problem"]["errors"]["json"]) == ["region"]
    assert set(results[1]["problem"]["errors"]["json"]) == {
        "team_id", "name", "region", "postgres_version", "plan", "storage_gb",
    }
    for result in results[2:]:
        assert result["problem"]["errors"] == {"json": {"_schema": ["Invalid input type."]}}
    assert db_row(engine, "clusters", items[0]["id"]) is None


# --- clusters: an ID repeated within a batch -----------------------------------


def test_a_repeated_new_id_is_created_by_its_first_occurrence_and_replayed_after(client, engine):
    first = internal_cluster_body(name="first")
    other_team = str(uuid.uuid4())
    items = [first, first, dict(first, name="second"), dict(first, region="us-west-2"), dict(first, team_id=other_team)]

    results = post_batch(client, CLUSTERS_BATCH, items)

    assert statuses(results) == [201, 200, 200, 409, 409]
    assert results[1]["object"] == results[2]["object"] == results[0]["object"]
    assert results[2]["object"]["name"] == "first"  # the first occurrence decided
    assert [c["field"] for c in results[3]["problem"]["conflicts"]] == ["region"]
    assert [c["field"] for c in results[4]["problem"]["conflicts"]] == ["team_id"]
    assert db_row(engine, "clusters", first["id"])["name"] == "first"


def test_an_invalid_first_occurrence_leaves_the_decision_to_the_first_valid_one(client, engine):
    body = internal_cluster_body(region="eu-central-1")
    items = [dict(body, storage_gb=5), dict(body, name="valid"), body, dict(body, region="us-east-1")]

    results = post_batch(client, CLUSTERS_BATCH, items)

    assert statuses(results) == [422, 201, 200, 409]
    assert db_row(engine, "clusters", body["id"])["name"] == "valid"


def test_a_repeated_existing_or_tombstoned_id_answers_the_same_each_time(client):
    existing = internal_cluster_body()
    created(client, existing)
    tombstoned = deleted(client, internal_cluster_body())
    conflicting = dict(existing, region="ap-southeast-1")

    results = post_batch(client, CLUSTERS_BATCH, [tombstoned, conflicting, existing, tombstoned, existing, conflicting])

    assert statuses(results) == [410, 409, 200, 410, 200, 409]


# --- clusters: the envelope ---------------------------------------------------


def test_a_batch_of_1000_items_of_the_largest_bodies_fits_in_the_body_limit(client, engine):
    items = [
        internal_cluster_body(name="n" * 63, region="ap-southeast-1", plan="standard-2", storage_gb=4096, generation=2**31 - 1)
        for _ in range(1000)
    ]
    assert len(json.dumps({"items": items})) < MAX_BODY_BYTES / 2

    results = post_batch(client, CLUSTERS_BATCH, items)

    assert statuses(results) == [201] * 1000
    assert [result["object"]["id"] for result in results] == [item["id"] for item in items]
    assert db_row(engine, "clusters", items[-1]["id"])["storage_gb"] == 4096


def test_more_than_1000_items_is_413_and_stores_nothing(client, engine):
    items = [internal_cluster_body() for _ in range(1001)]

    response = client.post(CLUSTERS_BATCH, json={"items": items})

    body = assert_problem(response, 413, "payload_too_large")
    assert "1,000" in body["detail"]
    assert db_row(engine, "clusters", items[0]["id"]) is None


@pytest.mark.parametrize(
    ("envelope", "field"),
    [
        ({}, "items"),
        ({"items": []}, "items"),
        ({"items": None}, "items"),
        ({"items": "abc"}, "items"),
        ({"items": {"id": "x"}}, "items"),
        ({"items": 3}, "items"),
        ({"items": [{}], "extra": 1}, "extra"),
    ],
    ids=["missing", "empty", "null", "string", "object", "number", "unknown-field"],
)
def test_a_bad_envelope_is_422_naming_it(client, envelope, field):
    response = client.post(CLUSTERS_BATCH, json=envelope)

    body = assert_problem(response, 422, "validation_error")
    assert list(body["errors"]["json"]) == [field]


@pytest.mark.parametrize("envelope", [[], [{"id": "x"}], "items", 1, None])
def test_a_body_that_is_not_an_object_is_422(client, envelope):
    response = client.post(CLUSTERS_BATCH, data=json.dumps(envelope), content_type="application/json")

    assert_problem(response, 422, "validation_error")


def test_invalid_json_is_400_and_a_non_json_body_is_415(client):
    truncated = client.post(CLUSTERS_BATCH, data='{"items": [', content_type="application/json")
    assert_problem(truncated, 400, "bad_request")
    form = client.post(CLUSTERS_BATCH, data="items=1", content_type="text/plain")
    assert_problem(form, 415, "unsupported_media_type")


# A fixed cluster ID: it is in the test's ID, which must be the same in every pytest-xdist worker.
@pytest.mark.parametrize("url", [CLUSTERS_BATCH, rules_batch("3c3d8d4e-ee56-438d-93f2-6e4ece6ebec4")])
def test_a_batch_without_the_token_is_401_and_stores_nothing(anon, engine, url):
    body = internal_rule_body() if "firewall" in url else internal_cluster_body()

    response = anon.post(url, json={"items": [body]})

    assert_problem(response, 401, "unauthorized")
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert db_row(engine, "firewall_rules" if "firewall" in url else "clusters", body["id"]) is None


def test_the_batch_routes_are_documented(client):
    spec = client.get("/openapi.json").get_json()

    for path in ("/v1/clusters/batch", "/v1/clusters/{cluster_id}/firewall-rules/batch"):
        post = spec["paths"][path]["post"]
        assert {"200", "413", "422"} <= set(post["responses"])
        assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    request = spec["components"]["schemas"]["ClusterBatchCreate"]["properties"]["items"]
    assert request["maxItems"] == 1000
    assert request["items"]["$ref"].endswith("/ClusterCreate")


# --- firewall rules -----------------------------------------------------------


def test_mixed_rules_answer_one_result_each_in_order(client, engine, cluster):
    url = rules_batch(cluster["id"])
    existing = internal_rule_body(cidr="10.1.0.0/16", description="old")
    assert client.post(f"/v1/clusters/{cluster['id']}/firewall-rules", json=existing).status_code == 201
    tombstoned = internal_rule_body()
    assert client.post(f"/v1/clusters/{cluster['id']}/firewall-rules", json=tombstoned).status_code == 201
    assert client.delete(f"/v1/clusters/{cluster['id']}/firewall-rules/{tombstoned['id']}").status_code == 204
    elsewhere = internal_rule_body()
    other = created(client, internal_cluster_body())
    assert client.post(f"/v1/clusters/{other['id']}/firewall-rules", json=elsewhere).status_code == 201
    new = internal_rule_body(cidr="2001:db8::/32")
    items = [
        new,
        dict(existing, description="new"),
        dict(existing, cidr="10.2.0.0/16"),
        tombstoned,
        elsewhere,
        internal_rule_body(cidr="10.0.0.1/8"),
        new,
    ]

    results = post_batch(client, url, items)

    assert statuses(results) == [201, 200, 409, 410, 409, 422, 200]
    assert results[0]["object"]["cluster_id"] == cluster["id"]
    assert results[0]["object"] == results[6]["object"]
    assert results[1]["object"]["description"] == "old"
    assert [c["field"] for c in results[2]["problem"]["conflicts"]] == ["cidr"]
    assert results[4]["problem"]["conflicts"] == [{"field": "cluster_id", "stored": other["id"], "sent": cluster["id"]}]
    assert "cidr" in results[5]["problem"]["errors"]["json"]
    row = db_row(engine, "firewall_rules", new["id"])
    assert (str(row["cluster_id"]), row["cidr"], row["deleted_at"]) == (cluster["id"], "2001:db8::/32", None)
    assert str(db_row(engine, "firewall_rules", elsewhere["id"])["cluster_id"]) == other["id"]


def test_rules_under_a_cluster_that_never_existed_answer_404_each(client, engine):
    items = [internal_rule_body(), internal_rule_body(cidr="bad")]

    results = post_batch(client, rules_batch(uuid.uuid4()), items)

    assert statuses(results) == [404, 422]
    assert results[0]["problem"]["code"] == "not_found"
    assert db_row(engine, "firewall_rules", items[0]["id"]) is None


def test_rules_under_a_deleted_cluster_answer_410_each_and_stay_deleted(client, engine, cluster):
    url = rules_batch(cluster["id"])
    old = internal_rule_body()
    assert statuses(post_batch(client, url, [old])) == [201]
    assert client.delete(f"/v1/clusters/{cluster['id']}").status_code == 204
    new = [internal_rule_body(), internal_rule_body()]

    results = post_batch(client, url, [old, *new])

    assert statuses(results) == [410, 410, 410]
    assert codes(results) == ["gone"] * 3
    assert db_row(engine, "firewall_rules", old["id"])["deleted_at"] is not None
    assert all(db_row(engine, "firewall_rules", rule["id"]) is None for rule in new)


def test_a_rule_batch_over_1000_items_is_413(client, cluster):
    response = client.post(rules_batch(cluster["id"]), json={"items": [internal_rule_body() for _ in range(1001)]})

    assert_problem(response, 413, "payload_too_large")


def test_a_bad_cluster_id_in_a_rule_batch_path_is_422(client):
    response = client.post("/v1/clusters/not-a-uuid/firewall-rules/batch", json={"items": [internal_rule_body()]})

    body = assert_problem(response, 422, "validation_error")
    assert body["errors"]["path"]
