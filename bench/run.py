"""``make bench``: the performance targets P1-P9 and P13 of docs/performance.md, in one run.

Everything runs the way users run it: a real PostgreSQL (embedded unless
``TEST_DATABASE_URL`` names one), cluster_svc and platform_svc started through
their console scripts, the two references in this folder (``limit_app.py``,
``keytable_app.py``) served by the same gunicorn settings, and ``wrk`` driving
each contender over keep-alive connections. Contenders alternate round by
round (A B C, then B C A, ...) and only ratios of medians from this one run
are reported, because the machine is shared and noisy.

Two phases keep PostgreSQL's 100 connections enough for every pool:

1. cluster_svc (empty table), cluster_svc on a table of 1,000,000 rows, limit
   and key-table: creates (a new UUID per request) and replays (one of a fixed
   set of existing IDs). Gives P1, P2, P3, P5.
2. cluster_svc and platform_svc (public creates, each pushed down inline; and
   public creates while cluster_svc is frozen with SIGSTOP, answered by the
   open circuit breaker), plus ``platform-svc reconcile --once`` draining
   10,000 pending clusters (in batches) in some rounds. Gives P6, P7 and P8.
3. The reconciler running with its default settings while cluster_svc is
   frozen for two minutes and 1,000 public creates arrive; then the seconds
   from its thaw until every row is synced. Gives P9.
4. A quiet account's single creates alone and while another account floods
   platform_svc over twice ``--connections`` (bench/flood.py). Gives P13.

P4 (statements per create / replay) is counted in-process with
``tooling.testing.StatementCounter``, as tests/cluster_svc/test_statements.py does.

On a small machine the service, PostgreSQL and wrk share the same cores, so
each run also reports the CPU milliseconds per request spent in each process
tree (from /proc), which says where a contender's throughput goes.
``--profile [DIR]`` adds py-spy profiles of cluster_svc's create and replay
paths, platform_svc's create and the reconciler (needs ``pip install py-spy``).

    make bench                          # full size, ~14 minutes on 2 cores
    make bench BENCH_ARGS=--quick       # ~3 minute smoke run
    python -m bench.run [--quick] [--profile [DIR]] [--rounds N] [--duration S] [--json PATH] ...
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extras
import requests
import uuid6

from bench import flood as bench_flood
from bench import keytable_app
from bench.serve import connect_kwargs
from shared.cli import READ_TIMEOUT
from tooling.testing import LiveServer, StatementCounter, console_script, fresh_database, postgres_server

ROOT = Path(__file__).resolve().parent.parent
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


# Processes ------------------------------------------------------------------------


class Server(LiveServer):
    """A LiveServer whose output goes to a log file instead of the terminal."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], logs: Path) -> None:
        super().__init__(argv, env)
        self.name = name
        self.log = logs / f"{name}.log"

    def start(self, timeout: float = 60.0) -> Server:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self.argv, env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            self.wait_healthy(timeout)
        except Exception:
            self.stop()
            raise RuntimeError(f"{self.name} did not start; see {self.log}:\n{self.log.read_text()[-2000:]}") from None
        return self


def run_checked(argv: list[str], env: dict[str, str], what: str) -> str:
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


@contextmanager
def pg_cursor(url: str) -> Iterator[Any]:
    """An autocommit cursor (so VACUUM works); the connection is closed afterwards."""
    conn = psycopg2.connect(**connect_kwargs(url))
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            yield cur
    finally:
        conn.close()


def sql(url: str, statement: str, params: Any = None) -> list[tuple]:
    with pg_cursor(url) as cur:
        cur.execute(statement, params)
        return cur.fetchall() if cur.description else []


# CPU accounting ---------------------------------------------------------------------
#
# On a 2-core machine everything (the service's workers, PostgreSQL, wrk) competes
# for the same CPU, so throughput is roughly 1 / (CPU per request). Measuring CPU
# milliseconds per request for each process tree says where a contender spends it.

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, CPU seconds used so far) for every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        table[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS)
    return table


