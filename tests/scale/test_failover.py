"""The production shape (tooling/ha.py) under real faults: replicas killed behind HAProxy,
the leading reconciler killed, PgBouncer, HAProxy and etcd killed (supervisord starts each
again), the platform's Patroni primary lost (synchronous: nothing acknowledged may be lost;
the node rejoins as a standby), cluster_svc's asynchronous primary lost after its standby fell
behind (repair brings back what the failover lost).

One topology for the module, its tests in this order; each has an account of its own.
Each prints its figures (the table in docs/scale-out.md comes from these lines).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
import requests

from bench.load import Load
from tooling.ha import PATRONI_TTL, Topology, wait_for
from tooling.pair import RATE_LIMITS, TIMINGS
from tooling.patroni import alive
from tooling.supervision import Supervised
from tooling.testing import _data_root

LEASE = 3.0  # --leader-lease of the reconcilers here (15 s by default)
FIGURES: list[str] = []


@pytest.fixture(scope="module")
def ha(request):
    workdir = Path(tempfile.mkdtemp(prefix="ha", dir=_data_root()))
    failed = request.session.testsfailed
    try:
        with Topology(workdir, env={**TIMINGS, **RATE_LIMITS}, reconciler_args=("--leader-lease", str(LEASE))) as topology:
            yield topology
    finally:
        kept = request.session.testsfailed != failed or bool(os.environ.get("SCALE_KEEP_LOGS"))
        if not kept:
            shutil.rmtree(workdir, ignore_errors=True)
        # Shown whatever the output capture and verbosity (as capsys.disabled() does).
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        with request.config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
            reporter.write_line("")
            for line in [*FIGURES, *([f"scale: the topology's logs are kept in {workdir}"] if kept else [])]:
                reporter.write_line(line)


def figure(line: str) -> None:
    FIGURES.append(f"scale: {line}")


def account(ha: Topology, name: str):
    pair = ha.pair()
    api = pair.use_account(pair.account(name, cli=False))
    return pair, api


def not_503_5xx(statuses: Counter) -> dict:
    return {status: n for status, n in statuses.items() if status is not None and status >= 500 and status != 503}


def wait_synced(pair, timeout: float = 120) -> float:
    """Seconds until every row of the pair's account is synced (the reconcilers push what is pending)."""
    started = time.monotonic()
    wait_for(pair.all_synced, timeout=timeout, what="every row synced", poll=0.25)
    return time.monotonic() - started


class FromAddress(requests.adapters.HTTPAdapter):
    """A browser on a loopback address of its own (each caller a source of its own)."""

    def __init__(self, address: str) -> None:
        self.address = address
        super().__init__()

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, source_address=(self.address, 0), **kwargs)


def console_login(base_url: str, address: str, operator: str, secret: str, headers: dict | None = None) -> int:
    """A browser at ``address`` logging in to the console at ``base_url``: the login's status."""
    with requests.Session() as browser:
        browser.mount("http://", FromAddress(address))
        form = browser.get(f"{base_url}/console/login", headers=headers, timeout=10)
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)
        answer = browser.post(f"{base_url}/console/login", data={"operator": operator, "secret": secret, "csrf_token": csrf},
                              headers=headers, allow_redirects=False, timeout=10)
        return answer.status_code


def test_behind_haproxy_each_caller_is_its_own_source_and_a_header_sent_past_it_is_not_believed(ha):
    """HAProxy names the client (X-Forwarded-For) from the one address the replicas trust: a guesser
    locks out only itself, never the operator behind the same balancer; and a client that calls a
    replica directly, naming someone else, is counted as itself."""
    pair = ha.pair()
    operator = json.loads(pair.cli("create-operator", "scale-behind-haproxy", "--json").stdout)
    name, secret = operator["operator"], operator["secret"]
    guesses = [console_login(ha.public_url, "127.0.0.11", name, f"guess-{n}") for n in range(6)]
    assert guesses == [401] * 5 + [429]
    assert console_login(ha.public_url, "127.0.0.12", name, secret) == 302  # through the same HAProxy

    replica = f"http://127.0.0.1:{ha.platform_ports[0]}"
    forged = [console_login(replica, "127.0.0.13", name, f"forged-{n}", headers={"X-Forwarded-For": "127.0.0.12"})
              for n in range(6)]
    assert forged == [401] * 5 + [429]  # counted under 127.0.0.13, its own address...
    assert console_login(ha.public_url, "127.0.0.12", name, secret) == 302  # ...never the address it named


