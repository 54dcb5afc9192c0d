"""``make bench``: the performance targets P1-P9, P13 and P14 of docs/performance.md, in one run.

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
4. A quiet account's single creates alone and under each of four floods:
   another account's creates over twice ``--connections``, its replays of one
   Idempotency-Key, requests with unknown keys, 2,000 silent sockets
   (bench/flood.py). Gives P13.
5. What a public create, a public read, a request refused by its account's
   limit and one with an unknown key each cost the platform's database:
   transactions and PostgreSQL CPU (bench/costs.py). Gives P14.

P4 (statements per create / replay) is counted in-process with
``tooling.testing.StatementCounter``, as tests/cluster_svc/test_statements.py does.

On a small machine the service, PostgreSQL and wrk share the same cores, so
each run also reports the CPU milliseconds per request spent in each process
tree (from /proc), which says where a contender's throughput goes.
``--profile [DIR]`` adds py-spy profiles of cluster_svc's create and replay
paths, platform_svc's create and the reconciler (needs ``pip install py-spy``).

The package, for a reader: this module is the driver (``main``, phase by
phase); ``bench.driver`` what it measures with (contenders, wrk, the data each
phase sets up, outages, the drain), ``bench.processes`` the processes it runs
and the CPU they spend, ``bench.report`` the table and the summary it prints.

    make bench                          # full size, ~14 minutes on 2 cores
    make bench BENCH_ARGS=--quick       # ~3 minute smoke run
    python -m bench.run [--quick] [--profile [DIR]] [--rounds N] [--duration S] [--json PATH] ...
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from sqlalchemy.engine import make_url

from bench import costs as bench_costs
from bench import flood as bench_flood
from bench import keytable_app
from bench.driver import (
    FULL,
    QUICK,
    TOKEN,
    Contender,
    Drain,
    Size,
    Wrk,
    alternate,
    cluster_svc_down,
    count_statements,
    drain,
    insert_pending,
    load_rows,
    outage_recovery,
    profile,
    seed_ids,
)
from bench.processes import ROOT, Server, postmaster_pid, profile_reconciler, py_spy, run_checked, sql
from bench.report import build_report
from tooling.testing import console_script, fresh_database, postgres_server


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
        log(f"bench: P13, a quiet account's creates at -c1 alone and under each of {len(bench_flood.FLOODS)} floods")
        flood_accounts = [json.loads(run_checked([console_script("platform-svc"), "create-account", name, "--json",
                                                  *limit], drain_env, "create-account"))["api_key"]
                          for name, limit in (("quiet", ("--rate-limit", str(bench_flood.QUIET_LIMIT))), ("noisy", ()))]
        p13 = [bench_flood.measure(platform_server.url, *flood_accounts, kind=kind, rounds=min(size.rounds, 3),
                                   duration=size.duration, connections=many, log=log) for kind in bench_flood.FLOODS]
        log("bench: P14, transactions and PostgreSQL CPU per public create, read, and refused request")
        limited = json.loads(run_checked([console_script("platform-svc"), "create-account", "limited", "--json",
                                          "--rate-limit", "1"], drain_env, "create-account"))["api_key"]
        p14 = bench_costs.measure(platform_server.url, server_url, make_url(urls["platform"]).database, postmaster,
                                  api_key=account["api_key"], limited_key=limited)
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
    for flood in p13:
        print(flood.summary())
    print(bench_costs.report(p14))
    report["data"]["p13"] = {flood.kind: {"measured": round(flood.ratio, 3), "goal": bench_flood.TARGET,
                                          "pass": flood.passed, "flooded_ms": flood.flooded, "alone_ms": flood.alone}
                             for flood in p13}
    report["data"]["p14"] = {cost.kind: {"transactions": round(cost.transactions, 3), "pg_cpu_ms": round(cost.pg_cpu_ms, 3),
                                         "statuses": dict(cost.statuses)} for cost in p14}
    if args.json:
        Path(args.json).write_text(json.dumps(report["data"], indent=2))
    problems = [p for contender in phase1 + phase2 for p in contender.problems]
    return 1 if problems or not all(flood.passed for flood in p13) else 0


if __name__ == "__main__":
    # A SIGTERM (from `timeout`, say) unwinds like Ctrl-C, so every server the
    # run started is stopped rather than left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
