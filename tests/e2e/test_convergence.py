"""Hands-free convergence with real processes and real faults: outages far past
any retry budget, recovery noticed at once, a push held past its lease, objects
lost downstream, the inline circuit breaker, and what sync-status tells."""
from __future__ import annotations

import os
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import text

from platform_svc import INLINE_POLICY
from tests.helpers import cluster_body
from tooling.faultproxy import Fault, FaultProxy
from tooling.testing import console_script, wait_for

COOL_DOWN = 5  # seconds: INLINE_BREAKER_COOL_DOWN_SECONDS's default
# A request that waited on the frozen cluster_svc took the inline push's whole budget; one that
# took less did not wait on it, however loaded the machine (a full suite's GETs take up to 0.5 s).
WAITED = INLINE_POLICY.total_timeout


def states(pair, table: str = "clusters") -> dict[str, str]:
    return {object_id: row["sync_state"] for object_id, row in pair.platform_rows(table).items()}


def create_pending(pair, count: int, prefix: str = "db") -> list[str]:
    ids = []
    for n in range(count):
        response = pair.api("POST", "/v1/clusters", json=cluster_body(name=f"{prefix}-{n}"))
        assert (response.status_code, response.json()["sync_state"]) == (201, "pending"), response.text
        ids.append(response.json()["id"])
    return ids


# Transient failures never end a row ---------------------------------------------------------


def test_an_outage_far_past_any_budget_fails_nothing_and_everything_syncs_after_it(fresh_pair):
    pair = fresh_pair  # of its own: it stops cluster_svc, and sync-status counts every row
    kept = pair.api("POST", "/v1/clusters", json=cluster_body(name="kept")).json()
    pair.stop_cluster_svc()
    created = create_pending(pair, 5)
    patched = pair.api("PATCH", f"/v1/clusters/{kept['id']}", json={"plan": "memory-8"})
    deleted = pair.api("DELETE", f"/v1/clusters/{created[0]}")
    assert (patched.status_code, deleted.status_code) == (200, 202)

    with pair.reconciler("--max-backoff", "0.2", "--concurrency", "4"):
        # More attempts per row than the old budget (it gave up after 8), all transient.
        wait_for(
            lambda: min(row["attempts"] for row in pair.platform_rows("clusters").values()) >= 10,
            timeout=60,
            what="10 attempts on every row",
        )
        rows = pair.platform_rows("clusters").values()
        assert {row["sync_state"] for row in rows} == {"pending"}
        assert all("connection failed" in row["sync_error"] for row in rows)
        status = pair.cli("sync-status")
        assert "clusters: 0 synced, 6 pending, 0 failed" in status.stdout, status.stdout

        pair.restart_cluster_svc()
        wait_for(pair.all_synced, timeout=20, what="every row synced after the recovery")

    pair.assert_downstream_matches()
    assert {row["attempts"] for row in pair.platform_rows("clusters").values()} == {0}
    downstream = pair.cluster_svc_rows("clusters")
    assert downstream[kept["id"]]["plan"] == "memory-8"
    assert downstream[created[0]]["deleted_at"] is not None


def test_recovery_after_a_long_outage_drains_within_seconds_not_when_backoffs_end(fresh_pair):
    """With the default backoff (cap 300 s). The reconciler meets the outage for
    real (its pushes fail, so it suspects an outage); the rows' backoffs are then
    set to what a half-hour outage leaves (attempts 12, next try in 4-5 minutes),
    since a test cannot wait that long. The recovery itself is real."""
    pair = fresh_pair  # of its own: it stops cluster_svc
    pair.stop_cluster_svc()
    created = create_pending(pair, 12)
    with pair.reconciler() as reconciler:
        wait_for(
            lambda: all(row["attempts"] >= 3 for row in pair.platform_rows("clusters").values()),
            timeout=60,
            what="three failed pushes of every row",
        )
        with pair.platform_engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE clusters SET attempts = 12,"
                    " next_attempt_at = now() + interval '240 seconds' + random() * interval '60 seconds'"
                )
            )
        assert set(states(pair).values()) == {"pending"}
        assert reconciler.process.poll() is None

        pair.restart_cluster_svc()
        recovered = time.monotonic()
        wait_for(pair.all_synced, timeout=30, what="every row synced after the recovery")
        drained_in = time.monotonic() - recovered

    assert drained_in < 10, f"{drained_in:.1f} s from recovery to all synced"
    assert set(pair.cluster_svc_rows("clusters")) == set(created)
    pair.assert_downstream_matches()


# The reconciler tells when cluster_svc fails and when it answers again ---------------------------


