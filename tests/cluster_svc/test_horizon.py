"""The UUIDv7 horizon on cluster_svc's routes (ID_HORIZON_SECONDS, 30 days here).

An ID past the horizon with no row answers 410 id_expired on every route and
stores nothing; a row that exists answers as it always did, whatever its age;
a UUIDv7 more than five minutes ahead answers 422. Old rows are made by a
second app on the same database whose horizon reaches back a century (as
they were made when they were young).
"""
from __future__ import annotations

import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from cluster_svc import Settings, create_app
from shared.horizon import Horizon
from tests.helpers import internal_cluster_body, internal_rule_body
from tooling.pair import TOKEN
from tooling.testing import StatementCounter, assert_reads_through, db_row, uuid7_ago

DAY = 86400
OLD = 31 * DAY  # past the default 30-day horizon
FUTURE = -10 * 60  # ten minutes ahead


@pytest.fixture(scope="module")
def old_times(cluster_db_url):
    """A client of an app on the same database whose horizon reaches back a century."""
    settings = Settings(database_url=cluster_db_url, internal_token=TOKEN, id_horizon_seconds=100 * 365 * DAY)
    app = create_app(settings, testing=True)
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {TOKEN}"
    yield client
    app.extensions["database"].dispose()


def old_cluster(old_times, **overrides):
    """A live cluster whose ID is 31 days old, created back when it was young."""
    body = internal_cluster_body(id=str(uuid7_ago(OLD)), **overrides)
    response = old_times.post("/v1/clusters", json=body)
    assert response.status_code == 201, response.get_json()
    return body


def expired_answer(response):
    assert response.status_code == 410, response.get_data(as_text=True)
    assert response.mimetype == "application/problem+json"
    body = response.get_json()
    assert body["code"] == "id_expired" and "horizon" in body["detail"]
    return body


def counted(client, name, **labels):
    metrics = client.get("/metrics").get_data(as_text=True)
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


def test_the_app_horizon_is_thirty_days_by_default(app):
    assert app.extensions["horizon"] == Horizon(2_592_000)


# -- absent IDs past the horizon -------------------------------------------------------------


def test_a_create_of_an_expired_id_answers_410_id_expired_stores_nothing_and_is_counted(client, engine):
    body = internal_cluster_body(id=str(uuid7_ago(OLD)))
    before = counted(client, "idempotent_creates_total", resource="cluster", outcome="expired")

    expired_answer(client.post("/v1/clusters", json=body))

    assert db_row(engine, "clusters", body["id"]) is None
    assert counted(client, "idempotent_creates_total", resource="cluster", outcome="expired") == before + 1


def test_a_create_of_an_expired_id_never_runs_the_insert(client, engine):
    assert client.get("/v1/clusters?limit=1").status_code == 200  # the pool warmed up
    counter = StatementCounter(engine)
    with counter.counting() as statements:
        expired_answer(client.post("/v1/clusters", json=internal_cluster_body(id=str(uuid7_ago(OLD)))))
    assert [statement.split(None, 1)[0].upper() for statement in statements] == ["SELECT"], statements


def test_a_firewall_rule_create_of_an_expired_id_answers_410_id_expired(client, engine, cluster):
    body = internal_rule_body(id=str(uuid7_ago(OLD)))
    expired_answer(client.post(f"/v1/clusters/{cluster['id']}/firewall-rules", json=body))
    assert db_row(engine, "firewall_rules", body["id"]) is None


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_get_put_and_delete_of_an_expired_id_with_no_row_answer_410_id_expired(client, engine, method):
    object_id = uuid7_ago(OLD)
    json = {"generation": 2, "name": "x", "plan": "hobby-0", "storage_gb": 10} if method == "PUT" else None

    expired_answer(client.open(f"/v1/clusters/{object_id}", method=method, json=json))

    assert db_row(engine, "clusters", object_id) is None  # a DELETE records no tombstone either


def test_a_delete_of_an_expired_firewall_rule_id_records_no_tombstone(client, engine, cluster):
    object_id = uuid7_ago(OLD)
    expired_answer(client.delete(f"/v1/clusters/{cluster['id']}/firewall-rules/{object_id}"))
    assert db_row(engine, "firewall_rules", object_id) is None


