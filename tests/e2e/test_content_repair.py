"""Repair compares what the objects say, not only their generations (issue 19), on real processes.

cluster_svc's database is edited behind the platform's back (as a hand edit,
or a restore of the platform's own database from an older backup, would
leave it): fields changed at the same generation, generations raised above
the platform's, a rule tombstone lost under a deleted cluster, a cluster
whose create fails for good with rules waiting on it. Each case ends with
both sides compared field by field, for the objects it made.

One pair serves the module (starting one is most of a test's time); each
test works on objects of its own and compares those.
"""
from __future__ import annotations

import random
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import text

from tests.e2e.metrics_helpers import scrape, value
from tests.helpers import cluster_body
from tooling.compare import compared
from tooling.pair import TOKEN, start_pair

CLUSTERS = "/v1/clusters"


@pytest.fixture(scope="module")
def pair(pg_server_url, tmp_path_factory):
    """A pair of the module's own, with one account: its tests run repair and the reconciler
    over every row, and one stops cluster_svc."""
    pair = start_pair(pg_server_url, tmp_path_factory.mktemp("content_repair"))
    try:
        pair.use_account(pair.account("content repair"))
        yield pair
    finally:
        pair.stop()


def assert_level(pair, clusters=(), rules=()):
    """These objects are synced on the platform and cluster_svc holds exactly their fields."""
    fields = {kind.table: kind.fields for kind in compared()}
    for table, ids in (("clusters", clusters), ("firewall_rules", rules)):
        platform, theirs = pair.platform_rows(table), pair.cluster_svc_rows(table)
        for object_id in ids:
            mine, there = platform[object_id], theirs[object_id]
            assert mine["sync_state"] == "synced", (table, object_id, mine["sync_error"])
            assert (mine["deleted_at"] is None) == (there["deleted_at"] is None), (table, object_id)
            if mine["deleted_at"] is None:
                assert {t: str(there[t]) for _, t in fields[table]} == {
                    t: str(mine[o]) for o, t in fields[table]
                }, (table, object_id)


def created(pair, path, body):
    response = pair.api("POST", path, json=body)
    assert (response.status_code, response.json()["sync_state"]) == (201, "synced"), response.text
    return response.json()["id"]


def downstream(pair, sql, **params):
    """Change cluster_svc's database behind the platform's back."""
    with pair.cluster_engine.begin() as conn:
        assert conn.execute(text(sql), params).rowcount >= 1, sql


def upstream(pair, sql, **params):
    with pair.platform_engine.begin() as conn:
        assert conn.execute(text(sql), params).rowcount >= 1, sql


def repair(pair, *args):
    """``platform-svc repair``: its finding lines (without details) and its summary."""
    result = pair.cli("repair", *args)
    assert result.returncode == 0, result.stderr
    *lines, summary = result.stdout.strip().splitlines()
    assert summary.startswith("repair: "), result.stdout
    return {line.split(" (")[0] for line in lines}, lines, summary


def reconcile(pair, *, failed=False):
    result = pair.cli("reconcile", "--once")
    assert result.returncode == (1 if failed else 0), result.stdout + result.stderr
    return result


def repairs_counted(pair, finding):
    return value(scrape(pair.platform_svc.url, TOKEN), "sync_repairs_total", finding=finding)


