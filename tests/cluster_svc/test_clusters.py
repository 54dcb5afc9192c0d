"""The cluster routes of cluster_svc's contract, through the test client."""
from __future__ import annotations

import uuid
from datetime import datetime

import pytest

from tests.helpers import internal_cluster_body, internal_rule_body
from tooling.testing import assert_problem, db_row

FIELDS = (
    "id", "team_id", "name", "region", "postgres_version", "plan", "storage_gb",
    "generation", "created_at", "updated_at", "deleted_at",
)


def update_body(generation, **overrides):
    body = {"generation": generation, "name": "renamed", "plan": "memory-8", "storage_gb": 250}
    body.update(overrides)
    return body


# --- create ---------------------------------------------------------------


def test_create_answers_201_with_location_full_body_and_stores_the_row(client, engine):
    sent = internal_cluster_body()

    response = client.post("/v1/clusters", json=sent)

    assert response.status_code == 201
    assert response.headers["Location"].endswith(f"/v1/clusters/{sent['id']}")
    assert "Idempotent-Replayed" not in response.headers
    body = response.get_json()
    assert set(body) == set(FIELDS)
    assert {k: body[k] for k in sent} == sent
    assert body["generation"] == 1
    assert body["deleted_at"] is None
    assert body["created_at"] == body["updated_at"]
    row = db_row(engine, "clusters", sent["id"])
    assert str(row["team_id"]) == sent["team_id"]
    assert (row["name"], row["region"], row["postgres_version"], row["plan"], row["storage_gb"]) == (
        "main-db", "eu-west-1", 16, "standard-2", 100,
    )
    assert row["generation"] == 1 and row["deleted_at"] is None


def test_create_keeps_a_caller_given_generation(client, engine):
    sent = internal_cluster_body(generation=4)

    response = client.post("/v1/clusters", json=sent)

    assert response.status_code == 201
    assert response.get_json()["generation"] == 4
    assert db_row(engine, "clusters", sent["id"])["generation"] == 4


def test_location_of_a_create_serves_the_cluster(client):
    response = client.post("/v1/clusters", json=internal_cluster_body())

    fetched = client.get(response.headers["Location"])

    assert fetched.status_code == 200
    assert fetched.get_json() == response.get_json()


def test_replay_answers_200_replayed_with_the_same_object(client, engine, cluster):
    replay = client.post("/v1/clusters", json=internal_cluster_body(id=cluster["id"], team_id=cluster["team_id"]))

    assert replay.status_code == 200
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.headers["Location"].endswith(f"/v1/clusters/{cluster['id']}")
    assert replay.get_json() == cluster
    assert db_row(engine, "clusters", cluster["id"])["generation"] == 1


def test_replay_answers_the_current_state_not_the_first_response(client, cluster):
    updated = client.put(f"/v1/clusters/{cluster['id']}", json=update_body(2))
    assert updated.status_code == 200

    replay = client.post("/v1/clusters", json=internal_cluster_body(id=cluster["id"], team_id=cluster["team_id"]))

    assert replay.status_code == 200
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.get_json() == updated.get_json()
    assert replay.get_json()["name"] == "renamed"
    assert replay.get_json()["generation"] == 2


@pytest.mark.parametrize(
    "changes",
    [
        {"name": "another-name"},
        {"plan": "memory-8"},
        {"storage_gb": 4096},
        {"name": "x", "plan": "hobby-0", "storage_gb": 10, "generation": 7},
    ],
    ids=["name", "plan", "storage_gb", "all-mutable-and-generation"],
)
def test_replay_with_different_mutable_fields_answers_the_stored_state(client, engine, cluster, changes):
    before = db_row(engine, "clusters", cluster["id"])

    replay = client.post("/v1/clusters", json=internal_cluster_body(id=cluster["id"], team_id=cluster["team_id"], **changes))

    assert replay.status_code == 200
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.get_json() == cluster
    assert db_row(engine, "clusters", cluster["id"]) == before


