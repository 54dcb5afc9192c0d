"""The production shape on one machine, for ``make run-ha``, ``make drill`` and tests/scale.

What runs (every process on 127.0.0.1, in a work folder of its own), each one a program of
one supervisord (:mod:`tooling.supervision`) that starts it again whenever it dies:

- etcd (Debian ``etcd-server``), the store Patroni elects leaders in;
- two Patroni clusters of two PostgreSQL 15 nodes each (Debian's binaries, :mod:`tooling.patroni`):
  ``platform`` with ``synchronous_mode`` (a commit waits for the standby, and only
  that standby may take over: what was acknowledged survives the loss of the
  primary), ``cluster`` asynchronous (a failover may lose its last commits;
  ``platform-svc repair`` puts them back);
- HAProxy: one database frontend per Patroni cluster, sending connections to
  the node whose REST API answers ``GET /primary`` with 200, and one HTTP
  frontend per service, balancing its replicas;
- PgBouncer in transaction mode between the services and HAProxy's database
  frontends (``tooling.pgbouncer``);
- 2 replicas each of cluster_svc and platform_svc (``serve``), platform_svc
  reaching cluster_svc through HAProxy;
- 2 reconcilers (``platform-svc reconcile``), one of which leads the periodic passes.

The services wait for their database through a failover (``DATABASE_WAIT_SECONDS``, set here
to Patroni's TTL and 10 s more) instead of answering 503 while no primary is routed.

:class:`Topology` starts it all (``with Topology(workdir) as ha:``), in the order each piece
needs, and stops every process again, whatever happened; ``python -m tooling.ha`` is
``make run-ha``, which runs until Ctrl-C whatever dies meanwhile.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import requests

from tooling import embedded_pg, packages
from tooling.devrun import migrate_databases
from tooling.patroni import PATRONI, PATRONI_TTL, PatroniCluster, children, wait_for
from tooling.pgbouncer import PgBouncer
from tooling.supervision import Program, Supervised, Supervisor
from tooling.testing import Ports, console_script

ROOT = Path(__file__).resolve().parent.parent
# HAProxy's checks: every 500 ms; a server is down after 2 failed checks, up after 1 good one.
CHECK = "inter 500ms fall 2 rise 1"
SERVICE_WORKERS = 1  # gunicorn workers per replica: 4 replicas share 2 cores here
# How long a request waits for its database before answering 503: a failover (a dead
# leader's key expires after the TTL, then a standby is promoted) and 10 s more.
DATABASE_WAIT = PATRONI_TTL + 10
PROXY_SOURCE = "127.0.0.2"  # HAProxy's address toward the replicas: the one proxy they trust


class Replica(Supervised):
    """A supervised replica of a service (``serve`` on ``port``)."""

    def __init__(self, supervisor: Supervisor, name: str, port: int) -> None:
        super().__init__(supervisor, name)
        self.port, self.url = port, f"http://127.0.0.1:{port}"

    def wait_healthy(self, timeout: float) -> None:
        wait_for(lambda: requests.get(self.url + "/healthz", timeout=1).status_code == 200, timeout=timeout,
                 what=f"{self.name} healthy")

    def worker_pids(self) -> list[int]:
        """Its gunicorn workers: the children of its master."""
        master = self.pid
        return [pid for pid, _ in children(master)] if master else []


class Topology:
    """etcd, two Patroni clusters, HAProxy, PgBouncer, the services' replicas and reconcilers.

    ``env`` is added to the services' and reconcilers' environment (tests pass
    short timings); ``base_port``: consecutive ports from there, else free ones.
    """

    def __init__(self, workdir: Path, *, base_port: int | None = None, env: dict[str, str] | None = None,
                 replicas: int = 2, reconcilers: int = 2, reconciler_args: tuple[str, ...] = ()) -> None:
        self.workdir = workdir
        self.ports = Ports(base_port)
        self.env = dict(env or {})
        self.replicas = replicas
        self.reconciler_count = reconcilers
        self.reconciler_args = reconciler_args
        self.token = secrets.token_urlsafe(24)
        self._stack = ExitStack()
        # The ports a user reaches first come first (docs/scale-out.md lists them from 8100).
        for name in ("public API (haproxy)", "internal API (haproxy)", "haproxy stats",
                     *(f"reconciler-{i} metrics" for i in range(reconcilers)), "etcd", "etcd peer",
                     "platform_svc database (haproxy)", "cluster_svc database (haproxy)", "platform_svc pgbouncer",
                     "cluster_svc pgbouncer"):
            self.ports[name]
        self.public_url = f"http://127.0.0.1:{self.ports['public API (haproxy)']}"
        self.internal_url = f"http://127.0.0.1:{self.ports['internal API (haproxy)']}"
        self.stats_url = f"http://127.0.0.1:{self.ports['haproxy stats']}/"
        self.reconciler_ports = [self.ports[f"reconciler-{i} metrics"] for i in range(reconcilers)]
        self.etcd_url = f"127.0.0.1:{self.ports['etcd']}"
        self.databases = {
            "platform_svc": PatroniCluster("platform_svc", workdir, self.ports, self.etcd_url, synchronous=True),
            "cluster_svc": PatroniCluster("cluster_svc", workdir, self.ports, self.etcd_url, synchronous=False),
        }
        self.platform_ports = [self.ports[f"platform_svc-{i}"] for i in range(replicas)]
        self.cluster_ports = [self.ports[f"cluster_svc-{i}"] for i in range(replicas)]
        # The databases through HAProxy (migrations, tests' reads), and through PgBouncer (the services).
        self.direct_urls = {name: embedded_pg.database_url(database.url, name)
                            for name, database in self.databases.items()}
        # PgBouncer tries a new server login at once after a failed one (server_login_retry 0), and
        # holds a query queued for a server up to DATABASE_WAIT. It still refuses a transaction
        # while its last login failed (1.18, measured): the services wait through that themselves.
        waits = {"server_login_retry": "0", "query_wait_timeout": str(DATABASE_WAIT)}
        self.bouncers = {name: PgBouncer(database.url, workdir / f"pgbouncer-{name}", port=self.ports[f"{name} pgbouncer"],
                                         settings=waits)
                         for name, database in self.databases.items()}
        self.database_urls = {name: self.bouncers[name].url(url) for name, url in self.direct_urls.items()}
        self.supervisor = Supervisor(workdir, [])
        self.etcd = self.haproxy = None  # type: Supervised | None
        self.platform_svcs: list[Replica] = []
        self.cluster_svcs: list[Replica] = []
        self.reconcilers: list[Supervised] = []

    # -- lifecycle -----------------------------------------------------------------

    def __enter__(self) -> Topology:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, *, progress: Callable[[str], None] = lambda line: None) -> Topology:
        """Every program declared to one supervisord, then started in the order each needs."""
        # The Debian packages this needs beyond PostgreSQL 15 (tooling/packages.py installs them).
        absent = packages.missing(packages.TARGETS["run-ha"])
        if absent:
            raise RuntimeError(f"the production shape needs the Debian packages {' '.join(absent)}: "
                               "apt-get install them (make run-ha and make test-scale do, as root)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workdir.chmod(0o755)  # postgres must reach its folders inside
        (self.workdir / "tmp").mkdir(exist_ok=True)
        self.supervisor = Supervisor(self.workdir, self.programs())
        self._stack.callback(self._shut_down)
        self.supervisor.run()
        progress("etcd")
        self.etcd = self._start("etcd")
        self.wait_etcd(30)
        progress("PostgreSQL: two Patroni-managed databases of two nodes (initdb, then a standby cloned from each primary)")
        for node in self.nodes():
            node.supervised = self._start(node.name)
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda database: database.wait_healthy(), self.databases.values()))
        progress("HAProxy")
        self.haproxy = self._start("haproxy")
        wait_for(lambda: requests.get(self.stats_url + ";csv", timeout=1).ok, timeout=30, what="HAProxy")
        for database in self.databases.values():
            self.wait_routed(database)
        progress("databases, migrations, PgBouncer")
        for name, database in self.databases.items():
            embedded_pg.ensure_database(database.url, name)
        migrate_databases({**os.environ, **{f"{name.removesuffix('_svc').upper()}_DATABASE_URL": url
                                            for name, url in self.direct_urls.items()}})
        for name, bouncer in self.bouncers.items():
            self._start(f"pgbouncer-{name}")
            bouncer.wait_ready(30)
        progress(f"{self.replicas} replicas each of cluster_svc and platform_svc, {self.reconciler_count} reconcilers")
        self.cluster_svcs = [Replica(self.supervisor, f"cluster_svc-{i}", p) for i, p in enumerate(self.cluster_ports)]
        self.platform_svcs = [Replica(self.supervisor, f"platform_svc-{i}", p) for i, p in enumerate(self.platform_ports)]
        for server in self.servers():
            self._start(server.name)
        for server in self.servers():
            server.wait_healthy(60)
        self.wait_balanced(30)
        self.reconcilers = [self._start(f"reconciler-{index}") for index in range(self.reconciler_count)]
        for index in range(self.reconciler_count):
            self.wait_reconciler(index)
        return self

    def stop(self) -> None:
        """Every process stopped (supervisord stops them newest first) and waited for; safe to call twice."""
        self._stack.close()

    def _shut_down(self) -> None:
        self.supervisor.stop()
        _in_parallel([node.kill_leftovers for node in self.nodes()])

    def _start(self, name: str) -> Supervised:
        self.supervisor.start(name)
        return Supervised(self.supervisor, name)

    def nodes(self) -> list:
        return [node for database in self.databases.values() for node in database.nodes]

    # -- what runs -----------------------------------------------------------------

    def programs(self) -> list[Program]:
        """Every process of the topology, as supervisord's programs (their configurations written now).
        ``priority``: supervisord stops the services first and etcd last."""
        log = self.workdir
        peer, client = f"http://127.0.0.1:{self.ports['etcd peer']}", f"http://{self.etcd_url}"
        etcd = [
            "etcd", "--name", "ha", "--data-dir", str(self.workdir / "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"ha={peer}", "--initial-cluster-state", "new",
        ]
        programs = [Program("etcd", etcd, log / "etcd.log", priority=100)]
        programs += [node.program() for node in self.nodes()]
        programs.append(Program("haproxy", ["haproxy", "-db", "-f", str(self._write_haproxy_config())],
                                log / "haproxy.log", priority=300))
        programs += [Program(f"pgbouncer-{name}", bouncer.command(), bouncer.log, priority=400, stop_signal="INT")
                     for name, bouncer in self.bouncers.items()]
        for script, ports in (("cluster-svc", self.cluster_ports), ("platform-svc", self.platform_ports)):
            programs += [
                Program(f"{script.replace('-', '_')}-{i}",
                        [console_script(script), "serve", "--workers", str(SERVICE_WORKERS), "--port", str(port)],
                        log / f"{script.replace('-', '_')}-{i}.log", env=self.service_env(), priority=500)
                for i, port in enumerate(ports)
            ]
        programs += [
            Program(f"reconciler-{i}", [console_script("platform-svc"), "reconcile", "--metrics-port", str(port),
                                        *self.reconciler_args],
                    log / f"reconciler-{i}.log", env=self.service_env(), priority=600)
            for i, port in enumerate(self.reconciler_ports)
        ]
        return programs

    def _write_haproxy_config(self) -> Path:
        config = self.workdir / "haproxy.cfg"
        config.write_text(self.haproxy_config())
        errors = self.workdir / "haproxy-errors"
        errors.mkdir(exist_ok=True)
        for status in (502, 503, 504):
            (errors / f"{status}.http").write_bytes(_unavailable_page())
        subprocess.run(["haproxy", "-c", "-q", "-f", str(config)], check=True)
        return config

    def wait_routed(self, database: PatroniCluster, timeout: float = 60):
        """Until HAProxy sends ``cluster``'s connections to its primary only (a server starts as
        up, before its first checks), and that node."""
        leader = database.leader()
        wait_for(lambda: self.haproxy_up(f"{database.name}_db") == [leader.name], timeout=timeout,
                 what=f"HAProxy's {database.name}_db on {leader.name} alone")
        return leader

    def haproxy_config(self) -> str:
        errors = self.workdir / "haproxy-errors"
        lines = [
            "global",
            "    maxconn 4096",
            "    log stdout format raw local0 info",  # into haproxy.log: one line per request, per connection
            "defaults",
            "    log global",
            "    timeout connect 2s",
            # Pooled database connections stay open for long: PgBouncer closes idle ones first.
            "    timeout client 30m",
            "    timeout server 30m",
            "    timeout check 2s",
            "listen stats",
            "    mode http",
            f"    bind 127.0.0.1:{self.ports['haproxy stats']}",
            "    stats enable",
            "    stats uri /",
            "    stats refresh 2s",
        ]
        for database in self.databases.values():
            # A connection goes to the node whose Patroni says it is the primary; when a
            # node stops being it, its connections are cut at once (on-marked-down).
            lines += [
                f"listen {database.name}_db",
                "    mode tcp",
                "    option tcplog",
                f"    bind 127.0.0.1:{database.frontend_port}",
                "    option httpchk",
                "    http-check send meth GET uri /primary",
                "    http-check expect status 200",
                f"    default-server {CHECK} on-marked-down shutdown-sessions",
            ]
            lines += [f"    server {node.name} 127.0.0.1:{node.pg_port} check port {node.rest_port}"
                      for node in database.nodes]
        for name, port, replicas in (("platform_svc", self.ports["public API (haproxy)"], self.platform_ports),
                                     ("cluster_svc", self.ports["internal API (haproxy)"], self.cluster_ports)):
            # /healthz (the process answers), not /readyz: while the database fails over,
            # the services answer 503 with Retry-After themselves. A request whose
            # connection could not be made is sent to the other replica; one that
            # reached a replica that died is answered 503 (the errorfiles), which a
            # client retries with its Idempotency-Key. A new connection to the replica for
            # each request (http-server-close): a kept-alive one that gunicorn closes just as
            # a request is sent on it would make HAProxy drop the client's connection unanswered.
            # It names the client in X-Forwarded-For, and reaches the replicas from an address
            # of its own (PROXY_SOURCE), the one their TRUSTED_PROXIES believes: a client that
            # calls a replica directly, header and all, is not believed (shared.source).
            lines += [
                f"listen {name}",
                "    mode http",
                f"    bind 127.0.0.1:{port}",
                "    balance roundrobin",
                "    option httplog",
                "    option http-server-close",
                "    option forwardfor",
                f"    source {PROXY_SOURCE}",
                "    option httpchk",
                "    http-check send meth GET uri /healthz",
                "    http-check expect status 200",
                "    retries 3",
                "    retry-on conn-failure",
                "    option redispatch 1",
                "    timeout client 60s",
                "    timeout server 60s",
                *[f"    errorfile {status} {errors / f'{status}.http'}" for status in (502, 503, 504)],
                f"    default-server {CHECK}",
            ]
            lines += [f"    server {name}-{i} 127.0.0.1:{p} check" for i, p in enumerate(replicas)]
        return "\n".join(lines) + "\n"

    def haproxy_status(self) -> dict[tuple[str, str], str]:
        """HAProxy's view: (proxy, server) -> UP / DOWN / ..."""
        import csv

        text = requests.get(self.stats_url + ";csv", timeout=2).text.lstrip("# ")
        return {(row["pxname"], row["svname"]): row["status"] for row in csv.DictReader(text.splitlines())}

    def haproxy_up(self, proxy: str) -> list[str]:
        return [server for (px, server), status in self.haproxy_status().items()
                if px == proxy and server not in ("FRONTEND", "BACKEND") and status.startswith("UP")]

    def service_env(self) -> dict[str, str]:
        return {
            "PLATFORM_DATABASE_URL": self.database_urls["platform_svc"],
            "CLUSTER_DATABASE_URL": self.database_urls["cluster_svc"],
            "CLUSTER_SVC_URL": self.internal_url,
            "INTERNAL_TOKEN": self.token,
            "DATABASE_WAIT_SECONDS": str(DATABASE_WAIT),
            "TRUSTED_PROXIES": PROXY_SOURCE,
            "TMPDIR": str(self.workdir / "tmp"),
            **self.env,
        }

    def servers(self) -> list[Replica]:
        return [*self.cluster_svcs, *self.platform_svcs]

    def wait_reconciler(self, index: int, timeout: float = 60) -> None:
        """Until reconciler ``index`` serves its metrics (it has started, and connected)."""
        metrics = f"http://127.0.0.1:{self.reconciler_ports[index]}/metrics"
        wait_for(lambda: requests.get(metrics, timeout=1).ok, timeout=timeout, what=f"reconciler-{index}'s metrics")

    def leaders(self) -> list[int]:
        """The reconcilers (by index) that lead the periodic passes now (``sync_repair_leader`` 1)."""
        return [i for i in range(len(self.reconcilers)) if self.reconciler_metric(i, "sync_repair_leader") == 1]

    def wait_etcd(self, timeout: float) -> None:
        wait_for(lambda: requests.get(f"http://{self.etcd_url}/health", timeout=1).ok, timeout=timeout, what="etcd")

    def wait_balanced(self, timeout: float) -> None:
        """Until HAProxy sends each service's requests to every one of its replicas."""
        for proxy in ("platform_svc", "cluster_svc"):
            wait_for(lambda proxy=proxy: len(self.haproxy_up(proxy)) == self.replicas, timeout=timeout,
                     what=f"HAProxy's {proxy} on every replica")

    def reconciler_metric(self, index: int, name: str) -> float | None:
        """One unlabelled sample of reconciler ``index``'s metrics, or None (not exported, or not answering)."""
        try:
            body = requests.get(f"http://127.0.0.1:{self.reconciler_ports[index]}/metrics", timeout=2).text
        except requests.RequestException:
            return None
        for line in body.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """``platform-svc ARGS`` with the services' settings."""
        return subprocess.run([console_script("platform-svc"), *args], env={**os.environ, **self.service_env()},
                              capture_output=True, text=True, timeout=timeout, check=False)

    def pair(self):
        """A :class:`tooling.pair.Pair` on this topology: its API calls go through HAProxy's frontends and
        its database reads through HAProxy's (the current primaries)."""
        from tooling.pair import Pair

        return Pair.served(public_url=self.public_url, internal_url=self.internal_url, token=self.token,
                           platform_db_url=self.direct_urls["platform_svc"], cluster_db_url=self.direct_urls["cluster_svc"],
                           workdir=self.workdir, env=self.service_env())

    # -- what it prints ------------------------------------------------------------

    def describe(self) -> str:
        rest = "\n".join(f"  {node.name:<15} {node.rest_url}   (Patroni's REST API)"
                         for database in self.databases.values() for node in database.nodes)
        pg = "\n".join(f"  {name + '_db':<15} {database.url.replace(database.password, '***')}   "
                       f"(PgBouncer: 127.0.0.1:{self.ports[f'{name} pgbouncer']})"
                       for name, database in self.databases.items())
        reconcilers = "\n".join(f"  http://127.0.0.1:{port}/metrics   reconciler-{i} (sync_repair_leader, ...)"
                                for i, port in enumerate(self.reconciler_ports))
        return f"""
platform_svc  {self.public_url}   (public API through HAProxy, {self.replicas} replicas; docs at /docs; console at /console)
cluster_svc   {self.internal_url}   (internal API through HAProxy, {self.replicas} replicas; token below)
HAProxy stats {self.stats_url}

Patroni REST APIs:
{rest}
PostgreSQL primaries through HAProxy (superuser passwords in {self.workdir}/env):
{pg}
Metrics: {self.public_url}/metrics and {self.internal_url}/metrics (with the internal token),
{reconcilers}
Logs: {self.workdir}/*.log.  In another terminal: . {self.workdir}/env  (then platform-svc create-account demo, platform-svc create-operator me, ...)
Every process is supervised (restarted whenever it dies): {self.supervisor.status_command()}
Ctrl-C stops everything.
"""

    def write_env(self) -> Path:
        """``env``: the exports the CLI needs (``. .dev-ha/env``), readable by its owner only."""
        import shlex

        path = self.workdir / "env"
        exports = {**{k: v for k, v in self.service_env().items() if k != "TMPDIR"},
                   "PLATFORM_ADMIN_URL": self.databases["platform_svc"].url,
                   "CLUSTER_ADMIN_URL": self.databases["cluster_svc"].url}
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write("".join(f"export {k}={shlex.quote(v)}\n" for k, v in exports.items()))
        return path