def test_a_killed_replica_of_each_service_is_routed_around_and_restarted(ha):
    pair, api = account(ha, "scale replicas")
    victims = [ha.platform_svcs[0], ha.cluster_svcs[0]]
    with Load(ha.public_url, api.api_key) as load:
        load.wait_acknowledged(20)
        processes = [pid for server in victims for pid in [server.pid, *server.worker_pids()]]
        killed_at = time.monotonic()
        masters = [server.kill() for server in victims]
        wait_for(lambda: not any(alive(pid) for pid in processes), timeout=10, what="the killed replicas gone")
        gone_at = time.monotonic()
        load.wait_acknowledged(40, since=killed_at)
        for server, master in zip(victims, masters):
            server.wait_restarted(master, timeout=10)  # supervisord starts it again
            server.wait_healthy(10)
        ha.wait_balanced(10)  # both replicas of each, the restarted ones back
        back = time.monotonic() - killed_at
        load.wait_acknowledged(20, since=time.monotonic())
    statuses = load.statuses()
    after = load.statuses(killed_at)
    figure(f"replica kill: both killed replicas restarted and routed to again {back:.1f} s after the kill; "
           f"{sum(statuses.values())} creates sent, {len(load.acknowledged)} acknowledged, "
           f"{after[503]} answered 503 after the kill, {statuses[None]} unanswered (in flight on the killed replica), "
           f"other 5xx: {not_503_5xx(statuses)}")
    assert back < 10
    assert not_503_5xx(statuses) == {}
    # A request a replica was serving while it died has its connection closed unanswered
    # (HAProxy does so for a request that was not the first on its connection, for the
    # client to retry); every other one is answered.
    assert load.unanswered(except_in_flight=(killed_at, gone_at)) == [], f"killed {killed_at:.3f}-{gone_at:.3f}"
    assert load.refused == {}
    wait_synced(pair)
    pair.assert_downstream_matches()


def back_in_service(ha: Topology, program: str) -> None:
    """Until the restarted ``program`` does its job again (not only runs)."""
    if program.startswith("pgbouncer-"):
        ha.bouncers[program.removeprefix("pgbouncer-")].wait_ready(10)
    elif program == "haproxy":
        ha.wait_balanced(10)
        for database in ha.databases.values():
            ha.wait_routed(database, timeout=10)
    else:
        ha.wait_etcd(10)


@pytest.mark.parametrize("program", ["pgbouncer-platform_svc", "pgbouncer-cluster_svc", "haproxy", "etcd"])
def test_a_killed_pooler_proxy_or_store_is_restarted_within_10_s_and_creates_go_on(ha, program):
    pair, api = account(ha, f"scale kill {program}")
    victim = Supervised(ha.supervisor, program)
    with Load(ha.public_url, api.api_key, clients=2) as load:
        load.wait_acknowledged(10)
        killed_at = time.monotonic()
        pid = victim.kill()
        victim.wait_restarted(pid, timeout=10)
        back_in_service(ha, program)
        back = time.monotonic() - killed_at
        load.wait_acknowledged(10, since=time.monotonic(), timeout=60)
    after = load.statuses(killed_at)
    figure(f"{program} kill: back in service {back:.1f} s after the kill; {after[503]} answered 503, "
           f"{after[None]} unanswered after it; {len(load.acknowledged)} acknowledged")
    assert back < 10
    assert not_503_5xx(load.statuses()) == {}
    assert load.refused == {}
    wait_synced(pair)
    pair.assert_downstream_matches()
    for database in ha.databases.values():
        database.wait_healthy(timeout=60)


def test_a_killed_leading_reconciler_is_restarted_and_one_leader_leads_within_the_lease(ha):
    [leader] = wait_for(lambda: (found := ha.leaders()) and len(found) == 1 and found, timeout=3 * LEASE,
                        what="exactly one reconciler leading")
    victim = ha.reconcilers[leader]
    killed_at = time.monotonic()
    pid = victim.kill()
    [successor] = wait_for(lambda: ha.leaders(), timeout=3 * LEASE, what="a reconciler leading again", poll=0.05)
    took = time.monotonic() - killed_at
    victim.wait_restarted(pid, timeout=10)  # supervisord starts it again: it does not lead until the lease is free
    ha.wait_reconciler(leader, timeout=10)
    back = time.monotonic() - killed_at
    figure(f"reconciler kill: reconciler-{successor} led {took:.1f} s after reconciler-{leader}'s leader was killed "
           f"(lease {LEASE:g} s, renewed every {LEASE / 3:g} s); the killed one was back {back:.1f} s after the kill")
    # Taken once the dead leader's lease expired: at most a lease after its last renewal,
    # plus the successor's wait until its next attempt (a third of the lease).
    assert took <= LEASE + LEASE / 3 + 1
    assert back < 10
    # The restarted one does not take a lease another holds: the successor alone goes on leading.
    assert wait_for(lambda: ha.leaders() == [successor], timeout=3 * LEASE, what="still one leader after the restart")


