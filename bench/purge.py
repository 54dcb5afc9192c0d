"""What a purge pass over a million tombstones costs, and proof that writes keep flowing during it.

    .venv/bin/python -m bench.purge [--tombstones 1000000] [--live 100000] [--batch 1000] [--writers 4]

Starts its own PostgreSQL (``TEST_DATABASE_URL`` to use yours), migrates a
fresh cluster_svc database, fills it with ``--tombstones`` bare tombstones of
UUIDv7s 40 days old (past the 30-day horizon) and ``--live`` live clusters as
old, then serves cluster_svc (its console script) and drives it with
``--writers`` clients, each creating and deleting clusters of fresh IDs in a
loop, while ``cluster-svc purge`` runs one pass. It prints the pass (time,
rows removed, rate) and the writes answered before, during and after it
(count, throughput, median, p99 and worst latency, the longest gap between
two answered writes, and any error), then whether every old tombstone went
and every live row stayed. Not part of ``make test``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import threading
import time
import uuid

import requests
from sqlalchemy import create_engine, text

from cluster_svc.cli import MIGRATIONS
from tooling.testing import LiveServer, console_script, fresh_database, postgres_server

TOKEN = "bench-purge-token"
DAY_MS = 86_400_000

FILL = """
INSERT INTO clusters (id, deleted_at, created_at, updated_at)
SELECT (lpad(to_hex(:born - i), 12, '0') || '7' || substr(md5(i::text), 1, 3) || '8'
        || substr(md5(i::text), 4, 15))::uuid,
       now() - (i % 86400) * interval '1 second', now(), now()
FROM generate_series(:first, :last) AS i
"""
FILL_LIVE = """
INSERT INTO clusters (id, team_id, name, region, postgres_version, plan, storage_gb)
SELECT (lpad(to_hex(:born - i), 12, '0') || '7' || substr(md5(i::text), 1, 3) || '9'
        || substr(md5(i::text), 4, 15))::uuid,
       gen_random_uuid(), 'live-' || i, 'eu-west-1', 16, 'hobby-0', 10
FROM generate_series(:first, :last) AS i
"""


class Writers:
    """Clients creating and deleting clusters of fresh IDs, each write timed."""

    def __init__(self, url: str, count: int) -> None:
        self.url = url
        self.count = count
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.writes: list[tuple[float, float, int]] = []  # (answered at, seconds, status)
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(count)]

    def start(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def _run(self) -> None:
        import uuid6

        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {TOKEN}"
        while not self.stop.is_set():
            body = {"id": str(uuid6.uuid7()), "team_id": str(uuid.uuid4()), "name": "w", "region": "eu-west-1",
                    "postgres_version": 16, "plan": "hobby-0", "storage_gb": 10}
            for method, path, json in (("POST", "/v1/clusters", body), ("DELETE", f"/v1/clusters/{body['id']}", None)):
                started = time.monotonic()
                try:
                    status = session.request(method, self.url + path, json=json, timeout=30).status_code
                except requests.RequestException:
                    status = 0
                with self.lock:
                    self.writes.append((time.monotonic(), time.monotonic() - started, status))

    def between(self, start: float, end: float) -> dict:
        with self.lock:
            writes = [w for w in self.writes if start <= w[0] < end]
        latencies = sorted(w[1] for w in writes)
        answered = sorted(w[0] for w in writes)
        gaps = [b - a for a, b in zip([start, *answered], [*answered, end])]
        return {
            "writes": len(writes),
            "per_second": len(writes) / (end - start) if end > start else 0.0,
            "median_ms": 1000 * statistics.median(latencies) if latencies else 0.0,
            "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))] if latencies else 0.0,
            "worst_ms": 1000 * latencies[-1] if latencies else 0.0,
            "longest_gap_ms": 1000 * max(gaps) if gaps else 0.0,
            "errors": sum(1 for w in writes if w[2] not in (201, 204)),
        }


def describe(name: str, figures: dict) -> str:
    return (
        f"  {name:<14} {figures['writes']:>6} writes, {figures['per_second']:7.1f}/s, median "
        f"{figures['median_ms']:6.1f} ms, p99 {figures['p99_ms']:7.1f} ms, worst {figures['worst_ms']:7.1f} ms, "
        f"longest gap {figures['longest_gap_ms']:7.1f} ms, errors {figures['errors']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tombstones", type=int, default=1_000_000)
    parser.add_argument("--live", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--warm", type=float, default=5.0, help="seconds of writes before and after the pass")
    args = parser.parse_args()

    with postgres_server() as server_url:
        url = fresh_database(server_url, "bench_purge", migrations=MIGRATIONS)
        engine = create_engine(url)
        born = int(time.time() * 1000) - 40 * DAY_MS
        started = time.monotonic()
        with engine.begin() as conn:
            for first in range(0, args.tombstones, 200_000):
                last = min(args.tombstones, first + 200_000) - 1
                conn.execute(text(FILL), {"born": born, "first": first, "last": last})
            if args.live:
                conn.execute(text(FILL_LIVE), {"born": born - args.tombstones, "first": 0, "last": args.live - 1})
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE clusters"))
        print(f"filled {args.tombstones:,} tombstones and {args.live:,} live rows in {time.monotonic() - started:.1f} s",
              flush=True)

        env = {"CLUSTER_DATABASE_URL": url, "INTERNAL_TOKEN": TOKEN}
        with LiveServer([console_script("cluster-svc"), "serve", "--workers", "2"], env) as service:
            writers = Writers(service.url, args.writers).start()
            time.sleep(args.warm)
            pass_started = time.monotonic()
            result = subprocess.run(
                [console_script("cluster-svc"), "purge", "--batch", str(args.batch)],
                env={**os.environ, **env}, capture_output=True, text=True,
            )
            pass_ended = time.monotonic()
            time.sleep(args.warm)
            writers.finish()
            ended = time.monotonic()

        seconds = pass_ended - pass_started
        print(f"purge pass: {seconds:.1f} s (exit {result.returncode})\n  {result.stdout.strip()}")
        if result.returncode:
            print(result.stderr)
        print(f"  {args.tombstones / seconds:,.0f} tombstones a second, in windows of {args.batch}")
        print("writes (create + delete of fresh IDs, each timed):")
        print(describe("before purge", writers.between(pass_started - args.warm, pass_started)))
        print(describe("during purge", writers.between(pass_started, pass_ended)))
        print(describe("after purge", writers.between(pass_ended, ended)))
        with engine.connect() as conn:
            old_left = conn.execute(
                text("SELECT count(*) FROM clusters WHERE deleted_at IS NOT NULL AND id < :cut"),
                {"cut": str(uuid.UUID(int=(born + 1) << 80))},
            ).scalar_one()
            live_left = conn.execute(text("SELECT count(*) FROM clusters WHERE name LIKE 'live-%'")).scalar_one()
        print(f"old tombstones left: {old_left:,}; old live rows kept: {live_left:,} of {args.live:,}")
        engine.dispose()


if __name__ == "__main__":
    main()
