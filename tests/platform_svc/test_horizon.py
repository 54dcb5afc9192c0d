"""platform_svc and the UUIDv7 horizon: public routes of expired IDs, a pending
create that expired, purging confirmed deleted rows (the Idempotency-Key free
again), repair not taking a purged tombstone for drift, and the recovery route
for a lost answer (``?idempotency_key=K``).

Old rows are the platform's own rows whose ID is rewritten to a UUIDv7 of 31
days ago (built bit by bit), as if they had been made then.
"""
from __future__ import annotations

import os
import subprocess
import uuid

import pytest
from sqlalchemy import text

from platform_svc.operations.purge import purger
from platform_svc.operations.repair import judge
from shared.horizon import Horizon
from tests.helpers import cluster_body, drained, rule_body
from tooling.testing import console_script, uuid7_ago

DAY = 86400
OLD = 31 * DAY


def make_old(engine, table, object_id):
    """Give a row (nothing may reference it) an ID of 31 days ago; return the new ID."""
    old = uuid7_ago(OLD)
    with engine.begin() as conn:
        assert conn.execute(text(f"UPDATE {table} SET id = :old WHERE id = :id"), {"old": old, "id": object_id}).rowcount
    return str(old)


def row(engine, table, object_id):
    with engine.connect() as conn:
        found = conn.execute(text(f"SELECT * FROM {table} WHERE id = :id"), {"id": object_id}).mappings().first()
    return None if found is None else dict(found)


def expired(response):
    assert (response.status_code, response.get_json()["code"]) == (410, "id_expired"), response.get_data(as_text=True)


# -- public routes ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "PATCH", "DELETE"])
def test_a_public_call_on_an_expired_id_with_no_row_answers_410_id_expired(client, method):
    json = {"plan": "memory-8"} if method == "PATCH" else None
    expired(client.open(f"/v1/clusters/{uuid7_ago(OLD)}", method=method, json=json))
    # An ID within the horizon that names nothing is still a plain 404.
    assert client.open(f"/v1/clusters/{uuid7_ago(0)}", method=method, json=json).status_code == 404


@pytest.mark.parametrize("method", ["GET", "PATCH", "DELETE"])
def test_a_public_call_on_a_uuid7_from_the_future_answers_404_as_for_any_id_the_platform_never_made(client, method):
    """The public routes name only objects the platform made, and it never made an ID of an hour
    from now: 404, as for any ID this account does not have (cluster_svc's 422 is for callers who
    create with their own IDs, where one from the future would outlive the horizon; docs/design.md)."""
    json = {"plan": "memory-8"} if method == "PATCH" else None
    future = uuid7_ago(-3600)
    response = client.open(f"/v1/clusters/{future}", method=method, json=json)
    assert (response.status_code, response.get_json()["code"]) == (404, "not_found")
    response = client.open(f"/v1/clusters/{future}/firewall-rules", method="POST", json=rule_body())
    assert (response.status_code, response.get_json()["code"]) == (404, "not_found")


def test_calls_under_an_expired_parent_with_no_row_answer_410_id_expired(client):
    rules = f"/v1/clusters/{uuid7_ago(OLD)}/firewall-rules"
    expired(client.post(rules, json=rule_body()))
    expired(client.get(rules))
    expired(client.get(f"{rules}/{uuid7_ago(0)}"))


def test_an_old_object_that_exists_answers_as_before(client, platform_engine):
    made = client.post("/v1/clusters", json=cluster_body()).get_json()
    old = make_old(platform_engine, "clusters", made["id"])
    assert client.get(f"/v1/clusters/{old}").status_code == 200
    assert client.delete(f"/v1/clusters/{old}").status_code in (202, 204)
    response = client.get(f"/v1/clusters/{old}")
    assert (response.status_code, response.get_json()["code"]) == (410, "gone")


# -- a pending create past the horizon ------------------------------------------------------


def test_a_pending_create_whose_id_expired_fails_for_good_with_reason_id_expired(
    offline_client, live_pusher, platform_engine, downstream_engine, platform_db_url
):
    pending = offline_client.post("/v1/clusters", json=cluster_body(name="too-late")).get_json()
    assert pending["sync_state"] == "pending"
    old = make_old(platform_engine, "clusters", pending["id"])  # cluster_svc stayed away past the horizon

    drained(live_pusher)

    stored = row(platform_engine, "clusters", old)
    assert stored["sync_state"] == "failed" and "410 id_expired" in stored["sync_error"]
    assert row(downstream_engine, "clusters", old) is None
    status = subprocess.run(
        [console_script("platform-svc"), "sync-status", "--limit", "1000"],
        env={**os.environ, "PLATFORM_DATABASE_URL": platform_db_url}, capture_output=True, text=True, timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert any(old in line and "id_expired" in line for line in status.stdout.splitlines()), status.stdout


# -- purge -----------------------------------------------------------------------------------


def test_purge_removes_confirmed_deleted_rows_past_the_horizon_and_nothing_else(
    client, offline_client, app, platform_engine, platform_database
):
    def made(client, key=None):
        headers = {"Idempotency-Key": key} if key else {}
        return client.post("/v1/clusters", json=cluster_body(), headers=headers).get_json()["id"]

    key = f"purge-{uuid.uuid4()}"
    confirmed = made(client, key)
    assert client.delete(f"/v1/clusters/{confirmed}").status_code == 204
    confirmed = make_old(platform_engine, "clusters", confirmed)
    pending = made(offline_client)
    assert offline_client.delete(f"/v1/clusters/{pending}").status_code == 202  # its delete never confirmed
    pending = make_old(platform_engine, "clusters", pending)
    failed = made(client)
    assert client.delete(f"/v1/clusters/{failed}").status_code == 204
    failed = make_old(platform_engine, "clusters", failed)
    with platform_engine.begin() as conn:
        conn.execute(text("UPDATE clusters SET sync_failed_at = now(), sync_error = 'x' WHERE id = :id"),
                     {"id": failed})
    young = made(client)
    assert client.delete(f"/v1/clusters/{young}").status_code == 204
    alive = make_old(platform_engine, "clusters", made(client))

    report = purger(platform_database, Horizon()).run()

    assert row(platform_engine, "clusters", confirmed) is None
    for kept in (pending, failed, young, alive):
        assert row(platform_engine, "clusters", kept) is not None, kept
    assert row(platform_engine, "clusters", pending)["sync_state"] == "pending"
    assert report.removed["cluster"] >= 1 and report.summary().startswith("purge: removed ")
    # The object is gone for good: its ID answers id_expired, and its key is free again.
    expired(client.get(f"/v1/clusters/{confirmed}"))
    again = client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key})
    assert again.status_code == 201 and again.get_json()["id"] != confirmed


