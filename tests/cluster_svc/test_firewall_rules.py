"""The firewall-rule routes of cluster_svc's contract, through the test client."""
from __future__ import annotations

import ipaddress
import uuid
from datetime import datetime

import pytest

from tests.helpers import internal_cluster_body, internal_rule_body
from tooling.testing import assert_problem, db_row

FIELDS = ("id", "cluster_id", "cidr", "description", "generation", "created_at", "updated_at", "deleted_at")


def rules_url(cluster_id):
    return f"/v1/clusters/{cluster_id}/firewall-rules"


def rule_url(cluster_id, rule_id):
    return f"{rules_url(cluster_id)}/{rule_id}"


def new_cluster(client):
    response = client.post("/v1/clusters", json=internal_cluster_body())
    assert response.status_code == 201
    return response.get_json()


# --- create ---------------------------------------------------------------


def test_create_answers_201_with_location_full_body_and_stores_the_row(client, engine, cluster):
    sent = internal_rule_body(cidr="192.168.0.0/16", description="vpn")

    response = client.post(rules_url(cluster["id"]), json=sent)

    assert response.status_code == 201
    assert response.headers["Location"].endswith(rule_url(cluster["id"], sent["id"]))
    assert "Idempotent-Replayed" not in response.headers
    body = response.get_json()
    assert set(body) == set(FIELDS)
    assert {k: body[k] for k in sent} == sent
    assert body["cluster_id"] == cluster["id"]
    assert (body["generation"], body["deleted_at"]) == (1, None)
    assert body["created_at"] == body["updated_at"]
    row = db_row(engine, "firewall_rules", sent["id"])
    assert (str(row["cluster_id"]), row["cidr"], row["description"]) == (cluster["id"], "192.168.0.0/16", "vpn")
    assert row["deleted_at"] is None


def test_description_defaults_to_empty(client, cluster):
    sent = internal_rule_body()
    del sent["description"]

    response = client.post(rules_url(cluster["id"]), json=sent)

    assert response.status_code == 201
    assert response.get_json()["description"] == ""


def test_location_of_a_create_serves_the_rule(client, cluster):
    response = client.post(rules_url(cluster["id"]), json=internal_rule_body())

    fetched = client.get(response.headers["Location"])

    assert fetched.status_code == 200
    assert fetched.get_json() == response.get_json()


def test_replay_answers_200_replayed_with_the_current_state(client, engine, cluster, rule):
    updated = client.put(rule_url(cluster["id"], rule["id"]), json={"generation": 2, "description": "changed"})
    assert updated.status_code == 200

    replay = client.post(rules_url(cluster["id"]), json=internal_rule_body(id=rule["id"]))

    assert replay.status_code == 200
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.headers["Location"].endswith(rule_url(cluster["id"], rule["id"]))
    assert replay.get_json() == updated.get_json()
    assert replay.get_json()["description"] == "changed"


def test_replay_with_another_description_answers_the_stored_state(client, engine, cluster, rule):
    before = db_row(engine, "firewall_rules", rule["id"])

    replay = client.post(rules_url(cluster["id"]), json=internal_rule_body(id=rule["id"], description="something else"))

    assert replay.status_code == 200
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.get_json() == rule
    assert db_row(engine, "firewall_rules", rule["id"]) == before


def test_replay_with_another_cidr_is_an_id_conflict(client, engine, cluster, rule):
    before = db_row(engine, "firewall_rules", rule["id"])

    response = client.post(rules_url(cluster["id"]), json=internal_rule_body(id=rule["id"], cidr="192.168.0.0/16"))

    body = assert_problem(response, 409, "id_conflict")
    assert body["conflicts"] == [{"field": "cidr", "stored": "10.0.0.0/8", "sent": "192.168.0.0/16"}]
    assert db_row(engine, "firewall_rules", rule["id"]) == before


def test_same_rule_id_under_another_cluster_is_an_id_conflict(client, engine, cluster, rule):
    other = new_cluster(client)
    before = db_row(engine, "firewall_rules", rule["id"])

    response = client.post(rules_url(other["id"]), json=internal_rule_body(id=rule["id"]))

    body = assert_problem(response, 409, "id_conflict")
    assert body["conflicts"] == [{"field": "cluster_id", "stored": cluster["id"], "sent": other["id"]}]
    assert db_row(engine, "firewall_rules", rule["id"]) == before
    assert_problem(client.get(rule_url(other["id"], rule["id"])), 404, "not_found")


