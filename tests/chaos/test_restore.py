"""Scenario 9: cluster_svc's database restored from an older dump.

An estate of clusters and firewall rules is synced; then, while users create,
change and delete objects (the reconciler running beside the inline pushes),
cluster_svc's database is dumped with pg_dump. The writes go on and are all
synced. Then cluster_svc is stopped, its database restored from the old dump
(losing every later create, update and delete), and started again. The
platform knows nothing of it: only the reconciler's periodic drift repair
(a short ``--repair-interval`` here) can notice. Both databases must end
exactly equal again, with nothing resurrected or moved backwards on the way.
"""
from __future__ import annotations

import random
import re
import time
from collections import Counter
from functools import partial

import pytest

from shared.contract import PLANS
from tests.chaos.convergence import read_audit, scenario_figures
from tests.chaos.harness import (
    REPAIR_INTERVAL,
    cluster_body,
    dump_partway,
    in_turn,
    rule_body,
    rules_path,
    run_all,
    running_pair,
)
from tooling import embedded_pg
from tooling.testing import wait_for

# What a restore of cluster_svc's database may show (never ahead or diverged: the platform holds the newer state).
FINDINGS = ("missing", "behind", "undeleted", "deleted_downstream", "orphan")


@pytest.fixture(scope="module")
def pair(pg_server_url, cluster_pg, tmp_path_factory, request):
    """Both services, cluster_svc on a PostgreSQL of its own."""
    cluster_server = embedded_pg.admin_url(cluster_pg)
    yield from running_pair(request, tmp_path_factory, platform_server=pg_server_url, cluster_server=cluster_server)


def cluster_changes(rng: random.Random) -> dict:
    return {"plan": rng.choice(PLANS), "storage_gb": rng.randint(10, 4096), "name": f"changed-{rng.randrange(10**6)}"}


def test_a_restore_from_an_older_dump_is_repaired_to_exactly_the_platforms_state(pair, scale, rng, figures):
    api = pair.account("restore")
    n = scale.objects
    clusters = run_all([partial(api.create, "/v1/clusters", cluster_body(rng, i)) for i in range(n)], scale.threads)
    rules = run_all([partial(api.create, rules_path(c["id"]), rule_body(rng)) for c in clusters[::3]], scale.threads)
    pair.converge()
    assert pair.compare().exact

    mark = pair.mark()
    doomed = rng.sample(clusters, n // 6)
    doomed_ids = {c["id"] for c in doomed}
    survivors = [c for c in clusters if c["id"] not in doomed_ids]
    surviving_rules = [r for r in rules if r["cluster_id"] not in doomed_ids]
    doomed_rules = surviving_rules[: len(surviving_rules) // 5]
    changed_rules = surviving_rules[len(surviving_rules) // 5 :][::2]
    new, with_rule, short_lived = n // 2, n // 4, max(2, n // 12)
    path = "/v1/clusters"
    creates = [[("POST", path, cluster_body(rng, n + i), (201,))] for i in range(new - with_rule)]
    creates += [
        [
            ("POST", path, cluster_body(rng, 2 * n + i), (201,)),
            ("POST", path + "/{id}/firewall-rules", rule_body(rng), (201,)),
        ]
        for i in range(with_rule)
    ]
    creates += [
        [("POST", path, cluster_body(rng, 3 * n + i), (201,)), ("DELETE", path + "/{id}", None, (202, 204))]
        for i in range(short_lived)
    ]
    changes = [
        [("PATCH", f"{path}/{c['id']}", cluster_changes(rng), (200,))] * rng.randint(1, 2)
        for c in rng.sample(survivors, len(survivors) // 3)
    ]
    changes += [
        [("PATCH", rule_path(r), {"description": f"new {rng.randrange(10**6)}"}, (200,))] for r in changed_rules
    ]
    deletes = [[("DELETE", f"{path}/{c['id']}", None, (202, 204))] for c in doomed]
    deletes += [[("DELETE", rule_path(r), None, (202, 204))] for r in doomed_rules]
    calls = [partial(in_turn, api, steps) for steps in creates + changes + deletes]
    rng.shuffle(calls)
    dump = dump_partway(pair, calls, scale.threads, database_url=pair.cluster_db_url, after=len(calls) // 3)

    pair.cluster_svc.stop()
    embedded_pg.restore(pair.cluster_db_url, dump)
    pair.restart_cluster_svc()
    pair.events["restore cluster_svc's database from an older dump"] += 1
    restored_at = time.monotonic()
    drift = pair.compare()
    drifted = len({(problem.table, problem.object_id) for problem in drift.problems})
    assert drifted > 0, "the dump was no older than the database"

    with pair.reconciler("--concurrency", "4", "--repair-interval", REPAIR_INTERVAL) as reconciler:
        comparison = pair.compare()

        def repaired():
            nonlocal comparison
            comparison = pair.compare()
            return comparison.exact

        wait_for(repaired, timeout=180, poll=0.5, what=lambda: f"not repaired:\n{comparison.describe()}")
        seconds = time.monotonic() - restored_at
    repaired = Counter(re.findall(r"repair: (\w+) (?:cluster|firewall_rule) ", reconciler.output()))

    deleted_clusters = len(doomed) + short_lived
    deleted_rules = sum(r["cluster_id"] in doomed_ids for r in rules) + len(doomed_rules)
    live = n + new - len(doomed) + len(rules) + with_rule - deleted_rules  # the short-lived ones came and went
    figures.append(
        scenario_figures(
            pair,
            "9 restore of older dump",
            mark,
            comparison,
            expected=(live, deleted_clusters + deleted_rules),
            notes=f"dump taken after {len(calls) // 3} of {len(calls)} writes; {drifted} objects differed after the"
            f" restore; repaired: {', '.join(f'{repaired[f]} {f}' for f in FINDINGS)};"
            f" exact {seconds:.1f} s after the restore (repair every {REPAIR_INTERVAL} s)",
        )
    )
    assert comparison.exact, comparison.describe()
    assert comparison.live_and_deleted(comparison.platform) == (live, deleted_clusters + deleted_rules)
    assert repaired["missing"] > 0 and repaired["behind"] > 0 and repaired["undeleted"] > 0, repaired
    assert repaired["deleted_downstream"] == repaired["orphan"] == 0, repaired
    assert sum(repaired.values()) <= drifted  # nothing repaired that had not drifted
    assert set(repaired) <= set(FINDINGS)
    audit = read_audit(pair)
    assert audit.clean, audit
    assert pair.public_5xx(mark) == 0


def rule_path(rule: dict) -> str:
    return f"/v1/clusters/{rule['cluster_id']}/firewall-rules/{rule['id']}"