def test_a_patch_of_an_object_cluster_svc_holds_ahead_is_not_confirmed_and_the_platform_moves_past_it(pair):
    cluster_id = created(pair, CLUSTERS, cluster_body(name="ahead-one"))
    counted = repairs_counted(pair, "ahead")
    # As after a restore of platform's database: cluster_svc holds a newer generation with other fields.
    downstream(pair, "UPDATE clusters SET generation = generation + 5, name = 'hand-edit' WHERE id = :id", id=cluster_id)

    answer = pair.api("PATCH", f"{CLUSTERS}/{cluster_id}", json={"storage_gb": 300})

    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["sync_state"] == "pending", body  # never "synced": cluster_svc did not take it
    assert body["generation"] == 7 and "ahead" in body["sync_error"], body  # moved past cluster_svc's 6
    row = pair.platform_rows("clusters")[cluster_id]
    assert row["synced_generation"] <= 6 < row["generation"]
    assert repairs_counted(pair, "ahead") == counted + 1

    reconcile(pair)

    assert_level(pair, [cluster_id])  # the platform's fields, name included, at generation 7
    there = pair.cluster_svc_rows("clusters")[cluster_id]
    assert (there["name"], there["storage_gb"], there["generation"]) == ("ahead-one", 300, 7)
    later = pair.api("PATCH", f"{CLUSTERS}/{cluster_id}", json={"plan": "memory-8"}).json()
    assert (later["sync_state"], later["generation"]) == ("synced", 8)  # later PATCHes apply again
    assert pair.cluster_svc_rows("clusters")[cluster_id]["plan"] == "memory-8"


def test_repair_finds_rows_cluster_svc_holds_ahead_and_brings_both_sides_level(pair):
    stale_synced = created(pair, CLUSTERS, cluster_body(name="recorded-synced-but-stale"))
    same_fields = created(pair, CLUSTERS, cluster_body(name="only-generation-ahead"))
    rule = created(pair, f"{CLUSTERS}/{same_fields}/firewall-rules", {"cidr": "10.9.0.0/16", "description": "mine"})
    # The state: a PATCH recorded synced_generation=6 beside generation=2, while cluster_svc kept its name.
    upstream(pair, "UPDATE clusters SET generation = 2, synced_generation = 6, storage_gb = 333 WHERE id = :id",
             id=stale_synced)
    downstream(pair, "UPDATE clusters SET generation = 6, name = 'theirs' WHERE id = :id", id=stale_synced)
    downstream(pair, "UPDATE clusters SET generation = 4 WHERE id = :id", id=same_fields)
    downstream(pair, "UPDATE firewall_rules SET generation = 3, description = 'theirs' WHERE id = :id", id=rule)
    before = repairs_counted(pair, "ahead")  # platform_svc's own count

    found, lines, summary = repair(pair)

    assert found == {f"ahead cluster {stale_synced}", f"ahead cluster {same_fields}", f"ahead firewall_rule {rule}"}
    assert f"ahead cluster {stale_synced} (generation 6 there, 2 here)" in lines
    assert "0 missing, 0 behind, 3 ahead, 0 diverged," in summary
    reconcile(pair)

    assert_level(pair, [stale_synced, same_fields], [rule])
    rows = pair.platform_rows("clusters")
    assert (rows[stale_synced]["generation"], rows[same_fields]["generation"]) == (7, 5)
    assert pair.cluster_svc_rows("clusters")[stale_synced]["storage_gb"] == 333
    assert pair.cluster_svc_rows("firewall_rules")[rule]["description"] == "mine"
    assert repair(pair)[0] == set()
    assert repairs_counted(pair, "ahead") == before  # repair counts in its own process, not platform_svc's


def test_a_lost_rule_tombstone_under_a_deleted_cluster_is_found_and_sent_again(pair):
    cluster_id = created(pair, CLUSTERS, cluster_body(name="deleted-with-rules"))
    rules = [created(pair, f"{CLUSTERS}/{cluster_id}/firewall-rules", {"cidr": f"10.{n}.0.0/16"}) for n in range(2)]
    assert pair.api("DELETE", f"{CLUSTERS}/{cluster_id}").status_code == 204
    reconcile(pair)  # the rules' deletes, confirmed
    assert_level(pair, [cluster_id], rules)
    downstream(pair, "DELETE FROM firewall_rules WHERE id = :id", id=rules[0])

    found, _, _ = repair(pair)

    assert found == {f"missing firewall_rule {rules[0]}"}
    reconcile(pair)
    tombstones = pair.cluster_svc_rows("firewall_rules")
    assert tombstones[rules[0]]["deleted_at"] is not None and tombstones[rules[1]]["deleted_at"] is not None
    assert repair(pair)[0] == set()  # found there now: nothing left to re-send
    assert_level(pair, [cluster_id], rules)


