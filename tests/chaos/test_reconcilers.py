"""Scenario 5: several reconcilers at once over a large backlog.

The backlog is recorded the way platform_svc records intent (its service
layer, with no inline push), then several ``platform-svc reconcile --once``
processes start together, while the proxy drops some answers and resets some
requests. Every row is pushed, no row is pushed by two pushers at once (the
proxy's log shows each ID's requests one after the other), exactly one push
per row succeeds, and all rows end synced.
"""
from __future__ import annotations

import random
import uuid
from collections import defaultdict
from datetime import timedelta

import pytest

from platform_svc import services
from platform_svc.models import CLUSTERS, FIREWALL_RULES
from shared.db import Database
from tooling.faultproxy import Fault, Plan
from tests.chaos.conftest import seed_for
from tests.chaos.harness import cluster_body, rule_body

RATES = {Fault.DROP_RESPONSE: 0.1, Fault.RESET: 0.05}


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


def record(db_session, resource, values):
    row, created = services.create_object(
        db_session=db_session, resource=resource, values=values, idempotency_key=None, lease=timedelta(0)
    )
    assert created
    return row


def test_several_reconcilers_push_each_row_once_and_never_twice_at_the_same_time(pair, backlog, scale, figures):
    pair.proxy.plan = Plan(seed_for("reconcilers"), RATES)
    mark = pair.mark()

    first = pair.reconcile(scale.reconcilers, concurrency=4, batch=20)
    pair.converge(processes=scale.reconcilers, concurrency=4, batch=20)
    comparison = pair.compare()

    log = pair.proxy.log[mark.log:]
    by_id = defaultdict(list)
    for exchange in log:
        by_id[exchange.object_id].append(exchange)
    overlapping = [
        object_id
        for object_id, exchanges in by_id.items()
        for earlier, later in zip(exchanges, exchanges[1:])
        if later.received < earlier.finished
    ]
    succeeded = {object_id: sum(e.delivered and e.status in (200, 201) for e in es) for object_id, es in by_id.items()}
    figures.append(
        pair.figures(
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
    assert overlapping == []  # no row pushed by two pushers at once
    assert {object_id for object_id, n in succeeded.items() if n != 1} == set()  # one success each
    assert all(run.returncode == 0 for run in first)
    assert sum(run.pushed > 0 for run in first) > 1  # the backlog was shared
    assert pair.audit().clean, pair.audit()
    assert {Fault.DROP_RESPONSE, Fault.RESET} <= {e.fault for e in log}