def test_create_of_a_deleted_rule_is_gone_and_never_resurrects_it(client, engine, cluster, rule):
    assert client.delete(rule_url(cluster["id"], rule["id"])).status_code == 204
    tombstone = db_row(engine, "firewall_rules", rule["id"])

    response = client.post(rules_url(cluster["id"]), json=internal_rule_body(id=rule["id"]))

    assert_problem(response, 410, "gone")
    assert db_row(engine, "firewall_rules", rule["id"]) == tombstone
    assert tombstone["deleted_at"] is not None


def test_create_under_a_missing_cluster_is_404_and_stores_nothing(client, engine):
    sent = internal_rule_body()

    assert_problem(client.post(rules_url(uuid.uuid4()), json=sent), 404, "not_found")
    assert db_row(engine, "firewall_rules", sent["id"]) is None


def test_create_under_a_deleted_cluster_is_410_and_stores_nothing(client, engine, cluster):
    assert client.delete(f"/v1/clusters/{cluster['id']}").status_code == 204
    sent = internal_rule_body()

    assert_problem(client.post(rules_url(cluster["id"]), json=sent), 410, "gone")
    assert db_row(engine, "firewall_rules", sent["id"]) is None


def test_create_under_a_cluster_tombstoned_before_it_was_seen_is_410(client, engine):
    never_seen = uuid.uuid4()
    assert client.delete(f"/v1/clusters/{never_seen}").status_code == 404
    sent = internal_rule_body()

    assert_problem(client.post(rules_url(never_seen), json=sent), 410, "gone")
    assert db_row(engine, "firewall_rules", sent["id"]) is None


# --- CIDR canonical form --------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "canonical"),
    [
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("10.1.2.3", "10.1.2.3/32"),
        ("0.0.0.0/0", "0.0.0.0/0"),
        ("2001:DB8::/32", "2001:db8::/32"),
        ("2001:0db8:0000:0000::/64", "2001:db8::/64"),
        ("2001:db8::1", "2001:db8::1/128"),
        ("::/0", "::/0"),
    ],
)
def test_cidr_is_stored_and_answered_in_canonical_form(client, engine, cluster, sent, canonical):
    body = internal_rule_body(cidr=sent)

    response = client.post(rules_url(cluster["id"]), json=body)

    assert response.status_code == 201
    assert response.get_json()["cidr"] == canonical
    assert db_row(engine, "firewall_rules", body["id"])["cidr"] == canonical


@pytest.mark.parametrize(
    "cidr",
    ["10.0.0.0/8", "2001:db8::/48", "2001:DB8::/48", "::ffff:10.0.0.0/104", "::ffff:1.2.3.0/120", "::1.2.3.0/120"],
)
def test_replay_with_the_same_cidr_text_is_not_a_conflict(client, engine, cluster, cidr):
    sent = internal_rule_body(cidr=cidr)
    created = client.post(rules_url(cluster["id"]), json=sent)
    assert created.status_code == 201

    replay = client.post(rules_url(cluster["id"]), json=sent)

    assert replay.status_code == 200, replay.get_json()
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.get_json() == created.get_json()
    assert ipaddress.ip_network(created.get_json()["cidr"]) == ipaddress.ip_network(cidr)


@pytest.mark.parametrize(
    ("sent", "network"),
    [("10.0.0.1/24", "10.0.0.0/24"), ("192.168.1.77/16", "192.168.0.0/16"), ("2001:db8::1/64", "2001:db8::/64")],
)
def test_cidr_with_host_bits_set_is_422_suggesting_the_network(client, engine, cluster, sent, network):
    body = internal_rule_body(cidr=sent)

    response = client.post(rules_url(cluster["id"]), json=body)

    problem = assert_problem(response, 422, "validation_error")
    [message] = problem["errors"]["json"]["cidr"]
    assert f"did you mean {network}?" in message
    assert db_row(engine, "firewall_rules", body["id"]) is None


# --- read -----------------------------------------------------------------


def test_get_answers_the_rule(client, cluster, rule):
    response = client.get(rule_url(cluster["id"], rule["id"]))

    assert response.status_code == 200
    assert response.get_json() == rule


def test_get_of_an_unknown_rule_is_404(client, engine, cluster):
    missing = uuid.uuid4()

    assert_problem(client.get(rule_url(cluster["id"], missing)), 404, "not_found")
    assert db_row(engine, "firewall_rules", missing) is None


