"""Pushing rows down: inline after a public write, and by the reconciler after it.

A platform whose cluster_svc cannot be reached (``offline_client``) records
every write as pending; ``drained`` with a pusher that reaches cluster_svc
finishes the work.
"""
from __future__ import annotations

import re
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from idempotent_pair_client.transport import ClientPolicy
from sqlalchemy import text

from platform_svc.api import services
from platform_svc.models import RESOURCES
from platform_svc.operations.retry import retry_failed
from platform_svc.push.breaker import CircuitBreaker
from platform_svc.push.pusher import PushPath, UnitPusher
from platform_svc.push.schedule import Claim, RetryPolicy, claim_due
from platform_svc.reconciler.controller import RecoveryWatch, count_failed
from shared.client import Answer, InternalClient, Outcome
from shared.declaration import HIGHEST_GENERATION
from tests.helpers import cluster_body, drained, rule_body, squat_downstream
from tooling.pair import TOKEN
from tooling.testing import assert_problem, db_row

CLUSTER, FIREWALL_RULE = RESOURCES["cluster"], RESOURCES["firewall_rule"]


def due_now(engine, table, object_id):
    with engine.connect() as conn:
        return conn.execute(
            text(f"SELECT next_attempt_at <= now() FROM {table} WHERE id = :id"), {"id": object_id}
        ).scalar()


def claimed_ids(database, kind):
    """What a reconciler would claim right now (the claim is rolled back)."""
    with database.engine.connect() as db_session:
        rows = claim_due(db_session=db_session, resource=kind, limit=10_000, lease=timedelta(seconds=60))
        db_session.rollback()
    return {str(row["id"]) for row in rows}


def claim_one(database, kind, object_id):
    with database.begin() as db_session:
        return services.claim(
            db_session=db_session, resource=kind, object_id=object_id, lease=timedelta(seconds=60)
        )


def push_claimed(pusher, kind, row, *, push_by=None):
    """What a reconciler's worker does with one claimed row (a unit of one)."""
    rows = pusher.push_claimed(Claim(kind, (row,), time.monotonic() + 60 if push_by is None else push_by))
    return None if rows is None else rows[0]


# Inline ------------------------------------------------------------------------


def test_a_create_cluster_svc_cannot_take_answers_quickly_pending_and_due_now(
    offline_client, platform_engine, downstream_engine
):
    started = time.monotonic()
    response = offline_client.post("/v1/clusters", json=cluster_body())
    elapsed = time.monotonic() - started

    assert response.status_code == 201
    assert elapsed < 3  # connect timeout 0.5 s, 2 quick retries
    body = response.get_json()
    assert (body["sync_state"], body["synced_at"]) == ("pending", None)
    assert "connection failed" in body["sync_error"]
    stored = db_row(platform_engine, "clusters", body["id"])
    assert (stored["synced_generation"], stored["attempts"], stored["lease_until"]) == (0, 1, None)  # one attempt, counted
    assert due_now(platform_engine, "clusters", body["id"])
    assert db_row(downstream_engine, "clusters", body["id"]) is None
    assert offline_client.get(f"/v1/clusters/{body['id']}").get_json()["sync_state"] == "pending"


def test_a_create_the_open_breaker_kept_from_cluster_svc_is_due_now_and_counts_no_attempt(
    unreachable_app, offline_client, platform_engine
):
    pusher = unreachable_app.extensions["writes"].pusher
    pusher.breaker = CircuitBreaker(failures_to_open=1, cool_down=60)
    pusher.breaker.record(failed=True)  # open: the next inline push is not even sent
    try:
        body = offline_client.post("/v1/clusters", json=cluster_body()).get_json()
    finally:
        pusher.breaker = None

    assert (body["sync_state"], body["sync_error"]) == ("pending", None)  # answered at once, never tried
    assert db_row(platform_engine, "clusters", body["id"])["attempts"] == 0
    assert due_now(platform_engine, "clusters", body["id"])