def test_the_purge_command_prints_one_summary_line_and_a_dry_run_removes_nothing(
    client, platform_engine, platform_db_url
):
    doomed = client.post("/v1/clusters", json=cluster_body()).get_json()["id"]
    assert client.delete(f"/v1/clusters/{doomed}").status_code == 204
    doomed = make_old(platform_engine, "clusters", doomed)

    def command(*args):
        return subprocess.run(
            [console_script("platform-svc"), "purge", *args],
            env={**os.environ, "PLATFORM_DATABASE_URL": platform_db_url}, capture_output=True, text=True, timeout=60,
        )

    dry = command("--dry-run")
    assert dry.returncode == 0 and dry.stdout.startswith("purge: would remove ") and dry.stdout.count("\n") == 1
    assert row(platform_engine, "clusters", doomed) is not None
    done = command()
    assert done.returncode == 0 and done.stdout.startswith("purge: removed ") and done.stdout.count("\n") == 1
    assert row(platform_engine, "clusters", doomed) is None


# -- repair ----------------------------------------------------------------------------------


def synced_deleted(object_id):
    return {"id": object_id, "sync_state": "synced", "deleted_at": "then", "generation": 1}


def test_repair_takes_a_missing_tombstone_of_an_expired_id_for_the_purge_not_for_drift():
    assert judge(synced_deleted(uuid7_ago(OLD)), None, Horizon()) is None
    assert judge(synced_deleted(uuid7_ago(0)), None, Horizon()) == "missing"
    assert judge(synced_deleted(uuid.uuid4()), None, Horizon()) == "missing"  # other versions never expire


# -- the recovery route for a lost answer ----------------------------------------------------


def test_a_lost_answer_is_found_by_its_idempotency_key(client, other_client):
    key = f"lost-{uuid.uuid4()}"
    made = client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key}).get_json()
    client.post("/v1/clusters", json=cluster_body(name="another"))

    found = client.get("/v1/clusters", query_string={"idempotency_key": key})

    assert found.status_code == 200
    assert [item["id"] for item in found.get_json()["items"]] == [made["id"]]
    assert client.get("/v1/clusters", query_string={"idempotency_key": "never-used"}).get_json()["items"] == []
    assert other_client.get("/v1/clusters", query_string={"idempotency_key": key}).get_json()["items"] == []


def test_a_lost_answer_of_a_firewall_rule_is_found_by_its_idempotency_key(client, cluster):
    rules = f"/v1/clusters/{cluster['id']}/firewall-rules"
    key = f"lost-rule-{uuid.uuid4()}"
    made = client.post(rules, json=rule_body(), headers={"Idempotency-Key": key}).get_json()
    client.post(rules, json=rule_body(cidr="10.1.0.0/16"))

    found = client.get(rules, query_string={"idempotency_key": key}).get_json()["items"]

    assert [item["id"] for item in found] == [made["id"]]


def test_the_recovery_route_lists_nothing_once_the_object_is_deleted(client):
    key = f"deleted-{uuid.uuid4()}"
    made = client.post("/v1/clusters", json=cluster_body(), headers={"Idempotency-Key": key}).get_json()
    assert client.delete(f"/v1/clusters/{made['id']}").status_code == 204
    assert client.get("/v1/clusters", query_string={"idempotency_key": key}).get_json()["items"] == []


@pytest.mark.parametrize("bad", ["", " padded", "x" * 256, "caf\u00e9"])
def test_the_recovery_route_refuses_a_key_no_create_could_have_used(client, bad):
    response = client.get("/v1/clusters", query_string={"idempotency_key": bad})
    assert response.status_code == 422 and "idempotency_key" in response.get_json()["errors"]["query"]


def test_the_expiry_policy_and_the_recovery_route_are_published_in_the_openapi_document(client):
    document = client.get("/openapi.json").get_json()
    create = document["paths"]["/v1/clusters"]["post"]
    [key] = [p for p in create["parameters"] if p["name"] == "Idempotency-Key"]
    assert "Expiry policy" in key["description"] and "purged" in key["description"]
    listing = document["paths"]["/v1/clusters"]["get"]
    assert "idempotency_key" in {p["name"] for p in listing["parameters"]}
