"""Metrics as an operator reads them, from real `serve` processes with 2 gunicorn workers.

Counters must be exact whichever worker answered, survive a worker killed
with SIGKILL, and the database gauges must follow an outage of cluster_svc.
"""
from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from sqlalchemy import text

from cluster_svc.cli import MIGRATIONS as CLUSTER_MIGRATIONS
from tests.e2e.metrics_helpers import scrape, series, value
from tests.helpers import cluster_body
from tooling.pair import TOKEN
from tooling.testing import LiveServer, console_script, free_port, fresh_database, wait_for

AUTH = {"Authorization": f"Bearer {TOKEN}"}
CLUSTERS, CLUSTER = "/v1/clusters", "/v1/clusters/<object_id:cluster_id>"
RULES = "/v1/clusters/<object_id:cluster_id>/firewall-rules"
RULE = "/v1/clusters/<object_id:cluster_id>/firewall-rules/<object_id:rule_id>"


@pytest.fixture
def cluster_server(pg_server_url):
    url = fresh_database(pg_server_url, "m_cluster", migrations=CLUSTER_MIGRATIONS)
    server = LiveServer(
        [console_script("cluster-svc"), "serve", "--workers", "2", "--threads", "4"],
        {"CLUSTER_DATABASE_URL": url, "INTERNAL_TOKEN": TOKEN},
    )
    with server:
        yield server


