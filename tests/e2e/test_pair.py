"""The service pair end to end: inline pushes, an outage and its recovery, a
permanent conflict, two reconcilers at once, and start-up failures."""
from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import text

from tests.helpers import cluster_body
from tooling.faultproxy import FaultProxy
from tooling.testing import console_script, free_port, fresh_database, wait_for

QUICK = 3.0  # seconds: an inline push gives up after 0.5 s connect timeouts and 2 quick retries


def timed(call):
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


def test_a_create_is_pushed_down_at_once(pair):
    response = pair.api("POST", "/v1/clusters", json=cluster_body(name="orders", region="ap-southeast-1"))

    assert response.status_code == 201
    body = response.json()
    assert uuid.UUID(body["id"]).version == 7
    assert response.headers["Location"].endswith(f"/v1/clusters/{body['id']}")
    assert (body["sync_state"], body["sync_error"], body["generation"]) == ("synced", None, 1)
    downstream = pair.cluster_svc_rows("clusters")[body["id"]]
    assert str(downstream["team_id"]) == pair.account_id
    assert (downstream["name"], downstream["region"], downstream["generation"]) == ("orders", "ap-southeast-1", 1)
    pair.assert_downstream_matches()


def test_writes_during_an_outage_are_pending_then_reconciled_exactly(fresh_pair):
    pair = fresh_pair  # of its own: it stops cluster_svc
    def create(name):
        response = pair.api("POST", "/v1/clusters", json=cluster_body(name=name))
        assert (response.status_code, response.json()["sync_state"]) == (201, "synced")
        return response.json()

    kept, patched, deleted = create("kept"), create("patched"), create("deleted")
    doomed_rule = pair.api("POST", f"/v1/clusters/{deleted['id']}/firewall-rules", json={"cidr": "10.9.0.0/16"})
    assert (doomed_rule.status_code, doomed_rule.json()["sync_state"]) == (201, "synced")

    pair.stop_cluster_svc()

    def during_outage(status, method, path, body=None):
        """Call the public API; it answers quickly, with the write recorded as pending."""
        response, elapsed = timed(lambda: pair.api(method, path, json=body))
        assert response.status_code == status, (method, path, response.text)
        assert response.json()["sync_state"] == "pending", (method, path)
        assert elapsed < QUICK, (method, path, elapsed)
        return response.json()

    new_one = during_outage(201, "POST", "/v1/clusters", cluster_body(name="new-one", region="us-east-1"))
    new_two = during_outage(201, "POST", "/v1/clusters", cluster_body(name="new-two", postgres_version=14))
    changed = during_outage(200, "PATCH", f"/v1/clusters/{patched['id']}", {"plan": "memory-8", "storage_gb": 300})
    gone = during_outage(202, "DELETE", f"/v1/clusters/{deleted['id']}")
    during_outage(201, "POST", f"/v1/clusters/{kept['id']}/firewall-rules", {"cidr": "10.1.0.0/16"})
    during_outage(200, "PATCH", f"/v1/clusters/{new_two['id']}", {"name": "renamed"})
    during_outage(201, "POST", f"/v1/clusters/{new_one['id']}/firewall-rules", {"cidr": "192.168.1.0/24"})
    assert "connection failed" in new_one["sync_error"]
    assert changed["generation"] == 2
    assert gone["deleted_at"] is not None

    pair.restart_cluster_svc()
    assert pair.api("GET", f"/v1/clusters/{new_one['id']}").json()["sync_state"] == "pending"  # nobody pushed yet
    result = pair.cli("reconcile", "--once")

    assert result.returncode == 0, result.stderr
    assert "pushed" in result.stdout
    listed = pair.api("GET", "/v1/clusters?limit=500").json()["items"]
    assert {item["id"] for item in listed} == {kept["id"], patched["id"], new_one["id"], new_two["id"]}
    assert {item["sync_state"] for item in listed} == {"synced"}
    pair.assert_downstream_matches()
    downstream = pair.cluster_svc_rows("clusters")
    assert (downstream[patched["id"]]["plan"], downstream[patched["id"]]["storage_gb"]) == ("memory-8", 300)
    assert (downstream[patched["id"]]["generation"], downstream[new_two["id"]]["generation"]) == (2, 2)
    assert downstream[new_two["id"]]["name"] == "renamed"
    assert downstream[new_one["id"]]["region"] == "us-east-1"
    assert downstream[deleted["id"]]["deleted_at"] is not None
    rules = pair.cluster_svc_rows("firewall_rules")
    assert rules[doomed_rule.json()["id"]]["deleted_at"] is not None  # gone with its cluster
    live_rules = {str(rule["cidr"]) for rule in rules.values() if rule["deleted_at"] is None}
    assert live_rules == {"10.1.0.0/16", "192.168.1.0/24"}
    assert pair.api("DELETE", f"/v1/clusters/{deleted['id']}").status_code == 410


