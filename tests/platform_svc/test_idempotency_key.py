"""The public Idempotency-Key (IETF draft "The Idempotency-Key HTTP Header Field"):
1-255 printable ASCII characters, stored on the object's own row, unique per account."""
from __future__ import annotations

import threading
import uuid
from collections import Counter

import pytest
from sqlalchemy import text

from tests.helpers import authed_client, cluster_body, rule_body
from tooling.testing import assert_problem


def rows_with_key(engine, table, account_id, key):
    with engine.connect() as conn:
        return conn.execute(
            text(f"SELECT id FROM {table} WHERE account_id = :a AND idempotency_key = :k"), {"a": account_id, "k": key}
        ).scalars().all()


def account_rows(engine, account_id):
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM clusters WHERE account_id = :a"), {"a": account_id}).scalar()


def downstream_count(engine, team_id):
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM clusters WHERE team_id = :t"), {"t": team_id}).scalar()


def test_same_key_and_body_replays_the_same_cluster(client, account, platform_engine, downstream_engine):
    key = str(uuid.uuid4())

    first = client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key})
    replay = client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key})

    assert first.status_code == 201
    assert "Idempotent-Replayed" not in first.headers
    assert replay.status_code == 200
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.headers["Location"] == first.headers["Location"]
    assert replay.get_json()["id"] == first.get_json()["id"]
    assert replay.get_json()["sync_state"] == "synced"
    assert len(rows_with_key(platform_engine, "clusters", account[0], key)) == 1
    assert downstream_count(downstream_engine, account[0]) == 1


def test_a_replay_answers_the_current_state(client):
    key = "create-orders-db"
    created = client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key}).get_json()
    client.patch(f"/v1/clusters/{created['id']}", json={"plan": "memory-8"})

    replay = client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key})

    assert replay.status_code == 200
    assert (replay.get_json()["id"], replay.get_json()["plan"], replay.get_json()["generation"]) == (
        created["id"],
        "memory-8",
        2,
    )


def test_same_key_with_another_body_is_422_idempotency_key_reused(client, account, platform_engine):
    key = str(uuid.uuid4())
    assert client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key}).status_code == 201
    response = client.post("/v1/clusters", json=cluster_body(storage_gb=200), headers={"Idempotency-Key": key})

    problem = assert_problem(response, 422, "idempotency_key_reused")

    assert key in problem["detail"]
    assert len(rows_with_key(platform_engine, "clusters", account[0], key)) == 1


@pytest.mark.parametrize(
    "key",
    [
        "",  # empty
        "   ",  # nothing but the whitespace HTTP trims
        "k" * 256,  # one character too many
        "café".encode().decode("latin-1"),  # UTF-8 bytes, as WSGI hands them over
        "tab\there",  # a control character
        "del\x7f",
    ],
    ids=["empty", "blank", "256 characters", "non-ASCII", "control character", "DEL"],
)
def test_a_key_that_is_not_1_to_255_printable_ascii_characters_is_400(client, account, platform_engine, key):
    before = account_rows(platform_engine, account[0])

    response = client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key})

    problem = assert_problem(response, 400, "invalid_idempotency_key")
    assert "printable ASCII" in problem["detail"]
    assert account_rows(platform_engine, account[0]) == before


@pytest.mark.parametrize("key", ["k" * 255, "a", "~ !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}", '"sf-string-with-quotes"'])
def test_any_1_to_255_printable_ascii_characters_make_a_key(client, account, platform_engine, key):
    first = client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key})
    replay = client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key})

    assert (first.status_code, replay.status_code) == (201, 200)
    assert rows_with_key(platform_engine, "clusters", account[0], key) == [uuid.UUID(first.get_json()["id"])]


def test_the_same_key_in_another_account_is_independent(
    client, other_client, account, other_account, downstream_engine
):
    key = "shared-key"

    mine = client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key})
    theirs = other_client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key})

    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert mine.get_json()["id"] != theirs.get_json()["id"]
    assert downstream_count(downstream_engine, account[0]) == 1
    assert downstream_count(downstream_engine, other_account[0]) == 1


def test_without_a_key_every_post_creates_a_new_cluster(client, account, downstream_engine):
    ids = {client.post("/v1/clusters", json=cluster_body()).get_json()["id"] for _ in range(2)}

    assert len(ids) == 2
    assert downstream_count(downstream_engine, account[0]) == 2


def test_a_replay_after_delete_is_410_and_creates_nothing(client, account, platform_engine):
    """The draft leaves this case open; here the key names an object that is gone."""
    key = str(uuid.uuid4())
    created = client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key}).get_json()
    assert client.delete(f"/v1/clusters/{created['id']}").status_code == 204

    assert_problem(client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key}), 410, "gone")
    assert len(rows_with_key(platform_engine, "clusters", account[0], key)) == 1


def test_concurrent_posts_with_one_key_make_one_cluster(app, account, platform_engine, downstream_engine):
    key = str(uuid.uuid4())
    count = 8
    barrier = threading.Barrier(count)
    responses = [None] * count

    def post(index):
        client = authed_client(app, account[1])
        barrier.wait(timeout=30)
        responses[index] = client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key})

    threads = [threading.Thread(target=post, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert Counter(response.status_code for response in responses) == {201: 1, 200: count - 1}
    assert len({response.get_json()["id"] for response in responses}) == 1
    assert len(rows_with_key(platform_engine, "clusters", account[0], key)) == 1
    assert downstream_count(downstream_engine, account[0]) == 1


def test_rules_honour_the_key_too(client, cluster, account, platform_engine):
    url = f"/v1/clusters/{cluster['id']}/firewall-rules"
    key = "rule-key"

    first = client.post(url, json=rule_body(), headers={"Idempotency-Key": key})
    replay = client.post(url, json=rule_body(), headers={"Idempotency-Key": key})
    other = client.post(url, json=rule_body(cidr="192.168.0.0/16"), headers={"Idempotency-Key": key})

    assert first.status_code == 201
    assert (replay.status_code, replay.headers["Idempotent-Replayed"]) == (200, "true")
    assert replay.get_json()["id"] == first.get_json()["id"]
    assert_problem(other, 422, "idempotency_key_reused")
    assert len(rows_with_key(platform_engine, "firewall_rules", account[0], key)) == 1


def test_a_key_is_scoped_to_the_account_and_the_kind_of_object_as_the_docs_say(client, cluster):
    """docs/design.md and the OpenAPI description: the same key on clusters and on firewall rules
    makes one of each, and each replays its own."""
    rules = f"/v1/clusters/{cluster['id']}/firewall-rules"
    key = "one-key-two-kinds"
    made = [client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key}),
            client.post(rules, json=rule_body(), headers={"Idempotency-Key": key})]
    replays = [client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key}),
               client.post(rules, json=rule_body(), headers={"Idempotency-Key": key})]

    assert [answer.status_code for answer in made] == [201, 201]
    assert [answer.status_code for answer in replays] == [200, 200]
    assert [a.get_json()["id"] for a in replays] == [a.get_json()["id"] for a in made]
    assert "the kind of object" in client.get("/openapi.json").get_data(as_text=True)
