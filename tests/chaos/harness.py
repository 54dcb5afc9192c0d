"""The pair as a user runs it, with the fault proxy between the two services.

A :class:`Pair` is cluster_svc and platform_svc as gunicorn processes (their
console scripts) on fresh databases, platform_svc calling cluster_svc through
a :class:`~tooling.faultproxy.FaultProxy`, and the reconciler as processes too.
Around it: a public client that tallies every answer, bursts of calls on a
thread pool the test can follow, and convergence (run the reconciler until no
row is pending, waiting only for the times the rows themselves name).
"""
from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from cluster_svc.cli import MIGRATIONS as CLUSTER_MIGRATIONS
from platform_svc.cli import MIGRATIONS as PLATFORM_MIGRATIONS
from shared.cli import migrate
from tooling.faultproxy import Fault, FaultProxy
from shared.schemas import PLANS, REGIONS
from tooling.testing import LiveServer, console_script, free_port
from tests.chaos.convergence import Comparison, Figures, compare, install_audit, read_audit

TOKEN = "chaos-internal-token"
# platform_svc's inline breaker probes a recovered cluster_svc after this long
# (5 s by default); short, so that inline pushes resume soon after each outage.
BREAKER_COOL_DOWN = 1
# platform_svc's inline push waits 1 s for an answer; a delayed request waits longer.
DELAY_BEYOND_INLINE_TIMEOUT = 1.5


@dataclass(frozen=True)
class Scale:
    """How big each scenario is; every size asserts the same things."""

    name: str
    creates: int  # scenario 1: public cluster creates (a firewall rule on every third)
    objects: int  # scenario 2: clusters then updated, some deleted
    burst: int  # scenario 3: creates during the crashes
    backlog: int  # scenario 5: clusters waiting (a firewall rule on every fourth)
    reconcilers: int  # scenario 5: reconciler processes at once
    fuzz_examples: int  # scenario 6: generated requests per operation and mode
    outage_seconds: float  # scenario 7: how long cluster_svc stays down
    outage_writes: int  # scenario 7: public writes during it
    restart_burst: int  # scenario 8: public creates while platform's PostgreSQL restarts
    threads: int = 8  # public clients at once


SCALES = {
    "ci": Scale(
        "ci", creates=150, objects=60, burst=120, backlog=400, reconcilers=4, fuzz_examples=10,
        outage_seconds=6, outage_writes=40, restart_burst=40,
    ),
    "full": Scale(
        "full", creates=600, objects=300, burst=500, backlog=3000, reconcilers=6, fuzz_examples=60,
        outage_seconds=120, outage_writes=1000, restart_burst=300,
    ),
}


def scale_from_env() -> Scale:
    name = os.environ.get("CHAOS_SCALE", "").strip() or "ci"
    if name not in SCALES:
        raise ValueError(f"CHAOS_SCALE must be one of {', '.join(SCALES)}, got {name!r}")
    return SCALES[name]


def cluster_body(rng: random.Random, index: int) -> dict[str, Any]:
    return {
        "name": f"c{index}-{rng.randrange(10**6)}",
        "region": rng.choice(REGIONS),
        "postgres_version": rng.randint(14, 17),
        "plan": rng.choice(PLANS),
        "storage_gb": rng.randint(10, 4096),
    }


def rule_body(rng: random.Random) -> dict[str, Any]:
    return {
        "cidr": f"10.{rng.randrange(256)}.{rng.randrange(256)}.0/24",
        "description": rng.choice(["office", "vpn ☂", "it's 'quoted'", ""]) + f" {rng.randrange(10**6)}",
    }


