"""The UUIDv7 horizon on real processes, with a horizon of seconds instead of days.

Both services and the CLI as a user runs them (tooling.pair's Pair): a pair
of the test's own where ``ID_HORIZON_SECONDS`` is shortened (``new_pair``),
``cluster-svc purge --every`` running where the test says, and the pair's
fault proxy between platform_svc and cluster_svc where a request must arrive
late. Waiting for an ID to expire is waiting for a time the ID itself names,
never for a race to go one way.
"""
from __future__ import annotations

import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import uuid6
from prometheus_client.parser import text_string_to_metric_families

from shared.horizon import Horizon, uuid7_millis
from tests.helpers import cluster_body
from tooling.testing import uuid7_ago, wait_for


def horizon_pair(new_pair, seconds: float, *, proxy: bool = False):
    """A pair of the test's own (it reconfigures the horizon) whose services both run with
    ``ID_HORIZON_SECONDS=seconds``; with ``proxy``, platform_svc reaches cluster_svc through
    the fault proxy (``pair.proxy``)."""
    return new_pair(env={"ID_HORIZON_SECONDS": str(seconds)}, proxy=proxy)


def until_purgeable(horizon: Horizon, object_id) -> None:
    """Wait for the time at which ``object_id`` is past the horizon and the grace (the ID names it)."""
    due = uuid7_millis(object_id) / 1000 + horizon.seconds + horizon.grace + 0.05
    time.sleep(max(0.0, due - time.time()))  # real time: the services' own clocks must pass it


def gauge(pair, name: str, resource: str = "cluster") -> float:
    metrics = pair.internal("GET", "/metrics").text
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == name and sample.labels == {"resource": resource}:
                return sample.value
    raise AssertionError(f"{name} not served")


def internal_cluster(**overrides):
    return {**cluster_body(), "id": str(uuid6.uuid7()), "team_id": str(uuid.uuid4()), **overrides}


# -- a late create of a purged ID ------------------------------------------------------------


def test_a_late_create_of_a_purged_id_held_in_the_proxy_answers_410_and_leaves_no_row(new_pair):
    horizon = Horizon(6)  # longer than the inline push takes to give up on a held request
    pair = horizon_pair(new_pair, horizon.seconds, proxy=True)
    proxy = pair.proxy
    hold = proxy.hold(method="POST", path="/v1/clusters")
    created = pair.api("POST", "/v1/clusters", json=cluster_body(name="late"))
    cluster_id = created.json()["id"]
    assert (created.status_code, created.json()["sync_state"]) == (201, "pending")
    assert hold.wait_held(timeout=30).object_id == cluster_id

    assert pair.api("DELETE", f"/v1/clusters/{cluster_id}").status_code == 204  # a tombstone downstream
    assert pair.cluster_svc_rows("clusters")[cluster_id]["deleted_at"] is not None
    until_purgeable(horizon, cluster_id)
    purged = pair.cluster_cli("purge")
    assert purged.returncode == 0 and purged.stdout.startswith("purge: removed 1 clusters"), purged.stdout
    assert cluster_id not in pair.cluster_svc_rows("clusters")

    hold.release()
    released = hold.wait_done(timeout=30)

    assert released and [exchange.status for exchange in released] == [410] * len(released)
    assert {exchange.answer()["code"] for exchange in released} == {"id_expired"}
    assert cluster_id not in pair.cluster_svc_rows("clusters")  # no row: nothing came back
    platform = pair.platform_rows("clusters")[cluster_id]
    assert platform["deleted_at"] is not None and platform["sync_state"] == "synced"
    assert pair.cli("purge").stdout.startswith("purge: removed 1 clusters")
    assert cluster_id not in pair.platform_rows("clusters")
    response = pair.api("GET", f"/v1/clusters/{cluster_id}")
    assert (response.status_code, response.json()["code"]) == (410, "id_expired")


# -- the bound -------------------------------------------------------------------------------

CYCLES = 200
EVERY = 0.2


