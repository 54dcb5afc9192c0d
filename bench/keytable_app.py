"""The "key-table" reference: the two-phase idempotency-key protocol this project replaces.

Per request, in one transaction (the classic key-table design): insert the
key ``ON CONFLICT DO NOTHING``; lock the key row (``SELECT ... FOR UPDATE``);
if it holds a stored response, answer that (409 when the body differs);
otherwise do the business INSERT into ``clusters``, store the response on the
key row, commit. Bare Flask and pooled psycopg2, like the limit reference, so
the comparison is of protocols, not frameworks. The key is the
``Idempotency-Key`` header (the benchmark sends the object's ID there).
"""
from __future__ import annotations

import hashlib
from typing import Any

from flask import Flask, Response, request

from bench.limit_app import RETURNING, WaitingPool, to_json

SCHEMA = """
CREATE TABLE IF NOT EXISTS idempotency_keys (
    key           text PRIMARY KEY,
    request_hash  bytea NOT NULL,
    response_code integer,
    response_body jsonb,
    created_at    timestamptz NOT NULL DEFAULT now()
)"""
INSERT_KEY = "INSERT INTO idempotency_keys (key, request_hash) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING"
LOCK_KEY = "SELECT request_hash, response_code, response_body::text FROM idempotency_keys WHERE key = %s FOR UPDATE"
INSERT = (
    "INSERT INTO clusters (id, team_id, name, region, postgres_version, plan, storage_gb, generation)"
    " VALUES (%(id)s, %(team_id)s, %(name)s, %(region)s, %(postgres_version)s, %(plan)s, %(storage_gb)s,"
    f" %(generation)s) RETURNING {RETURNING}"
)
STORE = "UPDATE idempotency_keys SET response_code = %s, response_body = %s WHERE key = %s"


def create_app(connect: dict[str, Any], *, pool_size: int) -> Flask:
    pool = WaitingPool(pool_size, **connect)
    app = Flask(__name__)
    app.add_url_rule("/healthz", "healthz", lambda: {"status": "ok"})

    @app.post("/v1/clusters")
    def create() -> Response:
        raw = request.get_data()
        values = {"generation": 1, **request.get_json()}
        key = request.headers.get("Idempotency-Key") or values["id"]
        request_hash = hashlib.sha256(raw).digest()
        conn = pool.getconn()
        try:
            with conn, conn.cursor() as cur:
                cur.execute(INSERT_KEY, (key, request_hash))  # phase 1: the key, locked
                cur.execute(LOCK_KEY, (key,))
                stored_hash, code, body = cur.fetchone()
                if bytes(stored_hash) != request_hash:
                    code, body = 409, '{"code": "key_reused"}'
                elif code is None:  # phase 2: the work, and its response stored on the key
                    cur.execute(INSERT, values)
                    code, body = 201, to_json(cur.fetchone())
                    cur.execute(STORE, (code, body, key))
                else:
                    return Response(body, status=code, headers={"Idempotent-Replayed": "true"},
                                    mimetype="application/json")
        finally:
            pool.putconn(conn)
        return Response(body, status=code, mimetype="application/json")

    return app