def test_the_children_of_an_expired_parent_with_no_row_answer_410_id_expired(client):
    parent = uuid7_ago(OLD)
    rules = f"/v1/clusters/{parent}/firewall-rules"
    expired_answer(client.post(rules, json=internal_rule_body()))  # the rule's own ID is fresh
    expired_answer(client.get(rules))
    expired_answer(client.get(f"{rules}/{uuid.uuid4()}"))
    expired_answer(client.delete(f"{rules}/{uuid.uuid4()}"))
    batch = client.post(f"{rules}/batch", json={"items": [internal_rule_body()]}).get_json()["results"]
    assert [(item["status"], item["problem"]["code"]) for item in batch] == [(410, "id_expired")]


def test_a_batch_answers_expired_items_in_their_place_and_stores_only_the_others(client, engine, old_times):
    existing = old_cluster(old_times)
    expired, fresh = internal_cluster_body(id=str(uuid7_ago(OLD))), internal_cluster_body(id=str(uuid7_ago(0)))
    before = counted(client, "idempotent_creates_total", resource="cluster", outcome="expired")

    response = client.post("/v1/clusters/batch", json={"items": [expired, fresh, existing, expired]})

    results = response.get_json()["results"]
    assert [result["status"] for result in results] == [410, 201, 200, 410]
    assert results[0]["problem"]["code"] == results[3]["problem"]["code"] == "id_expired"
    assert db_row(engine, "clusters", expired["id"]) is None
    assert db_row(engine, "clusters", fresh["id"]) is not None
    assert counted(client, "idempotent_creates_total", resource="cluster", outcome="expired") == before + 2


def test_a_batch_of_only_expired_ids_stores_nothing(client, engine):
    items = [internal_cluster_body(id=str(uuid7_ago(OLD + n))) for n in range(3)]
    results = client.post("/v1/clusters/batch", json={"items": items}).get_json()["results"]
    assert {(result["status"], result["problem"]["code"]) for result in results} == {(410, "id_expired")}
    assert all(db_row(engine, "clusters", item["id"]) is None for item in items)


def test_ids_of_other_versions_never_expire(client):
    born_in_2000 = uuid.UUID(fields=(0, 0, 0x1000 | 0x0FFF, 0x80, 0, 1))  # a v1 UUID carrying an old time
    assert born_in_2000.version == 1
    assert client.post("/v1/clusters", json=internal_cluster_body(id=str(born_in_2000))).status_code in (200, 201)
    assert client.delete(f"/v1/clusters/{born_in_2000}").status_code == 204


def test_an_id_just_inside_the_horizon_is_created(client):
    assert client.post("/v1/clusters", json=internal_cluster_body(id=str(uuid7_ago(29 * DAY)))).status_code == 201


# -- rows that exist answer as before, whatever their age -----------------------------------


def test_an_old_live_object_replays_200_and_its_updates_and_delete_apply(client, old_times):
    body = old_cluster(old_times)
    path = f"/v1/clusters/{body['id']}"

    replay = client.post("/v1/clusters", json=body)
    assert replay.status_code == 200 and replay.headers["Idempotent-Replayed"] == "true"
    assert client.post("/v1/clusters", json={**body, "region": "us-east-1"}).get_json()["code"] == "id_conflict"
    assert client.get(path).status_code == 200
    updated = client.put(path, json={"generation": 2, "name": "renamed", "plan": "memory-8", "storage_gb": 20})
    assert (updated.status_code, updated.get_json()["name"]) == (200, "renamed")
    assert client.post(f"{path}/firewall-rules", json=internal_rule_body()).status_code == 201  # children under it too
    assert client.delete(path).status_code == 204

    # Its tombstone answers as any tombstone: gone, never id_expired.
    for response in (client.delete(path), client.get(path), client.post("/v1/clusters", json=body)):
        assert (response.status_code, response.get_json()["code"]) == (410, "gone")


def test_an_old_tombstone_is_gone_not_expired_and_is_never_revived(client, engine, old_times):
    object_id = uuid7_ago(OLD)
    assert old_times.delete(f"/v1/clusters/{object_id}").status_code == 404  # a bare tombstone, recorded long ago

    response = client.post("/v1/clusters", json=internal_cluster_body(id=str(object_id)))

    assert (response.status_code, response.get_json()["code"]) == (410, "gone")
    assert db_row(engine, "clusters", object_id)["name"] is None


# -- IDs from the future --------------------------------------------------------------------


def test_a_create_of_a_uuid7_from_the_future_answers_422_naming_the_id_and_stores_nothing(client, engine):
    body = internal_cluster_body(id=str(uuid7_ago(FUTURE)))
    response = client.post("/v1/clusters", json=body)
    assert response.status_code == 422
    assert "future" in response.get_json()["errors"]["json"]["id"][0]
    assert db_row(engine, "clusters", body["id"]) is None