def test_tombstones_stay_within_those_deleted_inside_the_horizon_over_n_cycles(new_pair):
    """N create/delete cycles with a 1 s horizon and purge every 0.2 s. At every sample, the
    tombstones gauge never exceeds the deletes of IDs born within horizon + grace + interval
    (+ 0.5 s for a pass and a scrape); afterwards the table empties.

    The cycles go on past twice that window (N at least): the first purgeable ID comes one
    window after the first delete, so cycles that all fit in it (200 of them took 1.2 s on a
    quiet machine, against a 1.8 s window) would leave every tombstone standing rightly, and
    show nothing of the bound."""
    horizon = Horizon(1)
    window = horizon.seconds + horizon.grace + EVERY + 0.5
    pair = horizon_pair(new_pair, horizon.seconds)
    before = gauge(pair, "tombstones")
    born: list[float] = []
    samples: list[tuple[float, float, int]] = []  # (tombstones, allowed, deletes so far)
    with pair.purging(EVERY):
        started = time.monotonic()
        n = 0
        while n < CYCLES or time.monotonic() - started < 2 * window:
            body = internal_cluster(name=f"cycle-{n}")
            assert pair.internal("POST", "/v1/clusters", json=body).status_code == 201
            assert pair.internal("DELETE", f"/v1/clusters/{body['id']}").status_code == 204
            born.append(uuid7_millis(body["id"]) / 1000)
            if n % 10 == 9:
                since = time.time() - window
                tombstones = gauge(pair, "tombstones")
                samples.append((tombstones, sum(1 for b in born if b >= since), len(born)))
            n += 1
        cycling = time.monotonic() - started
        after_cycles = gauge(pair, "tombstones")
        wait_for(lambda: gauge(pair, "tombstones") == 0, timeout=window + 10, what="every tombstone purged")
    peak = max(samples)
    print(
        f"\nbound: {len(born)} create/delete cycles in {cycling:.1f} s, horizon {horizon.seconds:g} s, purge every "
        f"{EVERY} s: tombstones before {before:g}, peak {peak[0]:g} (allowed {peak[1]}), right after the "
        f"cycles {after_cycles:g}, settled 0; never more than the deletes of the last {window:.1f} s"
    )
    assert before == 0
    for tombstones, allowed, deleted in samples:
        assert tombstones <= allowed, (tombstones, allowed, deleted)
    assert samples[-1][0] < samples[-1][2]  # the bound held below the unbounded count (every delete so far)
    assert gauge(pair, "tombstone_oldest_seconds") == 0


# -- purge racing writes ---------------------------------------------------------------------


def test_purge_racing_creates_of_fresh_ids_and_deletes_of_old_ones_loses_nothing_and_revives_nothing(new_pair):
    """Whatever the order: every fresh create stays, every old object ends deleted and then
    purged, and no create of an old ID after its delete is ever accepted."""
    horizon = Horizon(2)
    pair = horizon_pair(new_pair, horizon.seconds)
    old = []
    for n in range(40):
        old.append(internal_cluster(name=f"old-{n}"))  # its ID made now, as it is sent
        assert pair.internal("POST", "/v1/clusters", json=old[-1]).status_code == 201
    until_purgeable(horizon, old[-1]["id"])  # every one is old now, and still alive
    fresh: list[dict] = []

    def delete_then_recreate(body):
        deleted = pair.internal("DELETE", f"/v1/clusters/{body['id']}").status_code
        again = pair.internal("POST", "/v1/clusters", json=body)
        return deleted, again.status_code, again.json()["code"]

    def create(n):
        body = internal_cluster(name=f"fresh-{n}")  # its ID made as it is sent
        fresh.append(body)
        return pair.internal("POST", "/v1/clusters", json=body).status_code

    with pair.purging(0.02), ThreadPoolExecutor(8) as pool:
        olds = pool.map(delete_then_recreate, old)
        news = pool.map(create, range(40))
        old_answers, new_answers = list(olds), list(news)

    assert {deleted for deleted, _, _ in old_answers} == {204}
    assert Counter(status for _, status, _ in old_answers) == Counter({410: len(old)})  # gone or id_expired
    assert set(new_answers) == {201}
    rows = pair.cluster_svc_rows("clusters")
    assert all(rows[body["id"]]["deleted_at"] is None for body in fresh)
    assert all(body["id"] not in rows or rows[body["id"]]["deleted_at"] is not None for body in old)
    final = pair.cluster_cli("purge")
    assert final.returncode == 0
    rows = pair.cluster_svc_rows("clusters")
    assert not any(body["id"] in rows for body in old)  # every old tombstone purged
    assert all(rows[body["id"]]["deleted_at"] is None for body in fresh)


