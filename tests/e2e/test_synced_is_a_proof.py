"""``synced`` is a proof, whatever an operator or a hand edit did (issue 29, cases 1-4), on real
processes: the operator's own commands (``reconcile --once``, ``repair``, ``sync-status
--retry-failed``) against a real pair, and cluster_svc's database edited behind the platform's back.

Each case ends with both sides agreeing, or with the row ``failed`` and saying why, and the other
team's object alive and unchanged.

One pair serves the module; each test works on objects of its own.
"""
from __future__ import annotations

import uuid

import pytest

from tests.e2e.test_content_repair import created, downstream, repair
from tests.helpers import cluster_body, rule_body
from tooling.pair import start_pair

CLUSTERS = "/v1/clusters"


@pytest.fixture(scope="module")
def pair(pg_server_url, tmp_path_factory):
    """A pair of the module's own: its tests run repair and the reconciler over every row, and stop cluster_svc."""
    pair = start_pair(pg_server_url, tmp_path_factory.mktemp("synced_is_a_proof"))
    try:
        pair.use_account(pair.account("synced is a proof"))
        yield pair
    finally:
        pair.stop()


def reconcile(pair):
    """``reconcile --once``: it exits 1 while any row is failed, which other tests' rows here are."""
    result = pair.cli("reconcile", "--once")
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr, result.stdout + result.stderr


def retry_failed(pair, *narrowing):
    result = pair.cli("sync-status", "--retry-failed", *narrowing)
    assert result.returncode == 0, result.stderr
    return result.stdout


def state(pair, table, object_id):
    row = pair.platform_rows(table)[object_id]
    return row["sync_state"], row["sync_error"]


