"""Scenario 2: updates and deletes under lost responses.

The same faults as scenario 1 (answers dropped after commit, requests reset,
a few delayed past the inline timeout), with the reconciler running beside
the inline pushes. Updates: generations only ever move forward downstream
(every write cluster_svc made is audited), and the final state equals the
platform's. Deletes: every deleted object is a tombstone downstream, and
nothing else is, until purge removes it.

This pair's horizon is seconds (the scale's ``short_horizon``): the objects are
made first and then only updated and deleted, so by the time they are
deleted their IDs are past it, and purge (running on both sides) removes
each tombstone, and the platform's deleted row once its delete is confirmed,
while the faulty pushes go on: late deletes and updates of purged IDs must
change nothing, and every deleted object must end purged on both sides.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
from sqlalchemy import text

from shared.contract import PLANS
from tests.chaos.convergence import read_audit, scenario_figures
from tests.chaos.harness import cluster_body, rule_body, rules_path, run_all, running_pair, seed_for
from tooling.faultproxy import Fault, Plan
from tooling.pair import PublicApi, expect
from tooling.testing import wait_for

RATES = {Fault.DROP_RESPONSE: 0.2, Fault.RESET: 0.1, Fault.DELAY: 0.02}


@dataclass
class Estate:
    api: PublicApi
    clusters: list[dict[str, Any]]
    rules: list[dict[str, Any]]

    def rules_of(self, cluster_id: str) -> list[dict[str, Any]]:
        return [rule for rule in self.rules if rule["cluster_id"] == cluster_id]


@pytest.fixture(scope="module")
def pair(pg_server_url, tmp_path_factory, request, scale):
    """Both services on the run's PostgreSQL, with a horizon of seconds (see above)."""
    yield from running_pair(
        request, tmp_path_factory, platform_server=pg_server_url, cluster_server=pg_server_url,
        horizon=scale.short_horizon,
    )


def deleted_rows(pair) -> tuple[int, int]:
    """Deleted rows each side holds (platform's, cluster_svc's): 0 once purge removed them all."""
    def count(engine):
        with engine.connect() as conn:
            return sum(
                conn.execute(text(f"SELECT count(*) FROM {table} WHERE deleted_at IS NOT NULL")).scalar_one()
                for table in ("clusters", "firewall_rules")
            )
    return count(pair.platform_engine), count(pair.cluster_engine)


@pytest.fixture(scope="module")
def estate(pair, scale):
    """Clusters, and a firewall rule on every second one, created and synced without faults."""
    rng = random.Random(seed_for("estate"))
    api = pair.account("updates-and-deletes")
    clusters = run_all([partial(api.create, "/v1/clusters", cluster_body(rng, i)) for i in range(scale.objects)], scale.threads)
    rules = run_all([partial(api.create, rules_path(c["id"]), rule_body(rng)) for c in clusters[::2]], scale.threads)
    pair.converge()
    assert pair.compare().exact
    return Estate(api, clusters, rules)


def cluster_changes(rng: random.Random) -> dict[str, Any]:
    fields = rng.sample(["name", "plan", "storage_gb"], rng.randint(1, 3))
    values = {"name": f"renamed-{rng.randrange(10**6)}", "plan": rng.choice(PLANS), "storage_gb": rng.randint(10, 4096)}
    return {name: values[name] for name in fields}


def in_turn(api: PublicApi, calls: list[tuple[str, str, dict | None, tuple[int, ...]]]) -> int:
    """One user's calls on one object, each after the previous answered."""
    for method, path, body, statuses in calls:
        expect(api.call(method, path, json=body), *statuses)
    return len(calls)


def test_updates_only_move_forward_and_end_as_the_platforms(pair, estate, scale, rng, figures):
    mark = pair.mark()
    pair.proxy.plan = Plan(seed_for("updates"), RATES)
    writes_before = read_audit(pair)
    patches = {c["id"]: [cluster_changes(rng) for _ in range(rng.randint(1, 3))] for c in estate.clusters}
    rule_patches = {
        r["id"]: [{"description": f"changed {rng.randrange(10**6)}"} for _ in range(rng.randint(1, 2))]
        for r in estate.rules
    }
    calls = [
        partial(in_turn, estate.api, [("PATCH", f"/v1/clusters/{cid}", body, (200,)) for body in bodies])
        for cid, bodies in patches.items()
    ] + [
        partial(in_turn, estate.api, [("PATCH", rule_path(r), body, (200,)) for body in rule_patches[r["id"]]])
        for r in estate.rules
    ]

    with pair.reconciler("--concurrency", "4"):
        results = run_all(calls, scale.threads)
    assert not [r for r in results if isinstance(r, BaseException)]
    pair.converge()
    comparison = pair.compare()

    log = pair.proxy.log[mark.log:]
    stale = [e for e in log if e.method == "PUT" and e.status == 200 and stale_put(e)]
    figures.append(
        scenario_figures(
            pair,
            "2a updates",
            mark,
            comparison,
            expected=(len(estate.clusters) + len(estate.rules), 0),
            notes=f"stale PUTs (late or repeated) that reached cluster_svc and changed nothing: {len(stale)}",
        )
    )
    assert comparison.exact, comparison.describe()
    audit = read_audit(pair)
    assert audit.clean, audit
    assert audit.regressions == writes_before.regressions == 0
    # The platform holds the generation each object should have reached (cluster_svc equals it, above).
    for cid, bodies in patches.items():
        assert pair.platform_row("clusters", cid)["generation"] == 1 + len(bodies)
    for rid, bodies in rule_patches.items():
        assert pair.platform_row("firewall_rules", rid)["generation"] == 1 + len(bodies)
    assert pair.public_5xx(mark) == 0
    assert not [e for e in log if e.status is not None and e.status >= 500]
    assert {Fault.DROP_RESPONSE, Fault.RESET} <= {e.fault for e in log}


