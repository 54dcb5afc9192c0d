"""The public cluster routes, pushed down to a live cluster_svc."""
from __future__ import annotations

import uuid

from tests.helpers import cluster_body, is_uuid7, rule_body
from tooling.testing import assert_problem, db_row


def test_create_answers_201_with_a_uuid7_and_is_pushed_down_at_once(client, account, downstream_engine):
    response = client.post("/v1/clusters", json=cluster_body(name="orders", region="us-west-2", postgres_version=17))

    assert response.status_code == 201
    body = response.get_json()
    assert is_uuid7(body["id"])
    assert response.headers["Location"].endswith(f"/v1/clusters/{body['id']}")
    assert "Idempotent-Replayed" not in response.headers
    assert body["sync_state"] == "synced"
    assert body["sync_error"] is None
    assert body["synced_at"] is not None
    assert body["generation"] == 1
    assert body["deleted_at"] is None
    assert {k: body[k] for k in cluster_body()} == cluster_body(name="orders", region="us-west-2", postgres_version=17)
    assert "team_id" not in body and "account_id" not in body  # the platform's own bookkeeping stays inside

    downstream = db_row(downstream_engine, "clusters", body["id"])
    assert downstream is not None
    assert downstream["team_id"] == account[0]
    assert (downstream["name"], downstream["region"], downstream["postgres_version"]) == ("orders", "us-west-2", 17)
    assert (downstream["plan"], downstream["storage_gb"], downstream["generation"]) == ("standard-2", 100, 1)
    assert downstream["deleted_at"] is None


def test_created_ids_are_time_ordered(client):
    ids = [client.post("/v1/clusters", json=cluster_body()).get_json()["id"] for _ in range(3)]

    assert ids == sorted(ids, key=uuid.UUID)
    assert len(set(ids)) == 3


def test_get_answers_the_cluster_with_its_sync_state(client, cluster):
    response = client.get(f"/v1/clusters/{cluster['id']}")

    assert response.status_code == 200
    assert response.get_json() == cluster


def test_a_confirmed_delete_is_204_without_body_or_content_type(client):
    created = client.post("/v1/clusters", json=cluster_body(name="to-delete")).get_json()

    deleted = client.delete(f"/v1/clusters/{created['id']}")

    assert deleted.status_code == 204
    assert deleted.get_data() == b""
    assert "Content-Type" not in deleted.headers


def test_get_of_an_unknown_id_is_404(client):
    assert_problem(client.get(f"/v1/clusters/{uuid.uuid4()}"), 404, "not_found")


def test_list_shows_the_accounts_live_clusters_in_pages(client):
    created = [client.post("/v1/clusters", json=cluster_body(name=f"db-{n}")).get_json() for n in range(3)]
    assert client.delete(f"/v1/clusters/{created[1]['id']}").status_code == 204

    first = client.get("/v1/clusters?limit=1")
    assert first.status_code == 200
    assert [item["id"] for item in first.get_json()["items"]] == [created[0]["id"]]
    after = first.get_json()["next_after"]
    second = client.get(f"/v1/clusters?limit=5&after={after}")

    assert [item["id"] for item in second.get_json()["items"]] == [created[2]["id"]]
    assert second.get_json()["next_after"] is None
    assert all(item["sync_state"] == "synced" for item in first.get_json()["items"] + second.get_json()["items"])


def test_patch_bumps_the_generation_and_cluster_svc_reaches_it(client, cluster, downstream_engine):
    response = client.patch(f"/v1/clusters/{cluster['id']}", json={"plan": "memory-8", "storage_gb": 500})

    assert response.status_code == 200
    body = response.get_json()
    assert (body["generation"], body["plan"], body["storage_gb"], body["name"]) == (2, "memory-8", 500, "main-db")
    assert body["sync_state"] == "synced"
    downstream = db_row(downstream_engine, "clusters", cluster["id"])
    assert (downstream["generation"], downstream["plan"], downstream["storage_gb"]) == (2, "memory-8", 500)

    again = client.patch(f"/v1/clusters/{cluster['id']}", json={"name": "renamed"})

    assert again.status_code == 200
    assert (again.get_json()["generation"], again.get_json()["name"]) == (3, "renamed")
    downstream = db_row(downstream_engine, "clusters", cluster["id"])
    assert (downstream["generation"], downstream["name"], downstream["plan"]) == (3, "renamed", "memory-8")
    assert client.get(f"/v1/clusters/{cluster['id']}").get_json()["generation"] == 3


def test_patch_of_an_unknown_id_is_404(client):
    assert_problem(client.patch(f"/v1/clusters/{uuid.uuid4()}", json={"plan": "hobby-0"}), 404, "not_found")


def test_delete_answers_204_then_410_and_leaves_a_tombstone_in_both_services(
    client, cluster, platform_engine, downstream_engine
):
    url = f"/v1/clusters/{cluster['id']}"

    response = client.delete(url)

    assert response.status_code == 204
    assert response.get_data() == b""
    assert db_row(downstream_engine, "clusters", cluster["id"])["deleted_at"] is not None
    stored = db_row(platform_engine, "clusters", cluster["id"])
    assert stored["deleted_at"] is not None and stored["sync_state"] == "synced"
    assert_problem(client.delete(url), 410, "gone")
    assert_problem(client.get(url), 410, "gone")
    assert_problem(client.patch(url, json={"plan": "hobby-0"}), 410, "gone")
    assert cluster["id"] not in [item["id"] for item in client.get("/v1/clusters?limit=500").get_json()["items"]]


def test_delete_of_an_unknown_id_is_404(client):
    assert_problem(client.delete(f"/v1/clusters/{uuid.uuid4()}"), 404, "not_found")


def test_deleting_a_cluster_makes_its_rules_gone(client, cluster, rule, downstream_engine):
    assert client.delete(f"/v1/clusters/{cluster['id']}").status_code == 204

    assert_problem(client.get(f"/v1/clusters/{cluster['id']}/firewall-rules/{rule['id']}"), 410, "gone")
    assert_problem(client.get(f"/v1/clusters/{cluster['id']}/firewall-rules"), 410, "gone")
    assert_problem(
        client.post(f"/v1/clusters/{cluster['id']}/firewall-rules", json=rule_body()), 410, "gone"
    )
    assert db_row(downstream_engine, "firewall_rules", rule["id"])["deleted_at"] is not None
