"""An account never sees or touches another account's objects: 404, as if absent."""
from __future__ import annotations

from tests.helpers import cluster_body, rule_body
from tooling.testing import assert_problem, db_row


def test_another_account_cannot_see_or_touch_a_cluster(client, other_client, cluster, downstream_engine):
    url = f"/v1/clusters/{cluster['id']}"

    assert_problem(other_client.get(url), 404, "not_found")
    assert_problem(other_client.patch(url, json={"plan": "memory-8"}), 404, "not_found")
    assert_problem(other_client.delete(url), 404, "not_found")
    assert_problem(other_client.get(f"{url}/firewall-rules"), 404, "not_found")
    assert_problem(other_client.post(f"{url}/firewall-rules", json=rule_body()), 404, "not_found")

    unchanged = client.get(url)
    assert unchanged.status_code == 200
    assert unchanged.get_json() == cluster
    assert client.get(f"{url}/firewall-rules").get_json()["items"] == []
    downstream = db_row(downstream_engine, "clusters", cluster["id"])
    assert (downstream["generation"], downstream["plan"], downstream["deleted_at"]) == (1, "standard-2", None)


def test_another_account_cannot_see_or_touch_a_rule(client, other_client, cluster, rule, downstream_engine):
    url = f"/v1/clusters/{cluster['id']}/firewall-rules/{rule['id']}"

    assert_problem(other_client.get(url), 404, "not_found")
    assert_problem(other_client.patch(url, json={"description": "mine now"}), 404, "not_found")
    assert_problem(other_client.delete(url), 404, "not_found")

    assert client.get(url).get_json() == rule
    downstream = db_row(downstream_engine, "firewall_rules", rule["id"])
    assert (downstream["description"], downstream["deleted_at"]) == ("office", None)


def test_a_rule_cannot_be_reached_through_another_accounts_cluster(client, other_client, cluster, rule):
    theirs = other_client.post("/v1/clusters", json=cluster_body(name="theirs")).get_json()
    url = f"/v1/clusters/{theirs['id']}/firewall-rules/{rule['id']}"

    assert_problem(other_client.get(url), 404, "not_found")
    assert_problem(other_client.delete(url), 404, "not_found")
    assert client.get(f"/v1/clusters/{cluster['id']}/firewall-rules/{rule['id']}").status_code == 200


def test_each_account_lists_only_its_own_clusters(client, other_client, cluster, other_account, downstream_engine):
    theirs = other_client.post("/v1/clusters", json=cluster_body(name="theirs")).get_json()

    mine = [item["id"] for item in client.get("/v1/clusters?limit=500").get_json()["items"]]
    other = [item["id"] for item in other_client.get("/v1/clusters?limit=500").get_json()["items"]]

    assert mine == [cluster["id"]]
    assert other == [theirs["id"]]
    assert db_row(downstream_engine, "clusters", theirs["id"])["team_id"] == other_account[0]
