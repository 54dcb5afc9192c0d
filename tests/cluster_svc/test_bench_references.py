"""The benchmark's two references (bench/) do what they claim, so the ratios
``make bench`` reports compare like with like: the limit is a correct
create-or-return, and the key-table reference runs the whole two-phase
protocol (one business row per key, the stored response on a replay)."""
from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import psycopg2
import pytest

from bench import keytable_app, limit_app
from bench.serve import connect_kwargs
from cluster_svc.cli import MIGRATIONS
from tooling.testing import fresh_database


def body(**overrides):
    return {
        "id": str(uuid.uuid4()),
        "team_id": str(uuid.uuid4()),
        "name": "bench",
        "region": "eu-west-1",
        "postgres_version": 16,
        "plan": "standard-2",
        "storage_gb": 100,
        **overrides,
    }


@pytest.fixture(scope="module")
def db_url(pg_server_url):
    return fresh_database(pg_server_url, "bench_refs", migrations=MIGRATIONS)


@pytest.fixture(scope="module")
def db(db_url):
    conn = psycopg2.connect(**connect_kwargs(db_url))
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(keytable_app.SCHEMA)
    yield conn
    conn.close()


def count(db, table, object_id):
    column = "key" if table == "idempotency_keys" else "id"
    with db.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table} WHERE {column} = %s", (object_id,))
        return cur.fetchone()[0]


@pytest.fixture(scope="module")
def limit(db, db_url):
    return limit_app.create_app(connect_kwargs(db_url), pool_size=4).test_client()


@pytest.fixture(scope="module")
def keytable(db, db_url):
    return keytable_app.create_app(connect_kwargs(db_url), pool_size=4).test_client()


def test_the_limit_creates_then_returns_the_stored_row(limit, db):
    sent = body()
    first = limit.post("/v1/clusters", json=sent)
    again = limit.post("/v1/clusters", json=sent)

    assert first.status_code == 201
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json() == first.get_json()
    assert first.get_json()["id"] == sent["id"]
    assert count(db, "clusters", sent["id"]) == 1


def test_the_key_table_stores_the_response_and_replays_it(keytable, db):
    sent = body()
    headers = {"Idempotency-Key": sent["id"]}
    first = keytable.post("/v1/clusters", json=sent, headers=headers)
    again = keytable.post("/v1/clusters", json=sent, headers=headers)
    other = keytable.post("/v1/clusters", json={**sent, "name": "other"}, headers=headers)

    assert first.status_code == 201
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json() == first.get_json()
    assert other.status_code == 409
    assert count(db, "clusters", sent["id"]) == 1
    assert count(db, "idempotency_keys", sent["id"]) == 1


def test_concurrent_requests_with_one_key_make_one_row(keytable, db):
    sent = body()

    def post(_):
        return keytable.post("/v1/clusters", json=sent, headers={"Idempotency-Key": sent["id"]}).status_code

    with ThreadPoolExecutor(4) as pool:
        statuses = list(pool.map(post, range(12)))

    assert statuses == [201] * 12
    assert count(db, "clusters", sent["id"]) == 1