@pytest.mark.parametrize(
    "changes",
    [
        {"team_id": "f0f0f0f0-0000-4000-8000-000000000001"},
        {"region": "us-east-1"},
        {"postgres_version": 17},
        {"team_id": "f0f0f0f0-0000-4000-8000-000000000002", "region": "ap-southeast-1", "postgres_version": 14},
        {"region": "us-west-2", "name": "other", "storage_gb": 20},
    ],
    ids=["team_id", "region", "postgres_version", "all-immutable", "immutable-and-mutable"],
)
def test_replay_with_different_immutable_fields_is_an_id_conflict(client, engine, cluster, changes):
    before = db_row(engine, "clusters", cluster["id"])
    sent = internal_cluster_body(**{"id": cluster["id"], "team_id": cluster["team_id"], **changes})

    response = client.post("/v1/clusters", json=sent)

    body = assert_problem(response, 409, "id_conflict")
    expected = [
        {"field": field, "stored": cluster[field], "sent": sent[field]}
        for field in ("team_id", "region", "postgres_version")
        if sent[field] != cluster[field]
    ]
    assert sorted(body["conflicts"], key=lambda c: c["field"]) == sorted(expected, key=lambda c: c["field"])
    for conflict in expected:
        assert conflict["field"] in body["detail"]
    assert db_row(engine, "clusters", cluster["id"]) == before


def test_create_of_a_deleted_id_is_gone_and_never_resurrects_it(client, engine, cluster):
    assert client.delete(f"/v1/clusters/{cluster['id']}").status_code == 204
    tombstone = db_row(engine, "clusters", cluster["id"])

    response = client.post("/v1/clusters", json=internal_cluster_body(id=cluster["id"], team_id=cluster["team_id"]))

    assert_problem(response, 410, "gone")
    assert db_row(engine, "clusters", cluster["id"]) == tombstone
    assert tombstone["deleted_at"] is not None
    assert_problem(client.get(f"/v1/clusters/{cluster['id']}"), 410, "gone")


# --- read -----------------------------------------------------------------


def test_get_answers_the_cluster(client, cluster):
    response = client.get(f"/v1/clusters/{cluster['id']}")

    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert response.get_json() == cluster


def test_get_of_an_unknown_id_is_404(client, engine):
    missing = uuid.uuid4()

    assert_problem(client.get(f"/v1/clusters/{missing}"), 404, "not_found")
    assert db_row(engine, "clusters", missing) is None  # a read records nothing


def test_get_after_delete_is_410(client, cluster):
    assert client.delete(f"/v1/clusters/{cluster['id']}").status_code == 204

    assert_problem(client.get(f"/v1/clusters/{cluster['id']}"), 410, "gone")


# --- list -----------------------------------------------------------------


def create_team(client, count):
    team_id = str(uuid.uuid4())
    ids = []
    for _ in range(count):
        response = client.post("/v1/clusters", json=internal_cluster_body(team_id=team_id))
        assert response.status_code == 201
        ids.append(response.get_json()["id"])
    return team_id, sorted(ids, key=uuid.UUID)


def test_list_filters_by_team_in_id_order_without_tombstones(client, cluster):
    team_id, ids = create_team(client, 4)
    assert client.delete(f"/v1/clusters/{ids[1]}").status_code == 204

    response = client.get(f"/v1/clusters?team_id={team_id}")

    assert response.status_code == 200
    body = response.get_json()
    assert [item["id"] for item in body["items"]] == [ids[0], ids[2], ids[3]]
    assert all(item["team_id"] == team_id for item in body["items"])
    assert body["next_after"] is None
    assert cluster["id"] not in [item["id"] for item in body["items"]]


def test_list_items_are_full_clusters(client, cluster):
    response = client.get(f"/v1/clusters?team_id={cluster['team_id']}")

    assert response.get_json() == {"items": [cluster], "next_after": None}


def test_list_of_an_unknown_team_is_empty(client):
    response = client.get(f"/v1/clusters?team_id={uuid.uuid4()}")

    assert response.status_code == 200
    assert response.get_json() == {"items": [], "next_after": None}


def test_list_pages_with_limit_and_after(client):
    team_id, ids = create_team(client, 5)

    pages = []
    after = None
    while True:
        query = f"/v1/clusters?team_id={team_id}&limit=2" + (f"&after={after}" if after else "")
        response = client.get(query)
        assert response.status_code == 200
        body = response.get_json()
        pages.append([item["id"] for item in body["items"]])
        after = body["next_after"]
        if after is None:
            break
        assert after == pages[-1][-1]
        assert len(pages) < 10

    assert pages == [ids[0:2], ids[2:4], ids[4:5]]


def test_list_of_an_exactly_full_page_has_no_next(client):
    team_id, ids = create_team(client, 2)

    body = client.get(f"/v1/clusters?team_id={team_id}&limit=2").get_json()

    assert [item["id"] for item in body["items"]] == ids
    assert body["next_after"] is None