def test_get_under_a_missing_cluster_is_404(client, cluster, rule):
    assert_problem(client.get(rule_url(uuid.uuid4(), rule["id"])), 404, "not_found")


def test_get_under_another_cluster_is_404(client, cluster, rule):
    other = new_cluster(client)

    assert_problem(client.get(rule_url(other["id"], rule["id"])), 404, "not_found")


def test_get_after_delete_is_410(client, cluster, rule):
    assert client.delete(rule_url(cluster["id"], rule["id"])).status_code == 204

    assert_problem(client.get(rule_url(cluster["id"], rule["id"])), 410, "gone")


def test_get_of_an_unknown_rule_under_a_deleted_cluster_is_410(client, cluster):
    assert client.delete(f"/v1/clusters/{cluster['id']}").status_code == 204

    assert_problem(client.get(rule_url(cluster["id"], uuid.uuid4())), 410, "gone")


# --- list -----------------------------------------------------------------


def test_list_answers_live_rules_of_that_cluster_in_id_order(client, cluster):
    ids = sorted(
        (client.post(rules_url(cluster["id"]), json=internal_rule_body()).get_json()["id"] for _ in range(4)), key=uuid.UUID
    )
    assert client.delete(rule_url(cluster["id"], ids[2])).status_code == 204
    assert client.delete(rule_url(cluster["id"], uuid.uuid4())).status_code == 404  # a bare tombstone
    other = new_cluster(client)
    assert client.post(rules_url(other["id"]), json=internal_rule_body()).status_code == 201

    response = client.get(rules_url(cluster["id"]))

    assert response.status_code == 200
    body = response.get_json()
    assert [item["id"] for item in body["items"]] == [ids[0], ids[1], ids[3]]
    assert all(item["cluster_id"] == cluster["id"] for item in body["items"])
    assert body["next_after"] is None


def test_list_pages_with_limit_and_after(client, cluster):
    ids = sorted(
        (client.post(rules_url(cluster["id"]), json=internal_rule_body()).get_json()["id"] for _ in range(3)), key=uuid.UUID
    )

    first = client.get(f"{rules_url(cluster['id'])}?limit=2").get_json()
    second = client.get(f"{rules_url(cluster['id'])}?limit=2&after={first['next_after']}").get_json()

    assert [item["id"] for item in first["items"]] == ids[:2]
    assert first["next_after"] == ids[1]
    assert [item["id"] for item in second["items"]] == ids[2:]
    assert second["next_after"] is None


def test_list_of_a_cluster_without_rules_is_empty(client, cluster):
    assert client.get(rules_url(cluster["id"])).get_json() == {"items": [], "next_after": None}


def test_list_under_a_missing_cluster_is_404(client):
    assert_problem(client.get(rules_url(uuid.uuid4())), 404, "not_found")


def test_list_under_a_deleted_cluster_is_410(client, cluster, rule):
    assert client.delete(f"/v1/clusters/{cluster['id']}").status_code == 204

    assert_problem(client.get(rules_url(cluster["id"])), 410, "gone")


# --- update ---------------------------------------------------------------


def test_put_with_a_higher_generation_applies(client, engine, cluster, rule):
    response = client.put(rule_url(cluster["id"], rule["id"]), json={"generation": 2, "description": "new text"})

    assert response.status_code == 200
    body = response.get_json()
    assert (body["description"], body["generation"], body["cidr"]) == ("new text", 2, rule["cidr"])
    assert datetime.fromisoformat(body["updated_at"]) > datetime.fromisoformat(rule["updated_at"])
    row = db_row(engine, "firewall_rules", rule["id"])
    assert (row["description"], row["generation"]) == ("new text", 2)


@pytest.mark.parametrize("generation", [1, 2], ids=["older", "equal"])
def test_stale_or_repeated_put_changes_nothing(client, engine, cluster, rule, generation):
    current = client.put(rule_url(cluster["id"], rule["id"]), json={"generation": 2, "description": "v2"}).get_json()
    before = db_row(engine, "firewall_rules", rule["id"])

    response = client.put(rule_url(cluster["id"], rule["id"]), json={"generation": generation, "description": "old"})

    assert response.status_code == 200
    assert response.get_json() == current
    assert db_row(engine, "firewall_rules", rule["id"]) == before


def test_put_of_an_unknown_rule_is_404_and_creates_nothing(client, engine, cluster):
    missing = uuid.uuid4()

    response = client.put(rule_url(cluster["id"], missing), json={"generation": 2, "description": "x"})

    assert_problem(response, 404, "not_found")
    assert db_row(engine, "firewall_rules", missing) is None