def test_a_permanent_conflict_fails_the_row_and_sync_status_can_requeue_it(fresh_pair):
    pair = fresh_pair  # of its own: it stops cluster_svc, and sync-status counts every row
    pair.stop_cluster_svc()
    doomed = pair.api("POST", "/v1/clusters", json=cluster_body(region="eu-west-1")).json()
    healthy = pair.api("POST", "/v1/clusters", json=cluster_body(name="healthy")).json()
    assert (doomed["sync_state"], healthy["sync_state"]) == ("pending", "pending")
    pair.restart_cluster_svc()
    squatter = {**cluster_body(region="us-west-2"), "id": doomed["id"], "team_id": str(uuid.uuid4())}
    assert pair.internal("POST", "/v1/clusters", json=squatter).status_code == 201

    result = pair.cli("reconcile", "--once")

    assert result.returncode == 1, result.stderr
    assert "1 row is failed; see `platform-svc sync-status`." in result.stderr
    failed = pair.api("GET", f"/v1/clusters/{doomed['id']}").json()
    assert failed["sync_state"] == "failed"
    assert "id_conflict" in failed["sync_error"]
    assert pair.api("GET", f"/v1/clusters/{healthy['id']}").json()["sync_state"] == "synced"
    assert pair.cluster_svc_rows("clusters")[doomed["id"]]["region"] == "us-west-2"  # left as it was

    status = pair.cli("sync-status")

    assert status.returncode == 0, status.stderr
    assert "clusters: 1 synced, 0 pending, 1 failed" in status.stdout
    [listed] = [line for line in status.stdout.splitlines() if doomed["id"] in line]
    assert "failed" in listed and "id_conflict" in listed

    kept = pair.cli("sync-status", "--retry-failed")  # the squatter is still there: nothing to retry

    assert kept.returncode == 0, kept.stderr
    assert "clusters: 0 failed rows put back in line" in kept.stdout
    assert f"left failed {doomed['id']}: not retried" in kept.stdout and "region, team_id" in kept.stdout
    assert pair.cluster_svc_rows("clusters")[doomed["id"]]["region"] == "us-west-2"

    assert pair.internal("DELETE", f"/v1/clusters/{doomed['id']}").status_code == 204  # its owner gives it up
    with pair.cluster_engine.begin() as conn:  # and a person removes the tombstone, freeing the ID
        conn.execute(text("DELETE FROM clusters WHERE id = :id"), {"id": doomed["id"]})
    requeued = pair.cli("sync-status", "--retry-failed", "--reason", "id_conflict")

    assert requeued.returncode == 0, requeued.stderr
    assert "clusters: 1 failed rows put back in line" in requeued.stdout
    assert "clusters: 1 synced, 1 pending, 0 failed" in requeued.stdout
    assert pair.api("GET", f"/v1/clusters/{doomed['id']}").json()["sync_state"] == "pending"
    assert pair.platform_rows("clusters")[doomed["id"]]["attempts"] == 0


# Two reconcilers at once ----------------------------------------------------------