def test_a_batch_answers_a_uuid7_from_the_future_422_in_its_place(client, engine):
    future, fresh = internal_cluster_body(id=str(uuid7_ago(FUTURE))), internal_cluster_body()
    results = client.post("/v1/clusters/batch", json={"items": [future, fresh]}).get_json()["results"]
    assert [result["status"] for result in results] == [422, 201]
    assert results[0]["problem"]["code"] == "id_from_the_future"
    assert db_row(engine, "clusters", future["id"]) is None


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_a_uuid7_from_the_future_in_a_path_answers_422_and_records_nothing(client, engine, method):
    object_id = uuid7_ago(FUTURE)
    json = {"generation": 2, "name": "x", "plan": "hobby-0", "storage_gb": 10} if method == "PUT" else None
    response = client.open(f"/v1/clusters/{object_id}", method=method, json=json)
    assert response.status_code == 422 and "path" in response.get_json()["errors"]
    assert db_row(engine, "clusters", object_id) is None


def test_a_uuid7_four_minutes_ahead_is_accepted(client):
    assert client.post("/v1/clusters", json=internal_cluster_body(id=str(uuid7_ago(-4 * 60)))).status_code == 201


def test_a_firewall_rule_of_a_parent_from_the_future_answers_422(client):
    response = client.post(f"/v1/clusters/{uuid7_ago(FUTURE)}/firewall-rules", json=internal_rule_body())
    assert response.status_code == 422


# -- the horizon is checked again once the row landed ---------------------------------------


def test_a_create_that_lands_after_a_purge_could_have_passed_its_id_is_not_committed(app, engine):
    """The create checked the horizon, then stalled: by the time its INSERT returned, the ID
    could have been purged. It is rolled back (503, try again), so no purge can be undone."""
    from cluster_svc.models import RESOURCES
    from cluster_svc.schemas import route_schemas
    from shared.db import transaction
    from shared.errors import TryAgain
    from shared.idempotent import create_or_return

    CLUSTER = RESOURCES["cluster"]
    ClusterCreate = route_schemas(CLUSTER)["create"]

    born = 1_800_000_000.0
    ticks = iter([born + 999, born + 1000 + 60])  # checked just inside; landed past horizon + grace/2
    horizon = Horizon(1000, clock=lambda: next(ticks))
    values = ClusterCreate().load(internal_cluster_body(id=str(uuid7_ago(0))))
    values["id"] = uuid.UUID(int=(int(born * 1000) << 80) | (values["id"].int & ((1 << 80) - 1)))

    with app.app_context(), pytest.raises(TryAgain):
        with transaction() as db_session:
            create_or_return(db_session=db_session, resource=CLUSTER, values=values, horizon=horizon)

    assert db_row(engine, "clusters", values["id"]) is None


# -- the tombstone gauges -------------------------------------------------------------------


def test_the_tombstone_gauges_count_tombstones_and_the_oldest_ones_age(client, engine):
    before = counted(client, "tombstones", resource="cluster")
    deleted = internal_cluster_body()
    assert client.post("/v1/clusters", json=deleted).status_code == 201
    assert client.delete(f"/v1/clusters/{deleted['id']}").status_code == 204
    with engine.begin() as conn:
        conn.execute(text("UPDATE clusters SET deleted_at = now() - interval '2 hours' WHERE id = :id"),
                     {"id": deleted["id"]})

    assert counted(client, "tombstones", resource="cluster") == before + 1
    assert counted(client, "tombstone_oldest_seconds", resource="cluster") >= 2 * 3600
    assert "tombstones" in {family.name for family in text_string_to_metric_families(
        client.get("/metrics").get_data(as_text=True))}
    assert counted(client, "tombstones", resource="firewall_rule") >= 0


def test_the_horizon_the_tombstones_are_bounded_by_is_served_beside_them(client, old_times):
    # What the alert on the oldest tombstone compares it with: each app's own ID_HORIZON_SECONDS.
    assert counted(client, "id_horizon_seconds") == 2_592_000
    assert counted(old_times, "id_horizon_seconds") == 100 * 365 * DAY


@pytest.mark.parametrize("table", ["clusters", "firewall_rules"])
def test_the_tombstone_gauges_are_read_through_the_deleted_rows_index_never_the_table(engine, table):
    from cluster_svc.models import RESOURCES
    from cluster_svc.tombstones import tombstone_stats

    resource = RESOURCES.by_table(table)
    assert_reads_through(engine, f"ix_{table}_deleted", lambda conn: tombstone_stats(db_session=conn, resource=resource))
