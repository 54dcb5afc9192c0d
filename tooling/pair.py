"""The pair as a user runs it, for tests: the one harness e2e tests and the chaos scenarios share.

A :class:`Pair` is cluster_svc and platform_svc as gunicorn processes (their
console scripts) on two databases, optionally with a
:class:`~tooling.faultproxy.FaultProxy` between them (platform_svc and its
reconcilers reach cluster_svc through it; its log is the record of every call
they made), the CLI and the reconciler as processes too, and the databases
read directly. Each process writes into a log file of the pair's work folder,
shown when a test fails.

Accounts: :meth:`Pair.account` makes one (``platform-svc create-account``);
:meth:`Pair.use_account` makes it the one :meth:`Pair.api` calls as and the
one :meth:`Pair.assert_downstream_matches` and :meth:`Pair.all_synced` look
at, so tests sharing a pair each see their own rows only.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from idempotent_pair_client.platform import PlatformClient
from sqlalchemy import create_engine, text

from cluster_svc.cli import MIGRATIONS as CLUSTER_MIGRATIONS
from platform_svc.cli import MIGRATIONS as PLATFORM_MIGRATIONS
from platform_svc.models import RESOURCES
from shared.config import id_horizon_seconds
from shared.horizon import Horizon
from tooling.commands import Commands
from tooling.compare import Comparison, compare
from tooling.faultproxy import FaultProxy
from tooling.testing import LiveServer, console_script, free_port, fresh_database

TOKEN = "pair-internal-token"
# Timings short enough that no test waits for a production default (each is
# described in docs/operations.md, "Timings"). The inline lease must outlast an
# inline push with its retries (INLINE_POLICY.longest_call(): 1 s); the breaker
# probes a recovered cluster_svc after 1 s, so inline pushes resume soon after
# an outage.
TIMINGS = {
    "INLINE_BREAKER_COOL_DOWN_SECONDS": "1",
    "INLINE_LEASE_SECONDS": "8",
    "RECONCILER_LEASE_MARGIN_SECONDS": "2",
    "RECONCILER_IDLE_SECONDS": "0.2",
    "RECONCILER_PROBE_SECONDS": "0.2",
}
# Tests drive one account faster than the default limit (100 public requests a
# second) allows, and would meet 429s the test is not about: the pair's default is
# one no test reaches, and the tests of the limit give their accounts their own.
RATE_LIMITS = {"ACCOUNT_RATE_LIMIT": "1000000"}
# platform_svc's inline push waits 1 s for an answer; a request the proxy delays waits longer.
DELAY_BEYOND_INLINE_TIMEOUT = 1.5


class Tally:
    """Every answer the public API gave, by status (``None``: no answer at all)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._statuses: Counter[int | None] = Counter()

    def record(self, status: int | None) -> None:
        with self._lock:
            self._statuses[status] += 1

    def snapshot(self) -> Counter[int | None]:
        with self._lock:
            return Counter(self._statuses)