def test_losing_the_platform_primary_loses_no_acknowledged_write_and_the_node_rejoins(ha):
    """The primary's machine hangs (Patroni and PostgreSQL stopped: supervisord sees nothing die),
    the synchronous standby takes over, then the machine is reset (kill -9): supervisord starts its
    Patroni again, which rejoins as the standby (rewound if need be)."""
    cluster = ha.databases["platform_svc"]
    cluster.wait_healthy()  # a synchronous standby streams: only it may take over
    pair, api = account(ha, "scale platform failover")
    with Load(ha.public_url, api.api_key, clients=4) as load:
        load.wait_acknowledged(30)
        old = cluster.leader()
        killed_at = time.monotonic()
        old.freeze()
        new = ha.wait_routed(cluster, timeout=PATRONI_TTL + 60)
        routed = time.monotonic() - killed_at
        load.wait_acknowledged(30, since=killed_at, timeout=PATRONI_TTL + 60)
        reset_at = time.monotonic()
        old.kill(everything=True)
        cluster.wait_healthy(timeout=120)
        rejoined = time.monotonic() - reset_at
    after = load.statuses(killed_at)
    early_503 = sum(1 for a in load.attempts if killed_at <= a.sent <= killed_at + PATRONI_TTL + 10 and a.status == 503)
    rows = pair.platform_rows("clusters")
    per_key = Counter(row["idempotency_key"] for row in rows.values())
    lost = {key: cluster_id for key, cluster_id in load.acknowledged.items() if cluster_id not in rows}
    lag = wait_synced(pair)
    figure(f"platform primary lost (synchronous): {old.name} -> {new.name}; HAProxy on the new primary after "
           f"{routed:.1f} s; first 2xx to a create sent after the loss {load.first_success_after(killed_at):.1f} s "
           f"after it, the longest create took {load.longest(since=killed_at):.1f} s; {after[503]} answered 503 "
           f"({early_503} in the first TTL + 10 s), {after[None]} unanswered; {len(load.acknowledged)} acknowledged, "
           f"{len(lost)} lost; the old node rejoined as a standby {rejoined:.1f} s after its reset; "
           f"every row synced {lag:.1f} s after the load stopped")
    assert new is not old
    assert lost == {}
    assert set(per_key) == set(load.acknowledged) and set(per_key.values()) == {1}, "one row per key"
    assert {row["idempotency_key"]: cluster_id for cluster_id, row in rows.items()} == load.acknowledged
    assert not_503_5xx(load.statuses()) == {}
    assert load.refused == {}
    assert rejoined < 60
    # The services wait for the new primary (DATABASE_WAIT_SECONDS): only a request in flight when
    # the old one's sessions were cut (at most one per client) may have been answered 503.
    assert early_503 <= load.clients
    pair.assert_downstream_matches()


def test_repair_restores_what_the_asynchronous_failover_of_cluster_svc_lost(ha):
    cluster = ha.databases["cluster_svc"]
    cluster.wait_healthy()
    pair, api = account(ha, "scale cluster_svc failover")
    body = {"region": "eu-west-1", "postgres_version": 16, "plan": "standard-2", "storage_gb": 100}
    for i in range(5):
        api.create("/v1/clusters", {**body, "name": f"kept-{i}"})
    old = cluster.leader()
    walsenders = old.processes("walsender")
    assert walsenders, "the primary streams to its standby"
    for pid in walsenders:
        os.kill(pid, signal.SIGSTOP)  # the standby hears nothing more from here on
    for i in range(20):
        api.create("/v1/clusters", {**body, "name": f"late-{i}"})
    wait_synced(pair)  # cluster_svc acknowledged every one: on the primary only
    killed_at = time.monotonic()
    old.freeze()  # its machine hangs: the standby, behind, takes over...
    new = ha.wait_routed(cluster, timeout=PATRONI_TTL + 60)
    routed = time.monotonic() - killed_at
    old.kill(everything=True)  # ...and is reset: its Patroni, started again, rejoins as a standby (rewound)
    comparison = pair.compare(account_id=pair.account_id)
    lost = [problem for problem in comparison.problems if problem.what == "missing from cluster_svc"]
    started = time.monotonic()
    repaired = ha.cli("repair")
    repair_took = time.monotonic() - started
    # repair requeues what cluster_svc lost; the running reconcilers push it down again
    assert repaired.returncode == 0, repaired.stderr
    pushed_after = wait_synced(pair)
    figure(f"cluster_svc primary kill (asynchronous, standby held back): {old.name} -> {new.name} after "
           f"{routed:.1f} s; {len(lost)} of 25 objects lost downstream; `platform-svc repair` took "
           f"{repair_took:.1f} s: {repaired.stdout.strip().splitlines()[-1] if repaired.stdout.strip() else ''};"
           f" all synced {pushed_after:.1f} s after it")
    assert new is not old
    assert lost, f"the failover lost nothing: {comparison.describe()}"
    pair.assert_downstream_matches()
    whole = pair.compare()
    assert whole.exact, whole.describe()
    cluster.wait_healthy(timeout=120)
