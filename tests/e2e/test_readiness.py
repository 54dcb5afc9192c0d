"""/readyz, and the `ready` gauge /metrics serves, follow the database; /healthz only the process.

The services run on a PostgreSQL of this test's own, which it stops and
starts again (the fault itself, not a mock).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from cluster_svc.cli import MIGRATIONS as CLUSTER_MIGRATIONS
from platform_svc.cli import MIGRATIONS as PLATFORM_MIGRATIONS
from tooling import embedded_pg
from tooling.pair import TOKEN
from tooling.testing import LiveServer, console_script, fresh_database, own_postgres, wait_for


@pytest.fixture
def database_server():
    with own_postgres("rdy") as server:
        yield server


@pytest.fixture
def services(database_server):
    admin = embedded_pg.admin_url(database_server)
    cluster = LiveServer(
        [console_script("cluster-svc"), "serve", "--workers", "2"],
        {"CLUSTER_DATABASE_URL": fresh_database(admin, "rc", migrations=CLUSTER_MIGRATIONS), "INTERNAL_TOKEN": TOKEN},
    )
    platform = LiveServer(
        [console_script("platform-svc"), "serve", "--workers", "2"],
        {
            "PLATFORM_DATABASE_URL": fresh_database(admin, "rp", migrations=PLATFORM_MIGRATIONS),
            "CLUSTER_SVC_URL": cluster.url,
            "INTERNAL_TOKEN": TOKEN,
        },
    )
    with cluster, platform:
        yield {"cluster_svc": cluster, "platform_svc": platform}


def readyz(server):
    return requests.get(f"{server.url}/readyz", timeout=10)


def ready_gauge(server) -> float | None:
    """The `ready` gauge of a scrape (None: not served); the scrape itself must succeed."""
    answer = requests.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert answer.status_code == 200, answer.text
    values = [s.value for f in text_string_to_metric_families(answer.text) for s in f.samples if s.name == "ready"]
    return values[0] if values else None


def test_readyz_and_the_ready_gauge_say_not_ready_while_the_database_is_down_and_ready_once_it_is_back(
    database_server, services
):
    for server in services.values():
        ok = readyz(server)
        assert (ok.status_code, ok.json()) == (200, {"status": "ok"})
        assert ready_gauge(server) == 1.0

    embedded_pg.stop(database_server)

    for name, server in services.items():
        [down] = wait_for(lambda s=server: (r := readyz(s)).status_code == 503 and [r], what=f"{name} not ready")
        assert down.headers["Content-Type"] == "application/problem+json"
        assert down.json()["code"] == "unavailable"
        assert int(down.headers["Retry-After"]) > 0
        assert "X-Request-ID" in down.headers
        assert requests.get(f"{server.url}/healthz", timeout=10).status_code == 200  # alive all the same
        # /metrics still answers (an alert cannot go by the scrape failing); its gauge says not ready.
        assert ready_gauge(server) == 0.0

    embedded_pg.start(Path(database_server.pgdata))

    for name, server in services.items():
        wait_for(lambda s=server: readyz(s).status_code == 200, what=f"{name} ready again")
        assert ready_gauge(server) == 1.0