def another_teams_cluster(pair, object_id, **fields):
    """Another team's caller creates its own cluster with this ID through the internal API."""
    body = {**cluster_body(name="theirs", region="us-east-1"), **fields, "id": object_id, "team_id": str(uuid.uuid4())}
    answer = pair.internal("POST", CLUSTERS, json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_a_retry_never_deletes_another_teams_object_under_a_failed_rows_id(pair):
    """Case 1: X failed on 409 id_conflict (another team holds its ID), its user deleted it (held
    back), and the operator retries every failed row: the other team's object stays alive, and X
    stays failed, saying why."""
    pair.stop_cluster_svc()
    try:
        x = pair.api("POST", CLUSTERS, json=cluster_body(name="mine")).json()["id"]
    finally:
        pair.restart_cluster_svc()
    theirs = another_teams_cluster(pair, x)
    reconcile(pair)
    assert "409 id_conflict" in state(pair, "clusters", x)[1]
    assert pair.api("DELETE", f"{CLUSTERS}/{x}").status_code == 202

    out = retry_failed(pair)
    reconcile(pair)

    assert f"left failed {x}: not retried: cluster_svc's {x} is not the platform's object" in out, out
    assert "team_id" in out.split(f"left failed {x}")[1].splitlines()[0]
    kept = pair.cluster_row("clusters", x)
    assert kept["deleted_at"] is None and str(kept["team_id"]) == theirs["team_id"] and kept["name"] == "theirs"
    assert pair.internal("GET", f"{CLUSTERS}/{x}").status_code == 200
    sync_state, reason = state(pair, "clusters", x)
    assert sync_state == "failed" and "409 id_conflict" in reason


def taken_with_a_rule(pair, name):
    """A cluster and its rule created while cluster_svc is down, its ID then taken there by another
    team, and the reconciler run: the cluster fails with 409 id_conflict, its rule with it."""
    pair.stop_cluster_svc()
    try:
        x = pair.api("POST", CLUSTERS, json=cluster_body(name=name)).json()["id"]
        rule = pair.api("POST", f"{CLUSTERS}/{x}/firewall-rules", json=rule_body()).json()["id"]
    finally:
        pair.restart_cluster_svc()
    theirs = another_teams_cluster(pair, x)
    reconcile(pair)
    return x, rule, theirs


def test_a_retry_of_a_cluster_that_stays_failed_leaves_its_rules_failed_never_stranded_pending(pair):
    """A subtree goes back in line only with its root: the cluster is left failed (another team
    holds its ID), so its rule stays failed, saying why, instead of waiting for a parent that is
    never pushed."""
    x, rule, _ = taken_with_a_rule(pair, "mine-with-a-rule")
    assert state(pair, "firewall_rules", rule)[0] == "failed"

    out = retry_failed(pair, "--id", x)
    reconcile(pair)

    assert f"left failed {x}" in out and f"left failed {rule}: not retried: its cluster {x} is failed" in out, out
    assert state(pair, "clusters", x)[0] == "failed"
    assert state(pair, "firewall_rules", rule)[0] == "failed"  # not pending behind a parent never pushed


def test_an_id_conflict_is_closed_by_abandoning_it_with_no_one_elses_help_and_stays_closed(pair):
    """The way out of an ``id_conflict`` that needs no cooperation: ``abandon`` deletes the object
    on the platform and closes it (and its rule) without pushing; the other team's object is never
    touched, and neither repair nor the reconciler fails the row again."""
    x, rule, theirs = taken_with_a_rule(pair, "mine-abandoned")
    assert "409 id_conflict" in state(pair, "clusters", x)[1]

    closed = pair.cli("abandon", "clusters", x)
    assert closed.returncode == 0 and f"abandoned cluster {x} (2 rows closed" in closed.stdout, closed.stderr
    repair(pair)
    reconcile(pair)

    for table, object_id in (("clusters", x), ("firewall_rules", rule)):
        row = pair.platform_rows(table)[object_id]
        assert (row["sync_state"], row["deleted_at"] is not None, row["abandoned_at"] is not None) == (
            "synced", True, True), table
        assert "abandoned by" in row["sync_error"] and "id_conflict" in row["sync_error"]
    kept = pair.cluster_row("clusters", x)
    assert kept["deleted_at"] is None and str(kept["team_id"]) == theirs["team_id"] and kept["name"] == "theirs"
    assert pair.api("GET", f"{CLUSTERS}/{x}").status_code == 410  # deleted for the platform's user
    again = pair.cli("abandon", "clusters", x)
    assert again.returncode == 1 and "is synced, not failed" in again.stderr


def test_abandon_refuses_a_row_whose_copy_downstream_is_the_platforms_own(pair):
    x = created(pair, CLUSTERS, cluster_body(name="mine-not-abandoned"))
    with pair.platform_engine.begin() as conn:  # failed for a reason that is not cluster_svc's copy
        conn.exec_driver_sql("UPDATE clusters SET sync_failed_at = now(), sync_error = 'test' WHERE id = %s", (x,))

    refused = pair.cli("abandon", "clusters", x)

    assert refused.returncode == 1 and "is the platform's own object" in refused.stderr, refused.stderr
    assert state(pair, "clusters", x)[0] == "failed"
    assert pair.cluster_row("clusters", x)["deleted_at"] is None


def test_a_row_deleted_downstream_never_reads_synced_and_its_way_out_leaves_both_sides_deleted(pair):
    """Case 2: a cluster deleted with cluster_svc's internal DELETE is found by repair; a retry does
    not make it ``synced`` (nothing can re-create it); deleting it on the platform, then retrying
    it, leaves both sides agreeing it is deleted, with no stale error."""
    x = created(pair, CLUSTERS, cluster_body(name="deleted-below"))
    rule = created(pair, f"{CLUSTERS}/{x}/firewall-rules", {"cidr": "10.3.0.0/16"})
    assert pair.internal("DELETE", f"{CLUSTERS}/{x}").status_code == 204

    found, _, _ = repair(pair)
    out = retry_failed(pair)
    reconcile(pair)

    assert f"deleted_downstream cluster {x}" in found
    assert f"left failed {x}: not retried: deleted in cluster_svc while alive on the platform" in out, out
    sync_state, reason = state(pair, "clusters", x)
    assert sync_state == "failed" and "delete it on the platform" in reason
    assert pair.api("GET", f"{CLUSTERS}/{x}").json()["sync_state"] == "failed"

    assert pair.api("DELETE", f"{CLUSTERS}/{x}").status_code == 202  # the way out
    out = retry_failed(pair, "--id", x)
    reconcile(pair)

    assert "clusters: 1 failed rows put back in line" in out, out
    for table, object_id in (("clusters", x), ("firewall_rules", rule)):
        assert state(pair, table, object_id) == ("synced", None), table
        assert pair.platform_rows(table)[object_id]["deleted_at"] is not None
        assert pair.cluster_row(table, object_id)["deleted_at"] is not None
    assert repair(pair)[0] == set()


@pytest.mark.parametrize("generations", [1, -1])
def test_an_immutable_field_edited_downstream_with_the_generation_is_diverged_never_ahead_or_behind(
    pair, generations
):
    """Case 3, found by repair: region and generation edited in cluster_svc's database. Not
    ``ahead``/``behind`` (whose push would call the row synced while the region differs):
    ``diverged (region)``, failed, and a retry leaves it so."""
    x = created(pair, CLUSTERS, cluster_body(name=f"moved-region-{generations}", region="eu-west-1"))
    if generations < 0:
        pair.api("PATCH", f"{CLUSTERS}/{x}", json={"storage_gb": 200})  # generation 2 here, 1 there
    downstream(pair, "UPDATE clusters SET region = 'us-east-1', generation = generation + :n WHERE id = :id",
               id=x, n=generations)

    found, lines, _ = repair(pair)
    out = retry_failed(pair, "--reason", "diverged")
    reconcile(pair)

    assert found == {f"diverged cluster {x}"}, lines
    assert any("(region)" in line for line in lines), lines
    assert f"left failed {x}: not retried" in out and "region" in out, out
    sync_state, reason = state(pair, "clusters", x)
    assert sync_state == "failed" and "region" in reason
    assert pair.cluster_row("clusters", x)["region"] == "us-east-1"  # a person decides


def test_a_push_answered_with_another_region_is_never_confirmed(pair):
    """Case 3, on the push path: the PATCH's answer shows cluster_svc ahead with another region;
    the push that follows moves the mutable fields, but its answer still shows the other region,
    so the row fails naming it instead of reading synced."""
    x = created(pair, CLUSTERS, cluster_body(name="patched-over-a-region", region="eu-west-1"))
    downstream(pair, "UPDATE clusters SET region = 'us-east-1', generation = generation + 5 WHERE id = :id", id=x)

    pair.api("PATCH", f"{CLUSTERS}/{x}", json={"storage_gb": 300})
    reconcile(pair)

    sync_state, reason = state(pair, "clusters", x)
    assert sync_state == "failed" and "diverged" in reason and "region" in reason, reason


def test_a_rule_moved_under_another_cluster_is_found_by_repair(pair):
    """Case 4, found by repair: ancestry is compared."""
    a = created(pair, CLUSTERS, cluster_body(name="rule-was-here"))
    b = created(pair, CLUSTERS, cluster_body(name="rule-moved-here"))
    rule = created(pair, f"{CLUSTERS}/{a}/firewall-rules", {"cidr": "10.4.0.0/16"})
    downstream(pair, "UPDATE firewall_rules SET cluster_id = :b WHERE id = :id", b=b, id=rule)

    found, lines, _ = repair(pair)

    assert found == {f"diverged firewall_rule {rule}"}, lines
    assert any("(cluster_id)" in line for line in lines), lines
    sync_state, reason = state(pair, "firewall_rules", rule)
    assert sync_state == "failed" and "cluster_id" in reason


def test_a_rule_moved_under_another_cluster_is_not_deleted_by_its_old_path(pair):
    """Case 4, on the push path: the user deletes the rule's cluster; the rule's delete goes to its
    old path. cluster_svc refuses it (the rule lives elsewhere) rather than answering 410 for the
    deleted cluster, so the row fails, saying so, and the rule lives on where it is."""
    a = created(pair, CLUSTERS, cluster_body(name="old-home"))
    b = created(pair, CLUSTERS, cluster_body(name="new-home"))
    rule = created(pair, f"{CLUSTERS}/{a}/firewall-rules", {"cidr": "10.5.0.0/16"})
    downstream(pair, "UPDATE firewall_rules SET cluster_id = :b WHERE id = :id", b=b, id=rule)

    assert pair.api("DELETE", f"{CLUSTERS}/{a}").status_code in (202, 204)
    reconcile(pair)

    assert state(pair, "clusters", a) == ("synced", None)
    sync_state, reason = state(pair, "firewall_rules", rule)
    assert sync_state == "failed" and "409 id_conflict" in reason, reason
    moved = pair.cluster_row("firewall_rules", rule)
    assert moved["deleted_at"] is None and str(moved["cluster_id"]) == b


def test_a_repair_and_a_purge_run_by_hand_are_the_last_passes_the_console_shows(pair):
    repair(pair)
    purged = pair.cli("purge")
    assert purged.returncode == 0, purged.stderr

    with pair.platform_engine.connect() as conn:
        passes = {row.name: row for row in conn.exec_driver_sql("SELECT name, holder, summary FROM passes")}
    for kind in ("repair", "purge"):
        assert passes[kind].holder.endswith("(CLI)") and passes[kind].summary, kind
