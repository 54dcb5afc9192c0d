"""Scenario 5: several reconcilers at once over a large backlog.

The backlog is recorded the way platform_svc records intent (its service
layer, with no inline push), then several ``platform-svc reconcile --once``
processes start together, while the proxy drops some answers and resets some
requests. Creates go down in batch calls. Every row is pushed, no row is
pushed by two pushers at once (the proxy's log shows each ID's calls, batch or
single, one after the other), exactly one push per row succeeds, and all rows
end synced.
"""
from __future__ import annotations

import random
import uuid
from collections import defaultdict
from datetime import timedelta

import pytest
import requests
from sqlalchemy import text

from platform_svc.api import services
from platform_svc.models import RESOURCES
from shared.db import Database
from tests.chaos.convergence import read_audit, scenario_figures
from tests.chaos.harness import cluster_body, rule_body, seed_for
from tooling.faultproxy import Fault, Plan
from tooling.pair import TOKEN
from tooling.testing import wait_for

CLUSTERS, FIREWALL_RULES = RESOURCES["cluster"], RESOURCES["firewall_rule"]

RATES = {Fault.DROP_RESPONSE: 0.1, Fault.RESET: 0.05}
BATCH = 10  # creates per batch call in the lost-answer scenario


@pytest.fixture(scope="module")
def backlog(pair, scale):
    """Clusters, and a firewall rule on every fourth, all pending: their IDs."""
    rng = random.Random(seed_for("backlog"))
    account_id = uuid.UUID(pair.account("backlog").account_id)
    database = Database(pair.platform_db_url, pool_size=1)
    ids = []
    try:
        with database.begin() as db_session:
            for index in range(scale.backlog):
                cluster = record(db_session, CLUSTERS, {**cluster_body(rng, index), "account_id": account_id})
                ids.append(str(cluster["id"]))
                if index % 4 == 0:
                    values = {**rule_body(rng), "cluster_id": cluster["id"], "account_id": account_id}
                    ids.append(str(record(db_session, FIREWALL_RULES, values)["id"]))
    finally:
        database.dispose()
    return ids


def start_together(pair, processes: int, **options):
    """Start ``processes`` reconcilers (``reconcile --once``) that begin claiming rows at one moment.

    They start one after another, each taking a second or more to import its code;
    the first could push the whole backlog before the last is up. So the tables
    are locked until every one of them waits for the lock to claim its first rows.
    """
    with pair.platform_engine.begin() as conn:
        conn.execute(text("LOCK TABLE clusters, firewall_rules IN EXCLUSIVE MODE"))
        started = pair.start_reconcilers(processes, **options)
        def all_waiting() -> bool:
            assert all(process.poll() is None for process, _ in started), "a reconciler exited before claiming"
            return waiting_for_the_lock(pair) >= processes

        wait_for(all_waiting, timeout=120, what="every reconciler waiting to claim its first rows")
    return started


def waiting_for_the_lock(pair) -> int:
    with pair.platform_engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT count(DISTINCT pid) FROM pg_locks"
                " WHERE NOT granted AND relation IN ('clusters'::regclass, 'firewall_rules'::regclass)"
            )
        ).scalar_one()


def record(db_session, resource, values):
    [result] = services.create_objects(db_session=db_session, resource=resource, items=[values], lease=timedelta(0))
    row, created = result.unwrap()
    assert created
    return row


def test_several_reconcilers_push_each_row_once_and_never_twice_at_the_same_time(pair, backlog, scale, figures):
    mark = pair.mark()
    pair.proxy.plan = Plan(seed_for("reconcilers"), RATES)

    first = pair.finish(start_together(pair, scale.reconcilers, concurrency=4, batch=20))
    pair.converge(processes=scale.reconcilers, concurrency=4, batch=20)
    comparison = pair.compare()

    log = pair.proxy.log[mark.log:]
    by_id = calls_by_id(log)
    succeeded = {
        object_id: sum(e.delivered and e.statuses().get(object_id) in (200, 201) for e in es)
        for object_id, es in by_id.items()
    }
    figures.append(
        scenario_figures(
            pair,
            "5 reconcilers",
            mark,
            comparison,
            expected=(len(backlog), 0),
            notes=f"{scale.reconcilers} reconcilers at once; rows pushed by each in its first pass:"
            f" {', '.join(str(run.pushed) for run in first)}",
        )
    )
    assert comparison.exact, comparison.describe()
    assert comparison.live_and_deleted(comparison.platform) == (len(backlog), 0)
    assert set(by_id) == set(backlog)  # every row pushed, and nothing else
    assert overlapping(by_id) == []  # no row pushed by two pushers at once
    assert any(len(e.object_ids) > 1 for e in log)  # creates went down in batches
    assert {object_id for object_id, n in succeeded.items() if n != 1} == set()  # one success each
    assert all(run.returncode == 0 for run in first)
    assert sum(run.pushed > 0 for run in first) > 1  # the backlog was shared
    assert read_audit(pair).clean, read_audit(pair)
    assert {Fault.DROP_RESPONSE, Fault.RESET} <= {e.fault for e in log}