def test_put_under_another_cluster_is_an_id_conflict_and_changes_nothing(client, engine, cluster, rule):
    other = new_cluster(client)
    before = db_row(engine, "firewall_rules", rule["id"])

    response = client.put(rule_url(other["id"], rule["id"]), json={"generation": 2, "description": "x"})

    problem = assert_problem(response, 409, "id_conflict")
    assert problem["conflicts"] == [{"field": "cluster_id", "stored": cluster["id"], "sent": other["id"]}]
    assert db_row(engine, "firewall_rules", rule["id"]) == before


def test_put_of_a_deleted_rule_is_410_and_changes_nothing(client, engine, cluster, rule):
    assert client.delete(rule_url(cluster["id"], rule["id"])).status_code == 204
    tombstone = db_row(engine, "firewall_rules", rule["id"])

    response = client.put(rule_url(cluster["id"], rule["id"]), json={"generation": 2, "description": "x"})

    assert_problem(response, 410, "gone")
    assert db_row(engine, "firewall_rules", rule["id"]) == tombstone


# --- delete ---------------------------------------------------------------


def test_delete_answers_204_then_410(client, engine, cluster, rule):
    first = client.delete(rule_url(cluster["id"], rule["id"]))

    assert first.status_code == 204
    row = db_row(engine, "firewall_rules", rule["id"])
    assert row["deleted_at"] is not None and row["cidr"] == rule["cidr"]
    assert_problem(client.delete(rule_url(cluster["id"], rule["id"])), 410, "gone")
    assert db_row(engine, "firewall_rules", rule["id"]) == row
    assert client.get(f"/v1/clusters/{cluster['id']}").status_code == 200  # the cluster lives on


def test_delete_of_a_never_seen_rule_is_404_and_a_late_create_is_gone(client, engine, cluster):
    never_seen = uuid.uuid4()

    assert_problem(client.delete(rule_url(cluster["id"], never_seen)), 404, "not_found")
    row = db_row(engine, "firewall_rules", never_seen)
    assert row["deleted_at"] is not None and str(row["cluster_id"]) == cluster["id"]

    late_create = client.post(rules_url(cluster["id"]), json=internal_rule_body(id=str(never_seen)))
    assert_problem(late_create, 410, "gone")
    assert_problem(client.delete(rule_url(cluster["id"], never_seen)), 410, "gone")


def test_delete_under_a_missing_cluster_is_404_and_records_nothing(client, engine):
    rule_id = uuid.uuid4()

    assert_problem(client.delete(rule_url(uuid.uuid4(), rule_id)), 404, "not_found")
    assert db_row(engine, "firewall_rules", rule_id) is None


def test_delete_of_an_unknown_rule_under_a_deleted_cluster_is_410_like_get_and_records_its_tombstone(
    client, engine, cluster
):
    assert client.delete(f"/v1/clusters/{cluster['id']}").status_code == 204
    rule_id = uuid.uuid4()

    assert_problem(client.delete(rule_url(cluster["id"], rule_id)), 410, "gone")
    # Every ID the platform deleted holds a tombstone: repair re-sends a lost one and finds it again.
    assert db_row(engine, "firewall_rules", rule_id)["deleted_at"] is not None


def test_delete_under_another_cluster_is_an_id_conflict_and_leaves_the_rule(client, engine, cluster, rule):
    other = new_cluster(client)

    problem = assert_problem(client.delete(rule_url(other["id"], rule["id"])), 409, "id_conflict")
    assert problem["conflicts"] == [{"field": "cluster_id", "stored": cluster["id"], "sent": other["id"]}]
    assert db_row(engine, "firewall_rules", rule["id"])["deleted_at"] is None
    assert client.get(rule_url(cluster["id"], rule["id"])).status_code == 200


def test_delete_under_a_deleted_cluster_of_a_rule_living_elsewhere_is_an_id_conflict(client, engine, cluster, rule):
    """The old path of a rule moved under another cluster: its cluster's tombstone does not make the
    delete look done (410); the rule lives on, and the caller is told where it is not."""
    old = new_cluster(client)
    assert client.delete(f"/v1/clusters/{old['id']}").status_code == 204

    assert_problem(client.delete(rule_url(old["id"], rule["id"])), 409, "id_conflict")
    assert db_row(engine, "firewall_rules", rule["id"])["deleted_at"] is None
