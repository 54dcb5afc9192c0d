"""Drift repair, end to end: cluster_svc's database loses, rolls back and
revives rows behind the platform's back (edited directly, as a restore from an
old backup or a manual edit would), then ``platform-svc repair`` and the
reconciler bring it back to exactly what the platform holds."""
from __future__ import annotations

import os
import subprocess
import uuid

from sqlalchemy import text

from platform_svc.models import RESOURCES
from platform_svc.operations.repair import read_page, requeue
from shared.db import Database
from tests.helpers import cluster_body
from tooling.testing import console_script, wait_for

CLUSTER = RESOURCES["cluster"]


def created(pair, path, body):
    response = pair.api("POST", path, json=body)
    assert (response.status_code, response.json()["sync_state"]) == (201, "synced"), response.text
    return response.json()["id"]


def changed(pair, method, path, body=None):
    response = pair.api(method, path, json=body)
    assert response.status_code in (200, 204), response.text
    if response.status_code == 200:
        assert response.json()["sync_state"] == "synced"


def downstream(pair, sql, **params):
    """Change cluster_svc's database behind the platform's back."""
    with pair.cluster_engine.begin() as conn:
        assert conn.execute(text(sql), params).rowcount >= 1, sql


def snapshot(engine):
    """Every row of both tables as text: equal snapshots mean nothing changed at all."""
    with engine.connect() as conn:
        return {
            table: conn.execute(text(f"SELECT t::text FROM {table} AS t ORDER BY id")).scalars().all()
            for table in ("clusters", "firewall_rules")
        }


def assert_restored(pair, *, failed=(), unknown=()):
    """cluster_svc holds exactly what the platform says, but for rows marked failed and objects it does not know."""
    comparison = pair.compare(account_id=pair.account_id)
    left = [problem for problem in comparison.problems if problem.object_id not in {*failed, *unknown}]
    assert left == [], "\n".join(map(str, left))
    for table in ("clusters", "firewall_rules"):  # nothing else is there that the platform did not ask for
        assert set(pair.cluster_svc_rows(table)) - set(pair.platform_rows(table)) <= set(unknown), table


def make_drift(pair):
    """Objects synced through the public API, then drift of every kind in cluster_svc's database.

    Returns ``(expected finding lines, the cluster deleted downstream, the IDs unknown to the platform)``.
    """
    clusters = "/v1/clusters"
    removed = created(pair, clusters, cluster_body(name="removed"))
    removed_rule = created(pair, f"{clusters}/{removed}/firewall-rules", {"cidr": "10.1.0.0/16"})
    kept = created(pair, clusters, cluster_body(name="kept"))
    lost_rule = created(pair, f"{clusters}/{kept}/firewall-rules", {"cidr": "10.2.0.0/16"})
    rolled_rule = created(pair, f"{clusters}/{kept}/firewall-rules", {"cidr": "10.3.0.0/16", "description": "v1"})
    changed(pair, "PATCH", f"{clusters}/{kept}/firewall-rules/{rolled_rule}", {"description": "v2"})
    deleted_rule = created(pair, f"{clusters}/{kept}/firewall-rules", {"cidr": "10.4.0.0/16"})
    changed(pair, "DELETE", f"{clusters}/{kept}/firewall-rules/{deleted_rule}")
    rolled = created(pair, clusters, cluster_body(name="rolled", plan="hobby-0"))
    changed(pair, "PATCH", f"{clusters}/{rolled}", {"plan": "memory-8", "storage_gb": 500})
    changed(pair, "PATCH", f"{clusters}/{rolled}", {"name": "rolled-twice"})
    revived = created(pair, clusters, cluster_body(name="revived"))
    changed(pair, "DELETE", f"{clusters}/{revived}")
    tombstone_lost = created(pair, clusters, cluster_body(name="tombstone-lost"))
    changed(pair, "DELETE", f"{clusters}/{tombstone_lost}")
    gone_there = created(pair, clusters, cluster_body(name="gone-there"))
    untouched = created(pair, clusters, cluster_body(name="untouched"))
    created(pair, f"{clusters}/{untouched}/firewall-rules", {"cidr": "10.5.0.0/16"})
    pair.assert_downstream_matches()

    downstream(pair, "DELETE FROM firewall_rules WHERE cluster_id = :id", id=removed)
    downstream(pair, "DELETE FROM clusters WHERE id = :id", id=removed)
    downstream(pair, "DELETE FROM firewall_rules WHERE id = :id", id=lost_rule)
    downstream(pair, "UPDATE firewall_rules SET generation = 1, description = 'v1' WHERE id = :id", id=rolled_rule)
    downstream(pair, "DELETE FROM firewall_rules WHERE id = :id", id=deleted_rule)  # its tombstone
    downstream(
        pair,
        "UPDATE clusters SET generation = 1, plan = 'hobby-0', storage_gb = 100, name = 'rolled' WHERE id = :id",
        id=rolled,
    )
    downstream(pair, "UPDATE clusters SET deleted_at = NULL WHERE id = :id", id=revived)
    downstream(pair, "DELETE FROM clusters WHERE id = :id", id=tombstone_lost)
    downstream(pair, "UPDATE clusters SET deleted_at = now() WHERE id = :id", id=gone_there)
    orphan = str(uuid.uuid4())
    insert = (
        "INSERT INTO clusters (id, team_id, name, region, postgres_version, plan, storage_gb)"
        " VALUES (:id, :team_id, 'stray', 'eu-west-1', 16, 'hobby-0', 10)"
    )
    downstream(pair, insert, id=orphan, team_id=pair.account_id)
    others = [str(uuid.uuid4()) for _ in range(5)]  # another team's, interleaved by ID: none of our business
    for other in others:
        downstream(pair, insert, id=other, team_id=str(uuid.uuid4()))

    expected = {
        f"missing cluster {removed}",
        f"missing firewall_rule {removed_rule}",
        f"missing firewall_rule {lost_rule}",
        f"behind firewall_rule {rolled_rule}",
        f"missing firewall_rule {deleted_rule}",
        f"behind cluster {rolled}",
        f"undeleted cluster {revived}",
        f"missing cluster {tombstone_lost}",
        f"deleted_downstream cluster {gone_there}",
        f"orphan cluster {orphan}",
    }
    return expected, gone_there, {orphan, *others}


