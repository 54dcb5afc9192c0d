"""A graceful stop of ``serve`` (SIGTERM): the request in flight is answered,
idle keep-alive connections are closed at once instead of being waited on.

Before, the worker kept waiting for each idle connection's next request until
its keep-alive time ran out, so every stop or restart took the whole graceful
timeout whenever a client (platform_svc's connection pool, a load balancer)
kept a connection open.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import uuid

from sqlalchemy import create_engine

from cluster_svc.cli import MIGRATIONS as CLUSTER_MIGRATIONS
from tooling.testing import LiveServer, console_script, db_row, fresh_database

TOKEN = "shutdown-token"
# Long, so that an idle connection closed by its own keep-alive timeout could
# never be mistaken for one closed by the stop.
READ_TIMEOUT = 60


def read_answer(sock: socket.socket) -> bytes:
    """One whole HTTP answer (head and a Content-Length body) from ``sock``."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(65536)
        assert chunk, f"closed without a whole answer: {answer!r}"
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, f"closed without a whole answer: {answer!r}"
        body += chunk
    return head + b"\r\n\r\n" + body


def keep_alive_connection(port: int) -> socket.socket:
    """A connection that has had one request answered and stays open."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
    answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 200") and b"Connection: close" not in answer, answer
    return sock


def test_sigterm_answers_the_request_in_flight_and_closes_idle_connections_at_once(pg_server_url):
    database_url = fresh_database(pg_server_url, "shutdown", migrations=CLUSTER_MIGRATIONS)
    env = {"CLUSTER_DATABASE_URL": database_url, "INTERNAL_TOKEN": TOKEN}
    argv = [console_script("cluster-svc"), "serve", "--workers", "2", "--read-timeout", str(READ_TIMEOUT)]
    with LiveServer(argv, env) as server:
        idle = [keep_alive_connection(server.port) for _ in range(8)]
        # A create in flight: its headers are in and the server is waiting for its body
        # (it said so: 100 Continue).
        object_id = str(uuid.uuid4())
        body = json.dumps(
            {"id": object_id, "team_id": str(uuid.uuid4()), "name": "in-flight", "region": "eu-west-1",
             "postgres_version": 16, "plan": "standard-2", "storage_gb": 10}
        ).encode()
        in_flight = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        in_flight.sendall(
            b"POST /v1/clusters HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {TOKEN}\r\nContent-Length: {len(body)}\r\n".encode()
            + b"Expect: 100-continue\r\n\r\n"
        )
        assert in_flight.recv(65536).startswith(b"HTTP/1.1 100 Continue")

        os.killpg(server.process.pid, signal.SIGTERM)

        # Every idle connection is closed by the server (end of file, no answer)
        # while the create is still waiting for its body.
        for sock in idle:
            assert sock.recv(65536) == b""
            sock.close()
        assert server.process.poll() is None, "the server exited with a request in flight"

        in_flight.sendall(body)
        answer = read_answer(in_flight)
        in_flight.close()
        assert answer.startswith(b"HTTP/1.1 201"), answer
        assert server.process.wait(timeout=30) == 0

    engine = create_engine(database_url)
    try:
        assert db_row(engine, "clusters", object_id)["name"] == "in-flight"
    finally:
        engine.dispose()
