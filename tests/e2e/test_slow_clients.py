"""Property 10: slow or idle clients cannot starve either service.

Real sockets against real ``serve`` processes: 64 connections that never send
a byte and 16 that send their headers one line at a time hold the server's
attention while other clients' requests are timed; then the tricklers must be
disconnected once the read timeout has passed. And more silent connections
than a worker holds: the oldest are closed, never a newcomer queued behind them.
"""
from __future__ import annotations

import json
import socket
import subprocess
import time
import uuid
from contextlib import ExitStack

import pytest
import requests

from cluster_svc.cli import MIGRATIONS as CLUSTER_MIGRATIONS
from platform_svc.cli import MIGRATIONS as PLATFORM_MIGRATIONS
from tooling.slowclients import open_silent, start_tricklers
from tooling.testing import LiveServer, console_script, fresh_database, wait_for

TOKEN = "slow-clients-token"
READ_TIMEOUT = 4  # seconds: `serve --read-timeout`, short so the test sees the drop
SILENT, TRICKLERS = 64, 16
PROMPT = 1.0  # seconds: every other request is answered within this


@pytest.fixture(scope="module")
def servers(pg_server_url):
    """cluster_svc and platform_svc, one worker each (the easiest to starve)."""
    serving = ["serve", "--workers", "1", "--read-timeout", str(READ_TIMEOUT)]
    cluster_env = {
        "CLUSTER_DATABASE_URL": fresh_database(pg_server_url, "slow_cluster", migrations=CLUSTER_MIGRATIONS),
        "INTERNAL_TOKEN": TOKEN,
    }
    with LiveServer([console_script("cluster-svc"), *serving], cluster_env) as cluster:
        platform_env = {
            "PLATFORM_DATABASE_URL": fresh_database(pg_server_url, "slow_platform", migrations=PLATFORM_MIGRATIONS),
            "CLUSTER_SVC_URL": cluster.url,
            "INTERNAL_TOKEN": TOKEN,
        }
        with LiveServer([console_script("platform-svc"), *serving], platform_env) as platform:
            created = subprocess.run(
                [console_script("platform-svc"), "create-account", "slow", "--json"],
                env=platform.env, capture_output=True, text=True, timeout=60, check=True,
            )
            api_key = json.loads(created.stdout)["api_key"]
            yield {
                "cluster_svc": (cluster, "/v1/clusters", {"Authorization": f"Bearer {TOKEN}"}),
                "platform_svc": (platform, "/v1/clusters", {"Authorization": f"Bearer {api_key}"}),
            }


def answered_in(method: str, url: str, **kwargs) -> float:
    """Seconds a request on a new connection took to be answered with a 2xx."""
    started = time.monotonic()
    response = requests.request(method, url, timeout=30, **kwargs)
    assert response.status_code < 300, response.text
    return time.monotonic() - started


@pytest.mark.parametrize("service", ["cluster_svc", "platform_svc"])
def test_idle_and_trickling_connections_do_not_delay_other_requests(servers, service):
    server, path, auth = servers[service]
    with ExitStack() as stack:
        silent = open_silent("127.0.0.1", server.port, SILENT, stack)
        tricklers = start_tricklers("127.0.0.1", server.port, TRICKLERS, interval=1.0, stack=stack)
        # Every slow connection is established and has started dawdling.
        wait_for(lambda: all(t.started_at for t in tricklers), timeout=5, what="every trickler dawdling", poll=0.01)
        assert len(silent) == SILENT

        took = {
            "healthz": [answered_in("GET", server.url + "/healthz") for _ in range(10)],
            "read": [answered_in("GET", server.url + path, headers=auth) for _ in range(10)],
            "write": [
                answered_in("POST", server.url + path, headers=auth, json=_cluster(service, n)) for n in range(5)
            ],
        }
        assert all(t.dropped_after is None for t in tricklers), "measured while the tricklers were still connected"

    slowest = {kind: max(times) for kind, times in took.items()}
    assert all(seconds < PROMPT for seconds in slowest.values()), slowest


@pytest.mark.parametrize("service", ["cluster_svc", "platform_svc"])
def test_a_client_trickling_its_headers_is_disconnected(servers, service):
    server, _, _ = servers[service]
    with ExitStack() as stack:
        tricklers = start_tricklers("127.0.0.1", server.port, 4, interval=1.0, stack=stack)
        wait_for(lambda: all(t.dropped_after is not None for t in tricklers), timeout=READ_TIMEOUT + 10,
                 what="every trickler disconnected", poll=0.1)
        dropped = [t.dropped_after for t in tricklers]

    assert all(after is not None for after in dropped), "a trickler is still connected"
    assert all(READ_TIMEOUT - 1 <= after <= READ_TIMEOUT + 5 for after in dropped), dropped


def test_a_client_trickling_its_body_is_disconnected(servers):
    """The body gets its own read timeout: a client that stops sending half-way is dropped, with a 400."""
    server, path, auth = servers["cluster_svc"]
    with socket.create_connection(("127.0.0.1", server.port), timeout=READ_TIMEOUT + 10) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {auth['Authorization']}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\": "
        )
        started = time.monotonic()
        sock.sendall(head.encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        took = time.monotonic() - started

    assert READ_TIMEOUT - 1 <= took <= READ_TIMEOUT + 5
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert b"application/problem+json" in answer


def test_more_silent_connections_than_a_worker_holds_close_the_oldest_and_newcomers_are_answered(pg_server_url):
    """Past the bound the connections that sent no request are closed, oldest first: with a read
    timeout of a minute, the only way the newcomer is answered is that room was made for it."""
    connections, read_timeout = 40, 60
    env = {
        "CLUSTER_DATABASE_URL": fresh_database(pg_server_url, "silent_cluster", migrations=CLUSTER_MIGRATIONS),
        "INTERNAL_TOKEN": TOKEN,
    }
    serving = ["serve", "--workers", "1", "--connections", str(connections), "--read-timeout", str(read_timeout)]
    with LiveServer([console_script("cluster-svc"), *serving], env) as server, ExitStack() as stack:
        silent = open_silent("127.0.0.1", server.port, 3 * connections, stack)
        answer = requests.get(server.url + "/healthz", timeout=read_timeout / 4)
        states = [_state(sock) for sock in silent]

    assert answer.status_code == 200
    closed = states.index("open")  # the oldest are closed, the newest kept:
    assert closed >= 2 * connections and states == ["closed"] * closed + ["open"] * (len(silent) - closed), states


def _state(sock: socket.socket) -> str:
    """"closed" when the server closed ``sock`` (it was closed before this is asked), else "open"."""
    sock.setblocking(False)
    try:
        return "closed" if sock.recv(1) == b"" else "answered"
    except BlockingIOError:
        return "open"
    except ConnectionResetError:
        return "closed"


def _cluster(service: str, n: int) -> dict:
    body = {"name": f"slow-{n}", "region": "eu-west-1", "postgres_version": 16, "plan": "hobby-0", "storage_gb": 10}
    if service == "cluster_svc":
        body |= {"id": str(uuid.uuid4()), "team_id": str(uuid.uuid4())}
    return body
