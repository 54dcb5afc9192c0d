"""The bulk read platform_svc's drift repair uses: every object in id order,
tombstones included when asked (bare ones too), rules across clusters with
their team; keyset pagination; token required; bad queries are 422."""
from __future__ import annotations

import uuid

import pytest

from tests.helpers import internal_cluster_body, internal_rule_body
from tooling.testing import assert_problem


def id_range(count):
    """``count`` consecutive IDs in a range no other test's random IDs fall into; and the ID just before."""
    base = uuid.uuid4().int & ~0xFFFF
    return uuid.UUID(int=base), [uuid.UUID(int=base + 1 + n) for n in range(count)]


def listed(client, url):
    response = client.get(url)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def test_clusters_with_include_deleted_lists_live_deleted_and_bare_tombstones_in_id_order(client):
    before, (live, deleted, bare, last) = id_range(4)
    team_id = str(uuid.uuid4())
    for cluster_id in (live, deleted, last):
        assert client.post("/v1/clusters", json=internal_cluster_body(id=str(cluster_id), team_id=team_id)).status_code == 201
    assert client.delete(f"/v1/clusters/{deleted}").status_code == 204
    assert client.delete(f"/v1/clusters/{bare}").status_code == 404  # never created: a bare tombstone

    body = listed(client, f"/v1/clusters?include_deleted=true&after={before}&limit=4")
    default = listed(client, f"/v1/clusters?after={before}&limit=4")

    assert [item["id"] for item in body["items"]] == [str(live), str(deleted), str(bare), str(last)]
    by_id = {item["id"]: item for item in body["items"]}
    assert by_id[str(live)]["deleted_at"] is None and by_id[str(deleted)]["deleted_at"] is not None
    assert by_id[str(deleted)]["team_id"] == team_id and by_id[str(deleted)]["name"] == "main-db"
    tombstone = by_id[str(bare)]
    assert tombstone["deleted_at"] is not None and tombstone["generation"] == 1
    assert [tombstone[name] for name in ("team_id", "name", "region", "postgres_version", "plan", "storage_gb")] == [
        None
    ] * 6
    assert [item["id"] for item in default["items"][:2]] == [str(live), str(last)]  # the default is unchanged


def test_clusters_with_include_deleted_page_by_id_across_tombstones(client):
    before, ids = id_range(5)
    for n, cluster_id in enumerate(ids):
        if n % 2:
            assert client.delete(f"/v1/clusters/{cluster_id}").status_code == 404
        else:
            assert client.post("/v1/clusters", json=internal_cluster_body(id=str(cluster_id))).status_code == 201

    pages, after = [], before
    while len(pages) < 3:
        body = listed(client, f"/v1/clusters?include_deleted=1&limit=2&after={after}")
        pages.append([item["id"] for item in body["items"]])
        after = body["next_after"]
        assert after is None or after == pages[-1][-1]

    assert pages[:2] == [[str(i) for i in ids[0:2]], [str(i) for i in ids[2:4]]]
    assert pages[2][0] == str(ids[4])  # then other tests' clusters, if any lie beyond


def test_firewall_rules_across_clusters_come_in_one_id_order_with_cluster_and_team(client):
    before, (first, second, third, fourth) = id_range(4)
    team_a, team_b = str(uuid.uuid4()), str(uuid.uuid4())
    cluster_a = client.post("/v1/clusters", json=internal_cluster_body(team_id=team_a)).get_json()["id"]
    cluster_b = client.post("/v1/clusters", json=internal_cluster_body(team_id=team_b)).get_json()["id"]
    for rule_id, cluster_id in ((first, cluster_b), (second, cluster_a), (fourth, cluster_b)):
        url = f"/v1/clusters/{cluster_id}/firewall-rules"
        assert client.post(url, json=internal_rule_body(id=str(rule_id), cidr="10.1.0.0/16")).status_code == 201
    assert client.delete(f"/v1/clusters/{cluster_a}/firewall-rules/{third}").status_code == 404  # bare tombstone
    assert client.delete(f"/v1/clusters/{cluster_b}").status_code == 204  # its rules go with it

    everything = listed(client, f"/v1/firewall-rules?include_deleted=true&after={before}&limit=4")["items"]
    live = listed(client, f"/v1/firewall-rules?after={before}&limit=4")["items"]

    assert [(i["id"], i["cluster_id"], i["team_id"]) for i in everything] == [
        (str(first), cluster_b, team_b),
        (str(second), cluster_a, team_a),
        (str(third), cluster_a, team_a),
        (str(fourth), cluster_b, team_b),
    ]
    assert [i["deleted_at"] is None for i in everything] == [False, True, False, False]
    assert (everything[2]["cidr"], everything[2]["description"]) == (None, None)
    assert (everything[1]["cidr"], everything[1]["description"], everything[1]["generation"]) == (
        "10.1.0.0/16",
        "office",
        1,
    )
    assert [i["id"] for i in live][:1] == [str(second)]
    assert str(first) not in [i["id"] for i in live] and str(fourth) not in [i["id"] for i in live]


def test_firewall_rules_page_with_limit_and_after(client, cluster):
    before, ids = id_range(3)
    for rule_id in ids:
        url = f"/v1/clusters/{cluster['id']}/firewall-rules"
        assert client.post(url, json=internal_rule_body(id=str(rule_id))).status_code == 201

    first = listed(client, f"/v1/firewall-rules?include_deleted=true&limit=2&after={before}")
    second = listed(client, f"/v1/firewall-rules?include_deleted=true&limit=1&after={first['next_after']}")

    assert [i["id"] for i in first["items"]] == [str(ids[0]), str(ids[1])]
    assert first["next_after"] == str(ids[1])
    assert [i["id"] for i in second["items"]] == [str(ids[2])]


@pytest.mark.parametrize("path", ["/v1/clusters", "/v1/firewall-rules"])
@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("include_deleted=maybe", "include_deleted"),
        ("include_deleted=", "include_deleted"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("after=nope", "after"),
    ],
)
def test_invalid_bulk_read_query_is_422_naming_it(client, path, query, field):
    problem = assert_problem(client.get(f"{path}?{query}"), 422, "validation_error")

    assert list(problem["errors"]["query"]) == [field]


@pytest.mark.parametrize("path", ["/v1/clusters?include_deleted=true", "/v1/firewall-rules?include_deleted=true"])
def test_the_bulk_read_needs_the_token(anon, path):
    response = anon.get(path)

    assert_problem(response, 401, "unauthorized")


def test_the_bulk_read_is_documented(anon):
    spec = anon.get("/openapi.json").get_json()

    for path, page in (("/v1/clusters", "ClusterPage"), ("/v1/firewall-rules", "FirewallRuleListedPage")):
        operation = spec["paths"][path]["get"]
        assert "include_deleted" in {parameter["name"] for parameter in operation["parameters"]}
        assert {"200", "401", "422"} <= set(operation["responses"])
        assert operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(page)
    rule = spec["components"]["schemas"]["FirewallRuleListed"]["properties"]
    assert {"cluster_id", "team_id", "deleted_at"} <= set(rule)
    assert spec["components"]["schemas"]["ClusterOut"]["properties"]["name"]["nullable"] is True
