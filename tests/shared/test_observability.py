"""The observability step of the app factory, through Flask's test client, and the logging setup.

(Real processes, workers and Prometheus itself: tests/e2e/test_metrics.py,
test_request_ids_and_logs.py, test_prometheus.py.)
"""
from __future__ import annotations

import io
import json
import logging
import logging.config
import os
import subprocess

import pytest
from idempotent_pair_client import request_id
from prometheus_client.parser import text_string_to_metric_families

from cluster_svc import Settings, create_app
from cluster_svc.cli import MIGRATIONS
from shared import counters
from shared.logs import logging_config
from tooling.testing import console_script, fresh_database

TOKEN = "observability-token"


@pytest.fixture(scope="module")
def app(pg_server_url):
    url = fresh_database(pg_server_url, "obs", migrations=MIGRATIONS)
    app = create_app(Settings(database_url=url, internal_token=TOKEN), testing=True)
    yield app
    app.extensions["database"].dispose()


@pytest.fixture
def client(app):
    return app.test_client()


def metric(client, name: str, **labels) -> float:
    text = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).get_data(as_text=True)
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


@pytest.mark.parametrize("sent", ["a", "req-123_ABC.x:y", "x" * 128, "b64+/=", "{trace}[1]!~"])
def test_a_valid_request_id_is_kept(sent):
    assert request_id.accept_or_new(sent) == sent


@pytest.mark.parametrize(
    "sent",
    [None, "", "x" * 129, "new\nline", "tab\there", "caf\xe9", "nul\x00", "with space inside",
     "x request_id=deadbeef status=200", 'quote"d', "back\\slash"],
)
def test_an_invalid_request_id_is_replaced_by_a_new_one(sent):
    made = request_id.accept_or_new(sent)
    assert made != sent and request_id.accept_or_new(made) == made


def test_every_answer_carries_a_request_id_even_a_refusal(client):
    answers = [
        client.get("/healthz"),
        client.get("/v1/clusters"),  # 401
        client.get("/no/such/route", headers={"Authorization": f"Bearer {TOKEN}"}),  # 404
        client.get("/metrics", headers={"X-Request-ID": "mine"}),  # 401
    ]
    assert [a.status_code for a in answers] == [200, 401, 404, 401]
    assert all(a.headers.get("X-Request-ID") for a in answers)
    assert answers[3].headers["X-Request-ID"] == "mine"


def test_unmatched_paths_are_counted_under_one_label_never_the_raw_path(client):
    before = metric(client, "http_requests_total", route="unmatched", status="404")

    for i in range(3):
        assert client.get(f"/random/path/{i}", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 404

    assert metric(client, "http_requests_total", route="unmatched", status="404") == before + 3
    text = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).get_data(as_text=True)
    assert "/random/path" not in text


def test_routes_are_labelled_by_their_url_rule(client):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    before = metric(client, "http_requests_total", route="/v1/clusters/<object_id:cluster_id>", status="404")

    client.get("/v1/clusters/6b2d8a52-3f5e-4a63-9c4c-2f3e1f9b8a11", headers=auth)

    after = metric(client, "http_requests_total", route="/v1/clusters/<object_id:cluster_id>", status="404")
    assert after == before + 1
    assert metric(client, "http_request_duration_seconds_count", route="/v1/clusters/<object_id:cluster_id>") >= 1


def test_readiness_and_health_are_public_and_metrics_are_not(client):
    assert client.get("/readyz").status_code == 200
    assert client.get("/healthz").status_code == 200
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_the_openapi_document_declares_the_request_id_on_every_response_and_the_operations_routes(client):
    spec = client.get("/openapi.json").get_json()

    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            if method == "parameters":
                continue
            for status, response in operation["responses"].items():
                if "$ref" in response:
                    name = response["$ref"].rsplit("/", 1)[1]
                    response = spec["components"]["responses"][name]
                assert response["headers"]["X-Request-ID"]["schema"]["maxLength"] == 128, (method, path, status)
    assert spec["paths"]["/readyz"]["get"]["security"] == []
    assert spec["paths"]["/healthz"]["get"]["security"] == []
    assert "503" in spec["paths"]["/readyz"]["get"]["responses"]
    assert "security" not in spec["paths"]["/metrics"]["get"]  # the bearer scheme, as everywhere


def test_a_counter_rejects_an_outcome_the_contract_does_not_name():
    with pytest.raises(ValueError):
        counters.count_create("cluster", "creted")
    with pytest.raises(ValueError):
        counters.count_push("cluster", None, "done")


def test_repair_findings_are_counted(client):
    before = metric(client, "sync_repairs_total", resource="cluster", finding="behind")

    counters.count_repair("cluster", "behind")
    counters.count_repair("cluster", "behind")

    assert metric(client, "sync_repairs_total", resource="cluster", finding="behind") == before + 2


def _log_through(fmt: str, **extra) -> str:
    config = logging_config("demo_svc", fmt)
    stream = io.StringIO()
    config["handlers"]["stderr"]["stream"] = stream
    logging.config.dictConfig(config)
    try:
        token = request_id.bind("rid-42")
        try:
            logging.getLogger("access").info("GET / 200", extra=extra)
        finally:
            request_id.unbind(token)
        logging.getLogger("other").warning("outside a request")
    finally:
        logging.config.dictConfig(
            {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING", "handlers": []}}
        )
    return stream.getvalue()


def test_json_log_lines_have_the_required_fields_and_the_request_id_while_one_is_handled():
    first, second = _log_through("json", method="GET", route="/", status=200, duration_ms=1.5).splitlines()

    access = json.loads(first)
    assert {k: access[k] for k in ("level", "service", "msg", "request_id", "method", "route", "status")} == {
        "level": "INFO",
        "service": "demo_svc",
        "msg": "GET / 200",
        "request_id": "rid-42",
        "method": "GET",
        "route": "/",
        "status": 200,
    }
    assert access["ts"].endswith("+00:00")
    assert "request_id" not in json.loads(second)


def test_urllib3s_warnings_are_not_logged_beside_our_own_lines():
    """urllib3 warns in its own words (a retry with an exception's repr, a connection dropped past the
    pool's size) of what the push's outcome and "cluster_svc does not answer" say already."""
    config = logging_config("demo_svc", "text")
    stream = io.StringIO()
    config["handlers"]["stderr"]["stream"] = stream
    logging.config.dictConfig(config)
    try:
        logging.getLogger("urllib3.connectionpool").warning(
            "Connection pool is full, discarding connection: 127.0.0.1. Connection pool size: 9"
        )
        logging.getLogger("platform_svc.reconciler.controller").warning("cluster_svc does not answer (a probe failed)")
    finally:
        logging.config.dictConfig(
            {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING", "handlers": []},
             "loggers": {"urllib3.connectionpool": {"level": "NOTSET"}}}
        )
    [line] = stream.getvalue().splitlines()
    assert line.endswith("WARNING [demo_svc] platform_svc.reconciler.controller: cluster_svc does not answer (a probe failed)")


def test_text_is_the_readable_default():
    first, second = _log_through("text").splitlines()

    assert "INFO [demo_svc] access: GET / 200 request_id=rid-42" in first
    assert second.endswith("WARNING [demo_svc] other: outside a request")


def test_an_unknown_log_format_stops_serve_with_one_line():
    result = subprocess.run(
        [console_script("cluster-svc"), "serve"],
        env={**os.environ, "LOG_FORMAT": "xml", "CLUSTER_DATABASE_URL": "postgresql://x@/y", "INTERNAL_TOKEN": "t"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "cluster-svc: LOG_FORMAT must be one of text, json, got 'xml'"