def test_two_reconcilers_at_once_push_each_row_once(fresh_pair):
    pair = fresh_pair  # of its own: it stops cluster_svc, and the reconcilers push every due row
    pair.stop_cluster_svc()

    def create(n):
        response = pair.api("POST", "/v1/clusters", json=cluster_body(name=f"db-{n}", storage_gb=10 + n))
        assert (response.status_code, response.json()["sync_state"]) == (201, "pending")
        return response.json()["id"]

    with ThreadPoolExecutor(16) as pool:
        ids = set(pool.map(create, range(200)))
    assert len(ids) == 200
    pair.restart_cluster_svc()

    # The proxy records when each call arrived and ended; a slow network, so that the two reconcilers' work overlaps.
    with FaultProxy(pair.cluster_svc.url, latency=0.02) as proxy:
        command = [console_script("platform-svc"), "reconcile", "--once", "--concurrency", "4", "--batch", "20"]
        env = {**os.environ, **pair.platform_env, "CLUSTER_SVC_URL": proxy.url}
        reconcilers = [
            subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        try:
            outputs = [reconciler.communicate(timeout=120) for reconciler in reconcilers]
        finally:
            for reconciler in reconcilers:
                if reconciler.poll() is None:
                    reconciler.kill()
                    reconciler.communicate()
        calls = proxy.log

    for reconciler, (stdout, stderr) in zip(reconcilers, outputs):
        assert reconciler.returncode == 0, stderr
    pushed = [int(stdout.split()[1]) for stdout, _ in outputs]  # "pushed N rows: ..."
    assert sum(pushed) == 200, outputs

    assert {row["sync_state"] for row in pair.platform_rows("clusters").values()} == {"synced"}
    downstream = pair.cluster_svc_rows("clusters")
    assert set(downstream) == ids
    pair.assert_downstream_matches()

    assert {call.method for call in calls} == {"POST"}
    posts = defaultdict(list)  # each ID's calls (an item of a batch as one), in arrival order
    for call in calls:
        for object_id in call.object_ids:
            posts[object_id].append(call)
    assert set(posts) == ids
    for object_id, its_calls in posts.items():
        for earlier, later in zip(its_calls, its_calls[1:]):
            assert later.received >= earlier.finished, f"two POSTs of {object_id} in flight at once"
    assert Counter(len(its_calls) for its_calls in posts.values()) == {1: 200}  # exactly one POST per ID
    assert Counter(call.statuses()[object_id] for object_id, its_calls in posts.items() for call in its_calls) == {
        201: 200
    }
    assert max(len(call.object_ids) for call in calls) > 1  # the creates went down in batches


# The long-running reconciler ------------------------------------------------------


def test_reconcile_once_prints_one_clean_line_whether_or_not_it_pushed(fresh_pair):
    pair = fresh_pair  # of its own: it stops cluster_svc
    pair.stop_cluster_svc()
    pending = [pair.api("POST", "/v1/clusters", json=cluster_body(name=f"db-{n}")).json() for n in range(2)]
    assert {row["sync_state"] for row in pending} == {"pending"}
    pair.restart_cluster_svc()

    pushed = pair.cli("reconcile", "--once")
    nothing = pair.cli("reconcile", "--once")  # everything is synced now

    assert (pushed.returncode, pushed.stdout) == (0, "pushed 2 rows: 2 synced\n"), pushed.stderr
    assert (nothing.returncode, nothing.stdout) == (0, "pushed 0 rows\n"), nothing.stderr


def test_the_running_reconciler_pushes_new_work_and_stops_on_sigterm(fresh_pair):
    pair = fresh_pair  # of its own: it stops cluster_svc
    pair.stop_cluster_svc()
    pending = pair.api("POST", "/v1/clusters", json=cluster_body()).json()
    assert pending["sync_state"] == "pending"
    pair.restart_cluster_svc()

    with pair.reconciler() as reconciler:  # stopped with SIGTERM at the end of the block, and must exit 0
        wait_for(
            lambda: pair.api("GET", f"/v1/clusters/{pending['id']}").json()["sync_state"] == "synced",
            timeout=30,
            what="the reconciler pushing the pending cluster",
        )
        assert reconciler.process.poll() is None
        output = reconciler.output()

    assert "reconciler running" in output
    pair.assert_downstream_matches()


# Start-up --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "missing"),
    [
        (["serve"], "PLATFORM_DATABASE_URL"),
        (["serve"], "CLUSTER_SVC_URL"),
        (["serve"], "INTERNAL_TOKEN"),
        (["reconcile", "--once"], "PLATFORM_DATABASE_URL"),
        (["migrate"], "PLATFORM_DATABASE_URL"),
    ],
)
def test_a_missing_setting_stops_start_up_with_one_line_naming_it(command, missing):
    env = {
        **os.environ,
        "PLATFORM_DATABASE_URL": "postgresql+psycopg2://nobody@127.0.0.1:9/nowhere",
        "CLUSTER_SVC_URL": "http://127.0.0.1:9",
        "INTERNAL_TOKEN": "token",
    }
    del env[missing]
    port = ["--port", str(free_port())] if command == ["serve"] else []

    result = subprocess.run(
        [console_script("platform-svc"), *command, *port], env=env, capture_output=True, text=True, timeout=30
    )

    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert missing in lines[0]
    assert "Traceback" not in result.stderr


def test_migrate_brings_a_fresh_database_up_to_date_and_can_run_again(pg_server_url):
    env = {**os.environ, "PLATFORM_DATABASE_URL": fresh_database(pg_server_url, "e2e_migrate")}

    for _ in range(2):
        result = subprocess.run(
            [console_script("platform-svc"), "migrate"], env=env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        assert "up to date" in result.stdout
