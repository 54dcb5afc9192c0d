"""Scenario 7: a long outage of cluster_svc, and its recovery.

cluster_svc is SIGKILLed and stays down (``outage_seconds``: 2 minutes at full
scale) while public writes keep coming: creates, updates and deletes of
clusters made before. Each answers at once, as ``pending`` (the inline
breaker is open), and the running reconciler retries every row, its backoff
growing towards tens of seconds. However long it lasts, no row ends
``failed``. When cluster_svc comes back, the reconciler notices within a
second or two and every row is synced within seconds: not when the backoffs
would have run out.
"""
from __future__ import annotations

import time
from functools import partial

from sqlalchemy import text

from tests.chaos.convergence import read_audit, scenario_figures
from tests.chaos.harness import Burst, cluster_body
from tooling.pair import expect
from tooling.testing import wait_for


def paced(call, at: float):
    """``call`` no earlier than monotonic time ``at``: the writes spread over the outage."""

    def run():
        time.sleep(max(0.0, at - time.monotonic()))  # real time: the writes spread over a real outage
        return call()

    return run


def backlog(pair) -> tuple[int, int, float, int]:
    """Rows failed, rows pending, the longest backoff still to wait (s), the most attempts."""
    with pair.platform_engine.connect() as conn:
        return conn.execute(
            text(
                """
                SELECT count(*) FILTER (WHERE sync_state = 'failed'),
                       count(*) FILTER (WHERE sync_state = 'pending'),
                       coalesce(EXTRACT(EPOCH FROM max(next_attempt_at - now())
                                        FILTER (WHERE sync_state = 'pending')), 0),
                       coalesce(max(attempts), 0)
                FROM (SELECT sync_state, next_attempt_at, attempts FROM clusters
                      UNION ALL SELECT sync_state, next_attempt_at, attempts FROM firewall_rules) AS rows
                """
            )
        ).one()


def test_a_long_outage_fails_nothing_and_recovery_drains_at_once(pair, scale, rng, figures):
    api = pair.account("outage")
    mark = pair.mark()
    before = [api.create("/v1/clusters", cluster_body(rng, i)) for i in range(10)]
    with pair.reconciler("--concurrency", "4"):
        pair.kill_cluster_svc()
        down_at = time.monotonic()
        spread = scale.outage_seconds * 0.8
        calls = []
        for n in range(scale.outage_writes):
            at = down_at + spread * n / scale.outage_writes
            if n % 10 == 1:
                target = before[n // 10 % 5]
                call = partial(api.call, "PATCH", f"/v1/clusters/{target['id']}", json={"storage_gb": 10 + n})
                calls.append(paced(lambda call=call: expect(call(), 200), at))
            else:
                calls.append(paced(partial(api.create, "/v1/clusters", cluster_body(rng, 100 + n)), at))
        for target in before[5:8]:
            calls.append(paced(lambda target=target: expect(api.call("DELETE", f"/v1/clusters/{target['id']}"), 202), down_at))
        written = Burst(calls, threads=4).start().results(timeout=scale.outage_seconds + 300)
        assert not [w for w in written if isinstance(w, BaseException)], [w for w in written if isinstance(w, BaseException)][:3]
        time.sleep(max(0.0, down_at + scale.outage_seconds - time.monotonic()))  # real time: the outage's length

        failed, pending, longest_backoff, most_attempts = backlog(pair)
        assert failed == 0
        pair.restart_cluster_svc()
        up_at = time.monotonic()
        wait_for(lambda: backlog(pair)[1] == 0, timeout=120, poll=0.1,
                 what=lambda: f"still pending after the recovery: {backlog(pair)}")
        recovery = time.monotonic() - up_at

    comparison = pair.compare()
    creates = scale.outage_writes - len(range(1, scale.outage_writes, 10))
    figures.append(
        scenario_figures(
            pair,
            "7 long outage",
            mark,
            comparison,
            expected=(len(before) - 3 + creates, 3),
            notes=f"cluster_svc down {scale.outage_seconds:.0f} s, {pending} rows waiting; failed rows after it: {failed};"
            f" longest backoff left at recovery {longest_backoff:.0f} s (attempts up to {most_attempts});"
            f" {recovery:.1f} s from recovery to all synced",
        )
    )
    assert comparison.exact, comparison.describe()
    assert comparison.live_and_deleted(comparison.platform) == (len(before) - 3 + creates, 3)
    assert pair.public_5xx(mark) == 0
    assert read_audit(pair).clean, read_audit(pair)
    assert most_attempts >= 3  # the reconciler kept trying during the outage
    assert recovery < 2 + 30, f"{recovery:.1f} s from recovery to all synced"