def tree_cpu(roots: dict[str, int]) -> dict[str, float]:
    """CPU seconds of each named process tree (root and descendants alive now), and of the machine."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    result = {}
    for name, root in roots.items():
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            total += table.get(pid, (0, 0.0))[1]
            todo.extend(children.get(pid, []))
        result[name] = total
    child = os.times()  # our finished children: wrk during a load run, the reconciler during a drain
    result["children"] = child.children_user + child.children_system
    with open("/proc/stat") as handle:
        ticks = [int(v) for v in handle.readline().split()[1:]]
    result["machine busy"] = (sum(ticks) - ticks[3] - ticks[4]) / CLOCK_TICKS  # all but idle and iowait
    return result


def postmaster_pid(server_url: str) -> int | None:
    """The PostgreSQL server's PID when it runs on this machine (embedded), else None."""
    try:
        data_dir = sql(server_url, "SHOW data_directory")[0][0]
        return int(Path(data_dir, "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError, psycopg2.Error):
        return None


# Load generation ------------------------------------------------------------------


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


# Setup ------------------------------------------------------------------------------


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


# Outages (P8, P9) ------------------------------------------------------------------
#
# "Down" is cluster_svc frozen with SIGSTOP (master and workers): its port still
# accepts connections, so every call hangs until its read timeout, which is the
# harder case for platform_svc (a killed process refuses at once).


def freeze(server: Server) -> None:
    os.killpg(server.process.pid, signal.SIGSTOP)


def thaw(server: Server) -> None:
    os.killpg(server.process.pid, signal.SIGCONT)


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


# Profiling ---------------------------------------------------------------------------


def py_spy() -> str:
    return shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


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


def profile_reconciler(env: dict[str, str], concurrency: int, out_dir: Path) -> Path:
    """py-spy record (GIL holder) of one ``platform-svc reconcile --once`` run."""
    out = out_dir / "reconciler.gil.txt"
    subprocess.run(
        [py_spy(), "record", "-f", "raw", "-r", "200", "--gil", "--nonblocking", "-o", str(out), "--",
         console_script("platform-svc"), "reconcile", "--once", "--concurrency", str(concurrency)],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
    )
    return out


# The run -------------------------------------------------------------------------------


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a ~1 minute smoke run (smaller tables, fewer rounds)")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--duration", type=float, help="seconds per contender per round")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers, every contender (default 2)")
    parser.add_argument("--pool-size", "--threads", dest="pool_size", type=int, default=8,
                        help="pooled DB connections per gunicorn worker, every contender (default 8)")
    parser.add_argument("--connections", type=int, default=32, help="wrk keep-alive connections (default 32)")
    parser.add_argument("--wrk-threads", type=int, default=2, help="wrk threads (default 2)")
    parser.add_argument("--reconcile-concurrency", type=int, default=16,
                        help="platform-svc reconcile --concurrency (default 16 = workers x pool size)")
    parser.add_argument("--profile", nargs="?", const="", metavar="DIR",
                        help="also py-spy cluster_svc's create and replay paths; raw profiles go to DIR")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)

    size = QUICK if args.quick else FULL
    size = Size(**{**size.__dict__, **{k: v for k, v in
                                        (("rounds", args.rounds), ("duration", args.duration)) if v}})
    if shutil.which("wrk") is None:
        print("bench: wrk is not installed (Debian/Ubuntu: apt-get install -y wrk)", file=sys.stderr)
        return 2
    if args.profile is not None and not Path(py_spy()).exists():
        print("bench: --profile needs py-spy (.venv/bin/pip install py-spy)", file=sys.stderr)
        return 2

    started = time.monotonic()
    log = lambda message: print(message, flush=True)  # noqa: E731
    logs = Path(tempfile.mkdtemp(prefix="bench-logs-"))
    serving = ["--workers", str(args.workers), "--pool-size", str(args.pool_size)]
    wrk = Wrk(args.wrk_threads, args.connections)
    many = 2 * args.connections  # the second load: P1, P3 and P7 again at twice the connections
    base_env = {
        "INTERNAL_TOKEN": TOKEN,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }

    with ExitStack() as stack:
        log(f"bench: starting PostgreSQL ({'TEST_DATABASE_URL' if os.environ.get('TEST_DATABASE_URL') else 'embedded'});"
            f" service logs in {logs}")
        server_url = stack.enter_context(postgres_server())
        wrk.server_url = server_url
        pg_version = sql(server_url, "SHOW server_version")[0][0]
        max_conn = int(sql(server_url, "SHOW max_connections")[0][0])

        def database(prefix: str, migrate: str | None = "cluster-svc") -> str:
            url = fresh_database(server_url, f"bench_{prefix}")
            if migrate:
                variable = "CLUSTER_DATABASE_URL" if migrate == "cluster-svc" else "PLATFORM_DATABASE_URL"
                run_checked([console_script(migrate), "migrate"], {**os.environ, **base_env, variable: url}, "migrate")
            return url

        urls = {name: database(name) for name in ("cluster", "big", "limit", "keytable", "p4")}
        sql(urls["keytable"], keytable_app.SCHEMA)
        urls["platform"] = database("platform", migrate="platform-svc")

        log("bench: P4, counting statements in-process")
        p4_create, p4_replay, p4_extra = count_statements(urls["p4"])

        log(f"bench: loading {size.big_rows:,} rows (generate_series) and VACUUM ANALYZE")
        load_seconds = load_rows(urls["big"], size.big_rows)
        log(f"bench:   loaded in {load_seconds:.1f} s")

        def start(name: str, argv: list[str], env: dict[str, str]) -> Server:
            server = Server(name, [*argv, *serving], {**base_env, **env}, logs)
            stack.callback(server.stop)
            return server.start()

        cluster = start("cluster_svc", [console_script("cluster-svc"), "serve"], {"CLUSTER_DATABASE_URL": urls["cluster"]})
        big = start("cluster_svc_1m", [console_script("cluster-svc"), "serve"], {"CLUSTER_DATABASE_URL": urls["big"]})
        limit = start("limit", [sys.executable, "-m", "bench.serve", "limit"], {"BENCH_DATABASE_URL": urls["limit"]})
        keytable = start("keytable", [sys.executable, "-m", "bench.serve", "keytable"],
                         {"BENCH_DATABASE_URL": urls["keytable"]})

        ids_file = logs / "replay_ids.txt"
        route = "/v1/clusters"
        seed_ids({"cluster_svc": cluster.url + route, "limit": limit.url + route, "keytable": keytable.url + route},
                 size.replay_ids, ids_file)

        postmaster = postmaster_pid(server_url)

        def c(key, label, server, mode, expect, token=TOKEN, also=()):
            roots = {name: s.process.pid for name, s in [(server.name, server), *also]}
            if postmaster:
                roots["postgres"] = postmaster
            return Contender(key, label, server.url + route, mode, token, expect,
                             ids_file if mode == "replay" else None, roots)

        cl_create = c("cluster.create", "cluster_svc creates", cluster, "create", 201)
        limit_create = c("limit.create", "limit creates", limit, "create", 201)
        kt_create = c("keytable.create", "key-table creates", keytable, "create", 201)
        cl_replay = c("cluster.replay", "cluster_svc replays", cluster, "replay", 200)
        limit_replay = c("limit.replay", "limit replays", limit, "replay", 200)
        kt_replay = c("keytable.replay", "key-table replays (cached 201)", keytable, "replay", 201)
        big_create = c("cluster1m.create", f"cluster_svc creates, {size.big_rows:,} rows stored", big, "create", 201)
        phase1 = [cl_create, limit_create, kt_create, cl_replay, limit_replay, kt_replay, big_create,
                  cl_create.at(many), limit_create.at(many), kt_create.at(many), cl_replay.at(many),
                  cl_create.at(1, "cluster_svc creates, one connection"),
                  limit_create.at(1, "limit creates, one connection")]

        log(f"bench: phase 1, {len(phase1)} contenders x {size.rounds} rounds x {size.duration:g} s"
            f" (warm-up {size.warmup:g} s each)")
        alternate(phase1, wrk, size, log=log)

        profiles: dict[str, Path] = {}
        if args.profile is not None:
            out_dir = Path(args.profile) if args.profile else logs
            out_dir.mkdir(parents=True, exist_ok=True)
            log(f"bench: profiling cluster_svc with py-spy ({out_dir})")
            for contender in (cl_create, cl_replay):
                for gil in (True, False):
                    path = profile(cluster, wrk, contender, 10, out_dir, gil=gil)
                    profiles[f"{contender.key} (cluster_svc), "
                             f"{'GIL holder only (Python CPU)' if gil else 'busy threads (wall)'}"] = path

        rows_after_phase1 = {name: sql(urls[name], "SELECT count(*) FROM clusters")[0][0] for name in ("cluster", "big")}
        for server in (big, limit, keytable):  # free their connections for phase 2
            server.stop()

        platform_env = {"PLATFORM_DATABASE_URL": urls["platform"], "CLUSTER_SVC_URL": cluster.url}
        # P7 measures the service's own throughput: its account is given a limit no load here reaches.
        account = json.loads(run_checked([console_script("platform-svc"), "create-account", "bench", "--json",
                                          "--rate-limit", "1000000"],
                                         {**os.environ, **base_env, **platform_env}, "create-account"))
        platform_server = start("platform_svc", [console_script("platform-svc"), "serve"], platform_env)
        cl_create2 = c("cluster.create2", "cluster_svc creates (phase 2)", cluster, "create", 201)
        pf_create = c("platform.create", "platform_svc public creates (synced inline)", platform_server, "public", 201,
                      token=account["api_key"], also=[("cluster_svc", cluster)])
        pf_down = c("platform.down", "platform_svc public creates, cluster_svc frozen", platform_server, "public",
                    201, token=account["api_key"], also=[("cluster_svc", cluster)])
        pf_down.synced_only = False  # answered "pending" at once: the breaker is open
        pf_down.condition = lambda: cluster_svc_down(cluster, platform_server, account["api_key"], drain_env, log)
        drains: list[Drain] = []
        drain_roots = {"cluster_svc": cluster.process.pid, **({"postgres": postmaster} if postmaster else {})}
        drain_env = {**os.environ, **base_env, **platform_env}
        startup = drain(drain_env, args.reconcile_concurrency, urls["platform"], drain_roots).seconds
        n = min(size.drain_rounds, size.rounds)  # spread over the rounds: 1, 3, 5 of 5
        drain_at = {1 + round(i * (size.rounds - 1) / max(1, n - 1)) for i in range(n)}

        def maybe_drain(r: int) -> list[str]:
            if r not in drain_at:
                return []
            insert_pending(urls["platform"], account["account_id"], size.pending)
            drains.append(drain(drain_env, args.reconcile_concurrency, urls["platform"], drain_roots))
            return [f"drain {drains[-1].pushed} in {drains[-1].seconds:.1f} s = {drains[-1].rate:.0f}/s"]

        phase2 = [cl_create2, pf_create, pf_down, cl_create2.at(many), pf_create.at(many)]
        log(f"bench: phase 2, {len(phase2)} contenders x {size.rounds} rounds x {size.duration:g} s,"
            f" + reconcile --once of {size.pending:,} pending clusters in {len(drain_at)} rounds")
        alternate(phase2, wrk, size, extra=maybe_drain, log=log)

        log(f"bench: P9, cluster_svc frozen for {size.outage:g} s while {size.outage_writes:,} public creates"
            " arrive, the reconciler running")
        run_checked([console_script("platform-svc"), "reconcile", "--once"], drain_env, "reconcile before P9")
        recovery = outage_recovery(cluster, platform_server, account["api_key"], drain_env, urls["platform"], size, logs)
        log(f"bench:   {recovery.waiting} rows waiting; all synced {recovery.seconds:.2f} s after the recovery")
        log(f"bench: P13, a quiet account's creates at -c1 alone and under another account's flood at -c{many}")
        flood_accounts = [json.loads(run_checked([console_script("platform-svc"), "create-account", name, "--json"],
                                                 drain_env, "create-account"))["api_key"] for name in ("quiet", "noisy")]
        p13 = bench_flood.measure(platform_server.url, *flood_accounts, rounds=size.rounds, duration=size.duration,
                                  connections=many, log=log)
        elapsed = time.monotonic() - started

        if args.profile is not None:
            log("bench: profiling platform_svc and the reconciler with py-spy")
            profiles["platform.create (platform_svc), GIL holder only (Python CPU)"] = profile(
                platform_server, wrk, pf_create, 10, out_dir, gil=True)
            insert_pending(urls["platform"], account["account_id"], size.pending)
            profiles["reconcile --once (the reconciler process), GIL holder only (Python CPU)"] = profile_reconciler(
                drain_env, args.reconcile_concurrency, out_dir)

    report = build_report(
        size=size, args=args, pg_version=pg_version, max_conn=max_conn, elapsed=elapsed,
        phase1=phase1, phase2=phase2, drains=drains, reconcile_startup=startup,
        p4=(p4_create, p4_replay), p4_extra=p4_extra, rows=rows_after_phase1, recovery=recovery,
    )
    if profiles:
        from bench.profile import summarize

        for key, path in profiles.items():
            print(f"\npy-spy profile: {key} ({path}):")
            print(summarize(path.read_text()))
    print(report["text"])
    print(p13.summary())
    report["data"]["p13"] = {"measured": round(p13.ratio, 3), "goal": bench_flood.TARGET, "pass": p13.passed,
                             "flooded_ms": p13.flooded, "alone_ms": p13.alone}
    if args.json:
        Path(args.json).write_text(json.dumps(report["data"], indent=2))
    problems = [p for contender in phase1 + phase2 for p in contender.problems]
    return 1 if problems or not p13.passed else 0


