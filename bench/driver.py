"""What ``make bench`` measures with: the contenders, wrk, the data each phase sets up, the drain,
the outages of P8 and P9, and the alternation of contenders round by round."""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extras
import requests
import uuid6

from bench.processes import ROOT, Server, freeze, pg_cursor, py_spy, run_checked, sql, thaw, tree_cpu
from tooling.testing import StatementCounter, console_script

LUA = Path(__file__).with_name("post.lua")
TOKEN = "bench-internal-token"
# The body post.lua sends; replays need objects created with the same immutable fields.
TEAM = "0193a1b2-7c00-7000-8000-0000000000aa"
FIELDS = {"name": "bench", "region": "eu-west-1", "postgres_version": 16, "plan": "standard-2", "storage_gb": 100}


@dataclass(frozen=True)
class Size:
    rounds: int
    duration: float  # seconds per contender per round
    warmup: float  # seconds per contender, once, before round 1
    big_rows: int  # P5: rows already stored
    pending: int  # P6: pending clusters per drain
    drain_rounds: int  # P6: how many phase-2 rounds include a drain
    replay_ids: int  # P3: existing IDs the replays pick from
    outage: float  # P9: seconds cluster_svc stays down
    outage_writes: int  # P9: public creates waiting when it comes back


FULL = Size(rounds=5, duration=5, warmup=2, big_rows=1_000_000, pending=10_000, drain_rounds=3, replay_ids=1000,
            outage=120, outage_writes=1000)


QUICK = Size(rounds=2, duration=2, warmup=1, big_rows=100_000, pending=1_000, drain_rounds=1, replay_ids=200,
             outage=15, outage_writes=200)


@dataclass
class Contender:
    key: str
    label: str
    url: str  # full URL of the POST route
    mode: str  # post.lua mode: create, replay, public
    token: str
    expect: int  # the status every answer should have
    ids_file: Path | None = None
    cpu_roots: dict[str, int] = field(default_factory=dict)  # process trees whose CPU to account
    samples: list[float] = field(default_factory=list)
    cpu: list[dict[str, float]] = field(default_factory=list)  # CPU ms per good request, per tree
    answers: list[dict[str, Any]] = field(default_factory=list)  # status counts and socket errors, per round
    problems: list[str] = field(default_factory=list)
    # public mode: count only answers that say "synced" (pushed inline); else every ``expect`` answer
    synced_only: bool = True
    # the state the contender runs in (P8: cluster_svc frozen), entered around each run
    condition: Any = field(default=contextlib.nullcontext)
    connections: int | None = None  # wrk -c for this contender (else the run's --connections)
    latency: list[tuple[float, float]] = field(default_factory=list)  # (p50, p99) ms per round
    wal: list[float] = field(default_factory=list)  # WAL bytes per good request, per round

    def probe(self) -> Contender:
        """A copy whose results are not kept (warm-up, profiling)."""
        return Contender(self.key, self.label, self.url, self.mode, self.token, self.expect, self.ids_file,
                         self.cpu_roots, synced_only=self.synced_only, condition=self.condition,
                         connections=self.connections)

    def at(self, connections: int, label: str | None = None) -> Contender:
        """The same load at another number of wrk connections."""
        copy = self.probe()
        copy.connections = connections
        copy.key = f"{self.key}.c{connections}"
        copy.label = label or f"{self.label} (-c{connections})"
        return copy

    def latency_median(self, which: int) -> float:
        return statistics.median(sample[which] for sample in self.latency) if self.latency else float("nan")

    @property
    def wal_median(self) -> float:
        return statistics.median(self.wal) if self.wal else float("nan")

    def cpu_median(self, name: str) -> float:
        values = [sample[name] for sample in self.cpu if name in sample]
        return statistics.median(values) if values else float("nan")

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")