def test_a_short_freeze_of_cluster_svc_is_logged_and_so_is_its_end(fresh_pair):
    """The README's outage demo: cluster_svc frozen, a couple of creates go
    pending, cluster_svc thawed. The reconciler's pushes of those rows only
    wait (a frozen process accepts connections and answers nothing), then are
    served once it thaws; the reconciler still tells both moments."""
    pair = fresh_pair  # of its own: it freezes cluster_svc
    with pair.reconciler() as reconciler:
        with pair.frozen_cluster_svc():
            create_pending(pair, 2)
            wait_for(
                lambda: "cluster_svc does not answer" in reconciler.output(),
                timeout=30,
                what="the reconciler noticing the freeze",
            )
            assert "cluster_svc answers again" not in reconciler.output()
        wait_for(
            lambda: "cluster_svc answers again" in reconciler.output(),
            timeout=30,
            what="the reconciler noticing cluster_svc back",
        )
        wait_for(pair.all_synced, timeout=30, what="every row synced after the freeze")
        output = reconciler.output()

    assert output.count("cluster_svc does not answer") == output.count("cluster_svc answers again") == 1, output
    pair.assert_downstream_matches()


def test_a_lone_row_failing_among_healthy_ones_is_not_an_outage(fresh_pair):
    """One row's pushes fail (the proxy resets every request about it) while
    cluster_svc serves everything else: nothing about cluster_svc is logged,
    however often that row fails."""
    pair = fresh_pair  # of its own: it stops cluster_svc
    pair.stop_cluster_svc()
    unlucky, *others = create_pending(pair, 6)
    pair.restart_cluster_svc()

    with FaultProxy(pair.cluster_svc.url) as proxy:
        proxy.add_rule(Fault.RESET, object_id=unlucky, times=None)
        env = {"CLUSTER_SVC_URL": proxy.url}
        with pair.reconciler("--max-backoff", "0.5", "--batch", "1", env=env) as reconciler:
            wait_for(
                lambda: all(states(pair)[object_id] == "synced" for object_id in others),
                timeout=30,
                what="the other rows synced",
            )
            wait_for(
                lambda: pair.platform_rows("clusters")[unlucky]["attempts"] >= 6,
                timeout=60,
                what="six failed pushes of the unlucky row",
            )
            new = create_pending_or_synced(pair, 3)  # more healthy work meanwhile
            wait_for(
                lambda: all(states(pair)[object_id] == "synced" for object_id in new),
                timeout=30,
                what="the new rows synced",
            )
            proxy.clear_rules()
            wait_for(pair.all_synced, timeout=30, what="the unlucky row synced once the proxy lets it through")
            output = reconciler.output()

    assert "cluster_svc does not answer" not in output, output
    assert "cluster_svc answers again" not in output, output
    pair.assert_downstream_matches()


def create_pending_or_synced(pair, count: int) -> list[str]:
    return [
        pair.api("POST", "/v1/clusters", json=cluster_body(name=f"more-{n}")).json()["id"] for n in range(count)
    ]


# A slow push holds only its own row ----------------------------------------------------------


def test_a_push_held_past_its_lease_delays_no_other_row(fresh_pair):
    """A batch call that hangs holds its own rows only: with --batch 5, the
    unit holding the held ID waits, every other unit goes through."""
    pair = fresh_pair  # of its own: it stops cluster_svc
    pair.stop_cluster_svc()
    held_id, *rest = create_pending(pair, 21)
    pair.restart_cluster_svc()

    with FaultProxy(pair.cluster_svc.url) as proxy:
        hold = proxy.hold(method="POST", object_id=held_id)
        # --push-timeout 0.5: one push lasts at most 5 s, so a row's lease is 5 s and the lease margin.
        lease = 5 + float(pair.platform_env["RECONCILER_LEASE_MARGIN_SECONDS"])
        env = {"CLUSTER_SVC_URL": proxy.url}
        with pair.reconciler("--concurrency", "4", "--batch", "5", "--push-timeout", "0.5", env=env):
            held = set(hold.wait_held(timeout=30).object_ids)
            held_since = time.monotonic()
            others = {held_id, *rest} - held
            assert held_id in held and 0 < len(held) <= 5
            wait_for(
                lambda: all(states(pair)[object_id] == "synced" for object_id in others),
                timeout=15,
                what="the other rows synced while one push is held",
            )
            others_done_in = time.monotonic() - held_since
            # Keep it held for longer than its lease. Its call timed out and was recorded:
            # the held rows backed off, each on its own jittered delay. Mostly they go
            # down together again (the same body, which the hold keeps too); if the
            # jitter split them, they went in other calls and are synced already.
            wait_for(
                lambda: time.monotonic() - held_since > lease + 2, timeout=lease + 10, what="the hold outlasting the lease"
            )
            row = pair.platform_rows("clusters")[held_id]
            assert row["attempts"] >= 1 or row["sync_state"] == "synced", row  # not stuck behind the call
            hold.release()
            wait_for(
                lambda: all(states(pair)[object_id] == "synced" for object_id in held),
                timeout=30,
                what="the held rows synced after release",
            )

    assert others_done_in < 10, f"the other rows waited {others_done_in:.1f} s"
    assert set(pair.cluster_svc_rows("clusters")) == {held_id, *rest}
    pair.assert_downstream_matches()