# -- the public side -----------------------------------------------------------------


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
        self._lock = threading.Lock()

    def call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """:raise requests.RequestException: no answer came (the tally counts it too)."""
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            session.headers["Authorization"] = f"Bearer {self.api_key}"
            with self._lock:
                self._sessions.append(session)
        try:
            response = session.request(method, self.pair.platform.url + path, timeout=60, **kwargs)
        except requests.RequestException:
            self.pair.tally.record(None)
            raise
        self.pair.tally.record(response.status_code)
        return response

    def create_cluster(self, body: dict[str, Any]) -> dict[str, Any]:
        return expect(self.call("POST", "/v1/clusters", json=body), 201)

    def create_rule(self, cluster_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return expect(self.call("POST", f"/v1/clusters/{cluster_id}/firewall-rules", json=body), 201)

    def close(self) -> None:
        with self._lock:
            for session in self._sessions:
                session.close()
            self._sessions.clear()


def expect(response: requests.Response, *statuses: int) -> Any:
    """The decoded body of an answer with one of ``statuses`` (None for an empty body)."""
    assert response.status_code in statuses, (
        f"{response.request.method} {response.url}: {response.status_code} {response.text}"
    )
    return response.json() if response.content else None


class Burst:
    """Calls run on a thread pool in the background; the test follows their progress."""

    def __init__(self, calls: list[Callable[[], Any]], threads: int) -> None:
        self._calls = calls
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="burst")
        self._outcomes: list[Any] = []  # in the order the calls finished
        self._progress = threading.Condition()
        self._futures: list = []

    def start(self) -> Burst:
        self._futures = [self._pool.submit(self._run, call) for call in self._calls]
        return self

    def _run(self, call: Callable[[], Any]) -> Any:
        outcome: Any = None
        try:
            outcome = call()
            return outcome
        except Exception as exc:
            outcome = exc
            raise
        finally:
            with self._progress:
                self._outcomes.append(outcome)
                self._progress.notify_all()

    def wait_finished(self, count: int, timeout: float = 120) -> None:
        """Wait until ``count`` calls have returned (or raised)."""
        self.wait_until(lambda outcome: True, count, timeout)

    def wait_until(self, predicate: Callable[[Any], bool], count: int, timeout: float = 120) -> None:
        """Wait until ``count`` calls have finished with an outcome ``predicate`` accepts."""
        with self._progress:
            done = lambda: sum(1 for outcome in self._outcomes if predicate(outcome)) >= count  # noqa: E731
            assert self._progress.wait_for(done, timeout), (
                f"fewer than {count} calls finished as wanted within {timeout} s"
            )

    def count(self, predicate: Callable[[Any], bool]) -> int:
        with self._progress:
            return sum(1 for outcome in self._outcomes if predicate(outcome))

    def results(self, timeout: float = 300) -> list[Any]:
        """Each call's return value, or the exception it raised."""
        self.wait_finished(len(self._calls), timeout)
        self._pool.shutdown()
        return [future.exception() or future.result() for future in self._futures]


def run_all(calls: list[Callable[[], Any]], threads: int) -> list[Any]:
    return Burst(calls, threads).start().results()


# -- processes -------------------------------------------------------------------------


