"""What one drift repair pass costs: time and peak memory of ``platform-svc repair``.

    .venv/bin/python -m bench.repair [--clusters 50000] [--rules 25000] [--drift 0]

Starts its own PostgreSQL (``TEST_DATABASE_URL`` to use yours), migrates a
fresh database for each service, fills both with the same ``--clusters``
synced clusters and ``--rules`` synced firewall rules (one account), serves
cluster_svc (its console script) and runs ``platform-svc repair --dry-run``
once as a process of its own. With ``--drift N``, N clusters are changed in
cluster_svc's database first (half of them a plan at the same generation,
half a generation ahead), so the pass has findings to print. It prints the
pass's wall time, the peak resident memory of the repair process, and its
summary line. Not part of ``make test``.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import time
import uuid

from sqlalchemy import create_engine, text

from cluster_svc.cli import MIGRATIONS as CLUSTER_MIGRATIONS
from platform_svc.cli import MIGRATIONS as PLATFORM_MIGRATIONS
from tooling.testing import LiveServer, console_script, fresh_database, postgres_server

TOKEN = "bench-repair-token"

# The same IDs and fields on both sides, derived from one series.
CLUSTER_ID = "md5('c' || i)::uuid"
RULE_ID = "md5('r' || i)::uuid"
PLATFORM_CLUSTERS = f"""
INSERT INTO clusters (id, account_id, name, region, postgres_version, plan, storage_gb, generation, synced_generation)
SELECT {CLUSTER_ID}, :account, 'db-' || i, 'eu-west-1', 16, 'standard-2', 10 + i % 100, 1, 1
FROM generate_series(1, :n) AS i
"""
CLUSTER_SVC_CLUSTERS = f"""
INSERT INTO clusters (id, team_id, name, region, postgres_version, plan, storage_gb, generation)
SELECT {CLUSTER_ID}, :account, 'db-' || i, 'eu-west-1', 16, 'standard-2', 10 + i % 100, 1
FROM generate_series(1, :n) AS i
"""
PLATFORM_RULES = f"""
INSERT INTO firewall_rules (id, account_id, cluster_id, cidr, description, generation, synced_generation)
SELECT {RULE_ID}, :account, md5('c' || (1 + i % :clusters))::uuid, '10.0.0.0/24', 'rule ' || i, 1, 1
FROM generate_series(1, :n) AS i
"""
CLUSTER_SVC_RULES = f"""
INSERT INTO firewall_rules (id, cluster_id, cidr, description, generation)
SELECT {RULE_ID}, md5('c' || (1 + i % :clusters))::uuid, '10.0.0.0/24', 'rule ' || i, 1
FROM generate_series(1, :n) AS i
"""
DRIFT = f"""
UPDATE clusters SET plan = 'memory-8', generation = generation + (i % 2) * 5
FROM generate_series(1, :n) AS i WHERE clusters.id = {CLUSTER_ID}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=50_000)
    parser.add_argument("--rules", type=int, default=25_000)
    parser.add_argument("--drift", type=int, default=0, help="clusters changed in cluster_svc's database first")
    args = parser.parse_args()

    with postgres_server() as server_url:
        cluster_url = fresh_database(server_url, "bench_repair_cluster", migrations=CLUSTER_MIGRATIONS)
        platform_url = fresh_database(server_url, "bench_repair_platform", migrations=PLATFORM_MIGRATIONS)
        account = str(uuid.uuid4())
        started = time.monotonic()
        platform, downstream = create_engine(platform_url), create_engine(cluster_url)
        with platform.begin() as conn:
            conn.execute(
                text("INSERT INTO accounts (id, name) VALUES (:account, 'bench')"),
                {"account": account},
            )
            conn.execute(text(PLATFORM_CLUSTERS), {"account": account, "n": args.clusters})
            conn.execute(text(PLATFORM_RULES), {"account": account, "n": args.rules, "clusters": args.clusters})
        with downstream.begin() as conn:
            conn.execute(text(CLUSTER_SVC_CLUSTERS), {"account": account, "n": args.clusters})
            conn.execute(text(CLUSTER_SVC_RULES), {"n": args.rules, "clusters": args.clusters})
            if args.drift:
                conn.execute(text(DRIFT), {"n": args.drift})
        for engine in (platform, downstream):
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM ANALYZE"))
            engine.dispose()
        print(f"filled {args.clusters:,} clusters and {args.rules:,} rules on each side"
              f" in {time.monotonic() - started:.1f} s", flush=True)

        env = {"CLUSTER_DATABASE_URL": cluster_url, "INTERNAL_TOKEN": TOKEN}
        with LiveServer([console_script("cluster-svc"), "serve", "--workers", "2"], env) as service:
            platform_env = {"PLATFORM_DATABASE_URL": platform_url, "CLUSTER_SVC_URL": service.url, "INTERNAL_TOKEN": TOKEN}
            pass_started = time.monotonic()
            result = subprocess.run(
                [console_script("platform-svc"), "repair", "--dry-run"],
                env={**os.environ, **platform_env}, capture_output=True, text=True,
            )
            seconds = time.monotonic() - pass_started
            # The largest process waited for so far: the repair (cluster_svc's workers are still running).
            peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
        print(f"repair pass: {seconds:.1f} s, peak memory {peak_mb:.0f} MB (exit {result.returncode})\n  {summary}")
        if result.returncode:
            print(result.stderr)


if __name__ == "__main__":
    main()