def test_a_delete_cluster_svc_cannot_take_answers_202_with_the_object(
    client, offline_client, cluster, live_pusher, downstream_engine, platform_engine
):
    url = f"/v1/clusters/{cluster['id']}"

    response = offline_client.delete(url)

    assert response.status_code == 202
    body = response.get_json()
    assert (body["id"], body["sync_state"]) == (cluster["id"], "pending")
    assert body["deleted_at"] is not None
    assert_problem(offline_client.delete(url), 410, "gone")
    assert_problem(client.get(url), 410, "gone")
    assert db_row(downstream_engine, "clusters", cluster["id"])["deleted_at"] is None

    drained(live_pusher)

    assert db_row(downstream_engine, "clusters", cluster["id"])["deleted_at"] is not None
    assert db_row(platform_engine, "clusters", cluster["id"])["sync_state"] == "synced"


def test_a_rule_on_an_unconfirmed_cluster_waits_for_it(
    client, offline_client, platform_database, platform_engine, downstream_engine, live_pusher
):
    pending = offline_client.post("/v1/clusters", json=cluster_body()).get_json()

    response = client.post(f"/v1/clusters/{pending['id']}/firewall-rules", json=rule_body())

    assert response.status_code == 201
    rule = response.get_json()
    assert (rule["sync_state"], rule["sync_error"]) == ("pending", None)
    assert db_row(downstream_engine, "firewall_rules", rule["id"]) is None
    assert rule["id"] not in claimed_ids(platform_database, FIREWALL_RULE)  # not before its cluster
    assert db_row(platform_engine, "firewall_rules", rule["id"])["attempts"] == 0

    drained(live_pusher)  # one pass: the cluster, then its rule

    assert client.get(f"/v1/clusters/{pending['id']}").get_json()["sync_state"] == "synced"
    rule_now = client.get(f"/v1/clusters/{pending['id']}/firewall-rules/{rule['id']}").get_json()
    assert rule_now["sync_state"] == "synced"
    downstream = db_row(downstream_engine, "firewall_rules", rule["id"])
    assert (str(downstream["cluster_id"]), str(downstream["cidr"])) == (pending["id"], "10.0.0.0/8")


def test_a_row_another_pusher_holds_is_left_to_it_until_its_lease_runs_out(
    client, offline_client, platform_database, platform_engine, downstream_engine, live_pusher
):
    pending = offline_client.post("/v1/clusters", json=cluster_body()).get_json()
    assert claim_one(platform_database, CLUSTER, pending["id"]) is not None  # a pusher that then died

    patched = client.patch(f"/v1/clusters/{pending['id']}", json={"plan": "memory-8"})
    drained(live_pusher)

    assert (patched.status_code, patched.get_json()["sync_state"]) == (200, "pending")  # not pushed inline
    assert db_row(downstream_engine, "clusters", pending["id"]) is None
    assert claim_one(platform_database, CLUSTER, pending["id"]) is None  # still theirs

    with platform_engine.begin() as conn:
        conn.execute(
            text("UPDATE clusters SET lease_until = now() - interval '1 second' WHERE id = :id"), {"id": pending["id"]}
        )
    drained(live_pusher)

    assert client.get(f"/v1/clusters/{pending['id']}").get_json()["sync_state"] == "synced"
    downstream = db_row(downstream_engine, "clusters", pending["id"])
    assert (downstream["generation"], downstream["plan"]) == (2, "memory-8")


# The reconciler -----------------------------------------------------------------


def test_the_reconciler_creates_what_the_inline_push_could_not(offline_client, live_pusher, downstream_engine, account):
    created = [offline_client.post("/v1/clusters", json=cluster_body(name=f"late-{n}")).get_json() for n in range(3)]

    states = drained(live_pusher)

    assert states["synced"] >= 3
    for cluster in created:
        now = offline_client.get(f"/v1/clusters/{cluster['id']}").get_json()
        assert (now["sync_state"], now["sync_error"]) == ("synced", None)
        assert now["synced_at"] is not None
        downstream = db_row(downstream_engine, "clusters", cluster["id"])
        assert (downstream["team_id"], downstream["name"], downstream["generation"]) == (account[0], cluster["name"], 1)


