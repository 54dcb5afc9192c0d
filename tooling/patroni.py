"""PostgreSQL under Patroni, for the production shape (:mod:`tooling.ha`): two nodes per database,
leaders elected in etcd, each node a program of the topology's supervisord.

PostgreSQL refuses to run as root: when we are root, Patroni (and so PostgreSQL) runs as the
``postgres`` user, in folders it owns. Patroni comes from PyPI (``patroni[etcd3]``), in a
virtualenv of its own that user can execute (:data:`PATRONI`, made by ``make run-ha``).

A node whose Patroni dies is started again by supervisord: it finds its data directory and
rejoins, as the leader again when its key has not expired (it was its own), else as a standby
of the new leader, rewound with pg_rewind if it had diverged.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
from pathlib import Path
from typing import Any

import requests
from sqlalchemy.engine import URL

from tooling import testing
from tooling.supervision import Program, Supervised
from tooling.testing import Ports

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


def wait_for(condition, *, timeout: float, what: str, poll: float = 0.1) -> Any:
    """``condition()``'s first truthy answer, a process that does not answer yet counting as none
    (:func:`tooling.testing.wait_for`). :raise TimeoutError: not within ``timeout`` seconds."""
    unanswered = (requests.RequestException, OSError)
    return testing.wait_for(condition, timeout=timeout, what=what, poll=poll, ignoring=unanswered)


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

        self.supervised: Supervised | None = None  # once the topology's supervisord runs it

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

    def program(self) -> Program:
        """Patroni for this node, as a supervised program (its configuration written now): a first
        start bootstraps or clones, a later one rejoins, rewinding if need be."""
        self.dir.mkdir(parents=True, exist_ok=True)
        _owned_by(self.dir, "postgres")
        config = self.dir / "patroni.yml"
        config.write_text(json.dumps(self.config(), indent=2))  # JSON is YAML: no YAML library needed
        config.chmod(0o644)
        env = {"HOME": str(self.dir), "PATH": f"{PG_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        # SIGTERM: Patroni stops PostgreSQL (fast shutdown, handing over leadership) before it exits.
        return Program(self.name, [str(PATRONI), str(config)], self.database.workdir / f"{self.name}.log",
                       env=env, user="postgres", cwd=self.dir, priority=200, stop_wait=60)

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
        too, as the loss of the machine would (a stopped one included). supervisord starts
        Patroni again at once."""
        postgres = self.postgres_pids()
        patroni = self.supervised.kill(signal.SIGKILL)
        for pid in postgres if everything else postgres[:1]:
            _kill(pid, signal.SIGKILL)
        _wait_gone([patroni, *postgres], f"{self.name}'s Patroni and PostgreSQL")

    def freeze(self) -> list[int]:
        """SIGSTOP to Patroni and every PostgreSQL process of this node, as a machine that hangs:
        supervisord sees nothing die, so restarts nothing. Returns what was stopped."""
        frozen = [self.supervised.pid, *self.postgres_pids()]
        for pid in frozen:
            _kill(pid, signal.SIGSTOP)
        return frozen

    def kill_leftovers(self) -> None:
        """Any PostgreSQL process its Patroni left behind (a Patroni killed, its postmaster not)."""
        postgres = self.postgres_pids()
        for pid in postgres:
            _kill(pid, signal.SIGKILL)
        _wait_gone(postgres, f"{self.name}'s PostgreSQL")

    def postgres_pids(self) -> list[int]:
        """The running postmaster, then its children."""
        postmaster = self.postmaster_pid()
        if postmaster is None or not alive(postmaster):
            return []
        return [postmaster, *(pid for pid, _ in children(postmaster))]

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
        return [pid for pid, cmd in children(postmaster) if title in cmd] if postmaster else []


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


def children(pid: int) -> list[tuple[int, str]]:
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




def _owned_by(path: Path, user: str) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, user, user)