def build_report(*, size, args, pg_version, max_conn, elapsed, phase1, phase2, drains, reconcile_startup, p4, p4_extra,
                 rows, recovery) -> dict[str, Any]:
    (cl_create, limit_create, kt_create, cl_replay, limit_replay, kt_replay, big_create,
     cl_many, limit_many, kt_many, replay_many, cl_one, limit_one) = phase1
    cl_create2, pf_create, pf_down, cl2_many, pf_many = phase2
    many = cl_many.connections
    drain_rates = [d.rate for d in drains]
    drain_median = statistics.median(drain_rates) if drain_rates else float("nan")
    p4_ok = p4 == (["INSERT"], ["INSERT", "SELECT"])

    def spread(num: list[float], den: list[float]) -> str:
        ratios = [a / b for a, b in zip(num, den) if b]
        return f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"

    def cpu(contender: Contender) -> str:
        """CPU µs per good request of each of the contender's own processes (PostgreSQL's: "pg")."""
        return "+".join(f"{contender.cpu_median(name) * 1000:.0f}{'pg' if name == 'postgres' else ''}"
                        for name in contender.cpu_roots)

    pairs = {  # each ratio's numerator and denominator, for the CPU column
        "P1": (cl_create, limit_create), "P2": (cl_create, kt_create), "P3": (cl_replay, cl_create),
        "P5": (big_create, cl_create), "P7": (pf_create, cl_create2), "P8": (pf_down, pf_create),
        f"P1@{many}": (cl_many, limit_many), f"P2@{many}": (cl_many, kt_many), f"P3@{many}": (replay_many, cl_many),
        f"P7@{many}": (pf_many, cl2_many),
    }
    rows_out = [
        ("P1", "cluster_svc creates / limit", cl_create.median / limit_create.median, 1.0,
         f"{cl_create.median:.0f} / {limit_create.median:.0f}", spread(cl_create.samples, limit_create.samples)),
        ("P2", "cluster_svc creates / key-table", cl_create.median / kt_create.median, 1.25,
         f"{cl_create.median:.0f} / {kt_create.median:.0f}", spread(cl_create.samples, kt_create.samples)),
        ("P3", "cluster_svc replays / its creates", cl_replay.median / cl_create.median, 1.0,
         f"{cl_replay.median:.0f} / {cl_create.median:.0f}", spread(cl_replay.samples, cl_create.samples)),
        ("P4", "statements per create / replay", None, None,
         f"{'1/2 (tested)' if p4_ok else 'create ' + '+'.join(p4[0]) + ', replay ' + '+'.join(p4[1])}", ""),
        ("P5", f"creates, {size.big_rows:,} rows / empty", big_create.median / cl_create.median, 0.9,
         f"{big_create.median:.0f} / {cl_create.median:.0f}", spread(big_create.samples, cl_create.samples)),
        ("P6", f"drain of {size.pending:,} pending / creates", drain_median / cl_create2.median, 2.0,
         f"{drain_median:.0f} / {cl_create2.median:.0f}", ""),
        ("P7", "platform creates / cluster_svc creates", pf_create.median / cl_create2.median, 0.5,
         f"{pf_create.median:.0f} / {cl_create2.median:.0f}", spread(pf_create.samples, cl_create2.samples)),
        ("P8", "platform creates, cluster_svc down / up", pf_down.median / pf_create.median, 1.0,
         f"{pf_down.median:.0f} / {pf_create.median:.0f}", spread(pf_down.samples, pf_create.samples)),
        (f"P1@{many}", "cluster_svc creates / limit", cl_many.median / limit_many.median, 1.0,
         f"{cl_many.median:.0f} / {limit_many.median:.0f}", spread(cl_many.samples, limit_many.samples)),
        (f"P2@{many}", "cluster_svc creates / key-table", cl_many.median / kt_many.median, 1.25,
         f"{cl_many.median:.0f} / {kt_many.median:.0f}", spread(cl_many.samples, kt_many.samples)),
        (f"P3@{many}", "cluster_svc replays / its creates", replay_many.median / cl_many.median, 1.0,
         f"{replay_many.median:.0f} / {cl_many.median:.0f}", spread(replay_many.samples, cl_many.samples)),
        (f"P7@{many}", "platform creates / cluster_svc creates", pf_many.median / cl2_many.median, 0.5,
         f"{pf_many.median:.0f} / {cl2_many.median:.0f}", spread(pf_many.samples, cl2_many.samples)),
    ]
    p50_ratio = cl_one.latency_median(0) / limit_one.latency_median(0)
    p9_target = 2.0 + recovery.waiting / drain_median
    lines = []
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines.append("")
    lines.append(f"idempotent-pair benchmark, {now}; nproc {os.cpu_count()}; {platform.platform(terse=True)};"
                 f" Python {platform.python_version()}; PostgreSQL {pg_version}"
                 f" ({'TEST_DATABASE_URL' if os.environ.get('TEST_DATABASE_URL') else 'embedded'},"
                 f" max_connections {max_conn})")
    lines.append(f"every contender: gunicorn gevent (shared.gunicorn_worker) --workers {args.workers},"
                 f" keep-alive / read timeout {READ_TIMEOUT} s, {args.pool_size} pooled DB connections per worker")
    lines.append(f"  cluster_svc, cluster_svc_1m: cluster-svc serve --workers {args.workers} --pool-size {args.pool_size}"
                 " (LOG_FORMAT text, an access line per request, metrics in PROMETHEUS_MULTIPROC_DIR files)")
    lines.append(f"  platform_svc: platform-svc serve --workers {args.workers} --pool-size {args.pool_size}"
                 " (the same; inline pushes to cluster_svc over a keep-alive urllib3 pool)")
    lines.append(f"  limit, keytable: python -m bench.serve limit|keytable --workers {args.workers} --pool-size"
                 f" {args.pool_size} (shared.cli.run_gunicorn; bare Flask on a psycopg2 pool: no log line, no metrics)")
    lines.append(f"load: wrk -t{args.wrk_threads} -c{args.connections} (and -c{many}, -t1 -c1 where a label says so;"
                 f" keep-alive), {size.rounds} rounds x"
                 f" {size.duration:g} s per contender, alternated, {size.warmup:g} s warm-up each; medians of rounds")
    lines.append(f"creates: a new UUIDv4 per request; replays: one of {size.replay_ids:,} existing IDs;"
                 f" P6: platform-svc reconcile --once --concurrency {args.reconcile_concurrency}"
                 f" (wall time incl. process start-up)")
    lines.append("P8: cluster_svc frozen with SIGSTOP (connections hang), platform_svc's breakers opened by priming;"
                 " P9: platform-svc reconcile (default settings) running throughout, cluster_svc frozen")
    lines.append(f"elapsed {elapsed / 60:.1f} min; rows at the end of phase 1: cluster_svc {rows['cluster']:,},"
                 f" 1M instance {rows['big']:,}")
    lines.append("")
    lines.append("req/s per round")
    for contender in [*phase1, *phase2]:
        phase = "2" if contender in phase2 else "1"
        cells = " ".join(f"{s:7.0f}" for s in contender.samples)
        lines.append(f"  [{phase}] {contender.label:<46} {cells}   median {contender.median:7.0f}")
    if drains:
        cells = " ".join(f"{rate:7.0f}" for rate in drain_rates)
        lines.append(f"  [2] {'reconciler drain, rows/s':<46} {cells}   median {drain_median:7.0f}"
                     f"   ({', '.join(f'{d.pushed} rows in {d.seconds:.1f} s' for d in drains)};"
                     f" reconcile --once with nothing due takes {reconcile_startup:.1f} s)")
    lines.append("")
    lines.append("CPU per good request, ms (medians; 'machine' = cores busy during the run, out of"
                 f" {os.cpu_count()}, including anything else running)")
    for contender in [*phase1, *phase2]:
        trees = [name for name in contender.cpu_roots] + ["wrk"]
        cells = ", ".join(f"{name} {contender.cpu_median(name):.2f}" for name in trees)
        lines.append(f"  {contender.label:<50} {cells}; machine {contender.cpu_median('machine busy'):.2f}")
    if drains:
        names = [name for name in drains[0].cpu_ms if name != "machine busy"]
        cells = ", ".join(f"{name} {statistics.median(d.cpu_ms[name] for d in drains):.2f}" for name in names)
        machine = statistics.median(d.cpu_ms["machine busy"] for d in drains)
        lines.append(f"  {'reconciler drain (per row)':<50} {cells}; machine {machine:.2f}")
    lines.append("")
    lines.append("latency at one connection (wrk -t1 -c1), ms, medians of rounds' p50 and p99")
    for contender in (cl_one, limit_one):
        lines.append(f"  {contender.label:<50} p50 {contender.latency_median(0):.2f},"
                     f" p99 {contender.latency_median(1):.2f}"
                     f"   (per round p50: {', '.join(f'{p50:.2f}' for p50, _ in contender.latency)})")
    lines.append("")
    lines.append("the database per create (medians): PostgreSQL CPU ms (all its processes)"
                 " and WAL bytes (pg_current_wal_lsn)")
    for contender in (cl_create, limit_create, kt_create, cl_many, limit_many, kt_many, cl_one, limit_one):
        lines.append(f"  {contender.label:<50} postgres CPU {contender.cpu_median('postgres'):.3f} ms,"
                     f" WAL {contender.wal_median:,.0f} bytes")
    lines.append("")
    header = (f"{'target':<7}{'what':<44}{'measured':>9}  {'target':<9}{'result':<7}{'medians (req/s)':<18}"
              f"{'per-round':<11}{'CPU µs per request (each process), numerator / denominator'}")
    lines.append(header)
    lines.append("-" * len(header))
    summary = []
    data_rows = []
    for target, what, ratio, goal, medians, per_round in rows_out:
        if goal is None:
            result = "pass" if p4_ok else "FAIL"
            lines.append(f"{target:<7}{what:<44}{'1/2' if p4_ok else '?':>9}  {'1/2':<9}{result:<7}{medians}")
            summary.append(f"{target} {'1/2' if p4_ok else '?'} {result}")
            data_rows.append({"target": target, "what": what, "measured": "1/2" if p4_ok else p4, "pass": p4_ok})
            continue
        result = "pass" if ratio >= goal else "FAIL"
        cpus = " / ".join(cpu(contender) for contender in pairs[target]) if target in pairs else ""
        lines.append(f"{target:<7}{what:<44}{ratio:>9.2f}  {'>= ' + format(goal, 'g'):<9}{result:<7}{medians:<18}"
                     f"{per_round:<11}{cpus}".rstrip())
        summary.append(f"{target} {ratio:.2f} {result}")
        data_rows.append({"target": target, "what": what, "measured": round(ratio, 3), "goal": goal,
                          "pass": ratio >= goal, "medians": medians})
    l1_pass = p50_ratio <= 1.5
    lines.append(f"{'L1':<7}{'p50 at -c1, cluster_svc / limit':<44}{p50_ratio:>9.2f}  {'<= 1.5':<9}"
                 f"{'pass' if l1_pass else 'FAIL':<7}"
                 f"{cl_one.latency_median(0):.2f} / {limit_one.latency_median(0):.2f} ms"
                 f"{'':<7}{cpu(cl_one)} / {cpu(limit_one)}")
    p99_ratio = cl_one.latency_median(1) / limit_one.latency_median(1)
    lines.append(f"{'L1p99':<7}{'p99 at -c1, cluster_svc / limit':<44}{p99_ratio:>9.2f}  {'(report)':<9}{'':<7}"
                 f"{cl_one.latency_median(1):.2f} / {limit_one.latency_median(1):.2f} ms")
    summary.append(f"L1 {p50_ratio:.2f} {'pass' if l1_pass else 'FAIL'} (p99 {p99_ratio:.2f})")
    data_rows.append({"target": "L1", "what": "p50 at -c1, cluster_svc / limit", "measured": round(p50_ratio, 3),
                      "goal": 1.5, "pass": l1_pass})
    # P11: what the database spends per create, cluster_svc's over the key table's (CPU and WAL, each <= 0.6).
    p11_cpu = cl_create.cpu_median("postgres") / kt_create.cpu_median("postgres")
    p11_wal = cl_create.wal_median / kt_create.wal_median
    p11_pass = p11_cpu <= 0.6 and p11_wal <= 0.6
    lines.append(f"{'P11':<7}{'PostgreSQL CPU, WAL per create / key-table':<44}{max(p11_cpu, p11_wal):>9.2f}  {'<= 0.6':<9}"
                 f"{'pass' if p11_pass else 'FAIL':<7}CPU {p11_cpu:.2f} ({cl_create.cpu_median('postgres') * 1000:.0f} /"
                 f" {kt_create.cpu_median('postgres') * 1000:.0f} µs), WAL {p11_wal:.2f} ({cl_create.wal_median:.0f} /"
                 f" {kt_create.wal_median:.0f} bytes)")
    summary.append(f"P11 CPU {p11_cpu:.2f} WAL {p11_wal:.2f} {'pass' if p11_pass else 'FAIL'}")
    data_rows.append({"target": "P11", "what": "PostgreSQL CPU and WAL per create / key-table",
                      "measured": [round(p11_cpu, 3), round(p11_wal, 3)], "goal": 0.6, "pass": p11_pass})
    p9_pass = recovery.seconds <= p9_target
    lines.append(f"{'P9':<7}{'seconds from recovery to all synced':<44}{recovery.seconds:>8.2f}s  "
                 f"{'<= ' + format(p9_target, '.2f') + 's':<9}{'pass' if p9_pass else 'FAIL':<7}"
                 f"{recovery.waiting} rows after {recovery.outage:.0f} s; target 2 s + {recovery.waiting} / "
                 f"{drain_median:.0f} rows/s")
    summary.append(f"P9 {recovery.seconds:.2f}s {'pass' if p9_pass else 'FAIL'}")
    data_rows.append({"target": "P9", "what": "seconds from recovery to all synced", "measured": round(
        recovery.seconds, 3), "goal": round(p9_target, 3), "pass": p9_pass, "waiting": recovery.waiting,
        "outage": round(recovery.outage, 1)})
    lines.append("")
    lines.append(f"P4 on the wire: {p4_extra}")
    lines.append(f"info: limit replays {limit_replay.median:.0f}/s, key-table replays {kt_replay.median:.0f}/s,"
                 f" key-table creates / limit {kt_create.median / limit_create.median:.2f}")
    problems = [f"  {c.label}: {p}" for c in [*phase1, *phase2] for p in c.problems]
    if problems:
        lines.append("WARNING: unexpected answers (results for these contenders are suspect):")
        lines.extend(problems)
    lines.append("")
    lines.append("summary: " + " | ".join(summary))
    data = {
        "date": now, "nproc": os.cpu_count(), "workers": args.workers, "pool_size": args.pool_size,
        "connections": args.connections, "rounds": size.rounds, "duration": size.duration,
        "targets": data_rows,
        "samples": {c.label: c.samples for c in [*phase1, *phase2]},
        "cpu_ms_per_request": {c.label: c.cpu for c in [*phase1, *phase2]},
        "answers": {c.label: c.answers for c in [*phase1, *phase2]},
        "drains": [d.__dict__ for d in drains],
        "latency_ms": {c.label: c.latency for c in [*phase1, *phase2]},
        "wal_bytes_per_request": {c.label: c.wal for c in [*phase1, *phase2]},
    }
    return {"text": "\n".join(lines), "data": data}


if __name__ == "__main__":
    # A SIGTERM (from `timeout`, say) unwinds like Ctrl-C, so every server the
    # run started is stopped rather than left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
