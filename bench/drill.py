"""``make drill``: every kill and failover of the production shape, under keyed load, in one table.

It starts ``make run-ha``'s topology (:class:`tooling.ha.Topology`, every process under
supervisord) in a folder of its own, and runs two kinds of callers through the whole drill:

- keyed callers (:class:`tooling.load.Load`) that send a 503 or a lost answer again with the
  same Idempotency-Key; every attempt is recorded, so each 503 and each attempt left
  unanswered is what a caller *without* retries would have seen as an error;
- a program using the project's client (``PlatformClient``, retrying for 60 s): its errors.

Then, one at a time, each fault: kill -9 of a service replica, the leading reconciler, each
PgBouncer, HAProxy, etcd, each Patroni leader (Patroni and its postmaster), the platform
primary's machine lost, its PostgreSQL hung for 20 s (SIGSTOP: a gray failure, the longest
create is what it cost a caller), and a planned ``patronictl switchover``. After each, it waits until the process is back (supervisord starts
it again) and the topology whole, and until creates are acknowledged again. A row per fault:
seconds until back, answers to the attempts sent meanwhile, 503s to callers without retries in
the first TTL + 10 s, the client's errors, the longest create. At the end: creates
acknowledged, lost (acknowledged, no row) and duplicated (a key with two rows), and whether
cluster_svc matches the platform once every row is synced. docs/scale-out.md has its figures.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.load import Load
from tooling.ha import PATRONI, PATRONI_TTL, Topology, wait_for
from tooling.pair import RATE_LIMITS
from tooling.supervision import Supervised

SETTLE = 10  # creates acknowledged after a fault before the next one
STALL = 20  # seconds the platform's primary hangs (SIGSTOP of its PostgreSQL): its requests answer within 5 s
LEASE = 3.0  # the reconcilers' --leader-lease here


@dataclass
class Row:
    fault: str
    back: float  # seconds from the fault until the process (or the cluster) was back
    statuses: Counter
    early_503: int  # 503 answers to attempts sent in the first TTL + 10 s
    client_errors: int
    longest: float

    def line(self) -> str:
        answers = ", ".join(f"{'none' if status is None else status}: {n}"
                            for status, n in sorted(self.statuses.items(), key=lambda item: str(item[0])))
        return (f"{self.fault:<38} {self.back:>7.1f} {self.early_503:>8} {self.client_errors:>7} "
                f"{self.longest:>8.1f}   {answers}")


HEADER = f"{'fault':<38} {'back s':>7} {'503 early':>8} {'client':>7} {'longest':>8}   answers to attempts sent from the fault on"


class ClientCaller:
    """A program creating through the project's client (retrying for 60 s), counting what it raised."""

    def __init__(self, url: str, api_key: str) -> None:
        from idempotent_pair_client.platform import PlatformClient

        self.client = PlatformClient(url, api_key=api_key, timeout=10, retry_for=60)
        self.created: list[str] = []
        self.errors: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ClientCaller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)
        self.client.close()

    def _run(self) -> None:
        body = {"name": "drill", "region": "eu-west-1", "postgres_version": 16, "plan": "standard-2", "storage_gb": 100}
        while not self._stop.is_set():
            try:
                self.created.append(str(self.client.create("/v1/clusters", body)["id"]))
            except Exception as exc:  # noqa: BLE001 - each is a row's figure
                self.errors.append((time.monotonic(), f"{type(exc).__name__}: {exc}"))
            time.sleep(0.2)

    def errors_since(self, moment: float) -> int:
        return sum(1 for when, _ in self.errors if when >= moment)


