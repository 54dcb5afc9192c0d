"""The services' pools heal by themselves, with PgBouncer in transaction mode between them and
PostgreSQL or without: connections the server ended are never handed to a request, and a server
that refuses writes (a standby, a primary not promoted yet) answers 503 with Retry-After, never 500,
and its connections are discarded.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers import cluster_body

BURST = 16  # creates at once: more than a worker's pool, so every pooled connection is in use


def creates(pair, n: int, prefix: str) -> list:
    """``n`` creates at once (each with its own Idempotency-Key); the answers."""
    def create(i: int):
        return pair.api("POST", "/v1/clusters", json=cluster_body(name=f"{prefix}-{i}"),
                        headers={"Idempotency-Key": f"{prefix}-{i}"})

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(create, range(n)))


@pytest.mark.parametrize("via", ["direct", "pgbouncer"])
def test_after_every_server_connection_is_terminated_the_next_creates_all_succeed(
    scale_pair, request, databases, admin, via
):
    pair = scale_pair(through=request.getfixturevalue("bouncer") if via == "pgbouncer" else None)
    assert {r.status_code for r in creates(pair, BURST, "warm")} == {201}  # every pool filled

    ended = admin.terminate_all(*databases)  # both services' server connections (PgBouncer's, if any)

    answers = creates(pair, BURST, "after")
    assert ended >= 2
    assert [r.status_code for r in answers] == [201] * BURST, [r.text for r in answers if r.status_code != 201]
    assert all(r.json()["sync_state"] == "synced" for r in answers)  # cluster_svc's pool healed too


@pytest.mark.parametrize("via", ["direct", "pgbouncer"])
def test_a_read_only_primary_answers_503_with_retry_after_and_its_connections_are_discarded(
    scale_pair, request, databases, admin, via
):
    # One worker: the read-only connection this test makes is in the pool it then checks.
    pair = scale_pair(through=request.getfixturevalue("bouncer") if via == "pgbouncer" else None, workers=1)
    assert {r.status_code for r in creates(pair, 4, "warm")} == {201}
    platform_db = databases[1]
    admin.read_only(platform_db, True)
    try:
        admin.terminate_all(platform_db)  # new sessions start read-only, as on a standby
        refused = pair.api("POST", "/v1/clusters", json=cluster_body(name="refused"),
                           headers={"Idempotency-Key": "refused"})
    finally:
        admin.read_only(platform_db, False)

    assert refused.status_code == 503, refused.text
    assert refused.headers["Content-Type"] == "application/problem+json"
    assert refused.json()["code"] == "unavailable" and int(refused.headers["Retry-After"]) >= 1
    again = creates(pair, 8, "again")  # the read-only connections were discarded: fresh ones, writable
    assert [r.status_code for r in again] == [201] * 8, [r.text for r in again if r.status_code != 201]
    retried = pair.api("POST", "/v1/clusters", json=cluster_body(name="refused"), headers={"Idempotency-Key": "refused"})
    assert retried.status_code == 201  # the refused create was never stored: its retry creates it
    assert pair.tally.snapshot()[500] == 0
