"""Scenario 8: platform's own PostgreSQL restarted during pushes.

platform_svc runs on a PostgreSQL of this module's own. Public creates (each
with an Idempotency-Key, retried while they get a 5xx or no answer): half of
them first; then two whose inline pushes are held in the proxy after their
intent was committed; the database is stopped, the other half starts, and
the held pushes are released (cluster_svc creates both, recording the
outcome fails). Those two must be answered 201 ``pending``; every other
answer during the outage is 503 with Retry-After, never a 500. After the
restart the creates finish, the reconciler converges, and both databases
agree row by row, with exactly one object per key.
"""
from __future__ import annotations

import threading
import time
from functools import partial

import pytest
import requests
from sqlalchemy import text

from tests.chaos.convergence import read_audit, scenario_figures
from tests.chaos.harness import Burst, cluster_body, running_pair
from tooling import embedded_pg
from tooling.testing import wait_for


@pytest.fixture(scope="module")
def pair(pg_server_url, platform_pg, tmp_path_factory, request):
    """Both services, platform_svc on a PostgreSQL of its own."""
    platform_server = embedded_pg.admin_url(platform_pg)
    yield from running_pair(request, tmp_path_factory, platform_server=platform_server, cluster_server=pg_server_url)


class Retrying:
    """Public creates with an Idempotency-Key each, retried until the answer is not a 5xx."""

    def __init__(self, api) -> None:
        self.api = api
        self.lock = threading.Lock()
        self.answers: dict[str, list[int | None]] = {}

    def create(self, key: str, body: dict) -> dict:
        while True:
            try:
                response = self.api.call("POST", "/v1/clusters", json=body, headers={"Idempotency-Key": key})
            except requests.RequestException:
                response = None
            with self.lock:
                self.answers.setdefault(key, []).append(None if response is None else response.status_code)
            if response is not None and response.status_code < 500:
                assert response.status_code in (200, 201), response.text
                return response.json()
            if response is not None:
                assert response.status_code == 503, response.text
                assert response.headers["Content-Type"] == "application/problem+json"
                assert response.json()["code"] == "unavailable" and int(response.headers["Retry-After"]) >= 1
            time.sleep(0.2)  # real time: a caller's pause before it retries


def test_a_restart_of_platforms_database_during_pushes_loses_nothing_and_answers_no_500(
    pair, platform_pg, scale, rng, figures
):
    api = pair.account("restart")
    mark = pair.mark()
    retrying = Retrying(api)
    total = scale.restart_burst
    bodies = [cluster_body(rng, i) for i in range(total + 2)]
    half = total // 2
    before = Burst([partial(retrying.create, f"key-{i}", bodies[i]) for i in range(half)], threads=4).start()
    assert not [c for c in before.results(timeout=300) if isinstance(c, BaseException)]

    holds = [pair.proxy.hold(method="POST", path="/v1/clusters") for _ in range(2)]
    held_calls = Burst([partial(retrying.create, f"held-{i}", bodies[total + i]) for i in range(2)], threads=2).start()
    for hold in holds:
        hold.wait_held(timeout=30)
    down_at = time.monotonic()
    embedded_pg.stop(platform_pg)
    pair.events["stop platform postgres"] += 1
    burst = Burst([partial(retrying.create, f"key-{i}", bodies[i]) for i in range(half, total)], threads=4).start()
    for hold in holds:
        hold.release()
    held = held_calls.results(timeout=60)
    seen_5xx = lambda: sum(s == 503 for answers in list(retrying.answers.values()) for s in answers)  # noqa: E731
    wait_for(lambda: seen_5xx() >= 5, timeout=30, what="five 503s while the database is down")
    platform_pg.ensure_postgres_running()
    outage = time.monotonic() - down_at
    created = burst.results(timeout=300)
    assert not [c for c in created if isinstance(c, BaseException)], [c for c in created if isinstance(c, BaseException)][:3]

    pair.converge(deadline=120)
    comparison = pair.compare()

    with pair.platform_engine.connect() as conn:
        per_key = dict(conn.execute(text("SELECT idempotency_key, count(*) FROM clusters GROUP BY 1")).all())
    answered_503 = seen_5xx()
    figures.append(
        scenario_figures(
            pair,
            "8 platform db restart",
            mark,
            comparison,
            expected=(total + 2, 0),
            notes=f"platform's PostgreSQL down {outage:.1f} s; {answered_503} answers were 503 with Retry-After,"
            f" 0 were 500; the 2 creates committed before it answered 201 pending",
        )
    )
    # The two committed before the database went away: 201 pending, never a 5xx.
    assert [retrying.answers[f"held-{i}"] for i in range(2)] == [[201], [201]]
    assert all(isinstance(h, dict) and h["sync_state"] == "pending" for h in held), held
    assert answered_503 >= 5
    assert not [s for answers in retrying.answers.values() for s in answers if s is not None and s >= 500 and s != 503]
    assert per_key == {key: 1 for key in retrying.answers}  # no duplicate after the retries
    assert comparison.exact, comparison.describe()
    assert comparison.live_and_deleted(comparison.platform) == (total + 2, 0)
    assert read_audit(pair).clean, read_audit(pair)
