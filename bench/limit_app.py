"""The "limit" reference: the least a create-or-return endpoint can do.

Bare Flask, a pooled psycopg2 connection, one ``INSERT ... ON CONFLICT (id) DO
NOTHING RETURNING`` and, only when nothing came back, one SELECT. No
validation, no ORM, no error handling: the ceiling cluster_svc is compared to.
Same ``clusters`` table (cluster_svc's migrations).
"""
from __future__ import annotations

import json
import threading
from typing import Any

from flask import Flask, Response, request
from psycopg2.pool import ThreadedConnectionPool

COLUMNS = ("id", "team_id", "name", "region", "postgres_version", "plan", "storage_gb",
           "generation", "created_at", "updated_at", "deleted_at")
RETURNING = ", ".join(COLUMNS)
INSERT = (
    "INSERT INTO clusters (id, team_id, name, region, postgres_version, plan, storage_gb, generation)"
    " VALUES (%(id)s, %(team_id)s, %(name)s, %(region)s, %(postgres_version)s, %(plan)s, %(storage_gb)s,"
    f" %(generation)s) ON CONFLICT (id) DO NOTHING RETURNING {RETURNING}"
)
SELECT = f"SELECT {RETURNING} FROM clusters WHERE id = %(id)s"


def to_json(row: tuple[Any, ...]) -> str:
    return json.dumps(dict(zip(COLUMNS, row)), default=lambda v: v.isoformat() if hasattr(v, "isoformat") else str(v))


class WaitingPool(ThreadedConnectionPool):
    """psycopg2's pool, where a caller waits for a free connection instead of
    failing: a gevent worker runs more requests at once than it has connections
    (SQLAlchemy's pool, which the services use, waits the same way).
    minconn == maxconn: psycopg2's pool closes a returned connection beyond minconn."""

    def __init__(self, size: int, **connect: Any) -> None:
        super().__init__(size, size, **connect)
        self._free = threading.BoundedSemaphore(size)

    def getconn(self, key: Any = None) -> Any:
        self._free.acquire()
        return super().getconn(key)

    def putconn(self, conn: Any = None, key: Any = None, close: bool = False) -> None:
        super().putconn(conn, key, close)
        self._free.release()


def create_app(connect: dict[str, Any], *, pool_size: int) -> Flask:
    pool = WaitingPool(pool_size, **connect)
    app = Flask(__name__)
    app.add_url_rule("/healthz", "healthz", lambda: {"status": "ok"})

    @app.post("/v1/clusters")
    def create() -> Response:
        values = {"generation": 1, **request.get_json()}
        conn = pool.getconn()
        try:
            with conn, conn.cursor() as cur:  # one transaction: commit, or roll back on error
                cur.execute(INSERT, values)
                row = cur.fetchone()
                created = row is not None
                if not created:
                    cur.execute(SELECT, values)
                    row = cur.fetchone()
        finally:
            pool.putconn(conn)
        headers = {"Location": f"/v1/clusters/{row[0]}"}
        if not created:
            headers["Idempotent-Replayed"] = "true"
        return Response(to_json(row), status=201 if created else 200, headers=headers, mimetype="application/json")

    return app