def test_rules_under_a_cluster_whose_create_failed_fail_at_once_naming_it_and_are_retried_with_it(pair):
    pair.stop_cluster_svc()
    pending = pair.api("POST", CLUSTERS, json=cluster_body(name="squatted", region="eu-west-1")).json()
    cluster_id = pending["id"]
    waiting = pair.api("POST", f"{CLUSTERS}/{cluster_id}/firewall-rules", json={"cidr": "10.1.0.0/16"}).json()
    assert (pending["sync_state"], waiting["sync_state"]) == ("pending", "pending")
    squatter = (
        "INSERT INTO clusters (id, team_id, name, region, postgres_version, plan, storage_gb)"
        " VALUES (:id, :team, 'squatter', 'us-east-1', 16, 'hobby-0', 10)"
    )
    downstream(pair, squatter, id=cluster_id, team=str(uuid.uuid4()))
    pair.restart_cluster_svc()

    reconcile(pair, failed=True)

    reason = f"parent_failed: {cluster_id} id_conflict"
    cluster = pair.api("GET", f"{CLUSTERS}/{cluster_id}").json()
    assert cluster["sync_state"] == "failed" and "409 id_conflict" in cluster["sync_error"]
    rule = pair.api("GET", f"{CLUSTERS}/{cluster_id}/firewall-rules/{waiting['id']}").json()
    assert (rule["sync_state"], rule["sync_error"]) == ("failed", reason)
    late = pair.api("POST", f"{CLUSTERS}/{cluster_id}/firewall-rules", json={"cidr": "10.2.0.0/16"})
    assert late.status_code == 201
    assert (late.json()["sync_state"], late.json()["sync_error"]) == ("failed", reason)
    status = pair.cli("sync-status")
    assert f"failed {waiting['id']} at " in status.stdout and reason in status.stdout, status.stdout
    assert ", 0 pending, 2 failed, 0 stalled" in status.stdout.split("firewall rules:")[1], status.stdout

    downstream(pair, "DELETE FROM clusters WHERE id = :id", id=cluster_id)  # a person removed the squatter
    retried = pair.cli("sync-status", "--retry-failed")
    assert "clusters: 1 failed rows put back in line" in retried.stdout, retried.stdout
    assert "firewall rules: 2 failed rows put back in line" in retried.stdout, retried.stdout
    reconcile(pair)

    rules = [row["id"] for row in pair.platform_rows("firewall_rules").values() if str(row["cluster_id"]) == cluster_id]
    assert_level(pair, [cluster_id], [str(rule_id) for rule_id in rules])
    assert len(rules) == 2