class Traffic:
    """Calls cluster_svc on fresh connections (so either worker may answer) and
    tallies what came back by (method, route template, status)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.answers: Counter[tuple[str, str, str]] = Counter()

    def __call__(self, method: str, route: str, path: str, body: dict | None = None, expect: int | None = None):
        response = requests.request(method, self.base_url + path, json=body, headers=AUTH, timeout=30)
        if expect is not None:
            assert response.status_code == expect, (method, path, response.text)
        self.answers[(method, route, str(response.status_code))] += 1
        return response


def downstream_cluster(**overrides):
    body = {**cluster_body(), "id": str(uuid.uuid4()), "team_id": str(uuid.uuid4()), "generation": 1}
    return {**body, **overrides}


def put_body(generation: int, name: str) -> dict:
    return {"generation": generation, "name": name, "plan": "standard-2", "storage_gb": 100}


def run_known_traffic(call: Traffic) -> None:
    """Outcomes, per resource: see the expected counts in the test."""
    c = [downstream_cluster() for _ in range(6)]
    with ThreadPoolExecutor(6) as pool:  # concurrent, so both workers answer
        list(pool.map(lambda body: call("POST", CLUSTERS, CLUSTERS, body, 201), c))
        list(pool.map(lambda body: call("POST", CLUSTERS, CLUSTERS, body, 200), [c[0], c[0], c[1], c[1]]))
    for changed in ({**c[0], "region": "us-east-1"}, {**c[0], "region": "us-west-2"}, {**c[1], "postgres_version": 14}):
        call("POST", CLUSTERS, CLUSTERS, changed, 409)
    for generation in (2, 3, 4):
        call("PUT", CLUSTER, f"{CLUSTERS}/{c[2]['id']}", put_body(generation, f"g{generation}"), 200)
    for generation in (3, 2):
        call("PUT", CLUSTER, f"{CLUSTERS}/{c[2]['id']}", put_body(generation, "old"), 200)
    call("PUT", CLUSTER, f"{CLUSTERS}/{c[3]['id']}", put_body(1, "same"), 200)
    call("DELETE", CLUSTER, f"{CLUSTERS}/{c[5]['id']}", expect=204)
    call("DELETE", CLUSTER, f"{CLUSTERS}/{c[4]['id']}", expect=204)
    for _ in range(2):
        call("DELETE", CLUSTER, f"{CLUSTERS}/{c[5]['id']}", expect=410)
        call("POST", CLUSTERS, CLUSTERS, c[5], 410)
    call("POST", CLUSTERS, CLUSTERS, c[4], 410)
    for _ in range(3):
        call("DELETE", CLUSTER, f"{CLUSTERS}/{uuid.uuid4()}", expect=404)

    rules = f"{CLUSTERS}/{c[0]['id']}/firewall-rules"
    r = [{"id": str(uuid.uuid4()), "cidr": f"10.0.{i}.0/24", "description": "x", "generation": 1} for i in range(2)]
    call("POST", RULES, rules, r[0], 201)
    call("POST", RULES, rules, r[1], 201)
    call("POST", RULES, rules, r[0], 200)
    call("POST", RULES, rules, {**r[0], "cidr": "192.168.0.0/16"}, 409)
    call("PUT", RULE, f"{rules}/{r[0]['id']}", {"generation": 2, "description": "y"}, 200)
    call("PUT", RULE, f"{rules}/{r[0]['id']}", {"generation": 2, "description": "z"}, 200)
    call("DELETE", RULE, f"{rules}/{r[1]['id']}", expect=204)
    call("DELETE", RULE, f"{rules}/{r[1]['id']}", expect=410)
    call("POST", RULES, rules, r[1], 410)
    call("DELETE", RULE, f"{rules}/{uuid.uuid4()}", expect=404)


EXPECTED = {
    "idempotent_creates_total": {
        ("cluster", "created"): 6,
        ("cluster", "replayed"): 4,
        ("cluster", "conflict"): 3,
        ("cluster", "gone"): 3,
        ("firewall_rule", "created"): 2,
        ("firewall_rule", "replayed"): 1,
        ("firewall_rule", "conflict"): 1,
        ("firewall_rule", "gone"): 1,
    },
    "idempotent_updates_total": {
        ("cluster", "applied"): 3,
        ("cluster", "stale"): 3,
        ("firewall_rule", "applied"): 1,
        ("firewall_rule", "stale"): 1,
    },
    "idempotent_deletes_total": {
        ("cluster", "deleted"): 2,
        ("cluster", "already_deleted"): 2,
        ("cluster", "never_seen"): 3,
        ("firewall_rule", "deleted"): 1,
        ("firewall_rule", "already_deleted"): 1,
        ("firewall_rule", "never_seen"): 1,
    },
}


def assert_counts(samples, traffic: Traffic) -> None:
    for metric, expected in EXPECTED.items():
        found = {
            (dict(labels)["resource"], dict(labels)["outcome"]): v for labels, v in series(samples, metric).items()
        }
        assert found == expected, metric
    api_requests = {
        (labels["method"], labels["route"], labels["status"]): v
        for labels, v in ((dict(k), v) for k, v in series(samples, "http_requests_total").items())
        if labels["route"].startswith("/v1/")
    }
    assert api_requests == dict(traffic.answers)
    durations = {
        (dict(k)["method"], dict(k)["route"]): v for k, v in series(samples, "http_request_duration_seconds_count").items()
    }
    for (method, route, _status), n in traffic.answers.items():
        assert durations[(method, route)] >= n


def test_every_outcome_is_counted_exactly_once_whichever_worker_answered_and_a_killed_worker_loses_nothing(
    cluster_server,
):
    traffic = Traffic(cluster_server.url)
    run_known_traffic(traffic)

    # Several scrapes on fresh connections: whichever worker answers, the same totals.
    scrapes = [scrape(cluster_server.url, TOKEN) for _ in range(6)]
    for samples in scrapes:
        assert_counts(samples, traffic)

    victim = cluster_server.worker_pids()[0]
    os.kill(victim, signal.SIGKILL)
    wait_for(
        lambda: len(cluster_server.worker_pids()) == 2 and victim not in cluster_server.worker_pids(),
        what="gunicorn to replace the killed worker",
    )
    for _ in range(4):
        assert_counts(scrape(cluster_server.url, TOKEN), traffic)

    traffic("POST", CLUSTERS, CLUSTERS, downstream_cluster(), 201)
    samples = scrape(cluster_server.url, TOKEN)
    assert value(samples, "idempotent_creates_total", resource="cluster", outcome="created") == 6 + 1


def test_metrics_need_the_internal_token(pair):
    account_key = f"Bearer {pair.api_key}"
    for url in (pair.cluster_svc.url, pair.platform_svc.url):
        assert requests.get(f"{url}/metrics", timeout=10).status_code == 401
        assert requests.get(f"{url}/metrics", headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401
    # platform_svc's account keys open its API, never its metrics.
    assert pair.api("GET", "/v1/clusters").status_code == 200
    answer = requests.get(f"{pair.platform_svc.url}/metrics", headers={"Authorization": account_key}, timeout=10)
    assert answer.status_code == 401
    assert answer.headers["Content-Type"] == "application/problem+json"


def _sync(samples, resource="cluster"):
    return {dict(labels)["state"]: v for labels, v in series(samples, "sync_rows", resource=resource).items()}


def test_sync_gauges_follow_a_downstream_outage_and_its_recovery(fresh_pair):
    pair = fresh_pair  # of its own: it stops cluster_svc, and the gauges count every row
    platform = pair.platform_svc.url
    before = scrape(platform, TOKEN)
    assert _sync(before) == {"pending": 0, "stalled": 0, "synced": 0, "failed": 0, "abandoned": 0}
    assert value(before, "sync_oldest_pending_seconds", resource="cluster") == 0

    pair.stop_cluster_svc()
    created = [pair.api("POST", "/v1/clusters", json=cluster_body(name=f"out-{i}")) for i in range(3)]
    assert [r.json()["sync_state"] for r in created] == ["pending"] * 3

    during = scrape(platform, TOKEN)
    assert _sync(during) == {"pending": 3, "stalled": 0, "synced": 0, "failed": 0, "abandoned": 0}
    assert value(during, "sync_oldest_pending_seconds", resource="cluster") > 0
    assert value(during, "sync_pushes_total", resource="cluster", operation="create", outcome="transient") == 3

    # One row has waited longer than STALLED_AFTER (5 minutes): it shows as stalled.
    with pair.platform_engine.begin() as conn:
        conn.execute(
            text("UPDATE clusters SET updated_at = now() - interval '10 minutes' WHERE id = :id"),
            {"id": created[0].json()["id"]},
        )
    stalled = scrape(platform, TOKEN)
    assert _sync(stalled) == {"pending": 2, "stalled": 1, "synced": 0, "failed": 0, "abandoned": 0}
    assert value(stalled, "sync_oldest_pending_seconds", resource="cluster") >= 600

    pair.restart_cluster_svc()
    result = pair.cli("reconcile", "--once")
    assert result.returncode == 0, result.stderr

    after = scrape(platform, TOKEN)
    assert _sync(after) == {"pending": 0, "stalled": 0, "synced": 3, "failed": 0, "abandoned": 0}
    assert value(after, "sync_oldest_pending_seconds", resource="cluster") == 0
    pair.assert_downstream_matches()


def test_the_reconciler_serves_its_push_counts_on_its_metrics_port(fresh_pair, tmp_path):
    pair = fresh_pair  # of its own: it stops cluster_svc, and the reconciler pushes every due row
    pair.stop_cluster_svc()
    for i in range(4):
        assert pair.api("POST", "/v1/clusters", json=cluster_body(name=f"r-{i}")).status_code == 201
    pair.restart_cluster_svc()

    port = free_port()
    stray_dir = tmp_path / "multiproc"
    stray_dir.mkdir()
    # A gunicorn metrics directory left in the environment must not capture its counts.
    env = {"HOST": "127.0.0.1", "PROMETHEUS_MULTIPROC_DIR": str(stray_dir)}
    with pair.reconciler("--metrics-port", str(port), env=env):
        url = f"http://127.0.0.1:{port}"

        def pushed():
            try:
                samples = scrape(url, None)
            except requests.ConnectionError:
                return None
            done = value(samples, "sync_pushes_total", resource="cluster", operation="create", outcome="done")
            return samples if done == 4 else None

        samples = wait_for(pushed, timeout=30, what="the reconciler to count 4 pushes")
        assert value(samples, "sync_pushes_total", outcome="transient") == 0
        # Its clock, measured by the scrape against the database and by every answer's Date: right.
        assert series(samples, "clock_offset_seconds") == {
            frozenset({("reference", "database")}): 0.0, frozenset({("reference", "cluster_svc")}): 0.0
        }
        assert list(stray_dir.iterdir()) == []
    pair.assert_downstream_matches()


def test_no_command_module_imports_prometheus_client_before_serve_sets_its_directory():
    # prometheus-client picks in-memory or per-worker-file storage when first
    # imported; `serve` sets PROMETHEUS_MULTIPROC_DIR only once it runs.
    code = (
        "import sys, cluster_svc.cli, platform_svc.cli\n"
        "assert 'prometheus_client' not in sys.modules, sorted(m for m in sys.modules if 'prometheus' in m)\n"
    )
    result = subprocess.run([console_script("python"), "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