def test_a_claimed_row_whose_lease_ran_short_is_released_unpushed(
    offline_client, platform_database, platform_engine, live_pusher, downstream_engine
):
    """A row that waited too long for a free worker is not pushed by it (its
    lease might run out mid-push); it is handed back, due as it was."""
    created = offline_client.post("/v1/clusters", json=cluster_body()).get_json()
    row = claim_one(platform_database, CLUSTER, created["id"])

    assert push_claimed(live_pusher, CLUSTER, row, push_by=time.monotonic() - 1) is None

    assert db_row(downstream_engine, "clusters", created["id"]) is None
    stored = db_row(platform_engine, "clusters", created["id"])
    assert (stored["sync_state"], stored["lease_until"], stored["attempts"]) == ("pending", None, 1)  # the inline one
    assert created["id"] in claimed_ids(platform_database, CLUSTER)


def test_updates_made_while_unreachable_reach_cluster_svc_at_the_newest_generation(
    offline_client, cluster, live_pusher, downstream_engine
):
    url = f"/v1/clusters/{cluster['id']}"
    offline_client.patch(url, json={"plan": "memory-8"})
    last = offline_client.patch(url, json={"storage_gb": 800})
    assert (last.status_code, last.get_json()["generation"], last.get_json()["sync_state"]) == (200, 3, "pending")
    assert db_row(downstream_engine, "clusters", cluster["id"])["generation"] == 1

    drained(live_pusher)

    downstream = db_row(downstream_engine, "clusters", cluster["id"])
    assert (downstream["generation"], downstream["plan"], downstream["storage_gb"]) == (3, "memory-8", 800)
    assert offline_client.get(url).get_json()["sync_state"] == "synced"


def test_a_cluster_changed_before_it_was_ever_pushed_is_created_at_its_newest_generation(
    offline_client, live_pusher, downstream_engine
):
    created = offline_client.post("/v1/clusters", json=cluster_body()).get_json()
    offline_client.patch(f"/v1/clusters/{created['id']}", json={"name": "renamed"})

    drained(live_pusher)

    downstream = db_row(downstream_engine, "clusters", created["id"])
    assert (downstream["generation"], downstream["name"]) == (2, "renamed")


def test_a_rule_deleted_while_unreachable_is_deleted_by_the_reconciler(
    offline_client, cluster, rule, live_pusher, downstream_engine
):
    url = f"/v1/clusters/{cluster['id']}/firewall-rules/{rule['id']}"

    assert offline_client.delete(url).status_code == 202
    drained(live_pusher)

    assert db_row(downstream_engine, "firewall_rules", rule["id"])["deleted_at"] is not None
    assert_problem(offline_client.delete(url), 410, "gone")


def test_a_create_whose_answer_was_lost_converges_to_the_newest_generation(
    offline_client, cluster_svc, account, live_pusher, downstream_engine
):
    """cluster_svc got the create but the platform never heard back, and the user
    changed the cluster since: the replayed create answers 200 with generation 1,
    so the reconciler follows with the update."""
    created = offline_client.post("/v1/clusters", json=cluster_body()).get_json()
    first_push = {**cluster_body(), "id": created["id"], "team_id": str(account[0]), "generation": 1}
    assert requests.post(
        f"{cluster_svc.url}/v1/clusters", json=first_push, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
    ).status_code == 201
    offline_client.patch(f"/v1/clusters/{created['id']}", json={"storage_gb": 250})

    drained(live_pusher)

    downstream = db_row(downstream_engine, "clusters", created["id"])
    assert (downstream["generation"], downstream["storage_gb"]) == (2, 250)
    now = offline_client.get(f"/v1/clusters/{created['id']}").get_json()
    assert (now["sync_state"], now["generation"]) == ("synced", 2)