def test_unfiltered_list_leaves_bare_tombstones_out(client):
    tombstone = uuid.uuid4()
    assert client.delete(f"/v1/clusters/{tombstone}").status_code == 404
    just_before = uuid.UUID(int=tombstone.int - 1)

    body = client.get(f"/v1/clusters?limit=1&after={just_before}").get_json()

    assert str(tombstone) not in [item["id"] for item in body["items"]]


def test_unfiltered_list_leaves_deleted_clusters_out(client, cluster):
    assert client.delete(f"/v1/clusters/{cluster['id']}").status_code == 204
    just_before = uuid.UUID(int=uuid.UUID(cluster["id"]).int - 1)

    body = client.get(f"/v1/clusters?limit=1&after={just_before}").get_json()

    assert cluster["id"] not in [item["id"] for item in body["items"]]


# --- update ---------------------------------------------------------------


def test_put_with_a_higher_generation_applies(client, engine, cluster):
    response = client.put(f"/v1/clusters/{cluster['id']}", json=update_body(2))

    assert response.status_code == 200
    body = response.get_json()
    assert (body["name"], body["plan"], body["storage_gb"], body["generation"]) == ("renamed", "memory-8", 250, 2)
    assert {k: body[k] for k in ("id", "team_id", "region", "postgres_version", "created_at")} == {
        k: cluster[k] for k in ("id", "team_id", "region", "postgres_version", "created_at")
    }
    assert datetime.fromisoformat(body["updated_at"]) > datetime.fromisoformat(cluster["updated_at"])
    row = db_row(engine, "clusters", cluster["id"])
    assert (row["name"], row["plan"], row["storage_gb"], row["generation"]) == ("renamed", "memory-8", 250, 2)
    assert row["updated_at"] > row["created_at"]


def test_put_may_skip_generations(client, engine, cluster):
    response = client.put(f"/v1/clusters/{cluster['id']}", json=update_body(9))

    assert response.status_code == 200
    assert response.get_json()["generation"] == 9
    assert db_row(engine, "clusters", cluster["id"])["generation"] == 9


@pytest.mark.parametrize("generation", [1, 2, 3], ids=["older", "older-still-above-1", "equal"])
def test_stale_or_repeated_put_changes_nothing(client, engine, cluster, generation):
    current = client.put(f"/v1/clusters/{cluster['id']}", json=update_body(3)).get_json()
    before = db_row(engine, "clusters", cluster["id"])

    response = client.put(
        f"/v1/clusters/{cluster['id']}",
        json=update_body(generation, name="stale-name", plan="hobby-0", storage_gb=10),
    )

    assert response.status_code == 200
    assert response.get_json() == current
    assert db_row(engine, "clusters", cluster["id"]) == before


def test_put_of_an_unknown_id_is_404_and_creates_nothing(client, engine):
    missing = uuid.uuid4()

    assert_problem(client.put(f"/v1/clusters/{missing}", json=update_body(2)), 404, "not_found")
    assert db_row(engine, "clusters", missing) is None


def test_put_of_a_deleted_cluster_is_410_and_changes_nothing(client, engine, cluster):
    assert client.delete(f"/v1/clusters/{cluster['id']}").status_code == 204
    tombstone = db_row(engine, "clusters", cluster["id"])

    assert_problem(client.put(f"/v1/clusters/{cluster['id']}", json=update_body(2)), 410, "gone")
    assert db_row(engine, "clusters", cluster["id"]) == tombstone


# --- delete ---------------------------------------------------------------


def test_delete_answers_204_then_410(client, engine, cluster):
    first = client.delete(f"/v1/clusters/{cluster['id']}")

    assert first.status_code == 204
    assert first.get_data() == b""
    assert "Content-Type" not in first.headers  # no body, so nothing to type
    row = db_row(engine, "clusters", cluster["id"])
    assert row["deleted_at"] is not None
    assert row["name"] == cluster["name"]  # a tombstone keeps what it was

    second = client.delete(f"/v1/clusters/{cluster['id']}")
    assert_problem(second, 410, "gone")
    assert db_row(engine, "clusters", cluster["id"]) == row


def test_delete_of_a_never_seen_id_is_404_and_records_a_tombstone(client, engine):
    never_seen = uuid.uuid4()

    response = client.delete(f"/v1/clusters/{never_seen}")

    assert_problem(response, 404, "not_found")
    row = db_row(engine, "clusters", never_seen)
    assert row is not None
    assert row["deleted_at"] is not None
    assert row["team_id"] is None