# Downstream lost it: push it again -----------------------------------------------------------


def test_a_patch_of_a_cluster_lost_downstream_re_creates_it_and_ends_synced(pair):
    cluster = pair.api("POST", "/v1/clusters", json=cluster_body(name="lost")).json()
    rule = pair.api("POST", f"/v1/clusters/{cluster['id']}/firewall-rules", json={"cidr": "10.2.0.0/16"}).json()
    doomed = pair.api("POST", "/v1/clusters", json=cluster_body(name="lost-and-deleted")).json()
    assert {cluster["sync_state"], rule["sync_state"], doomed["sync_state"]} == {"synced"}
    with pair.cluster_engine.begin() as conn:  # restored from a backup that predates them (this test's objects)
        ids = {"ids": [cluster["id"], doomed["id"]]}
        conn.execute(text("DELETE FROM firewall_rules WHERE cluster_id = ANY(CAST(:ids AS uuid[]))"), ids)
        conn.execute(text("DELETE FROM clusters WHERE id = ANY(CAST(:ids AS uuid[]))"), ids)

    patched = pair.api("PATCH", f"/v1/clusters/{cluster['id']}", json={"plan": "memory-8", "name": "found"})
    rule_patched = pair.api(
        "PATCH", f"/v1/clusters/{cluster['id']}/firewall-rules/{rule['id']}", json={"description": "back"}
    )
    deleted = pair.api("DELETE", f"/v1/clusters/{doomed['id']}")

    assert (patched.status_code, patched.json()["sync_state"], patched.json()["generation"]) == (200, "synced", 2)
    assert (rule_patched.status_code, rule_patched.json()["sync_state"]) == (200, "synced")
    assert deleted.status_code == 204  # a delete answered 404 downstream is done
    downstream = pair.cluster_svc_rows("clusters")[cluster["id"]]
    assert (downstream["generation"], downstream["plan"], downstream["name"]) == (2, "memory-8", "found")
    assert str(downstream["team_id"]) == pair.account_id
    pair.assert_downstream_matches()


# The inline circuit breaker ------------------------------------------------------------------


def test_public_writes_answer_at_once_while_cluster_svc_is_frozen_and_reads_never_wait(new_pair):
    # Of its own: it freezes cluster_svc. With the default cool-down, the subject here.
    pair = new_pair(env={"INLINE_BREAKER_COOL_DOWN_SECONDS": str(COOL_DOWN)})
    with pair.frozen_cluster_svc():

        def create(n):
            response, elapsed = timed_create(pair, n)
            assert (response.status_code, response.json()["sync_state"]) == (201, "pending"), response.text
            return elapsed

        def get_list(_):
            started = time.monotonic()
            assert pair.api("GET", "/v1/clusters?limit=5").status_code == 200
            return time.monotonic() - started

        # Until every worker's breaker has seen its failures, creates wait on the
        # frozen service (the push's budget each); then a whole round answers without waiting.
        with ThreadPoolExecutor(8) as pool:
            for round_ in range(8):
                if max(pool.map(create, range(round_ * 8, round_ * 8 + 8))) < WAITED:
                    break
            else:
                pytest.fail("the breaker never opened")

            started = time.monotonic()
            create_times = list(pool.map(create, range(100, 140)))
            get_times = list(pool.map(get_list, range(40)))
            elapsed = time.monotonic() - started

    # One request per worker and cool-down may probe the frozen service.
    probes = 2 * (int(elapsed / COOL_DOWN) + 1)
    assert statistics.median(create_times) < 0.2, create_times
    assert sum(t >= WAITED for t in create_times) <= probes, create_times
    assert max(get_times) < WAITED, get_times
    assert pair.cli("reconcile", "--once").returncode == 0
    pair.assert_downstream_matches()


