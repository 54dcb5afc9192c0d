"""Public creates in flight share their intent's INSERT and commit, and their inline
pushes share batch calls (shared.coalesce), and each still answers as its own:
its own object, 201, synced, stored on both sides as sent.

Real threads against the app, a live cluster_svc and PostgreSQL. A gate holds the
first create's INSERT on a lock (the account row, which the INSERT's foreign key
checks) while the others queue for the next flush."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import text

from tests.helpers import authed_client, cluster_body
from tooling.testing import db_row, wait_for

CREATES = 8


def test_public_creates_in_flight_share_one_intent_flush_and_each_answers_its_own(
    app, account, platform_engine, downstream_engine
):
    account_id, api_key = account
    bodies = [cluster_body(name=f"shared-{n}", storage_gb=10 + n) for n in range(CREATES)]

    def create(body):
        return authed_client(app, api_key).post("/v1/clusters", json=body)

    def waiting_on_locks():
        with platform_engine.connect() as conn:
            return conn.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            )).scalar()

    def until(condition, what):
        wait_for(condition, timeout=10, what=what, poll=0.002)

    assert create(cluster_body(name="warm-up")).status_code == 201  # the coalescers exist
    [intents] = [c for (key, _), c in app.extensions["writes"].creates_in_flight.items() if key == "cluster"]
    flushes, items = intents.flushes, intents.items
    with platform_engine.connect() as blocker, ThreadPoolExecutor(CREATES + 1) as pool:
        transaction = blocker.begin()
        blocker.execute(text("SELECT 1 FROM accounts WHERE id = :id FOR UPDATE"), {"id": account_id})
        gate = pool.submit(create, cluster_body(name="gate"))
        until(lambda: waiting_on_locks() > 0, "the gate's INSERT waiting on the account row")
        futures = [pool.submit(create, body) for body in bodies]
        until(lambda: len(intents._queue) == CREATES, "the creates queued behind the gate")
        transaction.rollback()
        assert gate.result(timeout=30).status_code == 201
        responses = [future.result(timeout=30) for future in futures]

    assert (intents.flushes - flushes, intents.items - items) == (2, 1 + CREATES)  # the gate's, then all of them
    answers = [response.get_json() for response in responses]
    assert [response.status_code for response in responses] == [201] * CREATES
    assert len({answer["id"] for answer in answers}) == CREATES
    for body, answer, response in zip(bodies, answers, responses):
        assert {name: answer[name] for name in body} == body
        assert answer["sync_state"] == "synced"
        assert response.headers["Location"].endswith(f"/v1/clusters/{answer['id']}")
        stored = db_row(downstream_engine, "clusters", answer["id"])
        assert (stored["name"], stored["storage_gb"]) == (body["name"], body["storage_gb"])
        assert stored["team_id"] == account_id
        assert db_row(platform_engine, "clusters", answer["id"])["sync_state"] == "synced"