def findings(result):
    assert result.returncode == 0, result.stderr
    *lines, summary = result.stdout.strip().splitlines()
    assert summary.startswith("repair: "), result.stdout
    return set(lines), summary


def test_repair_puts_back_what_cluster_svc_lost_and_the_reconciler_restores_it_exactly(fresh_pair):
    pair = fresh_pair  # of its own: repair goes over every object, its summary counts them all
    expected, gone_there, unknown = make_drift(pair)
    [orphan] = [line.split()[-1] for line in expected if line.startswith("orphan")]
    platform_before, cluster_before = snapshot(pair.platform_engine), snapshot(pair.cluster_engine)

    dry = pair.cli("repair", "--dry-run", "--page-size", "2")

    assert findings(dry)[0] == expected
    assert (snapshot(pair.platform_engine), snapshot(pair.cluster_engine)) == (platform_before, cluster_before)
    assert "dry run" in findings(dry)[1]

    real = pair.cli("repair", "--page-size", "2")

    lines, summary = findings(real)
    assert lines == expected
    assert summary.startswith("repair: 5 missing, 2 behind, 0 ahead, 0 diverged, 1 undeleted, 1 deleted_downstream, 1 orphan;"), summary
    assert "compared 12 objects (7 clusters, 5 firewall_rules)" in summary, summary
    assert snapshot(pair.cluster_engine) == cluster_before  # repair itself never writes to cluster_svc
    reconciled = pair.cli("reconcile", "--once")
    assert reconciled.returncode == 1, reconciled.stderr  # the one row deleted downstream is failed
    assert "1 row is failed; see `platform-svc sync-status`." in reconciled.stderr

    assert_restored(pair, failed={gone_there}, unknown=unknown)
    failed = pair.api("GET", f"/v1/clusters/{gone_there}").json()
    assert failed["sync_state"] == "failed"
    assert "deleted in cluster_svc" in failed["sync_error"]
    stray = pair.cluster_svc_rows("clusters")[orphan]
    assert (stray["name"], stray["deleted_at"], stray["generation"]) == ("stray", None, 1)  # left alone
    again = findings(pair.cli("repair"))
    assert again[0] == {f"orphan cluster {orphan}"}  # nothing else is left to repair


def test_a_requeue_yields_to_a_change_made_since_the_row_was_read(pair):
    cluster_id = created(pair, "/v1/clusters", cluster_body(name="raced"))
    database = Database(pair.platform_db_url, pool_size=1)
    try:
        with database.begin() as db_session:
            just_before = uuid.UUID(int=uuid.UUID(cluster_id).int - 1)  # the pair holds other tests' rows too
            [row] = read_page(db_session=db_session, resource=CLUSTER, after=just_before, limit=1)
        changed(pair, "PATCH", f"/v1/clusters/{cluster_id}", {"storage_gb": 300})  # pushed and synced again
        before = pair.platform_rows("clusters")[cluster_id]

        with database.begin() as db_session:
            applied = requeue(
                db_session=db_session, resource=CLUSTER, row=row, finding="missing", theirs=None, dry_run=False
            )

        assert not applied
        assert pair.platform_rows("clusters")[cluster_id] == before
    finally:
        database.dispose()


