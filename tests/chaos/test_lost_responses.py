"""Scenario 1: lost responses.

Hundreds of public creates while the proxy drops about 20% of cluster_svc's
answers after it committed, resets about 10% of requests before forwarding
them, and delays a few past the inline push's timeout; then the reconciler,
under the same faults. Afterwards cluster_svc holds exactly the platform's
objects: none missing, none doubled, every platform row synced.
"""
from __future__ import annotations

from functools import partial

from tests.chaos.convergence import read_audit, scenario_figures
from tests.chaos.harness import cluster_body, rule_body, rules_path, run_all, seed_for
from tooling.faultproxy import Fault, Plan

RATES = {Fault.DROP_RESPONSE: 0.2, Fault.RESET: 0.1, Fault.DELAY: 0.02}


def test_creates_whose_answers_are_lost_exist_exactly_once_downstream(pair, scale, rng, figures):
    api = pair.account("lost-responses")
    mark = pair.mark()
    pair.proxy.plan = Plan(seed_for("lost responses"), RATES)

    clusters = run_all([partial(api.create, "/v1/clusters", cluster_body(rng, i)) for i in range(scale.creates)], scale.threads)
    assert not [c for c in clusters if isinstance(c, BaseException)]
    rules = run_all([partial(api.create, rules_path(c["id"]), rule_body(rng)) for c in clusters[::3]], scale.threads)
    assert not [r for r in rules if isinstance(r, BaseException)]
    left_pending = sum(1 for created in clusters + rules if created["sync_state"] != "synced")
    pair.converge()
    comparison = pair.compare()

    log = pair.proxy.log[mark.log:]
    figures.append(
        scenario_figures(
            pair,
            "1 lost responses",
            mark,
            comparison,
            expected=(len(clusters) + len(rules), 0),
            notes=f"{left_pending} objects left pending by the inline push; the reconciler finished them",
        )
    )
    assert comparison.exact, comparison.describe()
    assert comparison.platform == {"clusters live": len(clusters), "firewall_rules live": len(rules)}
    assert read_audit(pair).clean, read_audit(pair)
    assert pair.public_5xx(mark) == 0
    assert not [e for e in log if e.status is not None and e.status >= 500]
    # The faults did happen, and replays of lost answers were answered from the stored rows.
    faults = {e.fault for e in log}
    assert {Fault.DROP_RESPONSE, Fault.RESET} <= faults
    assert any(e.method == "POST" and e.status == 200 for e in log)
