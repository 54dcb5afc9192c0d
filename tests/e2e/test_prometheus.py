"""A real Prometheus (Debian's package) scrapes the running pair and the reconciler.

It gets a temporary configuration shaped like the shipped one (the internal
token in a credentials file, the shipped alert rules), on loopback, scraping
every second; the test then asks its HTTP API what it saw.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import requests
import yaml

from tests.helpers import cluster_body
from tooling.pair import TOKEN
from tooling.testing import console_script, free_port, installed, wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def prometheus_binary():
    return installed("prometheus")


@pytest.fixture
def pair(prometheus_binary, fresh_pair):
    """Of its own: Prometheus reads the pair's counters of every request since it started.
    (Only once prometheus is known to be there.)"""
    return fresh_pair


@pytest.fixture
def reconciler(pair):
    port = free_port()
    process = subprocess.Popen(
        [console_script("platform-svc"), "reconcile", "--metrics-port", str(port)],
        env={**os.environ, **pair.platform_env, "HOST": "127.0.0.1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def _config(tmp_path: Path, targets: dict[str, str]) -> Path:
    shipped = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    token = tmp_path / "internal_token"
    token.write_text(TOKEN)
    for job in shipped["scrape_configs"]:
        job["static_configs"] = [{"targets": [targets[job["job_name"]]]}]
        job["scrape_interval"] = "1s"
        if "authorization" in job:
            job["authorization"]["credentials_file"] = str(token)
    shutil.copy(ROOT / "deploy" / "prometheus" / "alerts.yml", tmp_path / "alerts.yml")
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(shipped))
    return path


@pytest.fixture
def prometheus(prometheus_binary, pair, reconciler, tmp_path):
    targets = {
        "platform_svc": pair.platform_svc.url.removeprefix("http://"),
        "cluster_svc": pair.cluster_svc.url.removeprefix("http://"),
        "reconciler": reconciler,
    }
    port = free_port()
    with (tmp_path / "prometheus.log").open("wb") as log:
        process = subprocess.Popen(
            [
                prometheus_binary,
                f"--config.file={_config(tmp_path, targets)}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _ready(url), timeout=60, what="prometheus to start")
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def _ready(url: str) -> bool:
    try:
        return requests.get(f"{url}/-/ready", timeout=2).status_code == 200
    except requests.ConnectionError:
        return False


def _query(url: str, promql: str) -> dict[tuple, float]:
    answer = requests.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10).json()
    assert answer["status"] == "success", answer
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in answer["data"]["result"]}


def test_prometheus_scrapes_both_services_and_the_reconciler(pair, prometheus):
    def all_up():
        targets = requests.get(f"{prometheus}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
        return {t["labels"]["job"]: t["health"] for t in targets} == {
            "platform_svc": "up",
            "cluster_svc": "up",
            "reconciler": "up",
        }

    wait_for(all_up, timeout=30, what="every target to be up")

    for i in range(3):
        assert pair.api("POST", "/v1/clusters", json=cluster_body(name=f"prom-{i}")).status_code == 201

    def counted():
        found = _query(prometheus, 'http_requests_total{route="/v1/clusters",method="POST"}')
        return found if sorted(found.values()) == [3.0, 3.0] else None

    found = wait_for(counted, timeout=30, what="prometheus to see the three creates")
    assert {dict(labels)["job"]: dict(labels)["status"] for labels in found} == {
        "platform_svc": "201",
        "cluster_svc": "201",
    }
    created = _query(prometheus, 'idempotent_creates_total{resource="cluster",outcome="created"}')
    assert list(created.values()) == [3.0]
    synced = wait_for(
        lambda: _query(prometheus, 'sync_rows{resource="cluster",state="synced"} == 3'), what="synced rows"
    )
    assert [dict(labels)["job"] for labels in synced] == ["platform_svc"]
    rules = requests.get(f"{prometheus}/api/v1/rules", timeout=10).json()["data"]["groups"]
    assert {rule["name"] for group in rules for rule in group["rules"]} >= {
        "SyncOldestPendingTooOld",
        "SyncRowsFailed",
        "SyncPushesFailingTransiently",
        "TombstonesOutliveTheHorizon",
        "RepairLeaderNotOne",
        "ServiceNotReady",
        "ServiceAnswers5xx",
    }
    # What ServiceNotReady reads: each service's readiness, scraped beside its counters.
    ready = _query(prometheus, "ready")
    assert {dict(labels)["job"]: value for labels, value in ready.items()} == {"platform_svc": 1.0, "cluster_svc": 1.0}
    # What that alert compares: cluster_svc's oldest tombstone per resource, and its horizon.
    oldest = _query(prometheus, "max by (resource) (tombstone_oldest_seconds)")
    assert {dict(labels)["resource"] for labels in oldest} == {"cluster", "firewall_rule"}
    assert list(_query(prometheus, "id_horizon_seconds").values()) == [2_592_000.0]
