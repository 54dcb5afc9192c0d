"""Several reconcilers through PgBouncer in transaction mode: exactly one runs the periodic passes.

A session advisory lock failed here: through the pooler two reconcilers both
led, and a lock left on a pooled server connection kept a later reconciler,
connected directly, from ever leading. The lease row (docs/decisions/0011)
needs no session: ``sync_repair_leader`` summed over the reconcilers is 1 at
every scrape, a crashed leader is replaced within the lease, and a leader
that stops gives the lease back for the next one to take at once.
"""
from __future__ import annotations

import contextlib
import os
import signal
import time

from bench.load import leader_gauge
from tooling.testing import free_port, wait_for

LEASE = 3.0  # seconds: short, so a crashed leader's lease runs out quickly
LEADS = "this reconciler runs the passes"
DEFERS = "another reconciler runs the passes"


def options(port: int) -> list[str]:
    return ["--repair-interval", "0.5", "--purge-interval", "0", "--leader-lease", str(LEASE),
            "--concurrency", "2", "--metrics-port", str(port)]


def passes(reconciler) -> int:
    """Repair passes a reconciler finished so far (each ends with its summary line)."""
    return reconciler.output().count("; compared ")


def test_through_pgbouncer_exactly_one_reconciler_leads_and_another_takes_over_when_it_is_killed(
    scale_pair, bouncer, databases
):
    pair = scale_pair(through=bouncer)
    ports = [free_port(), free_port()]
    with contextlib.ExitStack() as stack:
        reconcilers = [stack.enter_context(pair.reconciler(*options(port))) for port in ports]
        wait_for(lambda: sum(leader_gauge(port) or 0 for port in ports) == 1, what="a leader")

        scrapes = [[leader_gauge(port) for port in ports] for _ in range(40)]  # about 4 s: over a lease renewed
        assert all(sum(gauges) == 1 for gauges in scrapes), scrapes
        leading = scrapes[-1].index(1.0)
        leader, other = reconcilers[leading], reconcilers[1 - leading]
        wait_for(lambda: passes(leader) >= 2, what="two passes by the leader")
        assert LEADS in leader.output() and LEADS not in other.output()
        assert DEFERS in other.output() and passes(other) == 0

        leader.kill()  # SIGKILL: the lease is not given back, it runs out
        killed = time.monotonic()
        wait_for(lambda: leader_gauge(ports[1 - leading]) == 1, timeout=2 * LEASE, what="the other leading")
        takeover = time.monotonic() - killed
        done = passes(other)
        wait_for(lambda: passes(other) > done, what="a pass by the new leader")

    print(f"takeover after kill -9: {takeover:.2f} s (lease {LEASE} s)")
    assert takeover <= LEASE + 0.5  # the lease's own time, and a scrape


def test_a_leader_that_stops_hands_over_and_after_all_stopped_a_new_one_connected_directly_leads_at_once(
    scale_pair, bouncer, databases
):
    pair = scale_pair(through=bouncer)
    ports = [free_port(), free_port()]
    with pair.reconciler(*options(ports[0])) as first, pair.reconciler(*options(ports[1])) as second:
        wait_for(lambda: sum(leader_gauge(port) or 0 for port in ports) == 1, what="a leader")
        leading = 0 if leader_gauge(ports[0]) == 1 else 1
        leader = (first, second)[leading]
        wait_for(lambda: passes(leader) >= 1, what="a pass")

        os.killpg(leader.process.pid, signal.SIGTERM)  # a clean stop: the lease is given back
        assert leader.process.wait(timeout=60) == 0
        stopped = time.monotonic()
        wait_for(lambda: leader_gauge(ports[1 - leading]) == 1, timeout=LEASE, what="the other leading")
        handover = time.monotonic() - stopped
    # Both stopped (SIGTERM, exit 0): the last leader gave the lease back too.

    port = free_port()
    direct = {"PLATFORM_DATABASE_URL": databases[1]}  # no PgBouncer on the way
    with pair.reconciler(*options(port), env=direct) as third:
        started = time.monotonic()  # it runs: its periodic thread takes the lease at once
        wait_for(lambda: leader_gauge(port) == 1, timeout=LEASE, what="the new reconciler leading")
        leading_after = time.monotonic() - started
        wait_for(lambda: passes(third) >= 1, what="a pass by the new reconciler")

    print(f"handover after a clean stop: {handover:.2f} s; a new reconciler leads {leading_after:.2f} s"
          f" after it started running (lease {LEASE} s)")
    assert "the lease is given back" in leader.output()
    assert handover <= LEASE / 3 + 0.5  # the other's next try, not the lease running out
    assert LEADS in third.output()