class PublicApi:
    """One account's calls to platform_svc, from any number of threads; every answer is tallied."""

    def __init__(self, pair: Pair, account_id: str, api_key: str) -> None:
        self.pair = pair
        self.account_id = account_id
        self.api_key = api_key
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._clients: list[PlatformClient] = []
        self._lock = threading.Lock()

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """:raise requests.RequestException: no answer came (the tally counts it too)."""
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            session.headers.update(self.headers)
            with self._lock:
                self._sessions.append(session)
        try:
            response = session.request(method, self.pair.platform_svc.url + path, timeout=60, **kwargs)
        except requests.RequestException:
            self.pair.tally.record(None)
            raise
        self.pair.tally.record(response.status_code)
        return response

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to the collection at ``path`` (under the public API's root): the object created."""
        return expect(self.call("POST", path, json=body), 201)

    def client(self, base_url: str | None = None, **options: Any) -> PlatformClient:
        """A :class:`~idempotent_pair_client.platform.PlatformClient` calling as this account: at platform_svc, or at
        ``base_url`` (a fault proxy in front of it); ``options``: its ``timeout``, ``retry_for``, ...
        Closed with this account's sessions. Its calls are not tallied (the proxy's log records them)."""
        client = PlatformClient(base_url or self.pair.platform_svc.url, api_key=self.api_key, **options)
        with self._lock:
            self._clients.append(client)
        return client

    def close(self) -> None:
        with self._lock:
            for session in self._sessions:
                session.close()
            self._sessions.clear()
            for client in self._clients:
                client.close()
            self._clients.clear()


def expect(response: requests.Response, *statuses: int) -> Any:
    """The decoded body of an answer with one of ``statuses`` (None for an empty body)."""
    assert response.status_code in statuses, (
        f"{response.request.method} {response.url}: {response.status_code} {response.text}"
    )
    return response.json() if response.content else None


class Reconciler:
    """A running ``platform-svc reconcile`` (see :meth:`Pair.reconciler`) and what it printed so far."""

    def __init__(self, process: subprocess.Popen, log: Path) -> None:
        self.process = process
        self.log = log

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL, as a crash would: no clean-up of any kind."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


@dataclass(frozen=True)
class Served:
    """A service some other harness runs, at ``url``: a :class:`Pair` neither starts nor stops it."""

    url: str

    def stop(self, sig: int = signal.SIGTERM) -> None:
        pass


@dataclass(frozen=True)
class Run:
    """One ``platform-svc reconcile --once`` process."""

    returncode: int
    pushed: int
    output: str


@dataclass(frozen=True)
class Mark:
    """Where the counters stood when a scenario began."""

    log: int
    public: Counter
    events: Counter
    started: float = field(default_factory=time.monotonic)


class Pair:
    """cluster_svc and platform_svc side by side, their databases, and what drives them.

    ``env`` is added to both services' (and the CLI's) environment, over
    :data:`TIMINGS` (``ID_HORIZON_SECONDS`` there is :attr:`horizon`); with
    ``proxy``, platform_svc reaches cluster_svc through a fault proxy
    (:attr:`proxy`). With ``purge_every``, purge runs on both sides as an
    operator runs it: ``cluster-svc purge --every`` beside the pair from
    start to stop (:meth:`purging`), and every :meth:`reconciler` with
    ``--purge-interval`` (unless the caller gives its own). ``service_env``
    adds to one service's ``serve`` alone (by ``cluster_svc`` or ``platform_svc``):
    a fake clock (tooling.fakeclock) around one process. Start it with
    :meth:`start` (or ``with``).
    """

    def __init__(
        self,
        *,
        cluster_db_url: str,
        platform_db_url: str,
        workdir: Path,
        env: dict[str, str] | None = None,
        proxy: bool = False,
        workers: int = 2,
        purge_every: float | None = None,
        service_env: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.token = TOKEN
        self.cluster_db_url = cluster_db_url
        self.platform_db_url = platform_db_url
        self.workdir = workdir
        # TMPDIR: what the processes leave behind when killed (serve's metrics folder) stays in the work folder.
        (workdir / "tmp").mkdir(exist_ok=True)
        self.env = {**TIMINGS, **RATE_LIMITS, "TMPDIR": str(workdir / "tmp"), **(env or {})}
        self.horizon = Horizon(id_horizon_seconds(self.env))
        self.purge_every = purge_every
        self.service_env = service_env or {}
        self._background = ExitStack()  # what runs beside the services until stop (the purge)
        self._purges = 0
        self.serve = ["serve", "--workers", str(workers), "--threads", "8"]
        self.tally = Tally()
        self.events: Counter[str] = Counter()  # the crashes a test caused, by kind
        self.apis: list[PublicApi] = []
        self.current: PublicApi | None = None  # the account api() calls as
        self._runs = 0
        self.cluster_svc = self._cluster_service(free_port())
        self.proxy = FaultProxy(self.cluster_svc.url, delay=DELAY_BEYOND_INLINE_TIMEOUT) if proxy else None
        self.platform_svc: LiveServer | None = None
        self.commands = Commands(workdir)
        # The test's own reads, on kept connections (a new one per read starts a server process:
        # a wait polling the rows 20 times a second took a fifth of a core). They must survive a restart
        # of either PostgreSQL: a kept connection is tested before each use, and replaced if dead.
        self.cluster_engine = create_engine(cluster_db_url, pool_pre_ping=True, pool_size=2)
        self.platform_engine = create_engine(platform_db_url, pool_pre_ping=True, pool_size=2)

    @classmethod
    def served(
        cls, *, public_url: str, internal_url: str, token: str, platform_db_url: str, cluster_db_url: str,
        workdir: Path, env: dict[str, str],
    ) -> Pair:
        """A pair some other harness runs (``tooling.ha``: replicas behind a balancer): the
        services are the two URLs, never started or stopped here; ``env`` is the services'
        own, for the CLI and reconcilers this pair starts."""
        pair = cls(cluster_db_url=cluster_db_url, platform_db_url=platform_db_url, workdir=workdir, env=env)
        pair.token = token
        pair.cluster_svc, pair.platform_svc = Served(internal_url), Served(public_url)
        return pair

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> Pair:
        """The proxy, then both services side by side (each takes about a second to start),
        and the purge beside them if the pair purges (it needs only the database)."""
        if self.proxy is not None:
            self.proxy.start()
        self.platform_svc = self._platform_service(free_port())
        starts = [server.start for server in (self.cluster_svc, self.platform_svc)]
        if self.purge_every is not None:
            starts.append(lambda: self._background.enter_context(self.purging(self.purge_every)))
        with ThreadPoolExecutor(len(starts)) as pool:
            for started in [pool.submit(start) for start in starts]:
                started.result()
        return self

    def __enter__(self) -> Pair:
        try:
            return self.start()
        except BaseException:
            self.stop()  # whatever had started
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Everything killed at once: nothing is checked after this, and a graceful stop of
        ``serve`` takes a second or two (a test that needs one calls ``stop_cluster_svc``).
        The purge beside them is stopped first, and must exit 0."""
        try:
            self._background.close()
        finally:
            self._stop_services()

    def _stop_services(self) -> None:
        for api in self.apis:
            api.close()
        for server in (self.platform_svc, self.cluster_svc):
            if server is not None:
                server.stop(signal.SIGKILL)
        if self.proxy is not None:
            self.proxy.stop()
        self.cluster_engine.dispose()
        self.platform_engine.dispose()

    @property
    def cluster_env(self) -> dict[str, str]:
        return {"CLUSTER_DATABASE_URL": self.cluster_db_url, "INTERNAL_TOKEN": self.token, **self.env}

    @property
    def platform_env(self) -> dict[str, str]:
        """platform_svc's settings: for ``serve``, the CLI and the reconciler."""
        return {
            "PLATFORM_DATABASE_URL": self.platform_db_url,
            "CLUSTER_SVC_URL": (self.proxy or self.cluster_svc).url,
            "INTERNAL_TOKEN": self.token,
            **self.env,
        }

    def _cluster_service(self, port: int, env: dict[str, str] | None = None) -> LiveServer:
        argv = [console_script("cluster-svc"), *self.serve]
        env = {**self.cluster_env, **self.service_env.get("cluster_svc", {}), **(env or {})}
        return LiveServer(argv, env, port=port, output=self.workdir / "cluster_svc.log")

    def _platform_service(self, port: int, env: dict[str, str] | None = None) -> LiveServer:
        argv = [console_script("platform-svc"), *self.serve]
        env = {**self.platform_env, **self.service_env.get("platform_svc", {}), **(env or {})}
        return LiveServer(argv, env, port=port, output=self.workdir / "platform_svc.log")

    def platform_replica(self, env: dict[str, str] | None = None) -> LiveServer:
        """Another platform_svc on the same database, on a port of its own (started; the caller stops it)."""
        return self._platform_service(free_port(), env).start()

    # -- processes -----------------------------------------------------------------

    @contextmanager
    def frozen_cluster_svc(self) -> Iterator[None]:
        """cluster_svc's master and workers stopped (SIGSTOP) for the block, then thawed:
        connections are accepted and nothing is answered, as with a hung process."""
        group = self.cluster_svc.process.pid
        os.killpg(group, signal.SIGSTOP)
        try:
            yield
        finally:
            os.killpg(group, signal.SIGCONT)

    def stop_cluster_svc(self, sig: int = signal.SIGTERM) -> None:
        self.cluster_svc.stop(sig)

    def kill_cluster_svc(self) -> None:
        self.cluster_svc.stop(signal.SIGKILL)
        self.events["sigkill cluster_svc"] += 1

    def restart_cluster_svc(self, env: dict[str, str] | None = None) -> None:
        """cluster_svc again on the same port, where platform_svc (or the proxy) sends everything;
        with ``env`` over its settings (a new ``INTERNAL_TOKEN``, say)."""
        self.cluster_svc = self._cluster_service(self.cluster_svc.port, env).start()

    def kill_platform_svc(self) -> None:
        self.platform_svc.stop(signal.SIGKILL)
        self.events["sigkill platform_svc"] += 1

    def restart_platform_svc(self, env: dict[str, str] | None = None) -> None:
        self.platform_svc = self._platform_service(self.platform_svc.port, env).start()

    def cli(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run ``platform-svc ARGS`` to completion, in a process of its own forked from one with the
        commands imported (:mod:`tooling.commands`: what the installed script runs after its imports,
        without half a second of CPU each); the test reads the exit code."""
        return self.commands.run("platform-svc", *args, env={**os.environ, **self.platform_env, **(env or {})},
                                 timeout=timeout)

    def cluster_cli(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        """Run ``cluster-svc ARGS`` to completion (``purge``, say), as :meth:`cli` runs its commands."""
        return self.commands.run("cluster-svc", *args, env={**os.environ, **self.cluster_env, **(env or {})},
                                 timeout=timeout)

    @contextmanager
    def purging(self, every: float) -> Iterator[Path]:
        """``cluster-svc purge --every EVERY`` running until the block ends, then stopped with
        SIGTERM (it must exit 0). Its first pass is done when the block starts; the block gets
        the log its ``purge:`` lines go to."""
        self._purges += 1
        log = self.workdir / f"purge-{self._purges}.log"
        argv = [console_script("cluster-svc"), "purge", "--every", str(every)]
        with _running(argv, self.cluster_env, log, ready=b"purge: ", what="the purge"):
            yield log

    @contextmanager
    def reconciler(self, *args: str, env: dict[str, str] | None = None) -> Iterator[Reconciler]:
        """``platform-svc reconcile ARGS`` running until the block ends, then stopped with SIGTERM
        (it finishes the pushes it holds, and must exit 0), unless the block ended it itself.

        It is running, its SIGTERM handler installed, when the block starts. When the pair
        purges (``purge_every``), it runs with ``--purge-interval`` that often unless ``args``
        say otherwise.
        """
        if self.purge_every is not None and "--purge-interval" not in args:
            args = (*args, "--purge-interval", str(self.purge_every))
        self._runs += 1
        log = self.workdir / f"reconciler-{self._runs}.log"
        argv = [console_script("platform-svc"), "reconcile", *args]
        with _running(argv, {**self.platform_env, **(env or {})}, log, ready=b"reconciler running",
                      what="the reconciler") as process:
            yield Reconciler(process, log)

    def reconcile(self, processes: int = 1, *, concurrency: int = 8, batch: int = 100) -> list[Run]:
        """``platform-svc reconcile --once``, ``processes`` of them started together."""
        return self.finish(self.start_reconcilers(processes, concurrency=concurrency, batch=batch))

    def start_reconcilers(self, processes: int = 1, *, concurrency: int = 8, batch: int = 100) -> list:
        """Start ``platform-svc reconcile --once`` processes (forked as :meth:`cli` runs its commands);
        :meth:`finish` waits for them. Each is ``(process, argv)``, the process answering ``poll()``."""
        args = ["reconcile", "--once", "--concurrency", str(concurrency), "--batch", str(batch)]
        env = {**os.environ, **self.platform_env}
        return [(self.commands.start("platform-svc", *args, env=env), args) for _ in range(processes)]

    def finish(self, started: list) -> list[Run]:
        runs = []
        for process, _ in started:
            result = process.wait(timeout=600)
            output = result.stdout + result.stderr
            pushed = re.search(r"^pushed (\d+) rows?", output, re.MULTILINE)
            runs.append(Run(result.returncode, int(pushed.group(1)) if pushed else 0, output))
        return runs

    def pending(self) -> tuple[int, float]:
        """Rows still pending, and the seconds until the soonest may be pushed again."""
        due = " UNION ALL ".join(
            f"SELECT next_attempt_at, lease_until FROM {resource.table.name} WHERE sync_state = 'pending'"
            for resource in RESOURCES
        )
        with self.platform_engine.connect() as conn:
            count, due_in = conn.execute(
                text(
                    "SELECT count(*), EXTRACT(EPOCH FROM min(greatest(next_attempt_at,"
                    f" coalesce(lease_until, next_attempt_at))) - now()) FROM ({due}) AS due"
                )
            ).one()
        return count, float(due_in or 0)

    def converge(self, *, processes: int = 1, deadline: float = 180, **options: Any) -> list[Run]:
        """Run the reconciler until no row is pending (failed rows stay, for the comparison).

        Between runs it waits for the backoff or lease the rows name, nothing else.
        """
        give_up = time.monotonic() + deadline
        runs: list[Run] = []
        while True:
            runs += self.reconcile(processes, **options)
            count, due_in = self.pending()
            if count == 0:
                return runs
            if time.monotonic() + due_in > give_up:
                raise AssertionError(f"{count} rows still pending after {deadline} s; last run:\n{runs[-1].output}")
            time.sleep(min(max(due_in, 0.05), 5.0))

    def logs(self, lines: int = 40) -> str:
        """The end of every process log, for a failure report."""
        out = []
        for log in sorted([*self.workdir.glob("*.log"), *self.workdir.glob("*.out")]):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(out)

    # -- accounts and the public API -------------------------------------------

    def account(self, name: str, *, cli: bool = True) -> PublicApi:
        """A new account, made with ``platform-svc create-account NAME --json``.

        Or, without ``cli``, made by what that command calls
        (``services.create_account``) in this process: a few milliseconds
        instead of a second and a half of starting a process, for a test's own
        account on a shared pair.
        """
        if cli:
            result = self.cli("create-account", name, "--json", timeout=60)
            assert result.returncode == 0, result.stderr
            created = json.loads(result.stdout)
        else:
            from platform_svc.api import services

            with self.platform_engine.begin() as conn:
                account_id, api_key = services.create_account(db_session=conn, name=name)
            created = {"account_id": str(account_id), "api_key": api_key}
        api = PublicApi(self, created["account_id"], created["api_key"])
        self.apis.append(api)
        return api

    def use_account(self, api: PublicApi) -> PublicApi:
        """Make ``api``'s account the one :meth:`api` calls as and the checks below look at."""
        self.current = api
        return api

    @property
    def account_id(self) -> str:
        return self.current.account_id

    @property
    def api_key(self) -> str:
        return self.current.api_key

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """Call platform_svc's public API as the current account."""
        return self.current.call(method, path, **kwargs)

    def internal(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """Call cluster_svc directly (never through the proxy), with the internal token."""
        headers = {"Authorization": f"Bearer {self.token}"}
        return requests.request(method, self.cluster_svc.url + path, headers=headers, timeout=30, **kwargs)

    # -- the databases --------------------------------------------------------------

    def platform_rows(self, table: str) -> dict[str, dict]:
        """The current account's rows of a platform table, by ID."""
        return _rows(self.platform_engine, f"SELECT * FROM {table} WHERE account_id = :account", self.account_id)

    def cluster_svc_rows(self, table: str) -> dict[str, dict]:
        """cluster_svc's rows of a table, by ID (every team's)."""
        return _rows(self.cluster_engine, f"SELECT * FROM {table}")

    def platform_row(self, table: str, object_id: str) -> dict[str, Any] | None:
        return _row(self.platform_engine, table, object_id)

    def cluster_row(self, table: str, object_id: str) -> dict[str, Any] | None:
        return _row(self.cluster_engine, table, object_id)

    def compare(self, *, account_id: str | None = None) -> Comparison:
        """Both databases side by side (:func:`tooling.compare.compare`), of one account or all."""
        if self.proxy is not None:
            self.proxy.wait_idle(timeout=60)  # a delayed request still on its way could land later
        return compare(self.platform_engine, self.cluster_engine, account_id=account_id, horizon=self.horizon)

    def all_synced(self) -> bool:
        """The current account has rows, and every one of them (of every resource) is synced."""
        tables = [resource.table.name for resource in RESOURCES]
        return {row["sync_state"] for table in tables for row in self.platform_rows(table).values()} == {"synced"}

    def assert_downstream_matches(self) -> None:
        """Every row of the current account is synced and cluster_svc holds exactly what it says."""
        comparison = self.compare(account_id=self.account_id)
        assert comparison.exact, comparison.describe()

    # -- what a scenario counts ----------------------------------------------------

    def mark(self) -> Mark:
        return Mark(len(self.proxy.log) if self.proxy else 0, self.tally.snapshot(), Counter(self.events))

    def public_5xx(self, mark: Mark) -> int:
        return sum(n for status, n in (self.tally.snapshot() - mark.public).items() if status and status >= 500)


@contextmanager
def _running(argv: list[str], env: dict[str, str], log: Path, *, ready: bytes, what: str) -> Iterator[subprocess.Popen]:
    """A process of ours running until the block ends, its output in ``log`` (a file, not a
    pipe: a full pipe would block its logging), in a session of its own; the block starts once
    ``ready`` is in its output. Then SIGTERM, and it must exit 0, unless the block ended it itself."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 60
        while ready not in log.read_bytes():
            assert process.poll() is None, f"{what} exited with {process.returncode} at start-up: {log.read_text()}"
            assert time.monotonic() < deadline, f"{what} did not start within 60 s"
            time.sleep(0.02)
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=120)
            assert process.returncode == 0, log.read_text(errors="replace")[-5000:]


def start_pair(server_url: str, workdir: Path, *, cluster_server_url: str | None = None, **options: Any) -> Pair:
    """A started pair on two fresh, migrated databases of ``server_url`` (cluster_svc's on
    ``cluster_server_url`` if given); ``options``: see :class:`Pair`. Stop it."""
    pair = Pair(
        cluster_db_url=fresh_database(cluster_server_url or server_url, "cluster_svc", migrations=CLUSTER_MIGRATIONS),
        platform_db_url=fresh_database(server_url, "platform_svc", migrations=PLATFORM_MIGRATIONS),
        workdir=workdir,
        **options,
    )
    return pair.__enter__()  # stopped again if it fails to start


def _rows(engine, query: str, account_id: str | None = None) -> dict[str, dict]:
    with engine.connect() as conn:
        rows = conn.execute(text(query), {"account": account_id}).mappings()
        return {str(row["id"]): dict(row) for row in rows}


def _row(engine, table: str, object_id: str) -> dict[str, Any] | None:
    with engine.connect() as conn:
        row = conn.execute(text(f"SELECT * FROM {table} WHERE id = :id"), {"id": object_id}).mappings().first()
    return None if row is None else dict(row)
