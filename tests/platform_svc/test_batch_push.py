"""The reconciler's units of work: creates claimed together go down in one batch
call and are recorded with one statement, each row with its own outcome."""
from __future__ import annotations

import json
import time
import uuid
from datetime import timedelta

import pytest
import requests
from idempotent_pair_client.transport import ClientPolicy

from platform_svc.api import services
from platform_svc.models import RESOURCES
from platform_svc.push.pusher import PushPath, UnitPusher
from platform_svc.push.schedule import Claim, claims_of
from shared.client import InternalClient
from tests.helpers import cluster_body, rule_body
from tooling.faultproxy import FaultProxy
from tooling.pair import TOKEN
from tooling.testing import StatementCounter, db_row

CLUSTER, FIREWALL_RULE = RESOURCES["cluster"], RESOURCES["firewall_rule"]


@pytest.fixture
def proxied_pusher(platform_database, cluster_svc):
    """A reconciler's pusher whose calls go through a fault proxy (which logs them)."""
    with FaultProxy(cluster_svc.url) as proxy:
        client = InternalClient(proxy.url, TOKEN, ClientPolicy(connect_timeout=1, read_timeout=5, retries=1))
        yield UnitPusher(PushPath(platform_database, client), RESOURCES), proxy
        client.close()


def record_pending(database, account, kind, count, **values):
    """``count`` objects recorded as the platform records intent, never pushed (pending, no lease): their IDs."""
    body = cluster_body() if kind is CLUSTER else rule_body()
    with database.begin() as db_session:
        results = services.create_objects(
            db_session=db_session, resource=kind, items=[{**body, "account_id": account[0], **values}] * count,
            lease=timedelta(0),
        )
        return [str(result.unwrap()[0]["id"]) for result in results]


def claim(database, kind, object_id):
    with database.begin() as db_session:
        return services.claim(
            db_session=db_session, resource=kind, object_id=object_id, lease=timedelta(seconds=60)
        )


def test_claims_put_creates_of_one_collection_together_and_every_other_row_alone():
    parent_a, parent_b = uuid.uuid4(), uuid.uuid4()

    def rule(parent, synced=0, deleted=None):
        return {"id": uuid.uuid4(), "cluster_id": parent, "synced_generation": synced, "deleted_at": deleted}

    creates_a = [rule(parent_a) for _ in range(5)]
    creates_b = [rule(parent_b)]
    update, delete = rule(parent_a, synced=1), rule(parent_a, deleted="now")
    rows = [creates_a[0], update, *creates_b, *creates_a[1:], delete]

    cut = claims_of(FIREWALL_RULE, rows, batch=2, push_by=0.0)

    assert sorted(len(claim.rows) for claim in cut) == [1, 1, 1, 1, 2, 2]
    alone = [claim.rows[0] for claim in cut if len(claim.rows) == 1]
    assert {id(row) for row in alone} >= {id(update), id(delete), id(creates_b[0])}
    together = [claim.rows for claim in cut if len(claim.rows) == 2]
    for group in together:
        assert {row["cluster_id"] for row in group} == {parent_a}
        assert list(group) == sorted(group, key=lambda row: row["id"])  # in id order, as cluster_svc inserts
    assert sorted(row["id"] for claim in cut for row in claim.rows) == sorted(row["id"] for row in rows)


def test_a_batch_of_creates_is_one_call_and_one_recording_statement_and_a_409_fails_only_its_row(
    account, cluster_svc, platform_database, platform_engine, downstream_engine, proxied_pusher
):
    pusher, proxy = proxied_pusher
    ids = record_pending(platform_database, account, CLUSTER, 5, name="batch-0")
    squatter = {**cluster_body(region="us-east-1"), "id": ids[2], "team_id": ids[2]}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    assert requests.post(f"{cluster_svc.url}/v1/clusters", json=squatter, headers=headers, timeout=10).status_code == 201
    rows = sorted((claim(platform_database, CLUSTER, object_id) for object_id in ids), key=lambda row: row["id"])
    counter = StatementCounter(platform_database.engine)

    with counter.counting() as statements:
        recorded = pusher.push_claimed(Claim(CLUSTER, tuple(rows), time.monotonic() + 60))

    assert len(statements) == 1 and statements[0].lstrip().upper().startswith("UPDATE")  # plus BEGIN and COMMIT
    [call] = proxy.log
    assert (call.method, call.path) == ("POST", "/v1/clusters/batch")
    assert [item["id"] for item in json.loads(call.request.body)["items"]] == [str(row["id"]) for row in rows]
    states = {str(row["id"]): (row["sync_state"], row["lease_until"]) for row in recorded}
    assert states == {object_id: ("failed" if object_id == ids[2] else "synced", None) for object_id in ids}
    assert "409 id_conflict" in db_row(platform_engine, "clusters", ids[2])["sync_error"]
    for object_id in set(ids) - {ids[2]}:
        stored = db_row(platform_engine, "clusters", object_id)
        assert (stored["synced_generation"], stored["attempts"], stored["sync_error"]) == (1, 0, None)
        assert db_row(downstream_engine, "clusters", object_id)["name"].startswith("batch-")
    assert db_row(downstream_engine, "clusters", ids[2])["region"] == "us-east-1"  # nothing overwritten


def test_a_rule_batch_whose_cluster_is_missing_downstream_backs_off_each_rule(
    account, platform_database, proxied_pusher
):
    """404 on a rule create is transient (the cluster is not there yet): every
    rule backs off with its own attempt count; none is failed."""
    pusher, proxy = proxied_pusher
    [cluster_id] = record_pending(platform_database, account, CLUSTER, 1)
    rules = record_pending(platform_database, account, FIREWALL_RULE, 3, cluster_id=uuid.UUID(cluster_id))
    rows = sorted((claim(platform_database, FIREWALL_RULE, rule_id) for rule_id in rules), key=lambda row: row["id"])

    recorded = pusher.push_claimed(Claim(FIREWALL_RULE, tuple(rows), time.monotonic() + 60))

    assert [e.path for e in proxy.log] == [f"/v1/clusters/{cluster_id}/firewall-rules/batch"]
    for row in recorded:
        assert (row["sync_state"], row["attempts"], row["lease_until"]) == ("pending", 1, None)
        assert "404 not_found" in row["sync_error"]


def test_a_unit_whose_lease_ran_short_is_released_unpushed_with_one_statement(
    account, platform_database, platform_engine, proxied_pusher
):
    pusher, proxy = proxied_pusher
    ids = record_pending(platform_database, account, CLUSTER, 3)
    rows = tuple(claim(platform_database, CLUSTER, object_id) for object_id in ids)
    counter = StatementCounter(platform_database.engine)

    with counter.counting() as statements:
        assert pusher.push_claimed(Claim(CLUSTER, rows, time.monotonic() - 1)) is None

    assert len(statements) == 1 and proxy.log == []
    for object_id in ids:
        stored = db_row(platform_engine, "clusters", object_id)
        assert (stored["sync_state"], stored["lease_until"], stored["attempts"]) == ("pending", None, 0)