def _in_parallel(calls: list[Callable[[], Any]]) -> None:
    """Every call made, side by side; the first failure raised after all have ended."""
    if calls:
        with ThreadPoolExecutor(len(calls)) as pool:
            for done in [pool.submit(call) for call in calls]:
                done.result()


def _unavailable_page() -> bytes:
    """HAProxy's answer when a replica died under a request, or none is up: the services'
    own 503 (problem+json, ``unavailable``, Retry-After) so a client retries it as any other."""
    body = json.dumps({
        "type": "about:blank", "title": "Service Unavailable", "status": 503, "code": "unavailable",
        "detail": "No replica could answer this request; retry it (with the same Idempotency-Key).",
    })
    head = ("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\n"
            f"Retry-After: 1\r\nCache-Control: no-cache\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n")
    return (head + body).encode()


# -- make run-ha -------------------------------------------------------------------


def main() -> int:
    """``make run-ha``: the topology in .dev-ha (emptied first) until Ctrl-C or SIGTERM.
    The Debian packages it needs are make's to install (``tooling.packages``)."""
    if not PATRONI.exists():
        sys.exit(f"{PATRONI} is missing: `make run-ha` installs it (or set HA_PATRONI).")
    workdir = ROOT / ".dev-ha"
    shutil.rmtree(workdir, ignore_errors=True)
    # Ctrl-C, even when started from a shell that ignores SIGINT in background jobs (Python then
    # installs no handler of its own), and SIGTERM: both end in the clean-up below.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    base = int(os.environ.get("HA_BASE_PORT", "8100"))
    topology = Topology(workdir, base_port=base)
    try:
        topology.start(progress=lambda step: print(f"Starting {step} ...", flush=True))
        topology.write_env()
        print(topology.describe(), flush=True)
        # supervisord restarts whatever dies; only supervisord itself ending (killed) ends this.
        while topology.supervisor.alive():
            time.sleep(1)
        print(f"supervisord stopped by itself; stopping everything (see {workdir}/supervisord.log).")
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("Stopping ...", flush=True)
        topology.stop()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
