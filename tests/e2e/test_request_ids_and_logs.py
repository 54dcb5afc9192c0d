"""Following one request across the pair: X-Request-ID, and the log lines both services print.

Both services run as `serve` processes with LOG_FORMAT=json, their output in
files this test reads after stopping them (so gunicorn's shutdown lines are
in it too).
"""
from __future__ import annotations

import json
import uuid

import pytest
import requests

from tests.e2e.conftest import TOKEN, cluster_body, start_pair

REQUIRED = {"ts", "level", "service", "msg"}
REQUEST_FIELDS = {"request_id", "method", "route", "status", "duration_ms"}


@pytest.fixture
def json_pair(pg_server_url, tmp_path):
    pair = start_pair(pg_server_url, env={"LOG_FORMAT": "json"}, log_dir=tmp_path)
    try:
        yield pair
    finally:
        pair.close()


def log_lines(pair, service: str) -> list[str]:
    return (pair.log_dir / f"{service}.log").read_text().splitlines()


def access_lines(pair, service: str) -> list[dict]:
    records = (json.loads(line) for line in log_lines(pair, service))
    return [record for record in records if record["logger"] == "access"]


def stop_both(pair) -> None:
    pair.platform_svc.stop()
    pair.cluster_svc.stop()


def test_a_request_id_sent_to_platform_svc_comes_back_and_is_in_cluster_svc_log_line_for_the_push(json_pair):
    sent = f"trace-{uuid.uuid4()}"

    response = json_pair.api("POST", "/v1/clusters", json=cluster_body(), headers={"X-Request-ID": sent})

    assert response.status_code == 201
    assert response.json()["sync_state"] == "synced"
    assert response.headers["X-Request-ID"] == sent
    stop_both(json_pair)
    [push] = [line for line in access_lines(json_pair, "cluster_svc") if line.get("request_id") == sent]
    assert (push["method"], push["route"], push["status"], push["service"]) == ("POST", "/v1/clusters", 201, "cluster_svc")
    [public] = [line for line in access_lines(json_pair, "platform_svc") if line.get("request_id") == sent]
    assert (public["method"], public["route"], public["status"]) == ("POST", "/v1/clusters", 201)


def test_without_a_request_id_a_new_one_is_made_and_propagated_the_same_way(json_pair):
    response = json_pair.api("POST", "/v1/clusters", json=cluster_body())

    made = response.headers["X-Request-ID"]
    assert response.status_code == 201
    assert 1 <= len(made) <= 128 and made.isprintable()
    stop_both(json_pair)
    assert [line["route"] for line in access_lines(json_pair, "cluster_svc") if line.get("request_id") == made] == [
        "/v1/clusters"
    ]


@pytest.mark.parametrize("invalid", ["x" * 129, "caf\xe9-latin-1", "tab\there"], ids=["too-long", "non-ascii", "control"])
def test_an_invalid_request_id_is_replaced_never_echoed(json_pair, invalid):
    response = requests.post(
        f"{json_pair.platform_svc.url}/v1/clusters",
        json=cluster_body(),
        headers={**json_pair.http.headers, "X-Request-ID": invalid.encode("latin-1")},
        timeout=30,
    )

    assert response.status_code == 201
    replaced = response.headers["X-Request-ID"]
    assert replaced != invalid
    assert 1 <= len(replaced) <= 128 and replaced.isprintable()
    stop_both(json_pair)
    for service in ("platform_svc", "cluster_svc"):
        assert not any(invalid in line for line in log_lines(json_pair, service)), service
    assert any(line.get("request_id") == replaced for line in access_lines(json_pair, "cluster_svc"))


def test_every_line_both_services_print_is_json_with_the_required_fields_and_no_secret_or_body(json_pair):
    api_key = json_pair.http.headers["Authorization"].removeprefix("Bearer ")
    marker = f"body-marker-{uuid.uuid4().hex[:8]}"
    created = json_pair.api("POST", "/v1/clusters", json=cluster_body(name=marker))
    cluster_id = created.json()["id"]
    json_pair.api("GET", f"/v1/clusters/{cluster_id}")
    json_pair.api("PATCH", f"/v1/clusters/{cluster_id}", json={"name": f"{marker}-2"})
    json_pair.api("POST", f"/v1/clusters/{cluster_id}/firewall-rules", json={"cidr": "10.1.0.0/16", "description": marker})
    json_pair.api("POST", "/v1/clusters", json={"name": marker})  # 422
    json_pair.api("GET", f"/no/such/{marker}")  # 404, unmatched
    requests.get(f"{json_pair.platform_svc.url}/v1/clusters", headers={"Authorization": "Bearer wrong"}, timeout=10)
    requests.get(f"{json_pair.cluster_svc.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    json_pair.api("DELETE", f"/v1/clusters/{cluster_id}")
    stop_both(json_pair)

    for service in ("platform_svc", "cluster_svc"):
        lines = log_lines(json_pair, service)
        assert any("gunicorn.error" in line for line in lines), service  # gunicorn's own lines are there
        for line in lines:
            record = json.loads(line)
            assert REQUIRED <= set(record), line
            assert record["service"] == service
            for secret in (api_key, TOKEN, marker):
                assert secret not in line, (service, line)
        accesses = access_lines(json_pair, service)
        assert accesses, service
        for record in accesses:
            assert REQUEST_FIELDS <= set(record), record
            assert record["level"] == "INFO"
    routes = {(r["method"], r["route"], r["status"]) for r in access_lines(json_pair, "platform_svc")}
    assert ("GET", "unmatched", 404) in routes
    assert ("POST", "/v1/clusters", 422) in routes
    assert ("GET", "/v1/clusters", 401) in routes
    assert ("DELETE", "/v1/clusters/<object_id:cluster_id>", 204) in routes