# -- IDs from the future ---------------------------------------------------------------------


def test_ids_from_the_future_answer_422_and_store_nothing(pair):
    future = internal_cluster(id=str(uuid7_ago(-600)))
    created = pair.internal("POST", "/v1/clusters", json=future)
    assert created.status_code == 422 and "id" in created.json()["errors"]["json"]
    assert pair.internal("DELETE", f"/v1/clusters/{future['id']}").status_code == 422
    batch = pair.internal("POST", "/v1/clusters/batch", json={"items": [future]}).json()["results"]
    assert [item["status"] for item in batch] == [422]
    assert future["id"] not in pair.cluster_svc_rows("clusters")
    assert pair.internal("POST", "/v1/clusters", json=internal_cluster(id=str(uuid7_ago(-60)))).status_code == 201


# -- repair after purges ---------------------------------------------------------------------


def test_repair_after_purges_on_both_sides_finds_nothing(new_pair):
    horizon = Horizon(2)
    pair = horizon_pair(new_pair, horizon.seconds)
    made = []
    for n in range(3):
        cluster = pair.api("POST", "/v1/clusters", json=cluster_body(name=f"db-{n}")).json()
        rule = pair.api("POST", f"/v1/clusters/{cluster['id']}/firewall-rules", json={"cidr": "10.0.0.0/8"}).json()
        assert cluster["sync_state"] == rule["sync_state"] == "synced"
        made.append((cluster["id"], rule["id"]))
    assert pair.api("DELETE", f"/v1/clusters/{made[0][0]}").status_code == 204
    assert pair.api("DELETE", f"/v1/clusters/{made[1][0]}/firewall-rules/{made[1][1]}").status_code == 204
    assert pair.cli("reconcile", "--once").returncode == 0  # the deleted cluster's rule, confirmed
    assert pair.all_synced()
    until_purgeable(horizon, made[-1][1])

    downstream = pair.cluster_cli("purge")
    assert downstream.stdout.startswith("purge: removed 1 clusters, 2 firewall_rules"), downstream.stdout
    first = pair.cli("repair")
    assert made[0][0] in pair.platform_rows("clusters") and made[0][0] not in pair.cluster_svc_rows("clusters")
    purged_downstream_first = pair.compare()
    # The last cluster (and its rule) is deleted only now: the platform purges it before cluster_svc does.
    assert pair.api("DELETE", f"/v1/clusters/{made[2][0]}").status_code == 204
    assert pair.cli("reconcile", "--once").returncode == 0  # its rule's delete, confirmed
    with pair.reconciler("--purge-interval", "0.3", "--repair-interval", "0") as reconciler:
        wait_for(lambda: not {made[0][0], made[2][0]} & pair.platform_rows("clusters").keys(),
                 what="the leader's purge")
        output = reconciler.output()
    second = pair.cli("repair")
    purged_upstream_first = pair.compare()

    for result in (first, second):
        assert result.returncode == 0, result.stderr
        [summary] = result.stdout.splitlines()  # no finding line at all
        assert summary.startswith("repair: 0 missing, 0 behind, 0 ahead, 0 diverged, 0 undeleted, 0 deleted_downstream, 0 orphan")
    assert "this reconciler runs the passes" in output and "purge: removed 2 clusters, 3 firewall_rules" in output
    # Whichever side purged first, the two databases agree (tooling.compare knows the horizon, as repair does).
    assert purged_downstream_first.exact, purged_downstream_first.describe()
    assert purged_upstream_first.exact, purged_upstream_first.describe()
    assert made[2][0] in pair.cluster_svc_rows("clusters") and made[2][0] not in pair.platform_rows("clusters")