def test_deletes_leave_exactly_the_deleted_objects_as_tombstones(pair, estate, scale, rng, figures):
    mark = pair.mark()
    pair.proxy.plan = Plan(seed_for("deletes"), RATES)
    doomed = rng.sample(estate.clusters, len(estate.clusters) // 3)
    doomed_ids = {c["id"] for c in doomed}
    survivors = [c for c in estate.clusters if c["id"] not in doomed_ids]
    surviving_rules = [r for r in estate.rules if r["cluster_id"] not in doomed_ids]
    doomed_rules = rng.sample(surviving_rules, len(surviving_rules) // 3)
    # Deleting twice: the second answer is 410 whether or not the first was confirmed yet.
    calls = [
        partial(in_turn, estate.api, [("DELETE", path, None, (204, 202)), ("DELETE", path, None, (410,))])
        for path in [f"/v1/clusters/{c['id']}" for c in doomed]
    ] + [
        partial(in_turn, estate.api, [("DELETE", path, None, (204, 202)), ("DELETE", path, None, (410,))])
        for path in map(rule_path, doomed_rules)
    ] + [
        partial(in_turn, estate.api, [("PATCH", f"/v1/clusters/{c['id']}", cluster_changes(rng), (200,))])
        for c in rng.sample(survivors, len(survivors) // 2)
    ] + [
        # Another user changing a cluster while it is being deleted: either may come first.
        partial(in_turn, estate.api, [("PATCH", f"/v1/clusters/{c['id']}", cluster_changes(rng), (200, 410))])
        for c in doomed[::2]
    ]
    rng.shuffle(calls)

    with pair.reconciler("--concurrency", "4"):
        results = run_all(calls, scale.threads)
        # Every ID is past the horizon soon (most already are): purge removes every deleted
        # object on both sides, the platform's once the reconciler had its delete confirmed.
        # (A wait for a time the IDs name, at most the horizon, not for a race.)
        wait_for(lambda: deleted_rows(pair) == (0, 0), timeout=pair.horizon.seconds + pair.horizon.grace + 60,
                 what="every deleted row purged on both sides", poll=0.1)
    assert not [r for r in results if isinstance(r, BaseException)]
    pair.converge()
    comparison = pair.compare()

    deleted = len(doomed) + sum(len(estate.rules_of(cid)) for cid in doomed_ids) + len(doomed_rules)
    live = len(estate.clusters) + len(estate.rules) - deleted
    figures.append(scenario_figures(pair, "2b deletes", mark, comparison, expected=(live, deleted)))
    assert comparison.exact, comparison.describe()
    # Each deleted object was a deleted row on each side, and purge removed it there, once.
    assert comparison.live_and_deleted(comparison.platform) == (live, 0)
    assert comparison.live_and_deleted(comparison.downstream) == (live, 0)
    platform, downstream = read_audit(pair, platform=True), read_audit(pair)
    assert (platform.purged, downstream.purged) == (deleted, deleted)
    assert platform.hard_deletes == 0, platform  # nothing removed alive, or before its ID was past the horizon
    assert downstream.clean, downstream
    assert pair.public_5xx(mark) == 0
    assert {Fault.DROP_RESPONSE, Fault.RESET} <= {e.fault for e in pair.proxy.log[mark.log:]}


def rule_path(rule: dict[str, Any]) -> str:
    return f"/v1/clusters/{rule['cluster_id']}/firewall-rules/{rule['id']}"


def stale_put(exchange) -> bool:
    """cluster_svc answered with a newer generation than the PUT asked for: it was ignored."""
    asked = json.loads(exchange.request.body)["generation"]
    return (exchange.answer() or {}).get("generation", asked) > asked
