"""The reconciler's pass line (its log line, and the console's "Reconciler's last pass") counts
what it found: each row it pushed once, by the state its last push left it in, and the pushes
apart, so a row cluster_svc would not take, pushed again and again, is never counted as many."""
from __future__ import annotations

import threading

from platform_svc.push.schedule import RetryPolicy
from platform_svc.reconciler import controller
from platform_svc.reconciler.settings import ReconcilerSettings


def test_a_burst_counts_each_row_it_pushed_once_by_the_state_it_was_left_in(dead_pusher, monkeypatch):
    reconciler = controller.Reconciler(dead_pusher(RetryPolicy()), ReconcilerSettings(concurrency=1),
                                       suspect=False)
    # Three claims of the same pending row, then one that syncs another: four pushes, two rows.
    pushed = [[(("cluster", 1), "pending")]] * 3 + [[(("cluster", 2), "synced")]]
    monkeypatch.setattr(reconciler, "_work", lambda claim, stop: pushed[claim])
    recorded, stop = [], threading.Event()

    def record_pass(database, name, holder, summary):
        recorded.append(summary)
        stop.set()

    monkeypatch.setattr(controller, "record_pass", record_pass)
    left = iter(range(len(pushed)))
    monkeypatch.setattr(reconciler, "_claim", lambda room: [i] if (i := next(left, None)) is not None else [])

    reconciler._schedule(stop=stop, until_idle=False)

    assert recorded == ["reconciled 2 rows in 4 pushes: 1 pending, 1 synced"]
