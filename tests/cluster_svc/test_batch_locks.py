"""Overlapping batches cannot deadlock: rows go in in id order, so a batch
waiting on another's row has not yet taken any row the other will need.

Forced deterministically with two real transactions: the first holds the lower
ID uncommitted; the second (a batch naming the higher ID first) must block on
it; then the first creates the higher ID. Inserting in request order, the
second would hold the higher ID already and PostgreSQL would abort one of them
as a deadlock.
"""
from __future__ import annotations

import threading
import uuid

import pytest
from sqlalchemy import text

from cluster_svc.models import RESOURCES
from cluster_svc.schemas import route_schemas
from shared.horizon import Horizon
from shared.idempotent import CreateOutcome, create_or_return_many
from tests.helpers import internal_cluster_body, internal_rule_body
from tooling.testing import wait_for

CLUSTER, FIREWALL_RULE = RESOURCES["cluster"], RESOURCES["firewall_rule"]
ClusterCreate, FirewallRuleCreate = route_schemas(CLUSTER)["create"], route_schemas(FIREWALL_RULE)["create"]


def wait_until_blocked_on_a_lock(engine, pid, timeout=10.0):
    with engine.connect() as conn:

        def on_a_lock() -> bool:
            waiting = conn.execute(
                text("SELECT wait_event_type FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
            ).scalar()
            conn.rollback()
            return waiting == "Lock"

        wait_for(on_a_lock, timeout=timeout, poll=0.01, what=f"backend {pid} waiting on a lock")


@pytest.fixture(params=["clusters", "firewall rules"])
def create_many(request, client):
    """``create_many(db_session, ids)``: the service's batch create of new objects with these IDs."""
    if request.param == "clusters":
        team_id = str(uuid.uuid4())  # the same object each time an ID is sent
        return lambda db_session, ids: create_or_return_many(
            db_session=db_session,
            resource=CLUSTER,
            items=[ClusterCreate().load(internal_cluster_body(id=str(i), team_id=team_id)) for i in ids],
            horizon=Horizon(),
        )
    response = client.post("/v1/clusters", json=internal_cluster_body())
    assert response.status_code == 201
    cluster_id = uuid.UUID(response.get_json()["id"])
    return lambda db_session, ids: create_or_return_many(
        db_session=db_session,
        resource=FIREWALL_RULE,
        items=[{**FirewallRuleCreate().load(internal_rule_body(id=str(i))), "cluster_id": cluster_id} for i in ids],
        horizon=Horizon(),
    )


def test_a_batch_waits_in_id_order_so_overlapping_batches_never_deadlock(engine, create_many):
    low, high = sorted([uuid.uuid4(), uuid.uuid4()])
    second_pid: list[int] = []
    second_results: list = []
    started = threading.Event()

    def second_batch():
        try:
            with engine.begin() as db_session:
                second_pid.append(db_session.execute(text("SELECT pg_backend_pid()")).scalar())
                started.set()
                second_results.extend(create_many(db_session, [high, low]))  # the higher ID first
        except Exception as exc:  # reported below, in the test's thread
            second_results.append(exc)
            started.set()

    with engine.connect() as first:
        first.begin()
        [holding] = create_many(first, [low])
        assert holding.outcome is CreateOutcome.CREATED
        second = threading.Thread(target=second_batch)
        second.start()
        try:
            assert started.wait(10) and second_pid, second_results
            wait_until_blocked_on_a_lock(engine, second_pid[0])
            [then] = create_many(first, [high])  # would close the cycle if the second held `high`
            first.commit()
        finally:
            second.join(30)
    assert not second.is_alive()

    assert then.outcome is CreateOutcome.CREATED
    assert [getattr(result, "outcome", result) for result in second_results] == [CreateOutcome.REPLAYED, CreateOutcome.REPLAYED]
