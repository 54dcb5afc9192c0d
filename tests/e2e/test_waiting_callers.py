"""``Prefer: wait`` through a real outage: 40 callers waiting on their creates while cluster_svc is
frozen hold next to none of the platform's database sessions, and another account's requests are
all answered while they wait."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import text

from tests.helpers import cluster_body

CALLERS, WAIT = 40, 5

HELD = text("""SELECT coalesce(array_agg(application_name || ' ' || state || ': ' || left(query, 80)), '{}')
               FROM pg_stat_activity
               WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'""")


def test_forty_callers_waiting_through_an_outage_hold_a_handful_of_sessions_and_slow_no_one(fresh_pair):
    pair = fresh_pair  # of its own: it freezes cluster_svc
    waiter, other = pair.current, pair.account("another account", cli=False)
    answered_while_waiting, held, done = [], [], threading.Event()

    def wait_on_a_create(n: int):
        return waiter.call("POST", "/v1/clusters", json=cluster_body(name=f"waits-{n}"),
                           headers={"Prefer": f"wait={WAIT}"})

    def sample_sessions() -> None:
        with pair.platform_engine.connect() as conn:
            while not done.wait(0.05):
                held.append(conn.execute(HELD).scalar())

    with pair.frozen_cluster_svc(), ThreadPoolExecutor(CALLERS + 1) as pool:
        sampler = pool.submit(sample_sessions)
        try:
            waits = [pool.submit(wait_on_a_create, n) for n in range(CALLERS)]
            for _ in range(10):  # another account's reads, one after another, while the 40 wait
                answered_while_waiting.append((other.call("GET", "/v1/clusters").status_code,
                                               sum(w.done() for w in waits)))
            answers = [w.result() for w in waits]
        finally:
            done.set()
        sampler.result()

    assert [a.status_code for a in answers] == [201] * CALLERS
    assert {a.headers["Idempotency-Status"] for a in answers} == {"processing"}  # waited the whole N, still pending
    assert {a.headers["Preference-Applied"] for a in answers} == {f"wait={WAIT}"}
    assert answered_while_waiting == [(200, 0)] * 10  # every read answered before any waiting caller was
    most = max(held, key=len)
    assert len(held) > 20 and len(most) <= 5, most  # sessions in use while 40 callers wait: a handful at most