class Wrk:
    def __init__(self, threads: int, connections: int, server_url: str | None = None) -> None:
        self.threads = threads
        self.connections = connections
        self.server_url = server_url  # where to read pg_current_wal_lsn() (WAL bytes per request)

    def wal_lsn(self) -> str | None:
        return sql(self.server_url, "SELECT pg_current_wal_lsn()")[0][0] if self.server_url else None

    def run(self, contender: Contender, seconds: float) -> dict[str, Any]:
        """Drive one contender for ``seconds``; return post.lua's summary with ``rate`` (good answers/s)."""
        connections = contender.connections or self.connections
        argv = [
            "wrk", f"-t{min(self.threads, connections)}", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "5s",
            "-s", str(LUA), contender.url, "--", contender.mode, contender.token,
        ]
        if contender.ids_file is not None:
            argv.append(str(contender.ids_file))
        with contender.condition():
            lsn_before = self.wal_lsn()
            before = tree_cpu(contender.cpu_roots)
            done = subprocess.run(argv, capture_output=True, text=True)
            after = tree_cpu(contender.cpu_roots)
            lsn_after = self.wal_lsn()
        line = next((line for line in done.stdout.splitlines() if line.startswith("BENCH ")), None)
        if done.returncode != 0 or line is None:
            raise RuntimeError(f"wrk failed on {contender.label}:\n{done.stdout}{done.stderr}")
        result = json.loads(line[len("BENCH "):])
        seconds_run = result["duration_us"] / 1e6
        good = result["status"].get(str(contender.expect), 0)
        if contender.mode == "public" and contender.synced_only:
            good = result["synced"]  # created *and* pushed down inline
        result["rate"] = good / seconds_run
        result["cpu_ms"] = {name: 1000 * (after[name] - before[name]) / max(1, good) for name in after}
        result["cpu_ms"]["wrk"] = result["cpu_ms"].pop("children")
        result["cpu_ms"]["machine busy"] = (after["machine busy"] - before["machine busy"]) / seconds_run  # cores
        if lsn_before is not None:
            # The whole server's WAL: contenders run one at a time, so it is this one's (plus any checkpoint).
            wal = sql(self.server_url, "SELECT pg_wal_lsn_diff(%s, %s)", (lsn_after, lsn_before))[0][0]
            result["wal_bytes"] = float(wal) / max(1, good)
        bad = result["requests"] - good + sum(result["errors"].values())
        if bad > 0.01 * max(1, result["requests"]):
            contender.problems.append(f"{bad} of {result['requests']} answers not {contender.expect}"
                                      f"{' synced' if contender.mode == 'public' and contender.synced_only else ''}:"
                                      f" {result}")
        return result


def cluster_body(object_id: str) -> dict[str, Any]:
    return {"id": object_id, "team_id": TEAM, **FIELDS}


def seed_ids(urls: dict[str, str], count: int, ids_file: Path) -> None:
    """Create the same ``count`` clusters through each contender's API, for the replays."""
    ids = [str(uuid.uuid4()) for _ in range(count)]
    ids_file.write_text("\n".join(ids) + "\n")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    for name, url in urls.items():
        with requests.Session() as session, ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(
                lambda i: session.post(url, json=cluster_body(i), headers={**headers, "Idempotency-Key": i}).status_code,
                ids,
            ))
        if set(statuses) != {201}:
            raise RuntimeError(f"seeding {name}: statuses {sorted(set(statuses))}")


def load_rows(url: str, rows: int) -> float:
    """Store ``rows`` live clusters (generate_series, not the API), then VACUUM ANALYZE; return seconds."""
    started = time.monotonic()
    with pg_cursor(url) as cur:
        cur.execute("SET synchronous_commit = off")
        cur.execute("SET maintenance_work_mem = '256MB'")
        cur.execute(
            """
            INSERT INTO clusters (id, team_id, name, region, postgres_version, plan, storage_gb)
            SELECT gen_random_uuid(),
                   ('00000000-0000-4000-8000-' || lpad(to_hex(i %% 1000), 12, '0'))::uuid,
                   'loaded-' || i,
                   (ARRAY['us-east-1','us-west-2','eu-west-1','eu-central-1','ap-southeast-1'])[1 + i %% 5],
                   14 + i %% 4,
                   (ARRAY['hobby-0','standard-2','standard-4','memory-8'])[1 + i %% 4],
                   10 + i %% 4000
            FROM generate_series(1, %s) AS i
            """,
            (rows,),
        )
        cur.execute("VACUUM ANALYZE clusters")
        cur.execute("CHECKPOINT")
    return time.monotonic() - started