def faults(ha: Topology) -> list[tuple[str, Callable[[], None]]]:
    """(what, do it and return once it is back) for each fault, in order."""

    def replica(server) -> Callable[[], None]:
        def run() -> None:
            server.wait_restarted(server.kill())
            server.wait_healthy(30)
            ha.wait_balanced(30)
        return run

    def program(name: str, ready: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            supervised = Supervised(ha.supervisor, name)
            supervised.wait_restarted(supervised.kill())
            ready()
        return run

    def leading_reconciler() -> None:
        leader = ha.leaders()[0]
        victim = ha.reconcilers[leader]
        victim.wait_restarted(victim.kill())
        ha.wait_reconciler(leader)
        wait_for(lambda: len(ha.leaders()) == 1, timeout=3 * LEASE + 10, what="one reconciler leading")

    def restarted(cluster, node, postmaster: int | None) -> None:
        """Until ``node`` runs a new PostgreSQL and the cluster is whole again (a primary, a streaming
        standby: the synchronous one on platform) and routed."""
        wait_for(lambda: node.postmaster_pid() not in (None, postmaster), timeout=PATRONI_TTL + 60,
                 what=f"{node.name}'s PostgreSQL started again")
        wait_for(lambda: node.status()["state"] == "running", timeout=PATRONI_TTL + 60, what=f"{node.name} running")
        cluster.wait_healthy(timeout=PATRONI_TTL + 120)
        ha.wait_routed(cluster, timeout=60)

    def leader_kill(name: str) -> Callable[[], None]:
        def run() -> None:
            cluster = ha.databases[name]
            node = cluster.leader()
            postmaster = node.postmaster_pid()
            node.kill()  # Patroni and its postmaster; supervisord starts Patroni again at once
            restarted(cluster, node, postmaster)
        return run

    def machine_lost(name: str) -> Callable[[], None]:
        def run() -> None:
            cluster = ha.databases[name]
            node = cluster.leader()
            postmaster = node.postmaster_pid()
            node.freeze()  # the machine hangs: the standby takes over once the leader key expires...
            wait_for(lambda: cluster.leader() is not node, timeout=PATRONI_TTL + 60, what="a failover")
            ha.wait_routed(cluster, timeout=60)
            node.kill(everything=True)  # ...then it is reset, and rejoins as a standby
            restarted(cluster, node, postmaster)
        return run

    def database_stalled(name: str) -> Callable[[], None]:
        def run() -> None:
            cluster = ha.databases[name]
            node = cluster.leader()
            stopped = node.postgres_pids()
            for pid in stopped:  # PostgreSQL hangs (a stalled disk), its Patroni and the machine do not
                os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(STALL)
            finally:
                for pid in stopped:
                    os.kill(pid, signal.SIGCONT)
            cluster.wait_healthy(timeout=PATRONI_TTL + 120)  # Patroni may have failed over meanwhile
            ha.wait_routed(cluster, timeout=60)
        return run

    def switchover() -> None:
        cluster = ha.databases["platform_svc"]
        cluster.wait_healthy(timeout=120)
        leader = cluster.leader()
        [candidate] = [node for node in cluster.nodes if node is not leader]
        patronictl = PATRONI.with_name("patronictl")
        subprocess.run([str(patronictl), "-c", str(leader.dir / "patroni.yml"), "switchover", "--leader", leader.name,
                        "--candidate", candidate.name, "--force"], check=True, capture_output=True, timeout=120)
        wait_for(lambda: cluster.leader() is candidate, timeout=60, what="the switchover")
        cluster.wait_healthy(timeout=120)
        ha.wait_routed(cluster, timeout=60)

    def routed() -> None:
        ha.wait_balanced(30)
        for database in ha.databases.values():
            ha.wait_routed(database, timeout=30)

    return [
        ("kill -9 platform_svc replica", replica(ha.platform_svcs[0])),
        ("kill -9 cluster_svc replica", replica(ha.cluster_svcs[0])),
        ("kill -9 the leading reconciler", leading_reconciler),
        ("kill -9 PgBouncer (platform_svc)", program("pgbouncer-platform_svc", lambda: ha.bouncers["platform_svc"].wait_ready(30))),
        ("kill -9 PgBouncer (cluster_svc)", program("pgbouncer-cluster_svc", lambda: ha.bouncers["cluster_svc"].wait_ready(30))),
        ("kill -9 HAProxy", program("haproxy", routed)),
        ("kill -9 etcd", program("etcd", lambda: ha.wait_etcd(30))),
        ("kill -9 platform_svc Patroni leader", leader_kill("platform_svc")),
        ("kill -9 cluster_svc Patroni leader", leader_kill("cluster_svc")),
        ("platform_svc primary's machine lost", machine_lost("platform_svc")),
        (f"platform_svc primary stalled {STALL} s", database_stalled("platform_svc")),
        ("patronictl switchover (platform_svc)", switchover),
    ]


def drill(ha: Topology, out: Callable[[str], None]) -> bool:
    """Run every fault under load; print the table. True when nothing was lost or duplicated."""
    pair = ha.pair()
    api = pair.use_account(pair.account("drill", cli=False))
    rows: list[Row] = []
    with Load(ha.public_url, api.api_key, clients=4) as load, ClientCaller(ha.public_url, api.api_key) as caller:
        load.wait_acknowledged(SETTLE)
        out(HEADER)
        for what, fault in faults(ha):
            started = time.monotonic()
            fault()
            back = time.monotonic() - started
            load.wait_acknowledged(SETTLE, since=time.monotonic(), timeout=120)
            early = sum(1 for a in list(load.attempts)
                        if started <= a.sent <= started + PATRONI_TTL + 10 and a.status == 503)
            row = Row(what, back, load.statuses(started), early, caller.errors_since(started), load.longest(since=started))
            rows.append(row)
            out(row.line())
    wait_for(pair.all_synced, timeout=300, what="every row synced", poll=0.5)
    stored = pair.platform_rows("clusters")
    keys = Counter(row["idempotency_key"] for row in stored.values() if row["idempotency_key"])
    acknowledged = {*load.acknowledged.values(), *caller.created}
    lost = acknowledged - set(stored)
    duplicated = sum(1 for n in keys.values() if n > 1)
    comparison = pair.compare()
    out("")
    out(f"creates acknowledged: {len(acknowledged)} ({len(load.acknowledged)} keyed callers, {len(caller.created)} client); "
        f"lost: {len(lost)}; duplicated keys: {duplicated}; client errors: {len(caller.errors)}; "
        f"refused (not 503): {len(load.refused)}; cluster_svc matches: {'yes' if comparison.exact else comparison.describe()}")
    for _, error in caller.errors[:5]:
        out(f"  client error: {error}")
    return not lost and not duplicated and comparison.exact


def main() -> int:
    if not PATRONI.exists():
        sys.exit(f"{PATRONI} is missing: `make drill` installs it (or set HA_PATRONI).")
    workdir = Path(tempfile.mkdtemp(prefix="drill-"))
    report = Path.cwd() / "drill.txt"
    lines: list[str] = []

    def out(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    started = time.strftime("%Y-%m-%d %H:%M")
    print(f"Starting the production shape in {workdir} ...", flush=True)
    try:
        # Clients faster than an account's default limit: the drill is about faults, not fairness.
        with Topology(workdir, env=RATE_LIMITS, reconciler_args=("--leader-lease", str(LEASE))) as ha:
            out(f"make drill, {started}, Patroni TTL {PATRONI_TTL} s, services waiting up to "
                f"{ha.service_env()['DATABASE_WAIT_SECONDS']} s for their database")
            ok = drill(ha, out)
    except BaseException:
        print(f"the topology's logs are kept in {workdir}", flush=True)
        raise
    report.write_text("\n".join(lines) + "\n")
    print(f"(also in {report})")
    shutil.rmtree(workdir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