class Service(LiveServer):
    """A LiveServer whose output goes to a log file (shown when a test fails)."""

    def __init__(self, argv: list[str], env: dict[str, str], *, log: Path, port: int | None = None) -> None:
        super().__init__(argv, env, port=port)
        self.log = log

    def start(self, timeout: float = 30.0) -> Service:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self.argv, env=self.env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            self.wait_healthy(timeout)
        except BaseException:
            self.stop(signal.SIGKILL)  # no process is left behind by a start that failed
            raise
        return self


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
    """Both services on fresh databases, platform_svc reaching cluster_svc through the proxy."""

    def __init__(self, *, platform_db_url: str, cluster_db_url: str, workdir: Path) -> None:
        self.platform_db_url = platform_db_url
        self.cluster_db_url = cluster_db_url
        self.workdir = workdir
        self.tally = Tally()
        self.events: Counter[str] = Counter()  # the crashes a scenario caused, by kind
        self.apis: list[PublicApi] = []
        self._runs = 0

    # lifecycle

    def start(self) -> Pair:
        migrate(CLUSTER_MIGRATIONS, self.cluster_db_url)
        migrate(PLATFORM_MIGRATIONS, self.platform_db_url)
        # NullPool: the test's own reads must survive a restart of cluster_svc's PostgreSQL.
        self.cluster_engine = create_engine(self.cluster_db_url, poolclass=NullPool)
        self.platform_engine = create_engine(self.platform_db_url, poolclass=NullPool)
        install_audit(self.cluster_engine)
        self.cluster_svc = self._cluster_service(free_port()).start()
        self.proxy = FaultProxy(self.cluster_svc.url, delay=DELAY_BEYOND_INLINE_TIMEOUT).start()
        self.platform = self._platform_service(free_port()).start()
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
        for api in self.apis:
            api.close()
        for service in ("platform", "proxy", "cluster_svc"):
            if hasattr(self, service):
                getattr(self, service).stop()
        for engine in ("cluster_engine", "platform_engine"):
            if hasattr(self, engine):
                getattr(self, engine).dispose()

    @property
    def platform_env(self) -> dict[str, str]:
        return {
            "PLATFORM_DATABASE_URL": self.platform_db_url,
            "CLUSTER_SVC_URL": self.proxy.url,
            "INTERNAL_TOKEN": TOKEN,
            "INLINE_BREAKER_COOL_DOWN_SECONDS": str(BREAKER_COOL_DOWN),
        }

    def _cluster_service(self, port: int) -> Service:
        return Service(
            [console_script("cluster-svc"), "serve", "--workers", "2", "--threads", "8"],
            {"CLUSTER_DATABASE_URL": self.cluster_db_url, "INTERNAL_TOKEN": TOKEN},
            log=self.workdir / "cluster_svc.log",
            port=port,
        )

    def _platform_service(self, port: int) -> Service:
        return Service(
            [console_script("platform-svc"), "serve", "--workers", "2", "--threads", "8"],
            self.platform_env,
            log=self.workdir / "platform_svc.log",
            port=port,
        )

    def kill_cluster_svc(self) -> None:
        self.cluster_svc.stop(signal.SIGKILL)
        self.events["sigkill cluster_svc"] += 1

    def restart_cluster_svc(self) -> None:
        """Start cluster_svc again on the same port, where the proxy sends everything."""
        self.cluster_svc = self._cluster_service(self.cluster_svc.port).start()

    def kill_platform(self) -> None:
        self.platform.stop(signal.SIGKILL)
        self.events["sigkill platform_svc"] += 1

    def restart_platform(self) -> None:
        self.platform = self._platform_service(self.platform.port).start()

    @contextmanager
    def reconciler_running(self, concurrency: int = 4, options: tuple[str, ...] = ()) -> Iterator[None]:
        """``platform-svc reconcile [OPTIONS]`` running (until the block ends) beside the inline pushes."""
        argv = [console_script("platform-svc"), "reconcile", "--concurrency", str(concurrency), *options]
        path = self.workdir / "reconciler.log"
        with open(path, "ab") as log:
            start = log.tell()
            process = subprocess.Popen(
                argv, env={**os.environ, **self.platform_env}, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            # Until it says it runs, its SIGTERM handler may not be installed yet, and a
            # short scenario would kill it during start-up instead of stopping it.
            deadline = time.monotonic() + 60
            while b"reconciler running" not in path.read_bytes()[start:]:
                assert process.poll() is None, f"the reconciler exited with {process.returncode} at start-up"
                assert time.monotonic() < deadline, "the reconciler did not start within 60 s"
                time.sleep(0.05)
            yield
        finally:
            process.send_signal(signal.SIGTERM)  # it finishes the pushes it holds, then exits
            returncode = process.wait(timeout=120)
            assert returncode == 0, f"the reconciler exited with {returncode} after SIGTERM"

    def logs(self, lines: int = 40) -> str:
        """The end of every process log, for a failure report."""
        out = []
        for log in sorted([*self.workdir.glob("*.log"), *self.workdir.glob("*.out")]):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(out)

    # accounts and the public API

    def account(self, name: str) -> PublicApi:
        """A new account, made with ``platform-svc create-account NAME --json``."""
        result = subprocess.run(
            [console_script("platform-svc"), "create-account", name, "--json"],
            env={**os.environ, **self.platform_env},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        created = json.loads(result.stdout)
        api = PublicApi(self, created["account_id"], created["api_key"])
        self.apis.append(api)
        return api

    # the reconciler

    def reconcile(self, processes: int = 1, *, concurrency: int = 8, batch: int = 100) -> list[Run]:
        """``platform-svc reconcile --once``, ``processes`` of them started together."""
        return self.finish(self.start_reconcilers(processes, concurrency=concurrency, batch=batch))

    def start_reconcilers(self, processes: int = 1, *, concurrency: int = 8, batch: int = 100) -> list:
        """Start ``platform-svc reconcile --once`` processes; :meth:`finish` waits for them."""
        argv = [console_script("platform-svc"), "reconcile", "--once", "--concurrency", str(concurrency)]
        argv += ["--batch", str(batch)]
        env = {**os.environ, **self.platform_env}
        started = []
        for _ in range(processes):
            self._runs += 1
            log = self.workdir / f"reconcile-{self._runs}.out"
            with open(log, "wb") as out:
                started.append((subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT), log))
        return started

    def finish(self, started: list) -> list[Run]:
        runs = []
        for process, log in started:
            returncode = process.wait(timeout=600)
            output = log.read_text(errors="replace")
            pushed = re.search(r"^pushed (\d+) rows", output, re.MULTILINE)
            runs.append(Run(returncode, int(pushed.group(1)) if pushed else 0, output))
        return runs

    def pending(self) -> tuple[int, float]:
        """Rows still pending, and the seconds until the soonest may be pushed again."""
        with self.platform_engine.connect() as conn:
            count, due_in = conn.execute(
                text(
                    """
                    SELECT count(*),
                           EXTRACT(EPOCH FROM min(greatest(next_attempt_at, coalesce(lease_until, next_attempt_at)))
                                              - now())
                    FROM (SELECT next_attempt_at, lease_until FROM clusters WHERE sync_state = 'pending'
                          UNION ALL
                          SELECT next_attempt_at, lease_until FROM firewall_rules WHERE sync_state = 'pending') AS due
                    """
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

    # what a scenario checks and reports

    def compare(self) -> Comparison:
        self.proxy.wait_idle(timeout=60)  # a delayed request still on its way could land later
        return compare(self.platform_engine, self.cluster_engine)

    def audit(self):
        return read_audit(self.cluster_engine)

    def mark(self) -> Mark:
        return Mark(len(self.proxy.log), self.tally.snapshot(), Counter(self.events))

    def figures(
        self, scenario: str, mark: Mark, comparison: Comparison, *, expected: tuple[int, int], notes: str = ""
    ) -> Figures:
        log = self.proxy.log[mark.log:]
        public = self.tally.snapshot()
        public.subtract(mark.public)
        audit = self.audit()
        return Figures(
            scenario=scenario,
            public_requests=sum(public.values()),
            public_5xx=sum(n for status, n in public.items() if status is not None and status >= 500),
            downstream_requests=len(log),
            downstream_5xx=sum(1 for e in log if e.status is not None and e.status >= 500),
            faults=Counter(e.fault.value for e in log if e.fault is not Fault.PASS) + (self.events - mark.events),
            expected=expected,
            platform=comparison.live_and_deleted(comparison.platform),
            cluster_svc=comparison.live_and_deleted(comparison.downstream),
            unsynced=comparison.unsynced,
            duplicates=audit.duplicates + comparison.orphans,
            resurrections=audit.resurrections,
            seconds=time.monotonic() - mark.started,
            notes=notes,
        )

    def public_5xx(self, mark: Mark) -> int:
        return sum(n for status, n in (self.tally.snapshot() - mark.public).items() if status and status >= 500)

    def platform_row(self, table: str, object_id: str) -> dict[str, Any] | None:
        return _row(self.platform_engine, table, object_id)

    def cluster_row(self, table: str, object_id: str) -> dict[str, Any] | None:
        return _row(self.cluster_engine, table, object_id)


def _row(engine, table: str, object_id: str) -> dict[str, Any] | None:
    with engine.connect() as conn:
        row = conn.execute(text(f"SELECT * FROM {table} WHERE id = :id"), {"id": object_id}).mappings().first()
    return None if row is None else dict(row)
