"""platform's own PostgreSQL stopped under public traffic (a server of this
module's own, so it can really be stopped and started again).

- A create whose intent is committed is never answered 5xx: its push is held
  in the fault proxy while the database goes away, then released; recording
  the outcome fails, and the answer is 201 ``pending``.
- Everything else meets 503 ``unavailable`` with Retry-After, never a 500, and
  a client retrying with its Idempotency-Key ends with exactly one object.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from sqlalchemy import text

from tests.helpers import cluster_body
from tooling import embedded_pg
from tooling.testing import frozen_postgres, own_postgres, wait_for


@pytest.fixture(scope="module")
def platform_pg():
    with own_postgres("pgp") as server:
        yield server


@pytest.fixture
def pair(new_pair, pg_server_url, platform_pg):
    """The pair of its own, platform_svc on its own PostgreSQL and calling cluster_svc through a fault proxy."""
    try:
        yield new_pair(server_url=embedded_pg.admin_url(platform_pg), cluster_server_url=pg_server_url, proxy=True)
    finally:
        platform_pg.ensure_postgres_running()  # for the next test, whatever happened


def restart(server) -> None:
    server.ensure_postgres_running()


def test_platform_database_stopped_under_traffic_answers_503_never_500_and_loses_nothing(pair, platform_pg):
    answers: dict[str, list[requests.Response | None]] = defaultdict(list)  # by Idempotency-Key
    lock = threading.Lock()

    def create(key: str, name: str, *, retry: bool = True) -> requests.Response | None:
        """POST with an Idempotency-Key, retried (after Retry-After, shortened) until it is not a 5xx."""
        while True:
            try:
                response = pair.api("POST", "/v1/clusters", json=cluster_body(name=name), headers={"Idempotency-Key": key})
            except requests.ConnectionError:
                response = None
            with lock:
                answers[key].append(response)
            if not retry or (response is not None and response.status_code < 500):
                return response
            # real time: a caller's pause before it retries (Retry-After, shortened)
            time.sleep(0.2 if response is None else min(float(response.headers["Retry-After"]), 0.3))

    # 1. Two creates committed, their pushes held; the database goes away; the pushes go through.
    first, second = (pair.proxy.hold(method="POST", path="/v1/clusters") for _ in range(2))
    with ThreadPoolExecutor(2) as pool:
        held = [pool.submit(create, f"held-{n}", f"held-{n}", retry=False) for n in range(2)]
        requests_held = [first.wait_held(timeout=30), second.wait_held(timeout=30)]
        for request in requests_held:  # the intent is committed before the push
            assert pair.platform_rows("clusters")[request.object_id]["synced_generation"] == 0
        embedded_pg.stop(platform_pg)
        first.release()
        second.release()
        held_answers = [future.result(timeout=60) for future in held]

    for response in held_answers:
        assert response.status_code == 201, response.text
        assert response.json()["sync_state"] == "pending"
    assert {e.status for e in first.wait_done(30) + second.wait_done(30)} <= {200, 201}

    # 2. Public traffic while the database is down, then after it is back.
    stop_reads = threading.Event()
    reads: list[int] = []

    def read_loop():
        while not stop_reads.is_set():
            try:
                response = pair.api("GET", "/v1/clusters?limit=5")
            except requests.ConnectionError:
                continue
            reads.append(response.status_code)
            if response.status_code >= 500:
                assert response.headers["Retry-After"] and response.json()["code"] == "unavailable"
            stop_reads.wait(0.05)

    with ThreadPoolExecutor(6) as pool:
        reader = pool.submit(read_loop)
        creates = [pool.submit(create, f"key-{n}", f"db-{n}") for n in range(24)]
        # Five creators retry while the database is down: wait for a dozen of their
        # tries, then keep the outage going for another dozen.
        def tries() -> int:
            with lock:
                return sum(len(responses) for key, responses in answers.items() if key.startswith("key-"))

        wait_for(lambda: tries() >= 12, timeout=30, what="a dozen tries while the database is down")
        wait_for(lambda: tries() >= 24, timeout=30, what="another dozen")
        restart(platform_pg)
        finals = [future.result(timeout=120) for future in creates]
        stop_reads.set()
        reader.result(timeout=30)

    every = [r for responses in answers.values() for r in responses if r is not None] + held_answers
    statuses = [r.status_code for r in every] + reads
    assert 500 not in statuses
    server_errors = [r for r in every if r.status_code >= 500]
    assert server_errors, "the database outage was not seen by any request"
    for response in server_errors:
        assert response.status_code == 503
        assert response.headers["Content-Type"] == "application/problem+json"
        assert response.json()["code"] == "unavailable"
        assert int(response.headers["Retry-After"]) >= 1
    assert all(r.status_code in (200, 201) for r in finals)
    # A 5xx only when nothing was committed: the first answer that is not a 5xx
    # is the 201 that created it, never the replay of an earlier, committed try.
    for key, responses in answers.items():
        settled = [r for r in responses if r is not None and r.status_code < 500]
        if any(r is None for r in responses):  # a connection cut mid-request: unknown
            continue
        assert settled[0].status_code == 201, (key, [r.status_code for r in responses if r is not None])

    # One object per key, pushed down exactly once each.
    with pair.platform_engine.connect() as conn:
        per_key = dict(conn.execute(text("SELECT idempotency_key, count(*) FROM clusters GROUP BY 1")).all())
    assert per_key == {key: 1 for key in answers}
    # The creates whose push outcome could not be recorded keep their inline lease
    # until it runs out; the reconciler then pushes them, with nobody's help.
    with pair.reconciler("--concurrency", "4"):
        wait_for(pair.all_synced, timeout=60, what="every cluster synced by the reconciler")
    pair.assert_downstream_matches()
    assert len(pair.cluster_svc_rows("clusters")) == len(answers)


STALL_SECONDS = 6.0  # longer than any request may wait: each one started in it has to give up
REQUEST_BOUND = 5.0  # what a hung database may cost a request (docs/design.md, property 15)


def test_a_stalled_database_costs_a_request_at_most_5_s_then_503_and_loses_nothing(pair, platform_pg):
    """platform's PostgreSQL hung, not dead (SIGSTOP of the postmaster and every backend), under 8
    callers: a stopped server fires no statement_timeout and its kernel still accepts connections,
    so only the service's own deadline on each wait (shared.deadline) bounds a request. A real
    stall, for real seconds: what is measured is the time it costs."""
    pair.api("POST", "/v1/clusters", json=cluster_body(name="before"))  # the key held, the pool warm
    answers: list[tuple[str, float, float, requests.Response | None]] = []  # key, started, seconds, answer
    stop = threading.Event()

    def caller(n: int) -> None:
        for i in range(10_000):
            if stop.is_set():
                return
            key, started = f"stall-{n}-{i}", time.monotonic()
            try:
                response = pair.api(
                    "POST", "/v1/clusters", json=cluster_body(name=f"s-{n}-{i}"), headers={"Idempotency-Key": key}
                )
            except requests.RequestException:
                response = None
            answers.append((key, started, time.monotonic() - started, response))
            if response is not None and response.status_code == 503:
                stop.wait(0.1)

    with ThreadPoolExecutor(8) as pool:
        callers = [pool.submit(caller, n) for n in range(8)]
        with frozen_postgres(platform_pg):
            frozen_at = time.monotonic()
            time.sleep(STALL_SECONDS)  # real time: the stall's length is what the answers are measured against
        thawed_at = time.monotonic()

        def answered_after_the_thaw() -> bool:
            return any(r is not None and r.status_code == 201 and s > thawed_at for _, s, _, r in list(answers))

        wait_for(answered_after_the_thaw, timeout=REQUEST_BOUND, what="a 201 within 5 s of the thaw")
        stop.set()
        for future in callers:
            future.result(timeout=60)

    assert all(response is not None for *_, response in answers), "a request's connection was cut"
    slowest = max(seconds for _, _, seconds, _ in answers)
    assert slowest <= REQUEST_BOUND, f"a request waited {slowest:.1f} s for the hung database"
    in_the_stall = [r for _, started, seconds, r in answers if frozen_at <= started and started + seconds < thawed_at]
    assert in_the_stall, "no request was answered during the stall"
    for response in in_the_stall:
        assert response.status_code == 503, response.text
        assert response.json()["code"] == "unavailable" and int(response.headers["Retry-After"]) >= 1
    assert not [r for *_, r in answers if r.status_code == 500]
    # Nothing acknowledged is lost: every create answered 2xx is stored, once.
    acknowledged = {key for key, _, _, r in answers if r.status_code in (200, 201)}
    with pair.platform_engine.connect() as conn:
        stored = dict(conn.execute(text("SELECT idempotency_key, count(*) FROM clusters GROUP BY 1")).all())
    assert {key: stored.get(key) for key in acknowledged} == {key: 1 for key in acknowledged}