def count_statements(db_url: str) -> tuple[list[str], list[str], str]:
    """P4: the statements one create and one replay send, counted in-process.

    Also says what else reaches PostgreSQL per request that the statement
    counter cannot see: pool checkouts, each a ``SELECT 1`` when pre-ping is on.
    """
    from sqlalchemy import event

    from cluster_svc import Settings, create_app

    app = create_app(Settings(database_url=db_url, internal_token=TOKEN), testing=True)
    engine = app.extensions["database"].engine
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {TOKEN}"
    counter = StatementCounter(engine)
    body = cluster_body(str(uuid.uuid4()))
    assert client.get("/v1/clusters?limit=1").status_code == 200  # warm the pool
    checkouts = []
    event.listen(engine.pool, "checkout", lambda *args: checkouts.append(1))
    with counter.counting() as create:
        assert client.post("/v1/clusters", json=body).status_code == 201
    with counter.counting() as replay:
        assert client.post("/v1/clusters", json=body).status_code == 200
    pre_ping = bool(getattr(engine.pool, "_pre_ping", False))
    engine.dispose()
    extra = (f"{len(checkouts) / 2:g} pool checkout per request"
             f"{', each a pre-ping SELECT 1 round trip' if pre_ping else ''}; plus BEGIN and COMMIT")
    return [s.split(None, 1)[0].upper() for s in create], [s.split(None, 1)[0].upper() for s in replay], extra


def insert_pending(url: str, account_id: str, count: int) -> None:
    """P6: clusters recorded while cluster_svc was down: UUIDv7 ids, synced_generation 0, due now."""
    rows = [(str(uuid6.uuid7()), account_id, f"pending-{i}", "eu-west-1", 16, "standard-2", 100) for i in range(count)]
    with pg_cursor(url) as cur:
        psycopg2.extras.execute_values(
            cur,
            "INSERT INTO clusters (id, account_id, name, region, postgres_version, plan, storage_gb) VALUES %s",
            rows,
            page_size=1000,
        )


@dataclass(frozen=True)
class Drain:
    rate: float  # rows pushed per second of wall time, process start-up included
    pushed: int
    seconds: float
    cpu_ms: dict[str, float]  # CPU ms per row: reconciler, cluster_svc, postgres; machine: cores busy


def drain(env: dict[str, str], concurrency: int, platform_url: str, roots: dict[str, int]) -> Drain:
    """Time ``platform-svc reconcile --once`` until nothing is due; every row must end synced."""
    before = tree_cpu(roots)
    started = time.monotonic()
    out = run_checked(
        [console_script("platform-svc"), "reconcile", "--once", "--concurrency", str(concurrency)], env, "reconcile"
    )
    seconds = time.monotonic() - started
    after = tree_cpu(roots)
    match = re.search(r"pushed (\d+) rows", out)
    pushed = int(match.group(1)) if match else 0
    left = sql(platform_url, "SELECT count(*) FROM clusters WHERE sync_state <> 'synced'")[0][0]
    if left:
        raise RuntimeError(f"reconcile left {left} clusters unsynced:\n{out}")
    cpu_ms = {name: 1000 * (after[name] - before[name]) / max(1, pushed) for name in after}
    cpu_ms["reconciler"] = cpu_ms.pop("children")
    cpu_ms["machine busy"] = (after["machine busy"] - before["machine busy"]) / seconds
    return Drain(pushed / seconds, pushed, seconds, cpu_ms)


def public_create(url: str, api_key: str, timeout: float = 10.0) -> dict[str, Any]:
    response = requests.post(url, json={"name": "bench", **{k: v for k, v in FIELDS.items() if k != "name"}},
                             headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout)
    if response.status_code != 201:
        raise RuntimeError(f"public create answered {response.status_code}: {response.text[:300]}")
    return response.json()


@contextmanager
def cluster_svc_down(cluster: Server, platform_server: Server, api_key: str, env: dict[str, str], log) -> Iterator[None]:
    """P8's state: cluster_svc frozen, and platform_svc's breakers already open.

    Priming: public creates until platform_svc answers them at once (each
    worker's breaker opens after a few inline pushes time out). Afterwards
    cluster_svc is thawed, what the run left pending is drained (not measured)
    and the breakers are closed again (creates answer "synced"), so the next
    contender meets a healthy pair.
    """
    url = platform_server.url + "/v1/clusters"
    freeze(cluster)
    try:
        quick = 0
        deadline = time.monotonic() + 60
        with ThreadPoolExecutor(8) as pool:
            while quick < 32 and time.monotonic() < deadline:
                started = time.monotonic()
                answers = list(pool.map(lambda _: public_create(url, api_key), range(8)))
                quick = quick + 8 if time.monotonic() - started < 0.2 and all(
                    a["sync_state"] == "pending" for a in answers) else 0
        yield
    finally:
        thaw(cluster)
    run_checked([console_script("platform-svc"), "reconcile", "--once"], env, "reconcile after P8")
    deadline = time.monotonic() + 60
    streak = 0
    while streak < 16:
        if time.monotonic() > deadline:
            raise RuntimeError("platform_svc's inline pushes did not recover within 60 s of cluster_svc's thaw")
        streak = streak + 1 if public_create(url, api_key)["sync_state"] == "synced" else 0
        if streak == 0:
            time.sleep(0.2)
    run_checked([console_script("platform-svc"), "reconcile", "--once"], env, "reconcile after P8")