def test_a_cluster_deleted_before_it_ever_reached_cluster_svc_is_tombstoned_there(
    offline_client, account, cluster_svc, platform_engine, live_pusher, downstream_engine
):
    created = offline_client.post("/v1/clusters", json=cluster_body()).get_json()
    rule = offline_client.post(f"/v1/clusters/{created['id']}/firewall-rules", json=rule_body()).get_json()
    assert offline_client.delete(f"/v1/clusters/{created['id']}").status_code == 202

    drained(live_pusher)

    assert db_row(platform_engine, "clusters", created["id"])["sync_state"] == "synced"
    assert db_row(platform_engine, "firewall_rules", rule["id"])["sync_state"] == "synced"
    tombstone = db_row(downstream_engine, "clusters", created["id"])
    assert tombstone["deleted_at"] is not None and tombstone["name"] is None  # never created, never will be
    # A create delayed in the network behind the delete can never bring either back.
    auth = {"Authorization": f"Bearer {TOKEN}"}
    late_create = {**cluster_body(), "id": created["id"], "team_id": str(account[0])}
    late_rule = {**rule_body(), "id": rule["id"]}
    clusters_url = f"{cluster_svc.url}/v1/clusters"
    assert requests.post(clusters_url, json=late_create, headers=auth, timeout=10).status_code == 410
    rules_url = f"{clusters_url}/{created['id']}/firewall-rules"
    assert requests.post(rules_url, json=late_rule, headers=auth, timeout=10).status_code == 410
    rule_there = db_row(downstream_engine, "firewall_rules", rule["id"])
    assert rule_there is None or rule_there["deleted_at"] is not None


def test_an_id_conflict_downstream_marks_the_row_failed_and_is_not_retried(
    offline_client, cluster_svc, platform_database, live_pusher, downstream_engine
):
    created = offline_client.post("/v1/clusters", json=cluster_body(region="eu-west-1")).get_json()
    squat_downstream(cluster_svc.url, TOKEN, created)

    drained(live_pusher)

    now = offline_client.get(f"/v1/clusters/{created['id']}").get_json()
    assert now["sync_state"] == "failed"
    assert "409 id_conflict" in now["sync_error"]
    assert count_failed(live_pusher) >= 1
    assert created["id"] not in claimed_ids(platform_database, CLUSTER)
    assert db_row(downstream_engine, "clusters", created["id"])["region"] == "us-east-1"  # nothing overwritten


def test_a_delete_refused_for_good_is_failed_not_retried_in_a_loop(
    offline_client, platform_database, platform_engine, refusing_pusher
):
    created = offline_client.post("/v1/clusters", json=cluster_body()).get_json()
    assert offline_client.delete(f"/v1/clusters/{created['id']}").status_code == 202
    drained(refusing_pusher)

    stored = db_row(platform_engine, "clusters", created["id"])
    assert stored["sync_state"] == "failed"
    assert "DELETE" in stored["sync_error"] and "422" in stored["sync_error"]


def test_a_transient_failure_backs_off_then_the_reconciler_finishes(
    offline_client, platform_database, platform_engine, live_pusher, downstream_engine, dead_pusher
):
    created = offline_client.post("/v1/clusters", json=cluster_body()).get_json()
    row = claim_one(platform_database, CLUSTER, created["id"])

    pusher = dead_pusher(RetryPolicy(base_delay=60, max_delay=60))
    after = push_claimed(pusher, CLUSTER, row)

    assert (after["sync_state"], after["attempts"], after["lease_until"]) == ("pending", 2, None)  # inline, then this
    assert "connection failed" in after["sync_error"]
    if due_now(platform_engine, "clusters", created["id"]):  # full jitter: 0 s is a possible backoff
        with platform_engine.begin() as conn:
            conn.execute(
                text("UPDATE clusters SET next_attempt_at = now() + interval '60 seconds' WHERE id = :id"),
                {"id": created["id"]},
            )
    drained(live_pusher)
    assert db_row(downstream_engine, "clusters", created["id"]) is None  # waits out its backoff

    with platform_engine.begin() as conn:
        conn.execute(text("UPDATE clusters SET next_attempt_at = now() WHERE id = :id"), {"id": created["id"]})
    drained(live_pusher)

    stored = db_row(platform_engine, "clusters", created["id"])
    assert (stored["sync_state"], stored["attempts"], stored["sync_error"]) == ("synced", 0, None)
    assert db_row(downstream_engine, "clusters", created["id"]) is not None