def test_hand_edits_and_rows_ahead_under_concurrent_patches_end_equal_field_by_field(pair):
    """PATCHes keep coming while cluster_svc's rows are edited at their generation and pushed ahead
    of the platform, with a reconciler and repair passes running; then the edits stop, and after a
    repair pass and the reconciler both sides hold the platform's fields, field by field."""
    rng = random.Random(19)
    clusters = [created(pair, CLUSTERS, cluster_body(name=f"busy-{n}")) for n in range(8)]
    rules = {c: created(pair, f"{CLUSTERS}/{c}/firewall-rules", {"cidr": "10.7.0.0/16"}) for c in clusters[:4]}
    stop = threading.Event()
    edits = {"same generation": 0, "ahead": 0}

    def patches(cluster_id, seed):
        mine = random.Random(seed)
        for n in range(6):
            body = {"plan": mine.choice(["hobby-0", "standard-2", "standard-4"]), "storage_gb": mine.randint(10, 4096)}
            assert pair.api("PATCH", f"{CLUSTERS}/{cluster_id}", json=body).status_code == 200
            if cluster_id in rules:
                path = f"{CLUSTERS}/{cluster_id}/firewall-rules/{rules[cluster_id]}"
                assert pair.api("PATCH", path, json={"description": f"patch {n}"}).status_code == 200

    def vandal():
        while not stop.is_set():
            cluster_id = rng.choice(clusters)
            if rng.random() < 0.5:
                sql, kind = "UPDATE clusters SET plan = 'memory-8', name = 'vandal' WHERE id = :id", "same generation"
            else:
                sql, kind = "UPDATE clusters SET generation = generation + 3, storage_gb = 11 WHERE id = :id", "ahead"
            downstream(pair, sql, id=cluster_id)
            if cluster_id in rules:
                downstream(pair, "UPDATE firewall_rules SET description = 'vandal' WHERE id = :id", id=rules[cluster_id])
            edits[kind] += 1
            stop.wait(0.05)

    def repairs():
        while not stop.is_set():
            assert pair.cli("repair").returncode == 0

    with pair.reconciler("--repair-interval", "0"), ThreadPoolExecutor(len(clusters) + 2) as pool:
        background = [pool.submit(vandal), pool.submit(repairs)]
        for future in [pool.submit(patches, c, n) for n, c in enumerate(clusters)]:
            future.result()
        stop.set()
        for future in background:
            future.result()
    assert edits["same generation"] > 0 and edits["ahead"] > 0, edits

    def pending():
        rows = {**pair.platform_rows("clusters"), **pair.platform_rows("firewall_rules")}
        return [i for i in (*clusters, *rules.values()) if rows[i]["sync_state"] == "pending"]

    # A repair pass puts each drifted row back in line once; a push answered ahead (the vandal's
    # generation) moves the platform past it and leaves the row due again, for the next drain
    # (a drain pushes what was due when it started). At most three rounds of both.
    for _ in range(3):
        found, _, _ = repair(pair)
        reconcile(pair)
        if not found and not pending():
            break
    assert not found, found
    assert_level(pair, clusters, rules.values())


def test_repair_finds_hand_edits_at_the_same_generation_and_pushes_the_platforms_fields(pair):
    """Last of the module: it leaves a row failed for a person."""
    plan = created(pair, CLUSTERS, cluster_body(name="plan-edited"))
    storage = created(pair, CLUSTERS, cluster_body(name="storage-edited"))
    region = created(pair, CLUSTERS, cluster_body(name="region-edited", region="eu-west-1"))
    rule = created(pair, f"{CLUSTERS}/{plan}/firewall-rules", {"cidr": "2001:db8::/48", "description": "office"})
    untouched = created(pair, CLUSTERS, cluster_body(name="untouched"))
    downstream(pair, "UPDATE clusters SET plan = 'memory-8' WHERE id = :id", id=plan)
    downstream(pair, "UPDATE clusters SET storage_gb = 4096, name = 'renamed' WHERE id = :id", id=storage)
    downstream(pair, "UPDATE clusters SET region = 'us-west-2' WHERE id = :id", id=region)
    downstream(pair, "UPDATE firewall_rules SET description = 'vandal' WHERE id = :id", id=rule)

    found, lines, summary = repair(pair)

    assert found == {
        f"diverged cluster {plan}", f"diverged cluster {storage}", f"diverged cluster {region}",
        f"diverged firewall_rule {rule}",
    }
    assert f"diverged cluster {storage} (name, storage_gb)" in lines
    assert f"diverged cluster {region} (region)" in lines
    assert "0 missing, 0 behind, 0 ahead, 4 diverged," in summary
    reconcile(pair, failed=True)  # the region: no update can change it

    platform, theirs = pair.platform_rows("clusters"), pair.cluster_svc_rows("clusters")
    for cluster_id in (plan, storage, untouched):
        mine = platform[cluster_id]
        assert mine["sync_state"] == "synced"
        assert {f: theirs[cluster_id][f] for f in ("name", "plan", "storage_gb", "region", "generation")} == {
            f: mine[f] for f in ("name", "plan", "storage_gb", "region", "generation")
        }
    assert platform[plan]["generation"] == 2 and platform[untouched]["generation"] == 1
    assert pair.cluster_svc_rows("firewall_rules")[rule]["description"] == "office"
    failed = pair.api("GET", f"{CLUSTERS}/{region}").json()
    assert failed["sync_state"] == "failed" and "region" in failed["sync_error"], failed
    assert repair(pair)[0] == set()  # the failed row waits for a person; nothing else is left