def test_the_first_public_writes_while_cluster_svc_is_frozen_answer_within_the_inline_budget(fresh_pair):
    """Before any worker's breaker has opened, each create waits on the frozen
    service for the inline push's whole budget: about a second, not the ~3.3 s
    of three read timeouts and two pauses. The bound, 2.5 s, leaves 1.5 s for a
    machine busy with the rest of the suite (a run on a slow day answered in up to
    2.8 s when these were also the workers' first requests, opening their pooled
    connections: the creates before the freeze open them)."""
    pair = fresh_pair  # of its own: it freezes cluster_svc and opens the breakers
    with ThreadPoolExecutor(8) as pool:  # both workers' connections open, their breakers closed
        assert all(response.status_code == 201 for response, _ in pool.map(lambda n: timed_create(pair, n), range(8)))
    with pair.frozen_cluster_svc():
        # 2 workers, 3 failures each to open their breakers: 8 at once, then 4 more, reach them all.
        with ThreadPoolExecutor(8) as pool:
            answered = list(pool.map(lambda n: timed_create(pair, n), range(8, 16)))
        answered += [timed_create(pair, n) for n in range(16, 20)]

    for response, elapsed in answered:
        assert (response.status_code, response.json()["sync_state"]) == (201, "pending"), response.text
        assert elapsed < 2.5, [round(t, 2) for _, t in answered]
    assert sum(elapsed > 0.8 for _, elapsed in answered) >= 2  # the frozen service was waited for, once per worker at least
    assert pair.cli("reconcile", "--once").returncode == 0
    pair.assert_downstream_matches()


# What sync-status tells ----------------------------------------------------------------------


def test_sync_status_shows_stalled_rows_their_age_attempts_and_last_error(fresh_pair):
    pair = fresh_pair  # of its own: it stops cluster_svc, and sync-status counts every row
    pair.stop_cluster_svc()
    stalled, fresh, failed = create_pending(pair, 3)
    with pair.platform_engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE clusters SET updated_at = now() - interval '42 minutes', attempts = 17,"
                " sync_error = 'POST /v1/clusters: connection failed' WHERE id = :id"
            ),
            {"id": stalled},
        )
        conn.execute(
            text("UPDATE clusters SET sync_failed_at = now(), sync_error = 'POST /v1/clusters: 422' WHERE id = :id"),
            {"id": failed},
        )

    status = pair.cli("sync-status")

    assert status.returncode == 0, status.stderr
    # Pending leaves the stalled row out, as the console and the sync_rows gauge count it (docs/operations.md).
    assert "clusters: 0 synced, 1 pending, 1 failed, 1 stalled, 0 abandoned; oldest pending 42m" in status.stdout, \
        status.stdout
    [line] = [line for line in status.stdout.splitlines() if stalled in line]
    assert line.strip().startswith(f"stalled {stalled} pending 42m")
    assert "17 attempts" in line and "connection failed" in line
    assert fresh not in status.stdout
    assert any(failed in line and "failed" in line and "422" in line for line in status.stdout.splitlines())

    # A threshold of a day: nothing is stalled.
    relaxed = pair.cli("sync-status", env={"SYNC_STALLED_AFTER_SECONDS": "86400"})
    assert "clusters: 0 synced, 2 pending, 1 failed, 0 stalled" in relaxed.stdout and stalled not in relaxed.stdout


@pytest.mark.parametrize("reader", ["closed", "head"])
def test_sync_status_retry_failed_commits_and_exits_0_when_the_pipe_closes(fresh_pair, reader):
    pair = fresh_pair  # of its own: it stops cluster_svc, and --retry-failed retries every failed row
    pair.stop_cluster_svc()
    failed = create_pending(pair, 1)[0]
    with pair.platform_engine.begin() as conn:
        conn.execute(
            text("UPDATE clusters SET sync_failed_at = now(), sync_error = 'POST /v1/clusters: 422' WHERE id = :id"),
            {"id": failed},
        )
    pair.restart_cluster_svc()  # a retry re-checks each row there first
    argv = [console_script("platform-svc"), "sync-status", "--retry-failed"]
    env = {**os.environ, **pair.platform_env}

    if reader == "closed":  # nobody reads at all: every write meets a closed pipe
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            result = subprocess.run(argv, env=env, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
        finally:
            os.close(write_end)
        returncode, stderr = result.returncode, result.stderr
    else:  # as an operator types it
        result = subprocess.run(
            ["bash", "-c", 'set -o pipefail; "$0" sync-status --retry-failed | head -1', argv[0]],
            env=env, capture_output=True, text=True, timeout=60,
        )
        returncode, stderr = result.returncode, result.stderr
        assert result.stdout == "clusters: 1 failed rows put back in line\n"

    assert returncode == 0, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr
    row = pair.platform_rows("clusters")[failed]
    assert (row["sync_state"], row["attempts"], row["sync_failed_at"]) == ("pending", 0, None)


def timed_create(pair, n: int):
    """A public create while cluster_svc is frozen: its answer, and how long it took."""
    started = time.monotonic()
    response = pair.api("POST", "/v1/clusters", json=cluster_body(name=f"frozen-{n}"))
    return response, time.monotonic() - started
