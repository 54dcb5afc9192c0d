"""The public firewall-rule routes, pushed down once their cluster is."""
from __future__ import annotations

import uuid

from tests.helpers import cluster_body, is_uuid7, rule_body
from tooling.testing import assert_problem, db_row


def rules_url(cluster):
    return f"/v1/clusters/{cluster['id']}/firewall-rules"


def test_create_answers_201_and_is_pushed_under_its_cluster(client, cluster, downstream_engine):
    response = client.post(rules_url(cluster), json=rule_body(cidr="2001:db8::/32", description="v6 office"))

    assert response.status_code == 201
    body = response.get_json()
    assert is_uuid7(body["id"])
    assert response.headers["Location"].endswith(f"{rules_url(cluster)}/{body['id']}")
    assert (body["cluster_id"], body["cidr"], body["description"]) == (cluster["id"], "2001:db8::/32", "v6 office")
    assert (body["sync_state"], body["sync_error"], body["generation"]) == ("synced", None, 1)
    assert body["synced_at"] is not None
    downstream = db_row(downstream_engine, "firewall_rules", body["id"])
    assert str(downstream["cluster_id"]) == cluster["id"]
    assert (str(downstream["cidr"]), downstream["description"], downstream["generation"]) == (
        "2001:db8::/32",
        "v6 office",
        1,
    )


def test_description_is_optional(client, cluster):
    response = client.post(rules_url(cluster), json={"cidr": "192.168.0.0/16"})

    assert response.status_code == 201
    assert response.get_json()["description"] == ""


def test_get_and_list(client, cluster, rule):
    second = client.post(rules_url(cluster), json=rule_body(cidr="172.16.0.0/12")).get_json()

    got = client.get(f"{rules_url(cluster)}/{rule['id']}")
    listed = client.get(rules_url(cluster))

    assert got.status_code == 200
    assert got.get_json() == rule
    assert listed.status_code == 200
    assert [item["id"] for item in listed.get_json()["items"]] == [rule["id"], second["id"]]
    assert listed.get_json()["next_after"] is None


def test_a_rule_is_found_only_under_its_own_cluster(client, cluster, rule):
    other = client.post("/v1/clusters", json=cluster_body(name="other")).get_json()

    assert_problem(client.get(f"/v1/clusters/{other['id']}/firewall-rules/{rule['id']}"), 404, "not_found")
    assert client.get(f"/v1/clusters/{other['id']}/firewall-rules").get_json()["items"] == []


def test_create_under_an_unknown_cluster_is_404(client):
    assert_problem(client.post(f"/v1/clusters/{uuid.uuid4()}/firewall-rules", json=rule_body()), 404, "not_found")


def test_patch_bumps_the_generation_and_cluster_svc_reaches_it(client, cluster, rule, downstream_engine):
    response = client.patch(f"{rules_url(cluster)}/{rule['id']}", json={"description": "vpn"})

    assert response.status_code == 200
    body = response.get_json()
    assert (body["generation"], body["description"], body["cidr"]) == (2, "vpn", "10.0.0.0/8")
    assert body["sync_state"] == "synced"
    downstream = db_row(downstream_engine, "firewall_rules", rule["id"])
    assert (downstream["generation"], downstream["description"]) == (2, "vpn")


def test_delete_answers_204_then_410(client, cluster, rule, downstream_engine):
    url = f"{rules_url(cluster)}/{rule['id']}"

    response = client.delete(url)

    assert response.status_code == 204
    assert db_row(downstream_engine, "firewall_rules", rule["id"])["deleted_at"] is not None
    assert_problem(client.delete(url), 410, "gone")
    assert_problem(client.get(url), 410, "gone")
    assert_problem(client.patch(url, json={"description": "x"}), 410, "gone")
    assert client.get(rules_url(cluster)).get_json()["items"] == []
    assert client.get(f"/v1/clusters/{cluster['id']}").status_code == 200  # the cluster lives on


def test_unknown_rule_is_404_on_every_route(client, cluster):
    url = f"{rules_url(cluster)}/{uuid.uuid4()}"

    assert_problem(client.get(url), 404, "not_found")
    assert_problem(client.patch(url, json={"description": "x"}), 404, "not_found")
    assert_problem(client.delete(url), 404, "not_found")