def test_a_create_delayed_behind_a_delete_of_its_id_is_gone(client, engine):
    never_seen = uuid.uuid4()
    assert client.delete(f"/v1/clusters/{never_seen}").status_code == 404

    late_create = client.post("/v1/clusters", json=internal_cluster_body(id=str(never_seen)))

    assert_problem(late_create, 410, "gone")
    row = db_row(engine, "clusters", never_seen)
    assert row["deleted_at"] is not None and row["team_id"] is None
    assert_problem(client.get(f"/v1/clusters/{never_seen}"), 410, "gone")
    assert_problem(client.delete(f"/v1/clusters/{never_seen}"), 410, "gone")


def test_deleting_a_cluster_makes_its_firewall_rules_gone(client, engine, cluster):
    base = f"/v1/clusters/{cluster['id']}/firewall-rules"
    rules = [client.post(base, json=internal_rule_body(cidr=cidr)).get_json() for cidr in ("10.0.0.0/8", "192.168.0.0/16")]

    assert client.delete(f"/v1/clusters/{cluster['id']}").status_code == 204

    for rule in rules:
        assert_problem(client.get(f"{base}/{rule['id']}"), 410, "gone")
        assert_problem(client.delete(f"{base}/{rule['id']}"), 410, "gone")
        assert db_row(engine, "firewall_rules", rule["id"])["deleted_at"] is not None
    assert_problem(client.get(base), 410, "gone")


def test_deleting_a_cluster_leaves_other_clusters_rules_alone(client, engine, cluster):
    other = client.post("/v1/clusters", json=internal_cluster_body()).get_json()
    kept = client.post(f"/v1/clusters/{other['id']}/firewall-rules", json=internal_rule_body()).get_json()

    assert client.delete(f"/v1/clusters/{cluster['id']}").status_code == 204

    assert client.get(f"/v1/clusters/{other['id']}/firewall-rules/{kept['id']}").status_code == 200
    assert db_row(engine, "firewall_rules", kept["id"])["deleted_at"] is None


# A write that names the owner it expects (the platform's always do) -------------------


def test_delete_naming_another_team_is_an_id_conflict_and_leaves_the_cluster(client, engine, cluster):
    """Another team's object under the same ID (caller-assigned IDs): a held-back delete of the
    platform's never reaches it."""
    stranger = str(uuid.uuid4())

    response = client.delete(f"/v1/clusters/{cluster['id']}?team_id={stranger}")

    problem = assert_problem(response, 409, "id_conflict")
    assert problem["conflicts"] == [{"field": "team_id", "stored": cluster["team_id"], "sent": stranger}]
    assert db_row(engine, "clusters", cluster["id"])["deleted_at"] is None


def test_put_naming_another_team_is_an_id_conflict_and_changes_nothing(client, engine, cluster):
    before = db_row(engine, "clusters", cluster["id"])

    response = client.put(f"/v1/clusters/{cluster['id']}?team_id={uuid.uuid4()}", json=update_body(5, name="taken"))

    assert_problem(response, 409, "id_conflict")
    assert db_row(engine, "clusters", cluster["id"]) == before


def test_writes_naming_the_owner_apply(client, engine, cluster):
    owner = cluster["team_id"]

    assert client.put(f"/v1/clusters/{cluster['id']}?team_id={owner}", json=update_body(2, name="b")).status_code == 200
    assert client.delete(f"/v1/clusters/{cluster['id']}?team_id={owner}").status_code == 204
    assert_problem(client.delete(f"/v1/clusters/{cluster['id']}?team_id={owner}"), 410, "gone")


def test_delete_of_a_never_seen_id_naming_its_owner_records_the_owner_on_the_tombstone(client, engine):
    never_seen, owner = uuid.uuid4(), str(uuid.uuid4())

    assert_problem(client.delete(f"/v1/clusters/{never_seen}?team_id={owner}"), 404, "not_found")

    assert str(db_row(engine, "clusters", never_seen)["team_id"]) == owner
    assert_problem(client.delete(f"/v1/clusters/{never_seen}?team_id={owner}"), 410, "gone")
    assert_problem(client.delete(f"/v1/clusters/{never_seen}?team_id={uuid.uuid4()}"), 409, "id_conflict")