def test_a_batch_whose_answer_is_lost_syncs_once_and_a_409_item_fails_only_its_row(pair, backlog, rng, figures):
    """cluster_svc commits a batch of creates but its answer is lost: the client's
    retry replays the batch and every item comes back 200, so each row is created
    once and synced. One item's ID is taken downstream with other fields: that
    item answers 409 and only its row fails."""
    account_id = uuid.UUID(pair.account("batches").account_id)
    database = Database(pair.platform_db_url, pool_size=1)
    try:
        with database.begin() as db_session:
            clusters = [
                record(db_session, CLUSTERS, {**cluster_body(rng, index), "account_id": account_id})
                for index in range(BATCH * 3)
            ]
            rule_values = {"cluster_id": clusters[0]["id"], "account_id": account_id}
            rules = [record(db_session, FIREWALL_RULES, {**rule_body(rng), **rule_values}) for _ in range(BATCH)]
    finally:
        database.dispose()
    ids = [str(row["id"]) for row in clusters + rules]
    squatted = str(clusters[1]["id"])
    squatter = {**cluster_body(rng, 0), "id": squatted, "team_id": str(uuid.uuid4())}
    assert requests.post(
        f"{pair.cluster_svc.url}/v1/clusters", json=squatter, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
    ).status_code == 201
    pair.proxy.plan = None
    pair.proxy.add_rule(Fault.DROP_RESPONSE, method="POST", path="/v1/clusters/batch")
    pair.proxy.add_rule(Fault.DROP_RESPONSE, method="POST", path="/v1/clusters/[^/]+/firewall-rules/batch")
    mark = pair.mark()

    pair.converge(concurrency=4, batch=BATCH)
    comparison = pair.compare()

    log = pair.proxy.log[mark.log:]
    figures.append(scenario_figures(pair, "5b lost batch answers", mark, comparison, expected=(len(backlog) + len(ids), 0),
                                notes="one 409 item (its row failed, as it should)"))
    by_id = calls_by_id(log)
    assert set(by_id) == set(ids)
    assert overlapping(by_id) == []
    lost = [e for e in log if e.fault is Fault.DROP_RESPONSE]
    assert len(lost) == 2 and all(e.status == 200 and not e.delivered for e in lost)
    for dropped in lost:  # cluster_svc committed it; the retry replayed it item by item
        retry = next(e for e in log if e.seq > dropped.seq and e.request.body == dropped.request.body)
        created = {object_id for object_id, status in dropped.statuses().items() if status == 201}
        assert created and retry.delivered
        assert {object_id: retry.statuses()[object_id] for object_id in created} == dict.fromkeys(created, 200)
    succeeded = {
        object_id: sum(e.delivered and e.statuses().get(object_id) in (200, 201) for e in by_id[object_id])
        for object_id in ids
    }
    assert succeeded == {object_id: 0 if object_id == squatted else 1 for object_id in ids}
    failed = pair.platform_row("clusters", squatted)
    assert failed["sync_state"] == "failed" and "409 id_conflict" in failed["sync_error"]
    assert str(pair.cluster_row("clusters", squatted)["team_id"]) == squatter["team_id"]  # nothing overwritten
    assert comparison.problems and all(squatted in str(problem) for problem in comparison.problems), comparison.describe()
    assert comparison.unsynced == 1
    assert read_audit(pair).clean, read_audit(pair)

def calls_by_id(log):
    """Each object's calls (single or batch), in arrival order."""
    by_id = defaultdict(list)
    for exchange in log:
        for object_id in dict.fromkeys(exchange.object_ids):
            by_id[object_id].append(exchange)
    return by_id


def overlapping(by_id):
    """IDs sent in a call that arrived before the previous call carrying them had finished."""
    return [
        object_id
        for object_id, exchanges in by_id.items()
        for earlier, later in zip(exchanges, exchanges[1:])
        if earlier.finished is None or later.received < earlier.finished
    ]
