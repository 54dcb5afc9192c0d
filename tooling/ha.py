"""The production shape on one machine, for ``make run-ha`` and tests/scale.

What runs (every process on 127.0.0.1, in a work folder of its own):

- etcd (Debian ``etcd-server``), the store Patroni elects leaders in;
- two Patroni clusters of two PostgreSQL 15 nodes each (Debian's binaries):
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

PostgreSQL refuses to run as root: when we are root, Patroni (and so PostgreSQL)
runs as the ``postgres`` user, in folders it owns. Patroni comes from PyPI
(``patroni[etcd3]``), in a virtualenv of its own that user can execute
(:data:`PATRONI`, made by ``make run-ha``).

:class:`Topology` starts it all (``with Topology(workdir) as ha:``) and stops every
process again, whatever happened; ``python -m tooling.ha`` is ``make run-ha``.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from sqlalchemy.engine import URL

from tooling import embedded_pg, packages, testing
from tooling.devrun import migrate_databases
from tooling.pgbouncer import PgBouncer
from tooling.testing import LiveServer, console_script, free_port

ROOT = Path(__file__).resolve().parent.parent
PG_BIN = Path(os.environ.get("HA_PG_BIN", "/usr/lib/postgresql/15/bin"))
PATRONI = Path(os.environ.get("HA_PATRONI", str(ROOT / ".venv-ha" / "bin" / "patroni")))
# Patroni's timings: its smallest ttl (20 s) is how long a dead leader keeps its key,
# so a kill -9 of the primary is followed by about that long without one; a node
# runs its loop every second.
PATRONI_TTL = 20
PATRONI_LOOP_WAIT = 1
PATRONI_RETRY_TIMEOUT = 3
# How far (bytes of WAL) a standby may be behind the last known primary position and
# still take over. platform: the synchronous standby never is behind what was
# acknowledged; 1 MB is Patroni's default. cluster: any lag, so a failover happens
# even when it loses commits (repair brings them back).
MAX_LAG = {"platform_svc": 1024 * 1024, "cluster_svc": 1024**3}
# HAProxy's checks: every 500 ms; a server is down after 2 failed checks, up after 1 good one.
CHECK = "inter 500ms fall 2 rise 1"
SERVICE_WORKERS = 1  # gunicorn workers per replica: 4 replicas share 2 cores here


@dataclass
class Ports:
    """The ports of a topology: consecutive from ``base`` (``make run-ha``), or any free ones (tests)."""

    base: int | None = None
    taken: dict[str, int] = field(default_factory=dict)

    def __getitem__(self, name: str) -> int:
        if name not in self.taken:
            self.taken[name] = free_port() if self.base is None else self.base + len(self.taken)
        return self.taken[name]


class Process:
    """One process of the topology, in a session of its own, its output in ``log``."""

    def __init__(self, name: str, argv: list[str], log: Path, *, env: dict[str, str] | None = None,
                 user: str | None = None, cwd: Path | None = None) -> None:
        self.name = name
        self.log = log
        with log.open("ab") as out:
            self.popen = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
                cwd=cwd,
                **_as_user(user),
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
        """``sig`` to its process group, then SIGKILL after ``timeout`` seconds."""
        if not self.alive():
            return
        _signal_group(self.pid, sig)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal_group(self.pid, signal.SIGKILL)
            self.popen.wait(timeout=30)

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def _as_user(user: str | None) -> dict[str, Any]:
    """Popen's arguments that run a process as ``user`` (only root can; anyone else runs it as themselves)."""
    if user is None or os.geteuid() != 0:
        return {}
    import pwd

    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _owned_by(path: Path, user: str) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, user, user)


def wait_for(condition: Callable[[], Any], *, timeout: float, what: str, poll: float = 0.1) -> Any:
    """``condition()``'s first truthy answer, a process that does not answer yet counting as none
    (:func:`tooling.testing.wait_for`). :raise TimeoutError: not within ``timeout`` seconds."""
    unanswered = (requests.RequestException, OSError)
    return testing.wait_for(condition, timeout=timeout, what=what, poll=poll, ignoring=unanswered)


# -- PostgreSQL under Patroni -------------------------------------------------------