def test_transient_failures_never_make_a_row_failed(offline_client, platform_database, platform_engine, dead_pusher):
    """Far past the old budget of 8 attempts: still pending, its backoff capped."""
    created = offline_client.post("/v1/clusters", json=cluster_body()).get_json()
    pusher = dead_pusher(RetryPolicy(base_delay=0.01, max_delay=0.05))

    for _ in range(30):
        after = push_claimed(pusher, CLUSTER, claim_one(platform_database, CLUSTER, created["id"]))
        assert after["sync_state"] == "pending"

    stored = db_row(platform_engine, "clusters", created["id"])
    assert (stored["sync_state"], stored["attempts"], stored["sync_failed_at"]) == ("pending", 31, None)  # and the inline one
    assert "connection failed" in stored["sync_error"]
    with platform_engine.connect() as conn:
        wait = conn.execute(text("SELECT next_attempt_at - now() FROM clusters WHERE id = :id"), {"id": created["id"]})
        assert wait.scalar() <= timedelta(seconds=0.05)
    assert offline_client.get(f"/v1/clusters/{created['id']}").get_json()["sync_state"] == "pending"


class _Refuses(BaseHTTPRequestHandler):
    """A downstream that refuses every call with a permanent 422."""

    def _refuse(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"code": "validation_error", "detail": "refused"}'
        self.send_response(422)
        self.send_header("Content-Type", "application/problem+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_PUT = do_DELETE = _refuse

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def refusing_pusher(platform_database):
    """A pusher whose downstream answers every call with a permanent 422."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refuses)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = InternalClient(f"http://127.0.0.1:{server.server_port}", TOKEN, ClientPolicy(retries=0))
    yield UnitPusher(PushPath(platform_database, client), RESOURCES)
    client.close()
    server.shutdown()
    server.server_close()


def fail_permanently(platform_database, refusing_pusher, object_id):
    """Downstream refuses the row for good: it is failed."""
    row = claim_one(platform_database, CLUSTER, object_id)
    assert push_claimed(refusing_pusher, CLUSTER, row)["sync_state"] == "failed"


def requeue(platform_database, live_pusher):
    """What ``sync-status --retry-failed`` does: re-check against cluster_svc, then put back in line."""
    return sum(r.requeued for r in retry_failed(platform_database, live_pusher.path.client, resource=CLUSTER))


def test_a_patch_of_a_failed_cluster_waits_for_the_operator_then_converges(
    client, offline_client, platform_database, downstream_engine, refusing_pusher, live_pusher
):
    """A failed row is an operator's business: a later public write records the
    new intent but does not push it (after an id_conflict that could change
    another object); once requeued, the reconciler brings it to the newest state."""
    created = offline_client.post("/v1/clusters", json=cluster_body()).get_json()
    fail_permanently(platform_database, refusing_pusher, created["id"])

    response = client.patch(f"/v1/clusters/{created['id']}", json={"plan": "memory-8"})

    assert response.status_code == 200
    assert (response.get_json()["sync_state"], response.get_json()["generation"]) == ("failed", 2)
    assert db_row(downstream_engine, "clusters", created["id"]) is None  # not pushed

    assert requeue(platform_database, live_pusher) >= 1
    drained(live_pusher)

    downstream = db_row(downstream_engine, "clusters", created["id"])
    assert (downstream["generation"], downstream["plan"]) == (2, "memory-8")
    body = client.get(f"/v1/clusters/{created['id']}").get_json()
    assert (body["sync_state"], body["sync_error"]) == ("synced", None)


def test_a_delete_of_a_failed_cluster_answers_202_then_converges_once_requeued(
    client, offline_client, platform_database, downstream_engine, refusing_pusher, live_pusher
):
    created = offline_client.post("/v1/clusters", json=cluster_body()).get_json()
    fail_permanently(platform_database, refusing_pusher, created["id"])

    response = client.delete(f"/v1/clusters/{created['id']}")

    assert response.status_code == 202
    assert response.get_json()["sync_state"] == "failed"
    requeue(platform_database, live_pusher)
    drained(live_pusher)
    assert db_row(downstream_engine, "clusters", created["id"])["deleted_at"] is not None  # a tombstone there
    assert db_row(platform_database.engine, "clusters", created["id"])["sync_state"] == "synced"


def test_a_transient_inline_failure_leaves_the_row_due_at_once_even_after_a_backoff(
    offline_client, cluster, platform_database, platform_engine, live_pusher, dead_pusher
):
    """The user's newest change must not wait out the backoff an older failure set."""
    offline_client.patch(f"/v1/clusters/{cluster['id']}", json={"plan": "hobby-0"})  # pending, due
    row = claim_one(platform_database, CLUSTER, cluster["id"])
    push_claimed(dead_pusher(RetryPolicy(base_delay=300, max_delay=300)), CLUSTER, row)
    with platform_engine.begin() as conn:  # a long backoff (full jitter could have drawn a short one)
        conn.execute(
            text("UPDATE clusters SET next_attempt_at = now() + interval '300 seconds' WHERE id = :id"),
            {"id": cluster["id"]},
        )

    response = offline_client.patch(f"/v1/clusters/{cluster['id']}", json={"plan": "memory-8"})

    assert (response.status_code, response.get_json()["sync_state"]) == (200, "pending")
    assert due_now(platform_engine, "clusters", cluster["id"])
    drained(live_pusher)
    assert offline_client.get(f"/v1/clusters/{cluster['id']}").get_json()["sync_state"] == "synced"


# Noticing recovery ---------------------------------------------------------------


def backed_off(offline_client, platform_database, platform_engine, dead_pusher):
    """A cluster whose push failed, now waiting on a long backoff."""
    created = offline_client.post("/v1/clusters", json=cluster_body()).get_json()
    push_claimed(dead_pusher(RetryPolicy()), CLUSTER, claim_one(platform_database, CLUSTER, created["id"]))
    with platform_engine.begin() as conn:
        conn.execute(
            text("UPDATE clusters SET attempts = 12, next_attempt_at = now() + interval '280 seconds' WHERE id = :id"),
            {"id": created["id"]},
        )
    return created["id"]


def test_a_probe_that_cluster_svc_serves_makes_rows_in_backoff_due_at_once(
    offline_client, platform_database, platform_engine, dead_pusher, live_pusher
):
    object_id = backed_off(offline_client, platform_database, platform_engine, dead_pusher)

    assert RecoveryWatch(dead_pusher(RetryPolicy()), suspect=True).check() == 0  # still down: nothing woken
    assert not due_now(platform_engine, "clusters", object_id)
    assert RecoveryWatch(live_pusher, suspect=False).check() == 0  # no outage suspected: no probe
    assert not due_now(platform_engine, "clusters", object_id)

    assert RecoveryWatch(live_pusher, suspect=True).check() >= 1

    assert due_now(platform_engine, "clusters", object_id)
    assert db_row(platform_engine, "clusters", object_id)["attempts"] == 12  # kept until it is confirmed
    drained(live_pusher)
    assert db_row(platform_engine, "clusters", object_id)["sync_state"] == "synced"


def test_a_push_served_after_consecutive_failures_wakes_rows_in_backoff(
    offline_client, platform_database, platform_engine, dead_pusher, live_pusher
):
    object_id = backed_off(offline_client, platform_database, platform_engine, dead_pusher)
    watch = RecoveryWatch(live_pusher, suspect=False)
    failed = Answer(Outcome.TRANSIENT, None, None, "POST /v1/clusters: connection failed")
    served = Answer(Outcome.DONE, 201, {}, "POST /v1/clusters: 201")
    parent_missing = Answer(Outcome.TRANSIENT, 404, {}, "POST /v1/clusters/x/firewall-rules: 404")

    # Failures with served calls between them: one row's trouble, not an outage
    # (a transient 404 is cluster_svc answering about one object).
    for answer in (failed, failed, served, failed, failed, parent_missing, failed, served):
        watch.observe(answer)
    assert not due_now(platform_engine, "clusters", object_id)
    for _ in range(3):
        watch.observe(failed)
    assert not due_now(platform_engine, "clusters", object_id)

    watch.observe(served)

    assert due_now(platform_engine, "clusters", object_id)


def test_failed_pushes_that_served_probes_contradict_are_one_rows_trouble_not_an_outage(
    offline_client, platform_database, platform_engine, dead_pusher, live_pusher, caplog
):
    """Each failure makes the next check probe; cluster_svc serves the probe, so
    the row's failures never add up to an outage, however many in a row."""
    object_id = backed_off(offline_client, platform_database, platform_engine, dead_pusher)
    watch = RecoveryWatch(live_pusher, suspect=False)
    failed = Answer(Outcome.TRANSIENT, 500, {}, "POST /v1/clusters: 500")
    served = Answer(Outcome.DONE, 201, {}, "POST /v1/clusters: 201")

    with caplog.at_level("INFO", logger="platform_svc.reconciler.controller"):
        for _ in range(5):
            watch.observe(failed)
            assert watch.check() == 0
        watch.observe(served)

    assert not due_now(platform_engine, "clusters", object_id)
    assert "cluster_svc" not in caplog.text


def test_a_failed_probe_after_a_failed_push_is_an_outage_and_the_next_served_push_ends_it(
    offline_client, platform_database, platform_engine, dead_pusher, live_pusher, caplog
):
    object_id = backed_off(offline_client, platform_database, platform_engine, dead_pusher)
    down = RecoveryWatch(dead_pusher(RetryPolicy()), suspect=False)

    with caplog.at_level("INFO", logger="platform_svc.reconciler.controller"):
        down.observe(Answer(Outcome.TRANSIENT, None, None, "POST /v1/clusters: timed out"))
        assert down.check() == 0  # the probe fails too: cluster_svc is down
        assert "cluster_svc does not answer" in caplog.text
        down.pusher = live_pusher  # cluster_svc is back
        down.observe(Answer(Outcome.DONE, 201, {}, "POST /v1/clusters: 201"))

    assert re.search(r"cluster_svc answers again: [1-9][0-9]* rows waiting on a backoff are due now", caplog.text)
    assert due_now(platform_engine, "clusters", object_id)


def put_downstream(cluster_svc, created: dict, generation: int) -> None:
    """What anyone holding the internal token can do: cluster_svc's copy moved to ``generation``."""
    body = {k: created[k] for k in ("name", "plan", "storage_gb")} | {"generation": generation}
    answer = requests.put(f"{cluster_svc.url}/v1/clusters/{created['id']}", json=body,
                          headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert answer.status_code == 200, answer.text


def test_a_copy_moved_near_the_integer_limit_is_followed_to_it_and_then_a_patch_is_409_never_500(
    client, cluster_svc, platform_engine
):
    created = client.post("/v1/clusters", json=cluster_body()).get_json()
    put_downstream(cluster_svc, created, HIGHEST_GENERATION - 1)

    first = client.patch(f"/v1/clusters/{created['id']}", json={"name": "renamed"})
    assert first.status_code == 200
    assert db_row(platform_engine, "clusters", created["id"])["generation"] == HIGHEST_GENERATION  # past theirs

    second = client.patch(f"/v1/clusters/{created['id']}", json={"name": "again"})
    assert_problem(second, 409, "generation_exhausted")
    assert db_row(platform_engine, "clusters", created["id"])["name"] == "renamed"  # nothing changed


def test_a_copy_moved_to_the_integer_limit_fails_the_row_with_that_reason_never_stalls_it(
    client, cluster_svc, platform_engine
):
    created = client.post("/v1/clusters", json=cluster_body()).get_json()
    put_downstream(cluster_svc, created, HIGHEST_GENERATION)

    answer = client.patch(f"/v1/clusters/{created['id']}", json={"name": "renamed"})

    assert answer.status_code == 200 and answer.get_json()["sync_state"] == "failed"
    stored = db_row(platform_engine, "clusters", created["id"])
    assert stored["generation"] == 2 and "highest" in stored["sync_error"]