def test_the_reconciler_repairs_drift_periodically_without_an_operator(fresh_pair):
    pair = fresh_pair  # of its own: the pass goes over every object, its summary counts them all
    clusters = [created(pair, "/v1/clusters", cluster_body(name=f"db-{n}")) for n in range(3)]
    rule = created(pair, f"/v1/clusters/{clusters[0]}/firewall-rules", {"cidr": "10.8.0.0/16"})
    changed(pair, "PATCH", f"/v1/clusters/{clusters[1]}", {"plan": "memory-8"})
    downstream(pair, "DELETE FROM firewall_rules WHERE id = :id", id=rule)
    downstream(pair, "DELETE FROM clusters WHERE id = :id", id=clusters[0])
    downstream(pair, "UPDATE clusters SET generation = 1, plan = 'standard-2' WHERE id = :id", id=clusters[1])

    with pair.reconciler("--repair-interval", "0.5") as reconciler:
        wait_for(
            lambda: clusters[0] in pair.cluster_svc_rows("clusters")
            and rule in pair.cluster_svc_rows("firewall_rules")
            and pair.cluster_svc_rows("clusters")[clusters[1]]["generation"] == 2,
            timeout=30,
            what="the periodic repair restoring cluster_svc's rows",
        )
        wait_for(pair.all_synced, timeout=30, what="every row synced after the repair")
        output = reconciler.output()

    pair.assert_downstream_matches()
    assert f"repair: missing cluster {clusters[0]}" in output
    assert f"repair: behind cluster {clusters[1]}" in output
    assert "repair: 2 missing, 1 behind" in output


def passes(reconciler) -> int:
    """The periodic repair passes a reconciler finished so far (each ends with its summary line)."""
    return reconciler.output().count("; compared ")


def test_of_several_reconcilers_one_runs_the_periodic_repair_and_another_takes_over_when_it_crashes(pair):
    clusters = [created(pair, "/v1/clusters", cluster_body(name=f"db-{n}")) for n in range(2)]

    lead = ("--repair-interval", "0.3", "--leader-lease", "2")  # a crashed leader's lease runs out within 2 s
    with pair.reconciler(*lead) as first, pair.reconciler(*lead) as second:
        wait_for(lambda: "this reconciler runs the passes" in first.output() + second.output(), what="a leader")
        leader, other = (first, second) if "this reconciler runs the passes" in first.output() else (second, first)
        wait_for(lambda: "another reconciler runs the passes" in other.output(), what="the other one to defer")
        done = passes(leader)
        wait_for(lambda: passes(leader) >= done + 3, what="three more passes by the leader")
        assert passes(other) == 0  # it tried every interval, and left the passes to the leader

        leader.kill()
        downstream(pair, "DELETE FROM clusters WHERE id = :id", id=clusters[0])
        wait_for(lambda: clusters[0] in pair.cluster_svc_rows("clusters"), what="the other one repairing")
        wait_for(pair.all_synced, what="every row synced after the repair")
        taken_over = other.output()

    assert "this reconciler runs the passes" in taken_over
    assert f"repair: missing cluster {clusters[0]}" in taken_over
    pair.assert_downstream_matches()


def test_repair_output_cut_short_still_repairs_everything(fresh_pair):
    pair = fresh_pair  # of its own: repair goes over every object, its first line is the first finding of all
    lost = [created(pair, "/v1/clusters", cluster_body(name=f"lost-{n}")) for n in range(6)]
    for cluster_id in lost:
        downstream(pair, "DELETE FROM clusters WHERE id = :id", id=cluster_id)

    with subprocess.Popen(
        [console_script("platform-svc"), "repair", "--page-size", "1"],
        env={**os.environ, **pair.platform_env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as repair:
        first = repair.stdout.readline()  # as `platform-svc repair | head -1` would
        repair.stdout.close()
        stderr = repair.stderr.read()
        repair.wait(timeout=60)

    assert first.startswith("missing cluster ")
    assert repair.returncode == 0, stderr
    assert "Traceback" not in stderr and "Broken pipe" not in stderr, stderr
    rows = pair.platform_rows("clusters")
    assert {rows[cluster_id]["synced_generation"] for cluster_id in lost} == {0}  # every one put back in line


def test_repair_without_cluster_svc_says_so_in_one_line_and_changes_nothing(fresh_pair):
    pair = fresh_pair  # of its own: it stops cluster_svc
    created(pair, "/v1/clusters", cluster_body(name="kept"))
    before = snapshot(pair.platform_engine)
    pair.stop_cluster_svc()

    result = pair.cli("repair")

    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "cluster_svc" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert snapshot(pair.platform_engine) == before
