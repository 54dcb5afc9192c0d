"""Scenario 4: races, made to happen in a chosen order by holding requests in the proxy.

A push held in the proxy keeps its retries with it, so the platform's inline
push gives up and answers "pending"; the test then lets a later call through
and only afterwards releases the held one. Every order is forced by a hold,
none is left to timing.

The last race is the reconciler's: its push of a firewall rule is held while
the user deletes the rule's cluster, then released, so the reconciler hears
cluster_svc's 410 for an object the platform itself has deleted meanwhile.
"""
from __future__ import annotations

from collections import Counter
from functools import partial

import pytest

from tests.chaos.convergence import read_audit, scenario_figures, updates_of
from tests.chaos.harness import Burst, cluster_body, rule_body, rules_path
from tooling.faultproxy import Fault
from tooling.pair import expect


@pytest.fixture(scope="module")
def api(pair):
    return pair.account("races")


@pytest.fixture(scope="module")
def ledger():
    """The objects this module's tests made, live and deleted (the databases hold all of them)."""
    return Counter()


def expected(ledger, live=0, deleted=0):
    ledger.update(live=live, deleted=deleted)
    return ledger["live"], ledger["deleted"]


def held_push(pair, call, **match):
    """Start ``call`` (a public write) and return once its push is held, with the hold and the call."""
    hold = pair.proxy.hold(**match)
    started = Burst([call], threads=1).start()
    hold.wait_held(timeout=30)
    return hold, started


def test_a_create_released_after_a_delete_of_its_id_answers_410_and_resurrects_nothing(
    pair, api, ledger, rng, figures
):
    mark = pair.mark()
    create = partial(api.create, "/v1/clusters", cluster_body(rng, 0))
    hold, creating = held_push(pair, create, method="POST", path="/v1/clusters")
    [created] = creating.results()  # the inline push gave up: the platform answers "pending"
    cluster_id = created["id"]
    assert hold.requests[0].object_id == cluster_id and created["sync_state"] == "pending"

    expect(api.call("DELETE", f"/v1/clusters/{cluster_id}"), 204)  # goes through while the create is held
    hold.release()
    released = hold.wait_done(timeout=30)

    assert [e.status for e in released] == [410] * len(released)
    assert {e.answer()["code"] for e in released} == {"gone"}
    downstream = pair.cluster_row("clusters", cluster_id)
    assert downstream["deleted_at"] is not None and downstream["name"] is None  # a bare tombstone, not revived
    pair.converge()
    comparison = pair.compare()
    figures.append(scenario_figures(pair, "4a create after delete", mark, comparison, expected=expected(ledger, deleted=1)))
    assert comparison.exact, comparison.describe()
    assert read_audit(pair).clean, read_audit(pair)


def test_a_stale_update_released_after_a_newer_one_changes_nothing(pair, api, ledger, rng, figures):
    cluster = api.create("/v1/clusters", cluster_body(rng, 1))
    assert cluster["sync_state"] == "synced"
    mark = pair.mark()
    path = f"/v1/clusters/{cluster['id']}"
    hold, patching = held_push(
        pair, partial(api.call, "PATCH", path, json={"plan": "memory-8"}), method="PUT", object_id=cluster["id"]
    )
    [stale] = patching.results()
    assert expect(stale, 200)["generation"] == 2

    newer = expect(api.call("PATCH", path, json={"plan": "standard-4", "storage_gb": 200}), 200)
    assert (newer["generation"], newer["sync_state"]) == (3, "synced")
    writes = updates_of(pair.cluster_engine, cluster["id"])
    hold.release()
    released = hold.wait_done(timeout=30)

    # Each stale PUT is answered with the current state, and writes nothing.
    assert [e.status for e in released] == [200] * len(released)
    assert {(e.answer()["generation"], e.answer()["plan"]) for e in released} == {(3, "standard-4")}
    assert updates_of(pair.cluster_engine, cluster["id"]) == writes
    downstream = pair.cluster_row("clusters", cluster["id"])
    assert (downstream["generation"], downstream["plan"], downstream["storage_gb"]) == (3, "standard-4", 200)
    pair.converge()
    comparison = pair.compare()
    figures.append(scenario_figures(pair, "4b stale update", mark, comparison, expected=expected(ledger, live=1)))
    assert comparison.exact, comparison.describe()
    assert read_audit(pair).clean, read_audit(pair)