@dataclass(frozen=True)
class Recovery:
    outage: float  # seconds cluster_svc was frozen
    waiting: int  # rows pending when it came back
    seconds: float  # from the thaw until every row was synced


def outage_recovery(cluster: Server, platform_server: Server, api_key: str, env: dict[str, str], platform_url: str,
                    size: Size, logs: Path) -> Recovery:
    """P9: the reconciler (default settings) runs throughout; cluster_svc is frozen for
    ``size.outage`` seconds while ``size.outage_writes`` public creates arrive; then it is
    thawed, and the time until every platform row is synced is measured."""
    url = platform_server.url + "/v1/clusters"
    with open(logs / "reconciler-p9.log", "ab") as out:
        reconciler = subprocess.Popen([console_script("platform-svc"), "reconcile"], env=env, cwd=ROOT,
                                      stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        freeze(cluster)
        frozen_at = time.monotonic()
        try:
            pace = 0.8 * size.outage / size.outage_writes  # the writes arrive during the first 80 %
            with ThreadPoolExecutor(4) as pool:
                futures = []
                for i in range(size.outage_writes):
                    time.sleep(max(0.0, frozen_at + i * pace - time.monotonic()))
                    futures.append(pool.submit(public_create, url, api_key))
                for future in futures:
                    future.result()
            time.sleep(max(0.0, frozen_at + size.outage - time.monotonic()))
            waiting = sql(platform_url, "SELECT count(*) FROM clusters WHERE sync_state <> 'synced'")[0][0]
        finally:
            thaw(cluster)
        thawed_at = time.monotonic()
        outage = thawed_at - frozen_at
        while sql(platform_url, "SELECT count(*) FROM clusters WHERE sync_state <> 'synced'")[0][0]:
            if time.monotonic() - thawed_at > 300:
                raise RuntimeError(f"P9: rows still unsynced 300 s after the recovery; see {logs}")
            time.sleep(0.02)
        return Recovery(outage, waiting, time.monotonic() - thawed_at)
    finally:
        os.killpg(reconciler.pid, signal.SIGTERM)
        try:
            reconciler.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(reconciler.pid, signal.SIGKILL)


def profile(server: Server, wrk: Wrk, contender: Contender, seconds: float, out_dir: Path, *, gil: bool) -> Path:
    """py-spy record (raw, every worker of ``server``) while wrk drives ``contender``.

    ``gil``: only the thread holding the GIL (where the Python CPU goes); otherwise
    every busy thread, including those blocked in psycopg2 on PostgreSQL (wall time).
    """
    out = out_dir / f"{contender.key}.{'gil' if gil else 'wall'}.txt"
    spy = subprocess.Popen(
        [py_spy(), "record", "--pid", str(server.process.pid), "--subprocesses", "-f", "raw", "-r", "200",
         "-d", f"{seconds + 1:g}", "-o", str(out), "--nonblocking", *(["--gil"] if gil else [])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # let py-spy attach
    wrk.run(contender.probe(), seconds)
    spy.wait(timeout=60)
    return out


def alternate(contenders: list[Contender], wrk: Wrk, size: Size, extra=None, log=print) -> None:
    """Warm each up once, then ``size.rounds`` rounds of A B C ...; ``extra(round)`` runs after each round."""
    for contender in contenders:
        wrk.run(contender.probe(), size.warmup)
    for r in range(1, size.rounds + 1):
        cells = []
        shift = (r - 1) % len(contenders)  # rotate the order each round: no contender always runs first
        for contender in contenders[shift:] + contenders[:shift]:
            result = wrk.run(contender, size.duration)
            contender.samples.append(result["rate"])
            contender.cpu.append(result["cpu_ms"])
            contender.answers.append({"status": result["status"], "errors": result["errors"]})
            contender.latency.append((result["p50_us"] / 1000, result["p99_us"] / 1000))
            if "wal_bytes" in result:
                contender.wal.append(result["wal_bytes"])
            cells.append(f"{contender.key} {result['rate']:.0f}")
            time.sleep(0.5)
        if extra is not None:
            cells.extend(extra(r))
        log(f"  round {r}/{size.rounds}: " + ", ".join(cells))
