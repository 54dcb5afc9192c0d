"""``Prefer: wait=N`` on public writes (platform_svc.api.waiting): the answer waits until the object
is completed or failed, or N seconds, holding no database connection meanwhile."""
from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import text

from platform_svc.api import services, waiting
from platform_svc.models import RESOURCES
from tests.helpers import ManualClock, cluster_body, drained
from tooling.testing import StatementCounter, db_row, wait_for

CLUSTER = RESOURCES["cluster"]


@pytest.mark.parametrize(
    ("fields", "seconds"),
    [
        (["wait=10"], 10),
        (["respond-async, wait=5"], 5),
        (["return=minimal", "Wait = 3 ; x"], 3),
        ([f"wait={waiting.MAX_WAIT + 100}"], waiting.MAX_WAIT),  # capped
        (["wait=abc"], None),
        (["wait=-1"], None),
        (["handling=strict"], None),
        ([], None),
    ],
)
def test_the_prefer_header_is_read_as_rfc_7240_has_it(fields, seconds):
    assert waiting.preferred_wait(fields) == seconds


def test_a_create_confirmed_at_once_answers_at_once_completed(client):
    started = time.monotonic()
    answer = client.post("/v1/clusters", json=cluster_body(), headers={"Prefer": "wait=10"})
    assert (answer.status_code, answer.headers["Idempotency-Status"]) == (201, "completed")
    assert answer.headers["Preference-Applied"] == "wait=10"
    assert time.monotonic() - started < 5  # the inline push confirmed it: nothing to wait for


def test_a_create_cluster_svc_never_confirms_answers_processing_after_the_wait(offline_client):
    started = time.monotonic()
    answer = offline_client.post("/v1/clusters", json=cluster_body(), headers={"Prefer": "wait=1"})
    assert time.monotonic() - started >= 1.0
    assert (answer.status_code, answer.headers["Idempotency-Status"]) == (201, "processing")
    assert answer.headers["Preference-Applied"] == "wait=1"
    assert "Preference-Applied" not in offline_client.post("/v1/clusters", json=cluster_body()).headers


def test_a_write_waiting_answers_as_soon_as_the_reconciler_confirms_it(offline_client, platform_engine, live_pusher):
    created = offline_client.post("/v1/clusters", json=cluster_body()).get_json()  # pending: cluster_svc unreachable
    answers = []
    patching = threading.Thread(target=lambda: answers.append(offline_client.patch(
        f"/v1/clusters/{created['id']}", json={"name": "renamed"}, headers={"Prefer": "wait=20"})))
    started = time.monotonic()
    patching.start()
    def left_to_the_reconciler() -> bool:  # committed, its inline push tried (in vain) and the lease given back
        row = db_row(platform_engine, "clusters", created["id"])
        return row["name"] == "renamed" and row["lease_until"] is None

    wait_for(left_to_the_reconciler, what="the PATCH committed and its inline push over")
    drained(live_pusher)  # the reconciler pushes it (the offline app's inline push could not)
    patching.join(30)

    [answer] = answers
    assert (answer.status_code, answer.headers["Idempotency-Status"]) == (200, "completed")
    assert answer.get_json()["sync_state"] == "synced" and time.monotonic() - started < 20


def test_waiting_holds_no_database_connection_between_its_reads(offline_client, platform_database):
    created = offline_client.post("/v1/clusters", json=cluster_body()).get_json()
    with platform_database.begin() as db_session:
        row = services.read_row(db_session, CLUSTER, created["id"])
    clock, held = ManualClock(), []

    def sleep(seconds: float) -> None:
        held.append(platform_database.engine.pool.checkedout())  # while the request waits
        clock.step(seconds)

    rereads = waiting.Rereads(platform_database)
    waited = waiting.wait_for_outcome(rereads, CLUSTER, row, 3, clock=clock.__call__, sleep=sleep)

    assert waited["sync_state"] == "pending" and clock.now >= 1000 + 3  # the whole wait, then as it is
    assert held and set(held) == {0}  # no connection held while waiting, however long
    assert len(held) <= 3 / waiting.LONGEST_PAUSE + 5  # reads back off to one each LONGEST_PAUSE


def test_requests_waiting_at_one_moment_read_their_rows_again_with_one_statement(
    offline_client, platform_database, platform_engine
):
    """However many requests of a worker wait, their reads share one statement (and one session) at a
    time: here the first read is held on a lock while five more arrive, and those five then share the
    next statement."""
    ids = [uuid.UUID(offline_client.post("/v1/clusters", json=cluster_body()).get_json()["id"]) for _ in range(6)]
    rereads, counter = waiting.Rereads(platform_database), StatementCounter(platform_database.engine)

    def waiting_on_a_lock() -> bool:
        with platform_engine.connect() as conn:
            return conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                     " AND wait_event_type = 'Lock'")).scalar() > 0

    with counter.counting() as statements, platform_engine.connect() as blocker, ThreadPoolExecutor(6) as pool:
        held = blocker.begin()
        blocker.execute(text("LOCK TABLE clusters IN ACCESS EXCLUSIVE MODE"))
        first = pool.submit(rereads.row, CLUSTER, ids[0])
        wait_for(waiting_on_a_lock, what="the first read waiting on the lock")
        others = [pool.submit(rereads.row, CLUSTER, object_id) for object_id in ids[1:]]
        wait_for(lambda: rereads.queued(CLUSTER) == len(others), what="the others queued behind the first read")
        held.rollback()
        rows = [first.result(timeout=10)] + [future.result(timeout=10) for future in others]

    assert [row["id"] for row in rows] == ids  # each its own row
    assert len([s for s in statements if s.lstrip().startswith("SELECT")]) == 2  # the first alone, then all five
