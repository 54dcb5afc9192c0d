"""A database that cannot be reached: 503 ``unavailable`` with Retry-After from
both services (one mechanism, in shared/errors.py), one log line, no traceback,
and no SQL parameter in any error or log."""
from __future__ import annotations

import logging
import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DataError

import cluster_svc
import platform_svc
from shared.db import Database
from tooling.testing import assert_problem, free_port

TOKEN = "db-errors-token"


def unreachable_url() -> str:
    """A PostgreSQL URL nothing listens on: every connection is refused."""
    return f"postgresql+psycopg2://nobody:secret-password@127.0.0.1:{free_port()}/nowhere"


@pytest.fixture(scope="module")
def cluster_app():
    app = cluster_svc.create_app(
        cluster_svc.Settings(database_url=unreachable_url(), internal_token=TOKEN), testing=True
    )
    yield app
    app.extensions["database"].dispose()


@pytest.fixture(scope="module")
def platform_app():
    settings = platform_svc.Settings(
        database_url=unreachable_url(), cluster_svc_url=f"http://127.0.0.1:{free_port()}", internal_token=TOKEN
    )
    app = platform_svc.create_app(settings, testing=True)
    yield app
    app.extensions["writes"].pusher.path.client.close()
    app.extensions["database"].dispose()


def authed(app, token=TOKEN):
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    return client


def assert_unavailable(response) -> None:
    body = assert_problem(response, 503, "unavailable")
    assert int(response.headers["Retry-After"]) >= 1
    assert "Traceback" not in body["detail"]


CLUSTER_ID = "0d8c5592-3e74-4f10-9359-e4a0dc267dcf"  # fixed: in test IDs, the same in every pytest-xdist worker
CLUSTER_CALLS = [
    ("POST", "/v1/clusters", {"id": CLUSTER_ID, "team_id": str(uuid.uuid4()), "name": "secret-name",
                              "region": "eu-west-1", "postgres_version": 16, "plan": "hobby-0", "storage_gb": 10}),
    ("GET", f"/v1/clusters/{CLUSTER_ID}", None),
    ("GET", "/v1/clusters", None),
    ("PUT", f"/v1/clusters/{CLUSTER_ID}", {"generation": 2, "name": "secret-name", "plan": "hobby-0", "storage_gb": 10}),
    ("DELETE", f"/v1/clusters/{CLUSTER_ID}", None),
]


@pytest.mark.parametrize(("method", "path", "body"), CLUSTER_CALLS)
def test_cluster_svc_answers_503_with_retry_after_when_its_database_is_unreachable(
    cluster_app, caplog, method, path, body
):
    with caplog.at_level(logging.INFO):
        response = authed(cluster_app).open(path, method=method, json=body)

    assert_unavailable(response)
    assert_one_quiet_line(caplog, method, path)


PLATFORM_CALLS = [
    ("POST", "/v1/clusters", {"name": "secret-name", "region": "eu-west-1", "postgres_version": 16,
                              "plan": "hobby-0", "storage_gb": 10}),
    ("GET", "/v1/clusters", None),
    ("GET", f"/v1/clusters/{CLUSTER_ID}", None),
    ("PATCH", f"/v1/clusters/{CLUSTER_ID}", {"name": "secret-name"}),
    ("DELETE", f"/v1/clusters/{CLUSTER_ID}", None),
]


@pytest.mark.parametrize(("method", "path", "body"), PLATFORM_CALLS)
def test_platform_svc_answers_503_with_retry_after_when_its_database_is_unreachable(
    platform_app, caplog, method, path, body
):
    client = authed(platform_app, token="0123456789abcdef.some-api-key-secret")
    with caplog.at_level(logging.INFO):
        response = client.open(path, method=method, json=body, headers={"Idempotency-Key": "secret-key"})

    assert_unavailable(response)
    assert_one_quiet_line(caplog, method, path)


def assert_one_quiet_line(caplog, method, path) -> None:
    """One warning naming the request, no traceback, nothing the client sent or any secret."""
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(records) == 1, [r.getMessage() for r in records]
    [record] = records
    message = record.getMessage()
    assert message.startswith(f"503 {method} {path}: database unavailable (OperationalError")
    assert record.exc_info is None
    for secret in ("secret-name", "secret-key", "secret-password", "some-api-key-secret"):
        assert secret not in caplog.text


def test_health_still_answers_while_the_database_is_unreachable(cluster_app, platform_app):
    assert cluster_app.test_client().get("/healthz").status_code == 200
    assert platform_app.test_client().get("/healthz").status_code == 200


def test_engines_never_show_sql_parameters(pg_server_url):
    """A statement that fails shows the SQL, never the values it was given."""
    database = Database(pg_server_url, pool_size=1)
    try:
        with pytest.raises(DataError) as failure, database.begin() as conn:
            conn.execute(text("SELECT CAST(:value AS text), 1 / 0"), {"value": "secret-name-123"})
    finally:
        database.dispose()

    assert "secret-name-123" not in str(failure.value)
    assert "hidden due to hide_parameters" in str(failure.value)