class Node:
    """One Patroni member: a patroni process and the PostgreSQL it runs."""

    def __init__(self, database: PatroniCluster, index: int, ports: Ports) -> None:
        self.database = database
        self.name = f"{database.name}-pg{index}"
        self.pg_port = ports[f"{self.name} postgres"]
        self.rest_port = ports[f"{self.name} patroni"]
        self.rest_url = f"http://127.0.0.1:{self.rest_port}"
        self.dir = database.workdir / self.name
        self.data_dir = self.dir / "data"
        self.process: Process | None = None

    def config(self) -> dict[str, Any]:
        database = self.database
        return {
            "scope": database.name,
            "namespace": "/ha/",
            "name": self.name,
            "restapi": {"listen": f"127.0.0.1:{self.rest_port}", "connect_address": f"127.0.0.1:{self.rest_port}"},
            "etcd3": {"host": database.etcd},
            "bootstrap": {
                "dcs": {
                    "ttl": PATRONI_TTL,
                    "loop_wait": PATRONI_LOOP_WAIT,
                    "retry_timeout": PATRONI_RETRY_TIMEOUT,
                    "maximum_lag_on_failover": MAX_LAG[database.name],
                    "synchronous_mode": database.synchronous,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "max_connections": 200,
                            "wal_level": "replica",
                            "hot_standby": "on",
                            "wal_log_hints": "on",
                            "wal_keep_size": "256MB",
                            "max_wal_senders": 10,
                            "max_replication_slots": 10,
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}, "data-checksums"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.pg_port}",
                "connect_address": f"127.0.0.1:{self.pg_port}",
                "data_dir": str(self.data_dir),
                "bin_dir": str(PG_BIN),
                "pgpass": str(self.dir / "pgpass"),
                "remove_data_directory_on_rewind_failure": True,
                "authentication": {
                    "superuser": {"username": "postgres", "password": database.password},
                    "replication": {"username": "replicator", "password": database.replication_password},
                },
                "parameters": {"unix_socket_directories": str(self.dir)},
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 scram-sha-256",
                    "host replication replicator 127.0.0.1/32 scram-sha-256",
                ],
            },
            "watchdog": {"mode": "off"},
        }

    def start(self) -> Node:
        """Start patroni (a first start bootstraps or clones; a later one rejoins, rewinding if need be)."""
        self.dir.mkdir(exist_ok=True)
        _owned_by(self.dir, "postgres")
        config = self.dir / "patroni.yml"
        config.write_text(json.dumps(self.config(), indent=2))  # JSON is YAML: no YAML library needed
        config.chmod(0o644)
        env = {"HOME": str(self.dir), "PATH": f"{PG_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        self.process = Process(self.name, [str(PATRONI), str(config)], self.database.workdir / f"{self.name}.log",
                               env=env, user="postgres", cwd=self.dir)
        return self

    def postmaster_pid(self) -> int | None:
        """The postmaster's pid, if it runs (postmaster.pid outlives a killed one, and its pid may be reused)."""
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split()[0])
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            return None
        return pid if str(self.data_dir).encode() in command else None

    def kill(self, *, everything: bool = False) -> None:
        """kill -9 of patroni and of its postmaster (the postmaster's children notice it is
        gone and exit by themselves), or with ``everything`` of every PostgreSQL process
        too, as the loss of the machine would (a stopped one included)."""
        postgres = self.postgres_pids()
        if self.process is not None:
            _signal_group(self.process.pid, signal.SIGKILL)
            self.process.popen.wait(timeout=30)
        for pid in postgres if everything else postgres[:1]:
            _kill(pid, signal.SIGKILL)
        _wait_gone(postgres, f"{self.name}'s PostgreSQL")

    def stop(self) -> None:
        """patroni stops its PostgreSQL (fast shutdown) and exits; anything left is killed."""
        postgres = self.postgres_pids()
        if self.process is not None:
            self.process.stop(signal.SIGTERM, timeout=60)
        for pid in postgres:
            _kill(pid, signal.SIGKILL)
        _wait_gone(postgres, f"{self.name}'s PostgreSQL")

    def postgres_pids(self) -> list[int]:
        """The running postmaster, then its children."""
        postmaster = self.postmaster_pid()
        if postmaster is None or not alive(postmaster):
            return []
        return [postmaster, *(pid for pid, _ in _children(postmaster))]

    def status(self) -> dict[str, Any]:
        """Patroni's ``GET /patroni``: role, state, timeline, ..."""
        return requests.get(self.rest_url + "/patroni", timeout=2).json()

    def is_primary(self) -> bool:
        try:
            return requests.get(self.rest_url + "/primary", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def processes(self, title: str) -> list[int]:
        """The pids of this node's PostgreSQL processes whose title contains ``title`` (``walsender``, ...)."""
        postmaster = self.postmaster_pid()
        return [pid for pid, cmd in _children(postmaster) if title in cmd] if postmaster else []


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def alive(pid: int) -> bool:
    """The process runs (a zombie, exited but not yet reaped by whoever adopted it, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _proc_table() -> list[tuple[int, int, str]]:
    """(pid, parent pid, command line) of every process."""
    table = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        table.append((int(stat.parent.name), ppid, cmd))
    return table


def _children(pid: int) -> list[tuple[int, str]]:
    return [(child, cmd) for child, ppid, cmd in _proc_table() if ppid == pid]


def _wait_gone(pids: list[int], what: str, timeout: float = 30) -> None:
    wait_for(lambda: not any(alive(pid) for pid in pids), timeout=timeout, what=f"{what} to exit")


class PatroniCluster:
    """Two Patroni nodes sharing one scope: a primary and a standby."""

    def __init__(self, name: str, workdir: Path, ports: Ports, etcd: str, *, synchronous: bool) -> None:
        self.name = name
        self.workdir = workdir
        self.etcd = etcd
        self.synchronous = synchronous
        self.password = secrets.token_urlsafe(16)
        self.replication_password = secrets.token_urlsafe(16)
        self.nodes = [Node(self, index, ports) for index in range(2)]
        self.frontend_port = ports[f"{name} database (haproxy)"]

    @property
    def url(self) -> str:
        """The ``postgres`` database on the current primary, through HAProxy, as the superuser."""
        return URL.create("postgresql+psycopg2", username="postgres", password=self.password, host="127.0.0.1",
                          port=self.frontend_port, database="postgres").render_as_string(hide_password=False)

    def members(self) -> list[dict[str, Any]]:
        """Patroni's ``GET /cluster`` members, from whichever node answers."""
        for node in self.nodes:
            try:
                return requests.get(node.rest_url + "/cluster", timeout=2).json()["members"]
            except (requests.RequestException, ValueError, KeyError):
                continue
        return []

    def leader(self) -> Node:
        """The node that is primary now (waits for one)."""
        return wait_for(lambda: next((node for node in self.nodes if node.is_primary()), None),
                        timeout=120, what=f"a primary of {self.name}")

    def healthy(self) -> bool:
        """A running primary and a standby streaming from it (the synchronous one, on platform)."""
        members = self.members()
        roles = {member["role"] for member in members if member.get("state") in ("running", "streaming")}
        standby = "sync_standby" if self.synchronous else "replica"
        streaming = any(member.get("state") == "streaming" for member in members)
        return len(members) == 2 and "leader" in roles and standby in roles and streaming

    def wait_healthy(self, timeout: float = 180) -> None:
        wait_for(self.healthy, timeout=timeout, what=f"{self.name}: a primary and a streaming standby", poll=0.25)


# -- the topology --------------------------------------------------------------------


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
        self.etcd: Process | None = None
        self.haproxy: Process | None = None
        self.platform_svcs: list[LiveServer] = []
        self.cluster_svcs: list[LiveServer] = []
        self.reconcilers: list[Process] = []
        self.database_urls: dict[str, str] = {}  # the services' (through PgBouncer)
        self.direct_urls: dict[str, str] = {}  # through HAProxy only: migrations, tests' reads

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
        # The Debian packages this needs beyond PostgreSQL 15 (tooling/packages.py installs them).
        absent = packages.missing(packages.TARGETS["run-ha"])
        if absent:
            raise RuntimeError(f"the production shape needs the Debian packages {' '.join(absent)}: "
                               "apt-get install them (make run-ha and make test-scale do, as root)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workdir.chmod(0o755)  # postgres must reach its folders inside
        (self.workdir / "tmp").mkdir(exist_ok=True)
        progress("etcd")
        self._start_etcd()
        progress("PostgreSQL: two Patroni-managed databases of two nodes (initdb, then a standby cloned from each primary)")
        nodes = [node for database in self.databases.values() for node in database.nodes]
        self._stack.callback(_in_parallel, [node.stop for node in nodes])
        for node in nodes:
            node.start()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda database: database.wait_healthy(), self.databases.values()))
        progress("HAProxy")
        self._start_haproxy()
        progress("databases, migrations, PgBouncer")
        self._prepare_databases()
        progress(f"{self.replicas} replicas each of cluster_svc and platform_svc, {self.reconciler_count} reconcilers")
        self._start_services()
        for index in range(self.reconciler_count):
            self.start_reconciler(index)
        return self

    def stop(self) -> None:
        """Every process stopped, newest first, and waited for; safe to call twice."""
        self._stack.close()

    def _start_etcd(self) -> None:
        peer = f"http://127.0.0.1:{self.ports['etcd peer']}"
        client = f"http://{self.etcd_url}"
        argv = [
            "etcd", "--name", "ha", "--data-dir", str(self.workdir / "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"ha={peer}", "--initial-cluster-state", "new",
        ]
        self.etcd = Process("etcd", argv, self.workdir / "etcd.log")
        self._stack.callback(self.etcd.stop)
        wait_for(lambda: requests.get(f"{client}/health", timeout=1).ok, timeout=30, what="etcd")

    def _start_haproxy(self) -> None:
        config = self.workdir / "haproxy.cfg"
        config.write_text(self.haproxy_config())
        errors = self.workdir / "haproxy-errors"
        errors.mkdir(exist_ok=True)
        for status in (502, 503, 504):
            (errors / f"{status}.http").write_bytes(_unavailable_page())
        subprocess.run(["haproxy", "-c", "-q", "-f", str(config)], check=True)
        self.haproxy = Process("haproxy", ["haproxy", "-db", "-f", str(config)], self.workdir / "haproxy.log")
        self._stack.callback(self.haproxy.stop)
        wait_for(lambda: requests.get(self.stats_url + ";csv", timeout=1).ok, timeout=30, what="HAProxy")
        for database in self.databases.values():
            self.wait_routed(database)

    def wait_routed(self, database: PatroniCluster, timeout: float = 60) -> Node:
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
            lines += [
                f"listen {name}",
                "    mode http",
                f"    bind 127.0.0.1:{port}",
                "    balance roundrobin",
                "    option httplog",
                "    option http-server-close",
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

    def _prepare_databases(self) -> None:
        env = {}
        for name, database in self.databases.items():
            direct = embedded_pg.ensure_database(database.url, name)
            self.direct_urls[name] = direct
            env[f"{name.removesuffix('_svc').upper()}_DATABASE_URL"] = direct  # PLATFORM_DATABASE_URL, ...
        migrate_databases({**os.environ, **env})
        for name in self.databases:
            self.database_urls[name] = self._pooled(name, self.direct_urls[name])

    def _pooled(self, name: str, url: str) -> str:
        """``url`` through a PgBouncer in transaction mode of its own, in front of HAProxy's frontend."""
        bouncer = PgBouncer(self.databases[name].url, self.workdir / f"pgbouncer-{name}",
                            port=self.ports[f"{name} pgbouncer"])
        self._stack.enter_context(bouncer)
        return bouncer.url(url)

    # -- the services --------------------------------------------------------------

    def service_env(self) -> dict[str, str]:
        return {
            "PLATFORM_DATABASE_URL": self.database_urls["platform_svc"],
            "CLUSTER_DATABASE_URL": self.database_urls["cluster_svc"],
            "CLUSTER_SVC_URL": self.internal_url,
            "INTERNAL_TOKEN": self.token,
            "TMPDIR": str(self.workdir / "tmp"),
            **self.env,
        }

    def _service(self, script: str, port: int, index: int) -> LiveServer:
        argv = [console_script(script), "serve", "--workers", str(SERVICE_WORKERS)]
        log = self.workdir / f"{script.replace('-', '_')}-{index}.log"
        return LiveServer(argv, self.service_env(), port=port, output=log)

    def _start_services(self) -> None:
        self.cluster_svcs = [self._service("cluster-svc", p, i) for i, p in enumerate(self.cluster_ports)]
        self.platform_svcs = [self._service("platform-svc", p, i) for i, p in enumerate(self.platform_ports)]
        # Replicas and reconcilers (those started later too) stop together: each finishes what it holds.
        self._stack.callback(lambda: _in_parallel(
            [*(process.stop for process in self.reconcilers), *(server.stop for server in self.servers())]))
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda server: server.start(), self.servers()))
        for proxy in ("platform_svc", "cluster_svc"):
            wait_for(lambda proxy=proxy: len(self.haproxy_up(proxy)) == self.replicas, timeout=30, what=f"HAProxy's {proxy}")

    def servers(self) -> list[LiveServer]:
        return [*self.cluster_svcs, *self.platform_svcs]

    def restart_service(self, server: LiveServer) -> None:
        """A killed replica started again on its port (HAProxy puts it back after one good check)."""
        server.start()

    def start_reconciler(self, index: int) -> Process:
        argv = [console_script("platform-svc"), "reconcile", "--metrics-port", str(self.reconciler_ports[index]),
                *self.reconciler_args]
        process = Process(f"reconciler-{index}", argv, self.workdir / f"reconciler-{index}.log",
                          env=self.service_env())
        if index < len(self.reconcilers):
            self.reconcilers[index] = process
        else:
            self.reconcilers.append(process)
        metrics = f"http://127.0.0.1:{self.reconciler_ports[index]}/metrics"
        wait_for(lambda: requests.get(metrics, timeout=1).ok, timeout=60, what=f"reconciler-{index}'s metrics")
        return process

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
        while True:
            dead = [process.name for process in (topology.etcd, topology.haproxy, *topology.reconcilers)
                    if process is not None and not process.alive()]
            if dead:
                print(f"{', '.join(dead)} stopped by itself; stopping everything (see {workdir}/*.log).")
                return 1
            time.sleep(1)
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