def test_a_rule_create_released_after_its_cluster_was_deleted_answers_410(pair, api, ledger, rng, figures):
    cluster = api.create("/v1/clusters", cluster_body(rng, 2))
    mark = pair.mark()
    rules = f"/v1/clusters/{cluster['id']}/firewall-rules"
    hold, creating = held_push(pair, partial(api.create, rules_path(cluster["id"]), rule_body(rng)), method="POST", path=rules)
    [rule] = creating.results()
    assert rule["sync_state"] == "pending"

    expect(api.call("DELETE", f"/v1/clusters/{cluster['id']}"), 204)
    hold.release()
    released = hold.wait_done(timeout=30)

    assert [e.status for e in released] == [410] * len(released)
    assert pair.cluster_row("firewall_rules", rule["id"]) is None  # never created under a deleted cluster
    pair.converge()  # pushes the rule's own delete, which its cluster's tombstone already answers (410)
    comparison = pair.compare()
    figures.append(scenario_figures(pair, "4c rule after cluster delete", mark, comparison, expected=expected(ledger, deleted=2)))
    assert comparison.exact, comparison.describe()
    # Never created: only the bare tombstone its own delete recorded (no fields), which lets a
    # repair see that delete confirmed.
    row = pair.cluster_row("firewall_rules", rule["id"])
    assert row["deleted_at"] is not None and row["cidr"] is None and row["description"] is None
    assert pair.platform_row("firewall_rules", rule["id"])["delete_synced_at"] is not None


@pytest.mark.parametrize("push", ["create", "update"])
def test_a_rule_push_answered_410_after_its_cluster_was_deleted_leaves_the_rule_deleted_not_failed(
    pair, api, ledger, rng, figures, push
):
    """The reconciler pushes a rule while the user deletes its cluster; cluster_svc answers the push 410.

    Both users' actions are legitimate and the platform's wish (the rule deleted)
    is exactly what cluster_svc holds, so the rule must end synced, not failed.
    """
    cluster = api.create("/v1/clusters", cluster_body(rng, 3))
    rules = f"/v1/clusters/{cluster['id']}/firewall-rules"
    mark = pair.mark()
    if push == "create":
        pair.proxy.add_rule(Fault.RESET, method="POST", path=rules, times=3)  # the inline push fails
        rule = api.create(rules_path(cluster["id"]), rule_body(rng))
        hold = pair.proxy.hold(method="POST", path=rules)
    else:
        rule = api.create(rules_path(cluster["id"]), rule_body(rng))
        pair.proxy.add_rule(Fault.RESET, method="PUT", object_id=rule["id"], times=3)
        rule = expect(api.call("PATCH", f"{rules}/{rule['id']}", json={"description": "changed"}), 200)
        hold = pair.proxy.hold(method="PUT", object_id=rule["id"])
    assert rule["sync_state"] == "pending"
    reconciler = pair.start_reconcilers()
    assert hold.wait_held(timeout=30).object_id == rule["id"]  # the reconciler's push, held

    expect(api.call("DELETE", f"/v1/clusters/{cluster['id']}"), 204)
    hold.release()
    [answered] = hold.wait_done(timeout=30)
    pair.finish(reconciler)

    assert (answered.status, answered.delivered) == (410, True)  # the reconciler heard the 410
    pair.converge()
    comparison = pair.compare()
    figures.append(scenario_figures(pair, f"4d rule {push} after delete", mark, comparison, expected=expected(ledger, deleted=2)))
    assert pair.platform_row("firewall_rules", rule["id"])["sync_state"] == "synced"
    assert comparison.exact, comparison.describe()
