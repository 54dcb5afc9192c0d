"""Following one request across the pair: X-Request-ID, and the log lines both services print.

Both services run as `serve` processes with LOG_FORMAT=json, their output in
files. One short flow of requests runs once for the module; the tests read
what it got back and, after both services stopped (so gunicorn's shutdown
lines are in them too), the log files.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

import pytest
import requests
from sqlalchemy import text

from tests.helpers import cluster_body, with_account
from tooling.pair import TOKEN, Pair, start_pair

REQUIRED = {"ts", "level", "service", "msg"}
REQUEST_FIELDS = {"request_id", "method", "route", "status", "duration_ms"}


INVALID_IDS = {"too-long": "x" * 129, "non-ascii": "caf\xe9-latin-1", "control": "tab\there"}


@dataclass
class Flow:
    """What one short flow against a LOG_FORMAT=json pair sent and got back; the logs it left."""

    pair: Pair
    api_key: str
    marker: str  # in request bodies only: must appear in no log line
    sent_id: str
    sent_id_answer: requests.Response
    no_id_answer: requests.Response
    invalid_id_answers: dict[str, requests.Response] = field(default_factory=dict)
    lost_id: str = ""  # a cluster lost downstream, re-created by `reconcile --once`
    reconciler_lines: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def flow(pg_server_url, tmp_path_factory, request):
    """One pair of its own (LOG_FORMAT=json), one flow of requests, then both services stopped
    (so gunicorn's shutdown lines are logged too)."""
    pair = start_pair(pg_server_url, tmp_path_factory.mktemp("logs"), env={"LOG_FORMAT": "json"})
    try:
        with_account(pair, request)
        sent = f"trace-{uuid.uuid4()}"
        flow = Flow(
            pair=pair,
            api_key=pair.api_key,
            marker=f"body-marker-{uuid.uuid4().hex[:8]}",
            sent_id=sent,
            sent_id_answer=pair.api("POST", "/v1/clusters", json=cluster_body(), headers={"X-Request-ID": sent}),
            no_id_answer=pair.api("POST", "/v1/clusters", json=cluster_body()),
        )
        for name, invalid in INVALID_IDS.items():
            flow.invalid_id_answers[name] = requests.post(
                f"{pair.platform_svc.url}/v1/clusters",
                json=cluster_body(),
                headers={"Authorization": f"Bearer {pair.api_key}", "X-Request-ID": invalid.encode("latin-1")},
                timeout=30,
            )
        marker = flow.marker
        created = pair.api("POST", "/v1/clusters", json=cluster_body(name=marker))
        cluster_id = created.json()["id"]
        pair.api("GET", f"/v1/clusters/{cluster_id}")
        pair.api("PATCH", f"/v1/clusters/{cluster_id}", json={"name": f"{marker}-2"})
        pair.api("POST", f"/v1/clusters/{cluster_id}/firewall-rules", json={"cidr": "10.1.0.0/16", "description": marker})
        pair.api("POST", "/v1/clusters", json={"name": marker})  # 422
        pair.api("GET", f"/no/such/{marker}")  # 404, unmatched
        requests.get(f"{pair.platform_svc.url}/v1/clusters", headers={"Authorization": "Bearer wrong"}, timeout=10)
        requests.get(f"{pair.cluster_svc.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        pair.api("DELETE", f"/v1/clusters/{cluster_id}")
        flow.lost_id = lose_downstream_and_change(pair)
        reconciled = pair.cli("reconcile", "--once")
        assert reconciled.returncode == 0, reconciled.stderr
        flow.reconciler_lines = (reconciled.stdout + reconciled.stderr).splitlines()
        pair.platform_svc.stop()
        pair.cluster_svc.stop()
        yield flow
    finally:
        pair.stop()


def lose_downstream_and_change(pair: Pair) -> str:
    """A synced cluster that cluster_svc's database lost, then changed here with no inline push: the reconciler's work."""
    lost_id = pair.api("POST", "/v1/clusters", json=cluster_body()).json()["id"]
    with pair.cluster_engine.begin() as conn:
        conn.execute(text("DELETE FROM clusters WHERE id = :id"), {"id": lost_id})
    with pair.platform_engine.begin() as conn:
        conn.execute(
            text("UPDATE clusters SET generation = generation + 1, next_attempt_at = now() WHERE id = :id"),
            {"id": lost_id},
        )
    return lost_id


def log_lines(pair, service: str) -> list[str]:
    return (pair.workdir / f"{service}.log").read_text().splitlines()


def access_lines(pair, service: str) -> list[dict]:
    records = (json.loads(line) for line in log_lines(pair, service))
    return [record for record in records if record["logger"] == "access"]


def test_a_request_id_sent_to_platform_svc_comes_back_and_is_in_cluster_svc_log_line_for_the_push(flow):
    response, sent = flow.sent_id_answer, flow.sent_id

    assert response.status_code == 201
    assert response.json()["sync_state"] == "synced"
    assert response.headers["X-Request-ID"] == sent
    [push] = [line for line in access_lines(flow.pair, "cluster_svc") if line.get("request_id") == sent]
    assert (push["method"], push["route"], push["status"], push["service"]) == ("POST", "/v1/clusters", 201, "cluster_svc")
    [public] = [line for line in access_lines(flow.pair, "platform_svc") if line.get("request_id") == sent]
    assert (public["method"], public["route"], public["status"]) == ("POST", "/v1/clusters", 201)


def test_without_a_request_id_a_new_one_is_made_and_propagated_the_same_way(flow):
    response = flow.no_id_answer

    made = response.headers["X-Request-ID"]
    assert response.status_code == 201
    assert 1 <= len(made) <= 128 and made.isprintable()
    assert [line["route"] for line in access_lines(flow.pair, "cluster_svc") if line.get("request_id") == made] == [
        "/v1/clusters"
    ]


def test_the_reconciler_sends_one_request_id_per_push_and_logs_its_lines_about_it_with_that_id(flow):
    [recreating] = [
        json.loads(line) for line in flow.reconciler_lines if f"{flow.lost_id} is missing downstream" in line
    ]
    pushed = recreating["request_id"]
    assert recreating["service"] == "reconciler"
    downstream = [
        (line["method"], line["route"], line["status"])
        for line in access_lines(flow.pair, "cluster_svc")
        if line.get("request_id") == pushed
    ]
    assert downstream == [("PUT", "/v1/clusters/<object_id:cluster_id>", 404), ("POST", "/v1/clusters", 201)]
    assert flow.pair.platform_rows("clusters")[flow.lost_id]["sync_state"] == "synced"


@pytest.mark.parametrize("name", list(INVALID_IDS))
def test_an_invalid_request_id_is_replaced_never_echoed(flow, name):
    response, invalid = flow.invalid_id_answers[name], INVALID_IDS[name]

    assert response.status_code == 201
    replaced = response.headers["X-Request-ID"]
    assert replaced != invalid
    assert 1 <= len(replaced) <= 128 and replaced.isprintable()
    for service in ("platform_svc", "cluster_svc"):
        assert not any(invalid in line for line in log_lines(flow.pair, service)), service
    assert any(line.get("request_id") == replaced for line in access_lines(flow.pair, "cluster_svc"))


def test_every_line_both_services_print_is_json_with_the_required_fields_and_no_secret_or_body(flow):
    for service in ("platform_svc", "cluster_svc"):
        lines = log_lines(flow.pair, service)
        assert any("gunicorn.error" in line for line in lines), service  # gunicorn's own lines are there
        for line in lines:
            record = json.loads(line)
            assert REQUIRED <= set(record), line
            assert record["service"] == service
            for secret in (flow.api_key, TOKEN, flow.marker):
                assert secret not in line, (service, line)
        accesses = access_lines(flow.pair, service)
        assert accesses, service
        for record in accesses:
            assert REQUEST_FIELDS <= set(record), record
            assert record["level"] == "INFO"
    routes = {(r["method"], r["route"], r["status"]) for r in access_lines(flow.pair, "platform_svc")}
    assert ("GET", "unmatched", 404) in routes
    assert ("POST", "/v1/clusters", 422) in routes
    assert ("GET", "/v1/clusters", 401) in routes
    assert ("DELETE", "/v1/clusters/<object_id:cluster_id>", 204) in routes
